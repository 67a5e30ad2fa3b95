import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Synchronization

/// The one thread that serves a libwebsockets context, for the server and the client alike:
/// it runs `lws_service` until told to stop, lets its owner destroy the context on it, and
/// wakes whoever waits for the end.
///
/// Threads: ``run(pass:until:afterEachPass:finish:)`` is the service thread, the only one that calls
/// lws with this context (callbacks arrive on it). Other threads may only call
/// `lws_cancel_service`, which their owner guards so that the context is alive meanwhile.
package final class ServiceThread: Sendable {
    private let finished = OneShot<Void>()
    /// The service thread's pthread id (0 until it runs), to let callers skip the wake-up.
    private let thread = Atomic<UInt>(0)
    private let name: String
    private let stackSize: Int?

    package init(name: String, stackSize: Int? = nil) {
        self.name = name
        self.stackSize = stackSize
    }

    /// Whether the caller runs on the service thread.
    package var isCurrent: Bool { thread.load(ordering: .acquiring) == UInt(bitPattern: Int(bitPattern: pthread_self())) }

    /// Starts the thread; it runs `body` (which calls ``run(pass:until:afterEachPass:finish:)``).
    package func start(_ body: @escaping @Sendable () -> Void) {
        Threads.start(name: name, stackBytes: stackSize ?? 0, body)
    }

    /// On the new thread: runs `pass` (one pass of the event loop over the ready sockets)
    /// until `shouldStop` says so or a pass fails, calling `afterEachPass` after each pass
    /// (and once more after `finish`), then calls `finish` (which destroys the context and
    /// reports what is left) and wakes every ``finishedRunning()`` waiter.
    package func run(pass: () -> Bool, until shouldStop: () -> Bool, afterEachPass: () -> Void = {}, finish: () -> Void) {
        thread.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .releasing)
        while !shouldStop() {
            let ok = pass()
            afterEachPass()
            if !ok { break }
        }
        finish()
        afterEachPass() // what the last connections' ends produced
        markFinished()
    }

    /// Wakes every waiter; for an owner whose thread never ran.
    package func markFinished() {
        finished.signal()
    }

    /// Returns once the service thread has finished.
    package func finishedRunning() async { await finished.wait() }
}
