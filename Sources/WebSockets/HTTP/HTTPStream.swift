import Locking

/// The body of an answer sent as it is made (server-sent events): ``HTTPResponder/stream(_:limit:)``
/// writes the head at once and then whatever is `send`-ed, in order, until ``finish()``,
/// the server stopping, or the peer going away; the connection closes at its end.
///
/// Bounded: bytes sent that the service thread has not handed to the socket yet (it hands
/// over the next ones once the last are written, so a peer that does not read keeps them
/// here) may weigh at most `limit`. A `send` past it closes the stream, as the server closes
/// a WebSocket that does not read: the peer misses what follows and must come back.
///
/// Any thread. `onClose` is called once when the stream ends for any reason, on the thread
/// that ended it (quick, never blocking).
public final class HTTPStream: Sendable {
    public let limit: Int

    private struct State {
        var pieces: [[UInt8]] = []
        var bytes = 0
        /// No more `send`s are taken: finished, over the bound, or gone.
        var closed = false
        /// Over its bound (or asked to drop): the connection goes without the rest.
        var dropped = false
        /// Nothing more will come to the service thread for it (its end is known there).
        var ended = false
        var onClose: [@Sendable () -> Void] = []
        /// Set by the service thread once the head is out: tells it there is more to write.
        var wake: (@Sendable () -> Void)?
        /// Pieces were added since the service thread last took them, and it was woken.
        var wakePending = false
        /// Tasks waiting in ``waitForSpace()``.
        var spaceWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Locked(State())

    init(limit: Int) {
        precondition(limit > 0)
        self.limit = limit
    }

    /// Whether `send` may still be taken.
    public var isOpen: Bool { !state.withLock { $0.closed } }

    /// Queues `bytes`; false when the stream is closed (or closes now: past its bound).
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty else { return isOpen }
        let (taken, wake, closers) = state.withLock { s -> (Bool, (@Sendable () -> Void)?, [@Sendable () -> Void]) in
            guard !s.closed else { return (false, nil, []) }
            if s.bytes + bytes.count > limit, s.bytes > 0 {
                s.closed = true
                s.dropped = true
                s.pieces = []
                s.bytes = 0
                return (false, takeWake(&s), takeClosers(&s))
            }
            s.pieces.append(bytes)
            s.bytes += bytes.count
            return (true, takeWake(&s), [])
        }
        wake?()
        for close in closers { close() }
        return taken
    }

    /// Ends the body after what was sent: the connection closes once it is written.
    public func finish() {
        let (wake, closers) = state.withLock { s -> ((@Sendable () -> Void)?, [@Sendable () -> Void]) in
            guard !s.closed else { return (nil, []) }
            s.closed = true
            return (takeWake(&s, force: true), takeClosers(&s))
        }
        wake?()
        for close in closers { close() }
    }

    /// Waits until at most half of `limit` waits for the peer (or the stream ended): a
    /// producer with much to send sends it in parts, as the peer takes them.
    public func waitForSpace() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.closed || s.bytes <= limit / 2 { return true }
                s.spaceWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Calls `handler` once the stream ends (at once if it has).
    public func onClose(_ handler: @escaping @Sendable () -> Void) {
        let closed = state.withLock { s -> Bool in
            if !s.closed { s.onClose.append(handler) }
            return s.closed
        }
        if closed { handler() }
    }

    private func takeWake(_ s: inout State, force: Bool = false) -> (@Sendable () -> Void)? {
        guard let wake = s.wake, !s.wakePending || force else { return nil }
        s.wakePending = true
        return wake
    }

    private func takeClosers(_ s: inout State) -> [@Sendable () -> Void] {
        defer { s.onClose = [] }
        let waiters = s.spaceWaiters
        s.spaceWaiters = []
        return s.onClose + waiters.map { waiter in { waiter.resume() } }
    }

    // MARK: The service thread

    /// What the service thread finds when it looks.
    enum Take {
        /// These bytes to write (empty: nothing now).
        case bytes([UInt8])
        /// Nothing more: write what was taken, then close.
        case end
        /// Close at once, without the rest (past its bound).
        case drop
    }

    /// The head is out: from now on `send` wakes the service thread with `wake`. True when
    /// there is something to take already.
    func attach(wake: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { s in
            s.wake = wake
            let ready = !s.pieces.isEmpty || s.closed
            s.wakePending = ready
            return ready
        }
    }

    /// Takes everything queued (joined into one write), or how the stream ends.
    func take() -> Take {
        let (take, waiters) = state.withLock { s -> (Take, [CheckedContinuation<Void, Never>]) in
            s.wakePending = false
            if s.dropped { return (.drop, []) }
            if !s.pieces.isEmpty {
                let bytes = s.pieces.count == 1 ? s.pieces[0] : Array(s.pieces.joined())
                s.pieces = []
                s.bytes = 0
                defer { s.spaceWaiters = [] }
                return (.bytes(bytes), s.spaceWaiters)
            }
            return (s.closed ? .end : .bytes([]), [])
        }
        for waiter in waiters { waiter.resume() }
        return take
    }

    /// A heartbeat the service thread adds when the stream was quiet (a comment line, which
    /// a reader of server-sent events skips), so that proxies keep it and a dead peer shows.
    func heartbeat() { send(Array(":\n\n".utf8)) }

    /// The connection is gone (the peer left, or the server stopped): nothing more is taken.
    func connectionGone() {
        let closers = state.withLock { s -> [@Sendable () -> Void] in
            s.closed = true
            s.pieces = []
            s.bytes = 0
            s.wake = nil
            return takeClosers(&s)
        }
        for close in closers { close() }
    }
}
