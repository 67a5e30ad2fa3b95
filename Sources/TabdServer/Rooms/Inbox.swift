import Locking

/// What the gateway and the HTTP API hand a room: inputs in order, taken all at once.
///
/// Unlike an `AsyncStream` of batches, ``takeAll(isolation:)`` returns everything that arrived
/// while the room was busy as one array, so the room can fold the joins and
/// leaves of many passes into one presence batch (a reconnect storm of N clients then
/// costs a few broadcasts to everyone, not one per pass).
final class Inbox<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var waiter: CheckedContinuation<[Element]?, Never>?
        var finished = false
    }
    private let state = Locked(State())

    private enum PutOutcome { case refused, kept, wake(CheckedContinuation<[Element]?, Never>) }

    /// Adds items (from any thread); wakes the consumer if it waits. False (and nothing
    /// kept) once the inbox is finished: the caller must answer the items itself.
    @discardableResult
    func put(_ items: [Element]) -> Bool {
        guard !items.isEmpty else { return true }
        let outcome = state.withLock { s -> PutOutcome in
            guard !s.finished else { return .refused }
            guard let waiter = s.waiter else {
                s.items += items
                return .kept
            }
            s.waiter = nil
            return .wake(waiter)
        }
        switch outcome {
        case .refused: return false
        case .kept: return true
        case let .wake(waiter):
            waiter.resume(returning: items) // outside the lock
            return true
        }
    }

    /// No more items: the consumer gets what is left, then nil.
    func finish() {
        let waiter = state.withLock { s -> CheckedContinuation<[Element]?, Never>? in
            s.finished = true
            defer { s.waiter = nil }
            return s.items.isEmpty ? s.waiter : nil
        }
        waiter?.resume(returning: nil)
    }

    /// Everything that arrived since the last call, waiting for at least one item; nil
    /// once finished and empty. One caller at a time. The caller stays on its actor: a
    /// ``put(_:)`` resumes it there directly (one hop from the putter's thread), and
    /// items already waiting are taken without leaving it.
    func takeAll(isolation: isolated (any Actor)? = #isolation) async -> [Element]? {
        await withCheckedContinuation(isolation: isolation) { continuation in
            let ready = state.withLock { s -> [Element]?? in
                if !s.items.isEmpty {
                    defer { s.items.removeAll(keepingCapacity: true) }
                    return .some(s.items)
                }
                if s.finished { return .some(nil) }
                s.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
