/// Everything a `WebSocketClient` is set up with.
public struct ClientConfiguration: Sendable {
    /// The most connections open at once; the open-file limit is raised toward it (creating the
    /// client fails with `fileDescriptorLimitTooLow` when the hard limit is too low).
    public var maxConnections: Int = 1024
    /// When set, libwebsockets' log level for the whole process (it is global: a client in the
    /// same process as a server changes the server's too). Nil leaves it as it is.
    public var logLevel: WebSocketLogLevel? = nil
    /// Seconds a connection may take from `connect` to an open WebSocket.
    public var connectTimeoutSeconds: Int = 20
    /// The name the service thread gets (shows in `top -H`, `perf`).
    public var threadName: String = "ws-client"
    /// The event loop the connections run on.
    public var eventLoop: WebSocketEventLoop = .libuv
    /// Seconds without traffic from the server before a connection pings it; it is dropped
    /// 10 s after that without an answer. nil: never (a load client: libwebsockets keeps
    /// these timers in one sorted list, which every new connection walks).
    public var keepAliveSeconds: Int? = 300
    /// Whom `wss://` connections trust: the system's store by default.
    public var tls: TLSTrust = .system

    public init(
        maxConnections: Int = 1024,
        logLevel: WebSocketLogLevel? = nil,
        connectTimeoutSeconds: Int = 20,
        threadName: String = "ws-client",
        eventLoop: WebSocketEventLoop = .libuv,
        keepAliveSeconds: Int? = 300
    ) {
        self.maxConnections = maxConnections
        self.logLevel = logLevel
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.threadName = threadName
        self.eventLoop = eventLoop
        self.keepAliveSeconds = keepAliveSeconds
    }
}

/// Where a client connects: `ws://HOST:PORT/PATH?QUERY`, or `wss://` over TLS.
public struct WebSocketURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The path with its query, e.g. `/ws?name=kiosk`.
    public var path: String
    /// `wss://`: TLS, verified against `ClientConfiguration.tls`.
    public var secure: Bool

    public init(host: String, port: Int, path: String = "/", secure: Bool = false) {
        self.host = host
        self.port = port
        self.path = path.hasPrefix("/") ? path : "/" + path
        self.secure = secure
    }

    /// Parses `ws://host:port/path?query` (port 80 by default) and `wss://…` (443); nil
    /// for anything else.
    public init?(_ text: String) {
        let secure = text.hasPrefix("wss://")
        guard secure || text.hasPrefix("ws://") else { return nil }
        let rest = text.dropFirst(secure ? 6 : 5)
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        var path = String(rest.dropFirst(authority.count))
        if path.isEmpty || path.hasPrefix("?") { path = "/" + path }
        let host: Substring
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            portText = after.hasPrefix(":") ? after.dropFirst() : nil
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
            portText = nil
        }
        guard !host.isEmpty else { return nil }
        let port = portText.map { Int($0) } ?? (secure ? 443 : 80)
        guard let port, (1...65_535).contains(port) else { return nil }
        self.init(host: String(host), port: port, path: path, secure: secure)
    }

    /// The same server with another path and query.
    public func with(path: String) -> WebSocketURL { WebSocketURL(host: host, port: port, path: path, secure: secure) }

    /// The `Host` header: `host:port`.
    public var hostHeader: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public var description: String { "\(secure ? "wss" : "ws")://\(hostHeader)\(path)" }
}

/// How a client connection ended.
public struct ClientClose: Sendable, Equatable, CustomStringConvertible {
    /// The close code: the one the server sent, else the one this side sent; nil when the
    /// connection failed or was dropped without a close frame.
    public var code: UInt16?
    public var reason: String
    /// Whether the WebSocket had opened (false: the connection or handshake failed).
    public var wasOpen: Bool
    /// For a refused handshake, the HTTP status the server answered (401, 403, 503, ...).
    public var httpStatus: Int?

    public init(code: UInt16?, reason: String, wasOpen: Bool, httpStatus: Int? = nil) {
        self.code = code
        self.reason = reason
        self.wasOpen = wasOpen
        self.httpStatus = httpStatus
    }

    public var closeCode: CloseCode? { code.flatMap(CloseCode.init(rawValue:)) }

    public var description: String {
        var s = code.map { "code \($0)" } ?? "no close code"
        if !reason.isEmpty { s += " (\(reason))" }
        if let httpStatus { s += ", HTTP \(httpStatus)" }
        return wasOpen ? s : "failed to open: " + s
    }
}

/// What a `WebSocketClient` tells its owner. Every method is called on the client's service
/// thread, one call at a time, so it must return quickly and never block. It may call the
/// client's own methods (`send`, `connect`, `close`): from the service thread they take effect
/// without a wake-up.
public protocol WebSocketClientHandler: Sendable {
    /// The WebSocket opened; `subprotocol` is the one the server chose, if any.
    func opened(_ id: ConnectionID, subprotocol: String?)

    /// One whole message (fragments and chunks reassembled). The bytes are valid only during
    /// the call: copy what you keep.
    func received(_ id: ConnectionID, message: UnsafeRawBufferPointer, binary: Bool)

    /// The connection is gone (or never opened); called exactly once per `connect`.
    func closed(_ id: ConnectionID, _ close: ClientClose)
}

/// Why a `WebSocketClient` could not be created.
public enum WebSocketClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The process may not open enough files for `ClientConfiguration.maxConnections`.
    case fileDescriptorLimitTooLow(limit: Int, required: Int)
    case invalidConfiguration(String)
    case libwebsocketsFailed(String)

    public var description: String {
        switch self {
        case let .fileDescriptorLimitTooLow(limit, required):
            return "the open-file limit (ulimit -n) is \(limit), but \(required) are needed; raise it"
        case let .invalidConfiguration(message):
            return "invalid client configuration: \(message)"
        case let .libwebsocketsFailed(message):
            return "libwebsockets failed: \(message)"
        }
    }
}
