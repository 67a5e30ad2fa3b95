#if canImport(Glibc)
import Glibc
#endif

/// State behind a pthread mutex, shared between the service thread and other threads.
///
/// Used instead of `Synchronization.Mutex`: `Mutex` takes its contended path with futex
/// system calls inside the (uninstrumented) Synchronization library, so ThreadSanitizer cannot
/// see that synchronisation and reports every access it guards as a race. A pthread mutex is
/// intercepted by TSan, so the TSan run checks this code for real. Uncontended, both cost the
/// same (one atomic each way).
///
/// `@unchecked Sendable`: `state` is only read or written inside `withLock`, which holds the
/// C mutex.
final class ThreadLocked<State>: @unchecked Sendable {
    private var state: State
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the state, holding the lock. Never call a handler from inside it.
    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
