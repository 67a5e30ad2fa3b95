import Locking

/// What the gateway hands the dispatcher: inputs in order, taken all at once.
///
/// Unlike an `AsyncStream` of batches, ``takeAll()`` returns everything that arrived
/// while the dispatcher was busy as one array, so the dispatcher can fold the joins and
/// leaves of many passes into one presence batch (a reconnect storm of N clients then
/// costs a few broadcasts to everyone, not one per pass).
final class Inbox<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var waiter: CheckedContinuation<[Element]?, Never>?
        var finished = false
    }
    private let state = Locked(State())

    /// Adds items (from any thread); wakes the dispatcher if it waits.
    func put(_ items: [Element]) {
        guard !items.isEmpty else { return }
        let wake = state.withLock { s -> (CheckedContinuation<[Element]?, Never>, [Element])? in
            guard !s.finished else { return nil }
            guard let waiter = s.waiter else {
                s.items += items
                return nil
            }
            s.waiter = nil
            return (waiter, items)
        }
        if let (waiter, items) = wake { waiter.resume(returning: items) } // outside the lock
    }

    /// No more items: the dispatcher gets what is left, then nil.
    func finish() {
        let waiter = state.withLock { s -> CheckedContinuation<[Element]?, Never>? in
            s.finished = true
            defer { s.waiter = nil }
            return s.items.isEmpty ? s.waiter : nil
        }
        waiter?.resume(returning: nil)
    }

    /// Everything that arrived since the last call, waiting for at least one item; nil
    /// once finished and empty. One caller at a time.
    func takeAll() async -> [Element]? {
        await withCheckedContinuation { continuation in
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
