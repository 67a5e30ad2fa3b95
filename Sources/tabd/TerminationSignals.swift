import CSignals
import Locking
import Dispatch
import FoundationEssentials
import Glibc

/// SIGINT, SIGTERM and SIGHUP, caught from the moment this is created: a stop signal that
/// arrives while tabd starts is kept for ``Mailbox/wait()``, not lost and not fatal; a
/// SIGHUP goes to ``onHangup(_:)``'s handler (kept until there is one), never ends tabd. The handler
/// (CSignals) only writes the signal's number to a pipe; a thread of its own reads it and
/// delivers it here.
///
/// Not a Dispatch signal source: on Linux it registers asynchronously, on Dispatch's
/// manager thread, so a signal in between found no handler; and Dispatch parks the main
/// thread with every signal unblocked, so no mask can keep signals off it.
final class TerminationSignals: Sendable {
    /// The first stop signal received; ``Mailbox/wait()`` returns it.
    let mailbox = Mailbox()
    /// Delivered to ``mailbox`` instead of a signal when tabd cannot go on: it stops with status 1.
    static let failure: Int32 = 0
    private let hangup = Locked<(handler: (@Sendable () -> Void)?, pending: Bool)>((nil, false))

    /// Calls `handler` on every SIGHUP from now on (on the signals' thread), and at once
    /// for one that came before.
    func onHangup(_ handler: @escaping @Sendable () -> Void) {
        let pending = hangup.withLock { h -> Bool in
            h.handler = handler
            defer { h.pending = false }
            return h.pending
        }
        if pending { handler() }
    }

    init() {
        let caught = [SIGINT, SIGTERM, SIGHUP]
        guard tabd_signals_catch(caught, Int32(caught.count)) == 0 else {
            fatalError("cannot catch SIGINT, SIGTERM and SIGHUP: \(String(cString: strerror(errno)))")
        }
        Threads.start(name: "tabd-signals") { [mailbox, hangup] in
            while true {
                let sig = tabd_signals_next()
                guard sig > 0 else { return }
                if sig == SIGHUP {
                    let handler = hangup.withLock { h -> (@Sendable () -> Void)? in
                        if h.handler == nil { h.pending = true }
                        return h.handler
                    }
                    handler?()
                } else {
                    mailbox.deliver(sig)
                }
            }
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
