#if canImport(Glibc)
import Glibc
#endif

/// State behind a pthread mutex.
///
/// Used instead of `Synchronization.Mutex` where state is shared with threads outside
/// Swift concurrency (the state store's writer): `Mutex` locks with futex system calls
/// that ThreadSanitizer cannot see, so it reports every access it guards as a race,
/// while a pthread mutex is understood and the TSan run checks this code for real.
///
/// `@unchecked Sendable`: `state` is only read or written inside `withLock`, which holds
/// the C mutex.
public final class Locked<State>: @unchecked Sendable {
    private var state: State
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    public init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the state, holding the lock. Never call out (resume a
    /// continuation, call a handler) from inside it.
    public func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
