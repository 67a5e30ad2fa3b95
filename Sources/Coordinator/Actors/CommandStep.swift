/// What a command came to when it was decided (``Coordinator/enqueue(_:by:ref:replyTo:commandKey:)``):
/// the answer queues take it as the answer to wait for.
enum CommandStep: Sendable {
    case pong
    case clients(ClientPage)
    /// `sync`: the room at `seq`, answered once `seq` is published.
    case snapshot(Snapshot, seq: Int)
    case refused(CommandError)
    /// Applied, and changed nothing.
    case unchanged
    /// Applied and recorded: its `ack` was queued before the batch was recorded.
    case recorded(EventBatch)
    /// A keyed command the store holds a decision of already.
    case decidedBefore(KeyedOutcome)

    /// The answer the step leaves to wait for, for a command with `ref` decided at `seq`
    /// (the last seq applied) by node `node`; nil when recording queued it already.
    func pending(ref: String?, seq: Int, node: String?) -> AnswerQueues.Pending? {
        switch self {
        case .pong: .ready(.pong(ref: ref))
        case let .clients(page): .ready(.clients(ref: ref, node: node, page))
        case let .snapshot(snapshot, at): .snapshot(snapshot, seq: at)
        case let .refused(error): .ready(.error(ref: ref, error))
        case .unchanged: .unchanged(after: seq)
        case .decidedBefore(.applied(let stored)): .applied(seq: stored)
        case .decidedBefore(.unchanged(let at)): .unchanged(after: at)
        case .decidedBefore(.refused(let error)): .ready(.error(ref: ref, error))
        case .recorded: nil
        }
    }

    /// What the outcome record of a keyed command's step records, when it must have one
    /// (`recordsOutcomes`: another writer may decide the same command): the step decided it
    /// (not the log's record of it) and it changed nothing. The outcome record, ordered in
    /// the log like a batch, makes the first decision the only one, so that a command's
    /// answer and its effect can never come from two decisions.
    func outcomeToRecord(seq: Int, recordsOutcomes: Bool) -> KeyedOutcome? {
        guard recordsOutcomes else { return nil }
        switch self {
        case .unchanged: return .unchanged(seq: seq)
        case let .refused(error): return .refused(error)
        case .pong, .clients, .snapshot, .recorded, .decidedBefore: return nil
        }
    }

    var batch: EventBatch? {
        if case let .recorded(batch) = self { return batch }
        return nil
    }
}

/// What a command did, for a caller in this process (``Coordinator/execute(_:by:ref:)``).
public enum CommandOutcome: Sendable, Equatable {
    /// The command took effect. `batch` holds its events (nil when it changed nothing);
    /// `seq` is its last event's seq, or the seq it was answered at when it changed nothing.
    case applied(seq: Int, batch: EventBatch?)
    /// The answer to `sync`.
    case snapshot(Snapshot)
    /// The answer to `ping`.
    case pong
    /// The answer to `clients`.
    case clients(ClientPage)
}

/// A command submitted in this process (``Coordinator/submit(_:by:ref:)``): where its
/// answer goes, and the batch it caused, if any. ``Coordinator/outcome(of:)`` waits for the answer.
public struct Receipt: Sendable {
    let address: UInt64
    let batch: EventBatch?
}

/// The answers of callers in this process: addresses with both top bits set, which the
/// daemon's addresses never have. An answer waits here until its caller asks for it, or
/// the caller waits until its answer comes.
struct OwnAnswers {
    static let bits: UInt64 = 0b11 << 62
    private var next: UInt64 = 0
    private var arrived: [UInt64: ServerFrame] = [:]
    private var waiting: [UInt64: CheckedContinuation<ServerFrame, Never>] = [:]

    mutating func newAddress() -> UInt64 {
        next += 1
        return Self.bits | next
    }

    /// Keeps the answers to callers in this process (resuming those that wait) and returns
    /// the rest, for the publishers.
    mutating func take(_ answers: [Answer]) -> [Answer] {
        guard answers.contains(where: { $0.to & Self.bits == Self.bits }) else { return answers }
        var rest: [Answer] = []
        for answer in answers {
            guard answer.to & Self.bits == Self.bits else { rest.append(answer); continue }
            if let continuation = waiting.removeValue(forKey: answer.to) {
                continuation.resume(returning: answer.frame)
            } else {
                arrived[answer.to] = answer.frame
            }
        }
        return rest
    }

    /// The answer to `address` if it came, or nil after registering `continuation`'s wait.
    mutating func answer(_ address: UInt64) -> ServerFrame? { arrived.removeValue(forKey: address) }
    mutating func wait(_ address: UInt64, _ continuation: CheckedContinuation<ServerFrame, Never>) { waiting[address] = continuation }
}
