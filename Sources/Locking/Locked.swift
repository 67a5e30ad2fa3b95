#if canImport(Glibc)
import Glibc
#endif

/// State behind a pthread mutex.
///
/// Used instead of `Synchronization.Mutex` everywhere state is shared between threads (the
/// libwebsockets service threads, the state store's writer, the actors): `Mutex` takes its
/// contended path with futex system calls inside the uninstrumented Synchronization
/// library, so ThreadSanitizer cannot see that synchronisation and reports every access it
/// guards as a race. A pthread mutex is intercepted by TSan, so the TSan run checks this
/// code for real. Uncontended, both cost one atomic each way.
///
/// `@unchecked Sendable`: `state` is only read or written inside `withLock`, which holds
/// the C mutex.
public final class Locked<State>: @unchecked Sendable {
    @usableFromInline var state: State
    @usableFromInline let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    public init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the state, holding the lock. Never call out (resume a
    /// continuation, call a handler) from inside it. Inlinable, so that the callers' closures
    /// are specialized, not called through generic code.
    @inlinable
    public func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
