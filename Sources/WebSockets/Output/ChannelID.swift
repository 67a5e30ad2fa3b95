/// Identifies one broadcast channel of a `WebSocketServer`: an independent stream of
/// broadcasts with its own `seq`, read by the connections activated on it.
///
/// The server gives the number no meaning; the caller picks it (tabd: one per loaded room).
/// A channel exists from the first broadcast or activation on it until `removeChannel`.
public struct ChannelID: Hashable, Sendable, CustomStringConvertible {
    /// The number behind the identifier.
    public let rawValue: UInt64

    /// Wraps a raw value.
    public init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    /// `ch` followed by the number, e.g. `ch3`.
    public var description: String { "ch\(rawValue)" }
}
