/// The error codes of PROTOCOL.md, in the order of precedence: when a command has
/// several faults, the first code in this list is the one reported.
public enum ErrorCode: String, Sendable, CaseIterable, Comparable {
    case rateLimited = "rate_limited"
    case badJSON = "bad_json"
    case badCommand = "bad_command"
    /// A `refresh` whose token tabd does not accept (expired, badly signed, malformed).
    case unauthorized
    /// The connection's role may not send this command (a `view` token sends only `sync`, `ping` and `clients`).
    case forbidden
    case unavailable
    case unknownTab = "unknown_tab"
    case invalid

    private var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (a: ErrorCode, b: ErrorCode) -> Bool { a.rank < b.rank }
}

/// Why a command was refused. Nothing of a refused command is applied.
public struct CommandError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    /// A store's report that another writer took the batch's place (a cluster's engine
    /// stored another node's batch at that seq): the coordinator decides the command
    /// again on the new state instead of answering. Never sent to a client.
    public var isConflict = false

    public init(_ code: ErrorCode, _ message: String) { self.code = code; self.message = message }

    /// What a store reports when another writer's batch took this batch's seq.
    public static func conflict() -> CommandError {
        var error = CommandError(.unavailable, "another node stored a batch at this seq")
        error.isConflict = true
        return error
    }

    public static func badCommand(_ m: String) -> CommandError { .init(.badCommand, m) }
    public static func unknownTab(_ id: TabID) -> CommandError { .init(.unknownTab, "no tab '\(id.prefix(40))'") }
    public static func invalid(_ m: String) -> CommandError { .init(.invalid, m) }
    public static func unavailable(_ m: String) -> CommandError { .init(.unavailable, m) }
    public static func forbidden(_ m: String) -> CommandError { .init(.forbidden, m) }

    public var description: String { "\(code.rawValue): \(message)" }
}
