/// A command's answer, ready to send: to whom (the address its submitter gave), for
/// which client, and the frame (`ack`, `error`, `snapshot` or `pong`).
public struct Answer: Sendable, Equatable {
    public let to: UInt64
    public let client: ClientID
    public let frame: ServerFrame
}

/// The answers of submitted commands, held so that each address gets its answers in
/// the order its commands were submitted, and an `ack` only once the batch it reports
/// is published (committed, with a store). A plain value, owned by the coordinator.
struct AnswerQueues {
    enum Pending {
        /// Nothing to wait for (errors, `pong`, `snapshot`).
        case ready(ServerFrame)
        /// `ack` once the command's batch, ending at `seq`, is published.
        case applied(seq: Int)
        /// The command changed nothing: `ack` at `after` once everything applied before
        /// it is published.
        case unchanged(after: Int)
        /// To be decided again after a conflict: it, and everything after it, waits.
        case held
        /// A keyed command that changed nothing: its answer waits for the commit of its
        /// outcome's record (``Coordinator/storeOutcome(_:commandKey:address:order:ref:)``),
        /// which settles it; a record that fails decides it again.
        case recordingOutcome
        /// Decided by another writer of the log, whose answer it waits for
        /// (``settleElsewhere(_:order:frame:)``).
        case elsewhere
        /// Acked by the writer that decided it, at `seq`: sent once `seq` is published
        /// here. Nothing this coordinator rolls back changes it (the other writer stored it).
        case acked(seq: Int)
        /// A `sync` behind answers that wait for other writers: its snapshot is taken once
        /// it is its turn (``takeDueSyncs()``), so that it holds every command acked before it.
        case syncLater
        /// Its snapshot is being taken.
        case syncDue
        /// `sync`: its snapshot, of the room at `seq`, once `seq` is published.
        case snapshot(Snapshot, seq: Int)
    }

    /// A command to decide again after a conflict: what it was and where its answer goes.
    struct Redo {
        let address: UInt64
        /// When it was first decided, among every address's commands.
        let order: Int
        let client: ClientID
        let ref: String?
        let command: Command
        /// Its key, if it has one: the log's record of the key keeps it from being
        /// applied twice.
        let commandKey: String?
    }

    private struct Entry {
        let client: ClientID
        let ref: String?
        var pending: Pending
        let order: Int
        /// The command, for entries that a conflict may send back to be decided again.
        let command: Command?
        let commandKey: String?
    }

    /// Only addresses with answers not yet released.
    private var queues: [UInt64: [Entry]] = [:]
    private var nextOrder = 0
    /// `sync`s whose turn has come: (address, order).
    private var dueSyncs: [(address: UInt64, order: Int, ref: String?)] = []

    var isEmpty: Bool { queues.isEmpty }

    /// Whether `address` has answers not released yet.
    func hasAnswers(_ address: UInt64) -> Bool { queues[address] != nil }

    var hasDueSyncs: Bool { !dueSyncs.isEmpty }

    /// Whether an answer of `address` waits for another writer (or for a `sync` that does):
    /// what it will report may not be applied here yet.
    func waitsForOthers(_ address: UInt64) -> Bool {
        queues[address]?.contains { entry in
            switch entry.pending {
            case .elsewhere, .acked, .held, .recordingOutcome, .syncLater, .syncDue: true
            case .ready, .applied, .unchanged, .snapshot: false
            }
        } ?? false
    }

    /// The `sync`s whose snapshot is to be taken now (each is then given its answer with
    /// ``settle(_:order:_:)``).
    mutating func takeDueSyncs() -> [(address: UInt64, order: Int, ref: String?)] {
        defer { dueSyncs = [] }
        return dueSyncs
    }

    /// Gives entry `order` of `address` its answer.
    mutating func settle(_ address: UInt64, order: Int, _ pending: Pending) {
        guard let i = queues[address]?.firstIndex(where: { $0.order == order }) else { return }
        queues[address]![i].pending = pending
    }

    /// `command`: keep it, so a conflict can have it decided again. Returns the entry's
    /// order (its name for ``settleElsewhere(_:order:frame:)``).
    @discardableResult
    mutating func add(_ pending: Pending, client: ClientID, ref: String?, to address: UInt64, command: Command? = nil,
                      commandKey: String? = nil) -> Int {
        nextOrder += 1
        queues[address, default: []].append(Entry(client: client, ref: ref, pending: pending, order: nextOrder, command: command,
                                                  commandKey: commandKey))
        return nextOrder
    }

