/// Many WebSocket client connections in one libwebsockets context, served by one dedicated
/// thread: the load tool's and the tests' side of the wire.
///
/// `connect` returns at once with the connection's id; the handler hears `opened`, every
/// message (`received`) and exactly one `closed` per connection, all on the service thread.
/// Messages sent before a connection opens wait for it. All methods are thread-safe; called
/// from the handler (the service thread) they skip the wake-up and act at once.
///
/// Call `shutdown()` when done: the service thread runs until then. Once shutdown has begun,
/// `connect`, `send` and `close` do nothing (and a `connect` then reports no `closed`).
public final class WebSocketClient: Sendable {
    let loop: ClientLoop

    /// Creates the context and starts the service thread.
    public init(configuration: ClientConfiguration = .init(), handler: any WebSocketClientHandler) throws(WebSocketClientError) {
        loop = try ClientLoop(configuration: configuration, handler: handler)
        loop.start()
    }

    /// Opens a connection to `url`, offering `subprotocols` (comma-separated) when given,
    /// sending `origin` as the `Origin` header when given (browsers do; scripts do not) and
    /// `authorization` as the `Authorization` header (a token kept out of the URL, and so out
    /// of every proxy's access log).
    @discardableResult
    public func connect(_ url: WebSocketURL, subprotocols: String? = nil, origin: String? = nil, authorization: String? = nil) -> ConnectionID {
        loop.update { t in t.connect(url: url, subprotocols: subprotocols, origin: origin, authorization: authorization) }
    }

    /// Sends one text message (the UTF-8 bytes are sent as they are). Ignored once the
    /// connection is closing or gone.
    public func send(_ text: [UInt8], on id: ConnectionID) {
        if loop.onServiceThread {
            _ = loop.table.withLock { $0.send(text, to: id, markDirty: false) }
            loop.requestWritableDirectly(id)
        } else {
            loop.update { t in ((), t.send(text, to: id, markDirty: true)) }
        }
    }

    /// Sends one text message.
    public func send(_ text: String, on id: ConnectionID) {
        send(Array(text.utf8), on: id)
    }

    /// Closes with a close frame carrying `code` and `reason`, after what was queued before.
    public func close(_ id: ConnectionID, code: CloseCode = .normal, reason: String = "") {
        request(id, .init(code: code, reason: reason, abort: false))
    }

    /// Drops the connection at once: no close frame, queued messages are not sent (a peer that
    /// vanishes, e.g. a laptop lid closing).
    public func abort(_ id: ConnectionID) {
        request(id, .init(code: .normal, reason: "", abort: true))
    }

    private func request(_ id: ConnectionID, _ close: ClientTable.CloseRequest) {
        if loop.onServiceThread {
            _ = loop.table.withLock { $0.close(id, close, markDirty: false) }
            loop.requestWritableDirectly(id)
        } else {
            loop.update { t in ((), t.close(id, close, markDirty: true)) }
        }
    }

    /// Connections not yet reported closed.
    public var connectionCount: Int { loop.table.withLock { $0.count } }

    /// Whether the caller runs on the service thread (inside a handler call).
    public var isServiceThread: Bool { loop.onServiceThread }

    /// Stops the service thread: open connections are dropped (each reported `closed`), then
    /// the context is destroyed. Returns once that is done. Must not be called from the handler.
    public func shutdown() async {
        precondition(!loop.onServiceThread, "WebSocketClient.shutdown() called from its own handler")
        loop.update { t in ((), t.stop()) }
        await loop.finished()
    }
}
