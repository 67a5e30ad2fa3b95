/// The WebSocket close codes (RFC 6455 §7.4.1) this server sends or recognises.
public enum CloseCode: UInt16, Sendable {
    /// The purpose of the connection was fulfilled.
    case normal = 1000
    /// The server is stopping, or a browser leaves the page.
    case goingAway = 1001
    /// The peer broke the WebSocket protocol.
    case protocolError = 1002
    /// The peer sent data of a type the endpoint does not accept (here: a binary frame).
    case unsupportedData = 1003
    /// A text message was not valid UTF-8.
    case invalidPayload = 1007
    /// A policy was violated, e.g. a client too slow to keep up (`too slow`).
    case policyViolation = 1008
    /// A message was larger than `Configuration.maxMessageBytes`.
    case messageTooBig = 1009
    /// The endpoint hit an unexpected condition.
    case internalError = 1011
    /// The server is overloaded for now (here: no room can be created).
    case tryAgainLater = 1013
    /// tabd's own: the connection's room was deleted (`room deleted`), or does not exist.
    case roomGone = 4404
    /// The connection's signed token ran out; reconnect with a fresh one (and `resume`).
    case tokenExpired = 4001
}