    /// The answer of a command decided elsewhere came back: an `ack` goes once its seq is published
    /// here too, anything else at its turn.
    mutating func settleElsewhere(_ address: UInt64, order: Int, frame: ServerFrame) {
        guard let i = queues[address]?.firstIndex(where: { $0.order == order }), case .elsewhere = queues[address]![i].pending else { return }
        if case let .ack(_, seq) = frame {
            queues[address]![i].pending = .acked(seq: seq)
        } else {
            queues[address]![i].pending = .ready(frame)
        }
    }

    /// A command decided elsewhere that is to be decided here instead, as a ``Redo``; nil
    /// when it is not waiting for another writer's answer.
    func elsewhere(_ address: UInt64, order: Int) -> Redo? {
        guard let entry = queues[address]?.first(where: { $0.order == order }), case .elsewhere = entry.pending,
              let command = entry.command else { return nil }
        return Redo(address: address, order: order, client: entry.client, ref: entry.ref, command: command, commandKey: entry.commandKey)
    }

    /// After a conflict rolled the state back to `committed`: every command whose answer
    /// depended on what is gone, held (its queue waits), in the order it was decided.
    mutating func takeRedo(after committed: Int) -> [Redo] {
        var out: [Redo] = []
        for (address, queue) in queues {
            var queue = queue
            for i in queue.indices {
                guard let command = queue[i].command else { continue }
                switch queue[i].pending {
                case let .applied(seq) where seq > committed: break
                case let .unchanged(after) where after > committed: break
                case let .snapshot(_, seq) where seq > committed: break
                case .recordingOutcome: break
                default: continue
                }
                queue[i].pending = .held
                out.append(Redo(address: address, order: queue[i].order, client: queue[i].client, ref: queue[i].ref, command: command,
                                commandKey: queue[i].commandKey))
            }
            queues[address] = queue
        }
        return out.sorted { $0.order < $1.order }
    }

    /// The new answer of a command decided again.
    mutating func settle(_ redo: Redo, _ pending: Pending) {
        guard let i = queues[redo.address]?.firstIndex(where: { $0.order == redo.order }) else { return }
        queues[redo.address]![i].pending = pending
    }

    /// Takes every answer that can go now, given the last published seq.
    mutating func release(published: Int) -> [Answer] {
        var out: [Answer] = []
        for address in Array(queues.keys) { release(address, published: published, into: &out) }
        return out
    }

    /// Takes the answers of one address that can go now.
    mutating func release(_ address: UInt64, published: Int) -> [Answer] {
        var out: [Answer] = []
        release(address, published: published, into: &out)
        return out
    }

    private mutating func release(_ address: UInt64, published: Int, into out: inout [Answer]) {
        guard let queue = queues[address] else { return }
        var n = 0
        while n < queue.count, let frame = Self.frame(queue[n], published: published) {
            out.append(Answer(to: address, client: queue[n].client, frame: frame))
            n += 1
        }
        var rest = n == queue.count ? nil : Array(queue[n...])
        if case .syncLater? = rest?.first?.pending {
            rest![0].pending = .syncDue
            dueSyncs.append((address, rest![0].order, rest![0].ref))
        }
        queues[address] = rest
    }

    private static func frame(_ entry: Entry, published: Int) -> ServerFrame? {
        switch entry.pending {
        case let .ready(frame): return frame
        case let .applied(seq), let .acked(seq): return seq <= published ? .ack(ref: entry.ref, seq: seq) : nil
        case let .unchanged(after): return after <= published ? .ack(ref: entry.ref, seq: after) : nil
        case let .snapshot(snapshot, seq): return seq <= published ? .snapshot(ref: entry.ref, snapshot) : nil
        case .held, .recordingOutcome, .elsewhere, .syncLater, .syncDue: return nil
        }
    }

    /// After a failed commit that rolled the state back to `committed`: commands whose
    /// batch is gone answer `error`, and so do commands that changed nothing on top of it
    /// (they were decided on state that is gone: a `select` of a tab whose selection was
    /// lost is no `ack`).
    mutating func rollBack(to committed: Int, error: CommandError) {
        for (address, queue) in queues {
            queues[address] = queue.map { entry in
                var entry = entry
                switch entry.pending {
                case let .applied(seq) where seq > committed: entry.pending = .ready(.error(ref: entry.ref, error))
                case let .unchanged(after) where after > committed: entry.pending = .ready(.error(ref: entry.ref, error))
                case let .snapshot(_, seq) where seq > committed: entry.pending = .ready(.error(ref: entry.ref, error))
                case .held, .recordingOutcome: entry.pending = .ready(.error(ref: entry.ref, error))
                default: break
                }
                return entry
            }
        }
    }
}
