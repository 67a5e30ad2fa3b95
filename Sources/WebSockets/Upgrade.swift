/// What the server knows about a WebSocket upgrade request when it asks whether to accept it.
public struct UpgradeRequest: Sendable {
    /// The path without the query (always `Configuration.webSocketPath` by the time a handler sees it).
    public let path: String
    /// The query parameters, percent-decoded; a repeated name keeps its last value.
    public let query: [String: String]
    /// The `Origin` header (browsers send it, scripts usually do not).
    public let origin: String?
    /// The `Host` header, e.g. `127.0.0.1:8080`.
    public let host: String?
    /// The `Authorization` header, e.g. `Bearer T`.
    public let authorization: String?
    /// `Configuration.subprotocol` when the client offered it, nil when it offered none.
    public let subprotocol: String?
    /// Every subprotocol the client offered, in order (one may carry a credential).
    public let offeredSubprotocols: [String]
    /// The peer's address, e.g. `127.0.0.1`.
    public let peer: String
    /// What a reverse proxy in front may have said about the client.
    public let forwarding: ForwardingHeaders

    public init(
        path: String,
        query: [String: String] = [:],
        origin: String? = nil,
        host: String? = nil,
        authorization: String? = nil,
        subprotocol: String? = nil,
        offeredSubprotocols: [String] = [],
        peer: String = "",
        forwarding: ForwardingHeaders = .init()
    ) {
        self.path = path
        self.query = query
        self.origin = origin
        self.host = host
        self.authorization = authorization
        self.subprotocol = subprotocol
        self.offeredSubprotocols = offeredSubprotocols
        self.peer = peer
        self.forwarding = forwarding
    }
}

/// The headers reverse proxies describe the client with, as sent (several lines of one
/// joined with `, `). Whether to believe them is the handler's decision.
public struct ForwardingHeaders: Sendable, Equatable {
    /// `Forwarded` (RFC 7239).
    public var forwarded: String?
    public var xForwardedFor: String?
    public var xForwardedHost: String?
    public var xForwardedProto: String?

    public init(forwarded: String? = nil, xForwardedFor: String? = nil, xForwardedHost: String? = nil, xForwardedProto: String? = nil) {
        self.forwarded = forwarded
        self.xForwardedFor = xForwardedFor
        self.xForwardedHost = xForwardedHost
        self.xForwardedProto = xForwardedProto
    }

    /// Those of a request's head.
    init(_ head: RequestHead) {
        self.init(forwarded: head.value("forwarded"), xForwardedFor: head.value("x-forwarded-for"),
                  xForwardedHost: head.value("x-forwarded-host"), xForwardedProto: head.value("x-forwarded-proto"))
    }

    /// Whether any of them was sent.
    public var any: Bool { forwarded != nil || xForwardedFor != nil || xForwardedHost != nil || xForwardedProto != nil }
}

/// A handler's answer to an `UpgradeRequest`.
public enum UpgradeDecision: Sendable {
    /// Complete the handshake; `connected` follows.
    case accept
    /// Answer with this HTTP status (401, 403, 503, ...) and a short text body instead.
    case reject(status: Int)
}

/// What the server knows of a request once its head is read, before it answers it in any
/// way: for a handler's ``WebSocketServerHandler/screen(_:)``, which may refuse it.
public struct RequestSummary: Sendable {
    /// The method as sent (`GET`, `POST`, …).
    public let method: String
    /// The path without the query, decoded and normalized.
    public let path: String
    /// Whether it asks for a WebSocket upgrade (`upgrade: websocket`).
    public let isUpgrade: Bool
    /// The `Host` header (nil: none, as HTTP/1.0 allows).
    public let host: String?
    /// The `Origin` header (browsers send it on cross-site requests and upgrades).
    public let origin: String?
    /// The peer's address, e.g. `127.0.0.1`.
    public let peer: String
    /// What a reverse proxy in front may have said about the client.
    public let forwarding: ForwardingHeaders

    public init(method: String, path: String, isUpgrade: Bool = false, host: String? = nil, origin: String? = nil,
                peer: String = "", forwarding: ForwardingHeaders = .init()) {
        self.method = method; self.path = path; self.isUpgrade = isUpgrade; self.host = host; self.origin = origin
        self.peer = peer; self.forwarding = forwarding
    }
}
