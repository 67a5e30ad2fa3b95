import TabdProtocol

/// What a credential lets its holder do in a room (see docs/PROTOCOL.md "Tokens and roles").
public enum Role: String, Sendable, CaseIterable, Comparable {
    /// Receives everything; may send only `sync`, `ping` and `clients`.
    case view
    /// Every command of its room.
    case control
    /// Every command of its room(s), the HTTP API for them, `/metrics`.
    case admin

    /// Whether this role may send a command of this type over the WebSocket: `view` only
    /// queries (``Command/isQuery``), every other role everything.
    public func maySend(_ command: Command) -> Bool {
        command.isQuery || self != .view
    }

    public static func < (a: Role, b: Role) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// The rooms a credential is for: one room, or every room (`"*"` in a token).
public enum RoomScope: Sendable, Equatable, CustomStringConvertible {
    case room(RoomID)
    case every

    /// `"*"` or a room id; nil for anything else.
    public init?(claim: String) {
        if claim == "*" { self = .every } else if Limits.isRoomID(claim) { self = .room(claim) } else { return nil }
    }

    public func covers(_ room: RoomID) -> Bool {
        switch self {
        case .every: true
        case let .room(id): id == room
        }
    }

    public var description: String {
        switch self {
        case .every: "*"
        case let .room(id): id
        }
    }
}

/// An accepted credential: its role, the rooms it is for, the name it gives its holder
/// and when it runs out.
public struct Grant: Sendable, Equatable {
    public var role: Role
    /// Nil for a token that names no room: it is for none.
    public var scope: RoomScope?
    /// The display name a token gives (it wins over the `name` parameter).
    public var name: String?
    /// Seconds since 1970 at which it stops being accepted; nil: never (the `--token`).
    public var expires: Double?

    public init(role: Role, scope: RoomScope?, name: String? = nil, expires: Double? = nil) {
        self.role = role; self.scope = scope; self.name = name; self.expires = expires
    }

    /// The `--token`: admin of every room, without end.
    public static let operatorToken = Grant(role: .admin, scope: .every)

    /// The role in `room`, or nil when the credential is not for that room.
    public func role(in room: RoomID) -> Role? {
        scope?.covers(room) == true ? role : nil
    }

    /// Whether it is admin of every room (listing and creating rooms need that).
    public var isAdminOfEveryRoom: Bool { role == .admin && scope == .every }
}
