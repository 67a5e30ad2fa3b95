import WebSockets

/// Where a room's answer goes: a connection, an HTTP call waiting for its response, or the
/// other writer of the room's log that handed the room the command (``SharedLog``). The coordinator carries it as a number (its
/// ``rawValue``); the room reads it back with ``init(rawValue:)`` and the compiler checks
/// that every kind is handled.
enum AnswerAddress: Equatable, Sendable {
    case connection(ConnectionID)
    /// The n-th HTTP call of the room.
    case apiCall(UInt64)
    /// The n-th command another writer handed to the room (``PeerAnswers``).
    case peer(UInt64)

    /// The top bit marks HTTP calls, the next peers' commands; a connection's id has
    /// neither.
    private static let apiBit: UInt64 = 1 << 63
    private static let peerBit: UInt64 = 1 << 62
    private static let numberMask: UInt64 = peerBit - 1

    init(rawValue: UInt64) {
        if rawValue & Self.apiBit != 0 {
            self = .apiCall(rawValue & Self.numberMask)
        } else if rawValue & Self.peerBit != 0 {
            self = .peer(rawValue & Self.numberMask)
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
        case let .peer(n): return Self.peerBit | (n & Self.numberMask)
        }
    }
}
