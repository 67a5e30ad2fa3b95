import WebSockets

/// Where a room's answer goes: a connection, an HTTP call waiting for its response, or the
/// node that forwarded the command. The coordinator carries it as a number (its
/// ``rawValue``); the room reads it back with ``init(rawValue:)`` and the compiler checks
/// that every kind is handled.
enum AnswerAddress: Equatable, Sendable {
    case connection(ConnectionID)
    /// The n-th HTTP call of the room.
    case apiCall(UInt64)
    /// The n-th command another node forwarded to the room.
    case forward(UInt64)

    /// The top bit marks HTTP calls, the next forwarded commands; a connection's id has
    /// neither.
    private static let apiBit: UInt64 = 1 << 63
    private static let forwardBit: UInt64 = 1 << 62
    private static let numberMask: UInt64 = forwardBit - 1

    init(rawValue: UInt64) {
        if rawValue & Self.apiBit != 0 {
            self = .apiCall(rawValue & Self.numberMask)
        } else if rawValue & Self.forwardBit != 0 {
            self = .forward(rawValue & Self.numberMask)
        } else {
            self = .connection(ConnectionID(rawValue: rawValue))
        }
    }

    var rawValue: UInt64 {
        switch self {
        case let .connection(id):
            precondition(id.rawValue & ~Self.numberMask == 0, "a connection id with an address bit set")
            return id.rawValue
        case let .apiCall(n): return Self.apiBit | (n & Self.numberMask)
        case let .forward(n): return Self.forwardBit | (n & Self.numberMask)
        }
    }
}
