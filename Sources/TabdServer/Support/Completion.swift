import Locking

/// A one-shot signal any number of tasks can wait for.
final class Completion: Sendable {
    private struct State {
        var done = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())

    func signal() {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.done = true
            defer { s.waiting = [] }
            return s.waiting
        }
        for w in waiting { w.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { s -> Bool in
                if s.done { return true }
                s.waiting.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }
}
