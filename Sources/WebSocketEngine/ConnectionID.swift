/// Identifies one WebSocket connection for as long as the server runs; never reused.
public struct ConnectionID: Hashable, Sendable, CustomStringConvertible {
    /// The number behind the identifier (1, 2, 3, ... in connection order).
    public let rawValue: UInt64

    /// Wraps a raw value; useful in tests that drive a handler without a server.
    public init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    /// `c` followed by the number, e.g. `c7`.
    public var description: String { "c\(rawValue)" }
}
