/// A value that is set once and that any number of tasks can wait for: the one latch of
/// every module (a batch's commit, a room that has finished, a service thread that has
/// stopped). The first ``fulfil(_:)`` wins; later ones change nothing. Waiters are resumed
/// outside the lock.
public final class OneShot<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiting: [CheckedContinuation<Value, Never>] = []
    }
    private let state = Locked(State())

    public init() {}

    /// Sets the value and resumes every waiter; false if it was set already.
    @discardableResult
    public func fulfil(_ value: Value) -> Bool {
        let waiting = state.withLock { s -> [CheckedContinuation<Value, Never>]? in
            guard s.value == nil else { return nil }
            s.value = value
            defer { s.waiting = [] }
            return s.waiting
        }
        guard let waiting else { return false }
        for continuation in waiting { continuation.resume(returning: value) }
        return true
    }

    /// The value, if it is set.
    public var value: Value? { state.withLock { $0.value } }

    /// The value, once it is set. The waiter stays on the caller's actor: it is resumed
    /// there directly, without a hop through the global executor.
    public func wait(isolation: isolated (any Actor)? = #isolation) async -> Value {
        await withCheckedContinuation(isolation: isolation) { continuation in
            let ready = state.withLock { s -> Value? in
                if let value = s.value { return value }
                s.waiting.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

extension OneShot where Value == Void {
    /// Sets it (a signal without a value).
    public func signal() { fulfil(()) }
}
