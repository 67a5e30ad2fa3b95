import Auth
import Coordinator

/// Who may connect to which room with which role: the decision on a WebSocket upgrade,
/// and the role a connection gets, as pure functions of what the request carries and what
/// the daemon knows.
package enum Admission {
    /// An upgrade refused: its HTTP status, and why (for the log; nil for the refusals
    /// that are not worth a line, such as a daemon that is stopping).
    package struct Refusal: Equatable, Sendable {
        package let status: Int
        package let why: String?
        /// A refusal of the credentials (401, or a token for another room): counted by
        /// `tabd_auth_refused_total`.
        package let ofCredentials: Bool

        package init(_ status: Int, _ why: String?, ofCredentials: Bool = false) {
            self.status = status; self.why = why; self.ofCredentials = ofCredentials
        }
    }

    /// What the daemon knows when an upgrade arrives.
    package struct Context: Sendable {
        package var allowOrigins: [String] = []
        package var stopping = false
        package var connections = 0
        package var maxClients = 10_000
        package var maxRooms = 100_000

        package init(allowOrigins: [String] = [], stopping: Bool = false, connections: Int = 0, maxClients: Int = 10_000, maxRooms: Int = 100_000) {
            self.allowOrigins = allowOrigins; self.stopping = stopping; self.connections = connections
            self.maxClients = maxClients; self.maxRooms = maxRooms
        }
    }

    /// A browser offers its token as a second subprotocol, `tabd.token.<token>`, so that no
    /// URL holds it (every proxy logs URLs).
    package static let tokenSubprotocolPrefix = "tabd.token."

    /// The parameters credentials are read from: the query, with a token offered as a
    /// subprotocol taken as its `token` (over one in the query; `Authorization` still wins
    /// over both).
    package static func credentialQuery(_ query: [String: String], offeredSubprotocols: [String]) -> [String: String] {
        guard let offered = offeredSubprotocols.first(where: { $0.hasPrefix(tokenSubprotocolPrefix) }) else { return query }
        var query = query
        query["token"] = String(offered.dropFirst(tokenSubprotocolPrefix.count))
        return query
    }

    /// The room a connection asks for: its `room` parameter, else `main`.
    package static func room(query: [String: String]) -> RoomID { query["room"] ?? Limits.defaultRoom }

    /// Decides an upgrade, in this order: credentials (401), origin (403), room id (400),
    /// the credential's room (403), stopping (503), `--max-clients` (503), then the room's
    /// existence (`roomRefusal`, asked last because it may ask the cluster's engine).
    package static func decide(grant: Result<Grant?, AuthError>, origin: String?, host: String?, room: String, context: Context,
                       roomRefusal: () -> RoomRefusal?) -> Refusal? {
        let granted: Grant?
        switch grant {
        case let .success(g): granted = g
        case let .failure(error): return Refusal(401, "\(error)", ofCredentials: true)
        }
        if let origin, !originAllowed(origin, host: host, allowOrigins: context.allowOrigins) {
            return Refusal(403, "origin '\(Log.printable(origin))' does not match host '\(Log.printable(host ?? ""))'")
        }
        guard Limits.isRoomID(room) else { return Refusal(400, "'\(Log.printable(room, limit: 80))' is not a room id") }
        if let granted, granted.role(in: room) == nil {
            return Refusal(403, "its token is for \(granted.scope.map { "room '\($0)'" } ?? "no room"), not '\(room)'", ofCredentials: true)
        }
        if context.stopping { return Refusal(503, nil) }
        if context.connections >= context.maxClients { return Refusal(503, "--max-clients \(context.maxClients) reached") }
        switch roomRefusal() {
        case nil: return nil
        case .unknown?: return Refusal(404, "no room '\(room)' and --rooms api")
        case .full?: return Refusal(503, "--max-rooms \(context.maxRooms) reached, cannot create room '\(room)'")
        case .deleting?, .exists?: return Refusal(503, nil)
        }
    }

    /// A browser is accepted from the address it asked for (`host`: the request's `Host`,
    /// or the public host a trusted proxy forwarded; ``ProxyForwarding/originMatches(_:host:)``),
    /// or from an `--allow-origin`.
    package static func originAllowed(_ origin: String, host: String?, allowOrigins: [String]) -> Bool {
        if allowOrigins.contains(origin) { return true }
        guard let host, !host.isEmpty else { return false }
        return ProxyForwarding.originMatches(origin, host: host)
    }

    /// The role of an accepted connection in `room`, checked again when it opens (its token
    /// may have run out since the upgrade): `control` when no credentials are configured,
    /// nil when it may no longer be in the room.
    package static func role(_ grant: Result<Grant?, AuthError>, in room: RoomID) -> Role? {
        switch grant {
        case .failure: nil
        case .success(nil): .control
        case let .success(g?): g.role(in: room)
        }
    }
}
