/// How a ``TabdClient`` reaches tabd: something that opens WebSocket connections and
/// reports what happens on each, in order.
///
/// The client needs very little of a WebSocket: open a URL, send text messages, close
/// with a code, and hear `opened`, each whole text message and exactly one `closed`. The
/// Linux transport is ``WebSocketTransport`` (libwebsockets, the project's client module).
/// Another one — `URLSessionWebSocketTask` on Apple platforms, say — only has to map its
/// callbacks onto ``TransportEvent``; nothing else in the client changes.
public protocol TabdTransport: Sendable {
    /// Starts opening a connection to `url` (`ws://host:port/path?query`) and returns at
    /// once. The connection's ``TabdConnection/events`` start with `opened` or end with
    /// `closed`.
    func open(_ url: String) -> any TabdConnection

    /// The same, sending `authorization` as the handshake's `Authorization` header (a
    /// token, which then appears in no URL). A transport that cannot send headers opens
    /// the connection without it (the server then refuses it with 401 if it needs one).
    func open(_ url: String, authorization: String?) -> any TabdConnection

    /// Releases what the transport holds (threads, sockets). Called once, when the client
    /// that owns the transport is closed; connections still open are dropped.
    func shutdown() async
}

extension TabdTransport {
    public func open(_ url: String, authorization: String?) -> any TabdConnection { open(url) }
}

/// One WebSocket connection of a ``TabdTransport``.
public protocol TabdConnection: Sendable {
    /// What happens on the connection, in order: `opened`, any number of `message`s, and
    /// exactly one `closed`, after which the sequence ends.
    var events: AsyncStream<TransportEvent> { get }

    /// Sends one text message. Ignored once the connection is closing or gone.
    func send(_ text: [UInt8])

    /// Closes with a close frame (`code`, `reason`) after what was queued before.
    func close(code: UInt16, reason: String)
}

/// What a ``TabdConnection`` reports.
public enum TransportEvent: Sendable, Equatable {
    case opened
    /// One whole text message.
    case message([UInt8])
    case closed(TransportClose)
}

/// How a connection ended.
public struct TransportClose: Sendable, Equatable, CustomStringConvertible {
    /// The close code the server sent (or this side sent); nil when the connection failed
    /// or was dropped without a close frame.
    public var code: UInt16?
    public var reason: String
    /// Whether the WebSocket had opened (false: connecting or the handshake failed).
    public var wasOpen: Bool
    /// The HTTP status of a refused handshake (401, 403, 404, 503, ...).
    public var httpStatus: Int?

    public init(code: UInt16?, reason: String, wasOpen: Bool, httpStatus: Int? = nil) {
        self.code = code; self.reason = reason; self.wasOpen = wasOpen; self.httpStatus = httpStatus
    }

    public var description: String {
        if let httpStatus { return "refused with HTTP \(httpStatus)" }
        guard wasOpen else { return "could not connect" + (reason.isEmpty ? "" : ": \(reason)") }
        guard let code else { return "connection dropped" }
        return "closed with \(code)" + (reason.isEmpty ? "" : " (\(reason))")
    }
}
