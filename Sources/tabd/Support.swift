import Locking
import Coordinator
import Dispatch
import Foundation

/// SIGINT and SIGTERM, caught from the moment this is created: their default action is
/// switched off at once, so a signal that arrives while tabd starts is not lost and does
/// not kill it. The handlers run on a global queue, never on the main actor.
final class TerminationSignals {
    /// The first signal received; ``Mailbox/wait()`` returns it.
    let mailbox = Mailbox()
    /// Kept alive for the life of the process.
    private var sources: [any DispatchSourceSignal] = []

    init() {
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [mailbox] in mailbox.deliver(sig) }
            source.resume()
            sources.append(source)
        }
    }

    final class Mailbox: Sendable {
        private struct State {
            var received: Int32?
            var waiter: CheckedContinuation<Int32, Never>?
        }
        private let state = Locked(State())

        func deliver(_ sig: Int32) {
            let waiter = state.withLock { s -> CheckedContinuation<Int32, Never>? in
                guard s.received == nil else { return nil }
                s.received = sig
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume(returning: sig)
        }

        /// Returns the first signal received, waiting for it if need be.
        func wait() async -> Int32 {
            await withCheckedContinuation { continuation in
                let already = state.withLock { s -> Int32? in
                    if let r = s.received { return r }
                    s.waiter = continuation
                    return nil
                }
                if let already { continuation.resume(returning: already) }
            }
        }
    }
}

/// Runs blocking work (a call to the cluster's engine) on a Dispatch thread, so it never
/// holds one of the cooperative pool's few threads.
func offPool<T: Sendable, E: Error>(_ work: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
    let result: Result<T, E> = await withCheckedContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(returning: Result(catching: work)) }
    }
    return try result.get()
}
