import CThreads
#if canImport(Glibc)
import Glibc
#endif

/// A mutex and a condition variable, as `NSCondition` offers them, over pthreads: the
/// daemon's modules link no Foundation (whose ICU data would weigh tens of megabytes in the
/// executables), and ThreadSanitizer sees pthread synchronisation.
///
/// `lock()` … `wait(until:)` … `unlock()`, with `signal()`/`broadcast()` under the lock.
public final class ThreadCondition: @unchecked Sendable {
    // @unchecked Sendable: the pthread objects are what synchronise.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        // Deadlines on the monotonic clock: a change of the wall clock moves no wait.
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    public func signal() { pthread_cond_signal(cond) }
    public func broadcast() { pthread_cond_broadcast(cond) }

    /// Waits (the lock held) until signalled.
    public func wait() { pthread_cond_wait(cond, mutex) }

    /// Waits (the lock held) until signalled or `seconds` have passed; false on the timeout.
    @discardableResult
    public func wait(seconds: Double) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let whole = Int(max(0, seconds).rounded(.down))
        var nanos = now.tv_nsec + Int((max(0, seconds) - Double(whole)) * 1e9)
        var secs = now.tv_sec + whole
        if nanos >= 1_000_000_000 { secs += 1; nanos -= 1_000_000_000 }
        var deadline = timespec(tv_sec: secs, tv_nsec: nanos)
        return pthread_cond_timedwait(cond, mutex, &deadline) == 0
    }

    /// `body` with the lock held.
    public func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// Threads of tabd's own (the libwebsockets service threads, webhook deliveries, the state
/// file's writer), started over pthreads.
public enum Threads {
    /// Starts `body` on a new thread named `name` (the first 15 bytes, as Linux keeps them).
    public static func start(name: String, stackBytes: Int = 0, _ body: @escaping @Sendable () -> Void) {
        final class Box: @unchecked Sendable {
            let body: @Sendable () -> Void
            let name: String
            init(_ body: @escaping @Sendable () -> Void, _ name: String) { self.body = body; self.name = name }
        }
        let box = Unmanaged.passRetained(Box(body, name)).toOpaque()
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        if stackBytes > 0 { pthread_attr_setstacksize(&attr, stackBytes) }
        pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let made = pthread_create(&thread, &attr, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            tabd_name_this_thread(box.name)
            box.body()
            return nil
        }, box)
        pthread_attr_destroy(&attr)
        precondition(made == 0, "cannot start thread \(name): error \(made)")
    }

    /// Sleeps this thread for `seconds`.
    public static func sleep(seconds: Double) {
        var left = timespec(tv_sec: Int(seconds.rounded(.down)), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var rest = timespec()
        while nanosleep(&left, &rest) == -1 && errno == EINTR { left = rest }
    }
}
