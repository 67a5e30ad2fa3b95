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
    /// The peer's address, e.g. `127.0.0.1`.
    public let peer: String

    public init(
        path: String,
        query: [String: String] = [:],
        origin: String? = nil,
        host: String? = nil,
        authorization: String? = nil,
        subprotocol: String? = nil,
        peer: String = ""
    ) {
        self.path = path
        self.query = query
        self.origin = origin
        self.host = host
        self.authorization = authorization
        self.subprotocol = subprotocol
        self.peer = peer
    }
}

/// A handler's answer to an `UpgradeRequest`.
public enum UpgradeDecision: Sendable {
    /// Complete the handshake; `connected` follows.
    case accept
    /// Answer with this HTTP status (401, 403, 503, ...) and a short text body instead.
    case reject(status: Int)
}
