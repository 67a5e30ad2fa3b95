import Locking

/// What one subscription of a ``TabdClient`` holds for its consumer: at most `limit`
/// elements. A consumer further behind than that does not make it grow: `overflow`
/// decides what the buffer becomes instead (for ``TabdClient/updates()``, one snapshot of
/// the state, which holds everything dropped; for ``TabdClient/events()``, the newest are
/// dropped). The consumer reads it as an `AsyncStream` (``stream``).
final class SubscriptionBuffer<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var head = 0
        var waiter: CheckedContinuation<Element?, Never>?
        var finished = false
        var count: Int { items.count - head }
    }

    let limit: Int
    /// A `Locked` (a pthread mutex), which ThreadSanitizer sees; it reported the
    /// Synchronization.Mutex this was as a race (make test-tsan).
    private let state = Locked(State())

    init(limit: Int) { self.limit = max(2, limit) }

    /// The consumer's side. Ends after ``finish()`` (what is held is read first), or when
    /// the consumer stops.
    var stream: AsyncStream<Element> {
        AsyncStream(unfolding: { await self.next() }, onCancel: { self.finish() })
    }

    /// Hands `element` over. When `limit` elements are held already, `overflow` gets them
    /// with `element` and returns what the buffer holds instead (at most `limit`).
    func push(_ element: Element, overflow: ([Element]) -> [Element]) {
        let waiter = state.withLock { s -> CheckedContinuation<Element?, Never>? in
            guard !s.finished else { return nil }
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            if s.count < limit {
                s.items.append(element)
            } else {
                let kept = overflow(Array(s.items[s.head...]) + [element])
                s.items = Array(kept.prefix(limit))
                s.head = 0
            }
            return nil
        }
        waiter?.resume(returning: element)
    }

    /// Whether the stream has ended or will (``finish()``, or the consumer stopped): the
    /// subscription can be dropped.
    var isFinished: Bool { state.withLock { $0.finished } }

    /// No more elements: the consumer reads what is held, then the stream ends.
    func finish() {
        let waiter = state.withLock { s -> CheckedContinuation<Element?, Never>? in
            s.finished = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: nil)
    }

    private func next() async -> Element? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Element?, Never>) in
            let now = state.withLock { s -> Element?? in
                if s.count > 0 {
                    let e = s.items[s.head]
                    s.head += 1
                    if s.head > 64, s.head * 2 > s.items.count { s.items.removeFirst(s.head); s.head = 0 }
                    return .some(e)
                }
                if s.finished { return .some(nil) }
                s.waiter = continuation
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }
}
