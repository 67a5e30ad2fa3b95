/// What a `WebSocketServer` tells its owner, and asks it.
///
/// Every method is called on the server's service thread, one call at a time: it must return
/// quickly and never block (hand work to an actor and return). Calling the server's own
/// thread-safe methods (`send`, `broadcast`, `activate`, `close`) from here is fine.
public protocol WebSocketServerHandler: Sendable {
    /// Every request whose head is well formed, before the server answers it in any way (a
    /// file, an upgrade, a handler's path): an answer refuses it (its body, if any, is read
    /// and dropped; an upgrade's connection closes after it); nil lets it go on.
    func screen(_ request: RequestSummary) -> HTTPResponse?

    /// Decides a WebSocket upgrade on `Configuration.webSocketPath` (origin, token, capacity).
    func shouldAccept(_ request: UpgradeRequest) -> UpgradeDecision

    /// A connection completed its handshake. It is *pending*: it receives nothing until
    /// `WebSocketServer.activate` is called for it.
    func connected(_ id: ConnectionID, request: UpgradeRequest)

    /// One whole text message (fragments reassembled), valid UTF-8, at most
    /// `Configuration.maxMessageBytes` long.
    func received(_ id: ConnectionID, message: [UInt8])

    /// The connection is gone, for whatever reason; called exactly once per `connected`.
    /// `code` is the close code this server sent (`close`, too slow, shutdown, bad input) or,
    /// failing that, the one the peer sent; nil when neither is known (the peer vanished, a
    /// ping timed out, or libwebsockets itself failed the connection, e.g. for invalid UTF-8).
    func disconnected(_ id: ConnectionID, code: CloseCode?, reason: String)

    /// A request for one of `Configuration.dynamicPaths`, or under one of
    /// `Configuration.dynamicPrefixes`, any method, with its whole body (or `bodyTooLarge`).
    /// Answer it through `responder`, now (on this thread) or later from any thread; until then
    /// the connection waits. Do not wait here for the answer.
    func httpRequest(_ request: HTTPRequest, responder: HTTPResponder)

    /// The service thread finished one pass over the sockets: whatever the calls above
    /// gathered in it can be handed on together (one wake-up of the consumer, not one per
    /// message).
    func serviceCycleEnded()
}

extension WebSocketServerHandler {
    public func screen(_ request: RequestSummary) -> HTTPResponse? { nil }
    public func serviceCycleEnded() {}
}
