/// One HTTP + WebSocket server on one port, run by libwebsockets on one dedicated thread.
///
/// Connections start *pending* and receive nothing until `activate` puts them on a channel
/// (``ChannelID``: an independent broadcast stream with its own seqs, e.g. one per room); from
/// then on each gets its `first` frames, then every `broadcast` on its channel, interleaved with
/// `send`s in call order. One `OutgoingFrame` is shared by every connection it goes to; a
/// connection that falls more than `Configuration.queueLimit` frames behind is closed with
/// 1008 `too slow`, so one slow client neither holds unbounded memory nor slows the others.
///
/// All methods are thread-safe. The handler is called on the service thread.
public final class WebSocketServer: Sendable {
    let loop: ServiceLoop

    /// Creates the libwebsockets context and binds the port; serving starts with `start()`.
    /// Throws `WebSocketServerError` (port in use, web root missing, fd limit too low, ...).
    public init(configuration: Configuration, handler: any WebSocketServerHandler) throws(WebSocketServerError) {
        loop = try ServiceLoop(configuration: configuration, handler: handler)
    }

    /// The port really listened on (the chosen one when `Configuration.port` is 0).
    public var port: Int { loop.port }

    /// It serves HTTPS and WSS only (`Configuration.tls`).
    public var usesTLS: Bool { loop.tls != nil }

    /// The certificate in use; nil without TLS.
    public var certificate: TLSCertificateInfo? { loop.tls?.certificate }

    /// Reads the certificate and key files again; if they make a good pair (both PEM, the key
    /// the certificate's), handshakes from now on use it and it is returned. Open
    /// connections keep theirs. A bad pair throws and changes nothing. Nil without TLS.
    public func reloadTLS() throws(TLSError) -> TLSCertificateInfo? {
        try loop.tls?.reload()
    }

    /// Starts the service thread. Calling it again, or after `shutdown`, does nothing.
    public func start() {
        _ = loop.start()
    }

    /// Sends `frame` to every connection activated on `channel`. `seq` is the last event seq in
    /// the frame and must increase strictly from call to call on the same channel (a programmer
    /// error otherwise); other channels' seqs do not matter. Costs O(1) here, and wakes only the
    /// channel's connections.
    public func broadcast(_ frame: OutgoingFrame, seq: Int, on channel: ChannelID) {
        loop.update { $0.broadcast(frame, seq: seq, on: channel) }
    }

    /// Broadcasts `frames` on `channel` (each with its last seq, increasing as for
    /// ``broadcast(_:seq:on:)``), then sends each reply to its connection, with at most one
    /// wake-up of the service thread for all of them: an acknowledgement travels with the frame
    /// it acknowledges.
    public func publish(_ frames: [(OutgoingFrame, seq: Int)], on channel: ChannelID, replies: [(ConnectionID, OutgoingFrame)]) {
        guard !frames.isEmpty || !replies.isEmpty else { return }
        loop.update { table in
            var wake = false
            for (frame, seq) in frames { wake = table.broadcast(frame, seq: seq, on: channel) || wake }
            for (id, frame) in replies { wake = table.send(frame, to: id) || wake }
            return wake
        }
    }

    /// Ends a connection's pending state and puts it on `channel`, for good: it gets `first`
    /// (welcome, replayed frames), then every broadcast on `channel` with a seq above
    /// `afterSeq`, including those made while it was pending; none twice, none missed, none of
    /// another channel. If one of those is no longer retained, it is closed 1008 `too slow`: a
    /// channel keeps what its connections have not read yet and, for pending connections, the
    /// broadcasts made since they opened if among the server's last `Configuration.queueLimit`;
    /// with no connection on it and none pending, it keeps nothing. Frames `send` to it while
    /// pending follow `first`, in call order with the channel's broadcasts. Ignored unless the
    /// connection is pending.
    public func activate(_ id: ConnectionID, on channel: ChannelID, first: [OutgoingFrame], afterSeq: Int) {
        loop.update { $0.activate(id, on: channel, first: first, afterSeq: afterSeq) }
    }

    /// Bytes waiting for the connections (each broadcast once, the unsent tails lws holds of
    /// blocked connections' last writes, the HTTP answers held for peers that do not take
    /// them, and pending connections' early frames included): what
    /// `Configuration.totalQueueBytes` bounds.
    public var queuedBytes: Int { loop.table.withLock { $0.heldBytes } }

    /// Of ``queuedBytes``, the HTTP answers held for peers that do not take them.
    public var queuedAnswerBytes: Int { loop.table.withLock { $0.answerBytes } }

    /// HTTP connections dropped because they held some of the largest answers not taken
    /// when the total passed `Configuration.totalQueueBytes`.
    public var droppedAnswers: Int { loop.droppedAnswers.load(ordering: .relaxed) }

    /// The handler keeps `bytes` of a pending connection's frames until it is activated: they
    /// count toward the connection's `Configuration.queueBytes` (past it, it is closed 1008
    /// `too slow`) and the total, until ``activate(_:on:first:afterSeq:)``.
    public func holdEarly(_ id: ConnectionID, bytes: Int) {
        loop.update { $0.holdEarly(id, bytes: bytes) }
    }

    /// Whether frames sent to `id` may still reach it: false once it is closing or gone
    /// (``send(_:to:)`` then ignores them), so work for it can be skipped.
    public func isOpen(_ id: ConnectionID) -> Bool {
        loop.table.withLock { table in
            switch table.state(of: id) {
            case .pending, .active: true
            case .closing, nil: false
            }
        }
    }

    /// Sends `frame` to one connection, after every broadcast made before this call on the
    /// connection's channel. Ignored for unknown or closing connections.
    public func send(_ frame: OutgoingFrame, to id: ConnectionID) {
        loop.update { $0.send(frame, to: id) }
    }

    /// Closes a connection with a close frame, once what was queued for it before this call went out.
    public func close(_ id: ConnectionID, code: CloseCode, reason: String) {
        loop.update { $0.close(id, code: code, reason: reason) }
    }

    /// Forgets a channel (its room was unloaded or deleted): its retained frames and its last
    /// seq. A later broadcast on the same id starts a new history (any seq accepted). Connections
    /// still on it are closed with `code`/`reason` (the daemon closes them itself before,
    /// normally), after what was queued for them; those closing already keep their own close.
    public func removeChannel(_ channel: ChannelID, code: CloseCode, reason: String) {
        loop.update { $0.removeChannel(channel, code: code, reason: reason) }
    }

    /// Refuses new connections (503), closes every connection with `code` and `reason` (a real
    /// close frame), keeps serving until they are gone or `timeout` passes, then destroys the
    /// context and ends the service thread. Every connection is reported `disconnected` first.
    public func shutdown(code: CloseCode = .goingAway, reason: String = "server stopping", timeout: Duration) async {
        await loop.shutdown(code: code, reason: reason, timeout: timeout)
    }

    /// Connections that ended before their first HTTP request or upgrade was complete:
    /// dropped after `Configuration.requestTimeoutSeconds` (a slowloris) or by the peer.
    public var incompleteRequests: Int { loop.incompleteRequests.load(ordering: .relaxed) }

    /// Open WebSocket connections (pending, active or closing).
    public var connectionCount: Int {
        loop.table.withLock { $0.count }
    }
}
