/// Why a ``TabdClient`` call failed.
public enum TabdClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// tabd answered the command with an error and changed nothing. `code` is the
    /// protocol's (`unknown_tab`, `invalid`, `forbidden`, `rate_limited`, ...).
    case refused(CommandError)
    /// The URL is not one the client can use (`ws://`, `wss://`, `http://` or `https://`
    /// with a host and port).
    case invalidURL(String)
    /// The connection could not be opened: `status` is the HTTP status when tabd refused
    /// the upgrade (400 not a room id, 401 credentials, 403 role or origin, 404 unknown room
    /// with `--rooms api`, 503 full or stopping), nil when tabd could not be reached.
    case connectFailed(status: Int?, reason: String)
    /// The connection dropped while the command was in flight: it may or may not have
    /// taken effect (the events that follow the reconnect tell).
    case connectionLost
    /// The client is closed for good: by ``TabdClient/close()``, or by tabd with a code
    /// that a reconnect cannot fix (4404 room deleted, 4001 token expired). (A reconnect
    /// that tabd refuses closes the client with ``connectFailed(status:reason:)``.)
    case closed(code: Int?, reason: String)
    /// An HTTP API answer this client cannot read. (A WebSocket frame it cannot read drops
    /// the connection with 1002, and the client reconnects from a snapshot.)
    case protocolViolation(String)
    /// No welcome came within the connect timeout.
    case timedOut
    /// The command had no answer within its deadline (``TabdClient/Options/commandTimeout``):
    /// if it was sent, it may or may not take effect (its events are folded all the same).
    case deadlineExceeded
    /// The HTTP API answered `status` with an error code that is not a command's:
    /// `unauthorized` (401), `unknown_room` (404), `room_exists` (409), `too_large` (413), ...
    case api(status: Int, code: String, message: String)

    /// The protocol's error code, for ``refused(_:)``.
    public var code: ErrorCode? {
        if case let .refused(error) = self { return error.code }
        return nil
    }

    public var description: String {
        switch self {
        case let .refused(error): "\(error.code.rawValue): \(error.message)"
        case let .invalidURL(message): "invalid URL: \(message)"
        case .connectFailed(301, _): "tabd answered with a redirect to https (HTTP 301): it serves TLS on that port; use https:// or wss://"
        case let .connectFailed(status?, reason): "tabd refused the connection (HTTP \(status))" + (reason.isEmpty ? "" : ": \(reason)")
        case let .connectFailed(nil, reason): "could not reach tabd" + (reason.isEmpty ? "" : ": \(reason)")
        case .connectionLost: "the connection dropped while the command was in flight; it may or may not have taken effect"
        case let .closed(code?, reason): "closed (\(code)" + (reason.isEmpty ? ")" : ": \(reason))")
        case let .closed(nil, reason): "closed" + (reason.isEmpty ? "" : ": \(reason)")
        case let .protocolViolation(message): "protocol violation: \(message)"
        case .timedOut: "no welcome from tabd in time"
        case .deadlineExceeded: "no answer from tabd within the command's deadline; if it was sent, it may or may not take effect"
        case let .api(status, code, message): "\(code) (HTTP \(status)): \(message)"
        }
    }
}
