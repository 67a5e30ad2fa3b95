/// An event that does not fit the state it is applied to: the stream is broken, or
/// belongs to another history. Nothing of the event was applied.
public struct FoldError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A ``FoldError`` with the seq of the event that did not fit.
public struct ReplayError: Error, Sendable, CustomStringConvertible {
    public let seq: Int
    public let message: String
    public var description: String { "replay failed at seq \(seq): \(message)" }
    public init(seq: Int, message: String) { self.seq = seq; self.message = message }
}
