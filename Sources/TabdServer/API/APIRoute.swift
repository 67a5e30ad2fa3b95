import Auth
import Coordinator
import WebSockets

/// A request of the HTTP API that may be carried out: what it asks for, checked.
package enum APIRoute: Equatable, Sendable {
    /// `GET /api/rooms[?after=ID&limit=N]`.
    case listRooms(after: RoomID?, limit: Int)
    /// `GET /api/rooms/ID`.
    case readRoom(RoomID)
    /// `PUT /api/rooms/ID`: the body (empty, or `{"tabs":[…]}`) is read by the handler.
    case createRoom(RoomID)
    /// `DELETE /api/rooms/ID`.
    case deleteRoom(RoomID)
    /// `POST /api/rooms/ID/commands`.
    case postCommand(RoomID)
    /// `GET /api/rooms/ID/clients[?after=CURSOR&limit=N]`: one page of who is connected.
    case readClients(RoomID, after: ClientID?, limit: Int)
    /// `GET /api/rooms/ID/events[?after=SEQ&epoch=E]` (or `Last-Event-ID: SEQ`): the room's
    /// stream as server-sent events, from a snapshot or resumed after `after`.
    case followRoom(RoomID, after: Int?, epoch: String?)
    /// `GET /api/events[?after=POSITION]` (or `Last-Event-ID`): the outbox as server-sent
    /// events, what webhooks deliver, from `after` (nil: from the next event written).
    case followOutbox(after: Int?)

    package static let prefix = "/api/"

    /// Rooms a listing returns when `limit` is not given, and the most it may ask for.
    package static let defaultLimit = 100
    package static let maxLimit = 1000

    /// The route of a request, or the error to answer, in this order of precedence: no
    /// such path (404), credentials (401), a body too large (413), the method (405), the
    /// room id (400), the credential's role (403), then the rest of the path (404) and
    /// the method (405), and last the query (400).
    ///
    /// `grant` is what the request's credentials gave (nil: none are configured).
    /// `lastEventID` is the request's `Last-Event-ID` (it takes precedence over `?after=`).
    package static func resolve(method: HTTPMethod, path: String, query: [String: String],
                        grant: Result<Grant?, AuthError>, bodyTooLarge: Bool, lastEventID: String? = nil) -> Result<APIRoute, APIError> {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        // "/api/rooms[/ID[/commands|/clients|/events]]" → ["", "api", "rooms", ID, "commands"]; "/api/events"
        let outbox = parts.count == 3 && parts[2] == "events"
        guard parts.count >= 3, parts.count <= 5, parts[0].isEmpty, parts[1] == "api", parts[2] == "rooms" || outbox else {
            return .failure(.notFound(path))
        }
        let granted: Grant?
        switch grant {
        case let .success(g): granted = g
        case let .failure(error): return .failure(.unauthorized(error))
        }
        if bodyTooLarge { return .failure(APIError(413, "too_large", "a request body may have at most 65536 bytes")) }
        if outbox {
            guard method == .get || method == .head else { return .failure(.notAllowed("GET")) }
            if let refusal = forbidden(granted, everyRoom: true, "the events of every room") { return .failure(refusal) }
            return following(query, lastEventID: lastEventID).map { .followOutbox(after: $0) }
        }
        if parts.count == 3 || (parts.count == 4 && parts[3].isEmpty) {
            guard method == .get || method == .head else { return .failure(.notAllowed("GET")) }
            if let refusal = forbidden(granted, everyRoom: true, "listing rooms") { return .failure(refusal) }
            return listing(query)
        }
        let id = String(parts[3])
        guard Limits.isRoomID(id) else {
            return .failure(APIError(400, "invalid", "'\(id.prefix(80))' is not a room id: use 1 to 64 of A-Z a-z 0-9 _ -"))
        }
        let creating = parts.count == 4 && method == .put
        if let refusal = forbidden(granted, everyRoom: creating, creating ? "creating rooms" : "room '\(id)'", room: id) {
            return .failure(refusal)
        }
        if parts.count == 5 {
            switch parts[4] {
            case "commands":
                guard method == .post else { return .failure(.notAllowed("POST")) }
                return .success(.postCommand(id))
            case "clients":
                guard method == .get || method == .head else { return .failure(.notAllowed("GET")) }
                return clients(id, query)
            case "events":
                guard method == .get || method == .head else { return .failure(.notAllowed("GET")) }
                return following(query, lastEventID: lastEventID).map { .followRoom(id, after: $0, epoch: query["epoch"]) }
            default:
                return .failure(.notFound(path))
            }
        }
        switch method {
        case .get, .head: return .success(.readRoom(id))
        case .put: return .success(.createRoom(id))
        case .delete: return .success(.deleteRoom(id))
        default: return .failure(.notAllowed("GET, PUT, DELETE"))
        }
    }

    /// A page of a room's clients: `after` a cursor, `limit` 1 to 1,000 (the `clients`
    /// command's bounds).
    private static func clients(_ id: RoomID, _ query: [String: String]) -> Result<APIRoute, APIError> {
        var limit = Limits.defaultClientsPage
        if let text = query["limit"] {
            guard let n = Int(text), (1...Limits.maxClientsPage).contains(n) else {
                return .failure(APIError(400, "invalid", "limit must be an integer from 1 to \(Limits.maxClientsPage)"))
            }
            limit = n
        }
        let after = query["after"]
        if let after, !Members.isCursor(after) { return .failure(APIError(400, "invalid", "after must be a 'next' of an earlier page")) }
        return .success(.readClients(id, after: after, limit: limit))
    }

    /// Where a stream resumes: `Last-Event-ID`, else `?after=`, each digits only (nil: from
    /// the start, a snapshot). An empty `Last-Event-ID` is none (EventSource sends it so).
    package static func following(_ query: [String: String], lastEventID: String?) -> Result<Int?, APIError> {
        let given = lastEventID.flatMap { $0.isEmpty ? nil : $0 } ?? query["after"]
        guard let given else { return .success(nil) }
        guard given.utf8.count <= 18, !given.isEmpty, given.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let n = Int(given) else {
            return .failure(APIError(400, "invalid", "Last-Event-ID and after must be a position: digits only, as the stream's ids are"))
        }
        return .success(n)
    }

    /// A listing's `after` and `limit`.
    private static func listing(_ query: [String: String]) -> Result<APIRoute, APIError> {
        var limit = defaultLimit
        if let text = query["limit"] {
            guard let n = Int(text), (1...maxLimit).contains(n) else {
                return .failure(APIError(400, "invalid", "limit must be an integer from 1 to \(maxLimit)"))
            }
            limit = n
        }
        let after = query["after"]
        if let after, !Limits.isRoomID(after) { return .failure(APIError(400, "invalid", "after must be a room id")) }
        return .success(.listRooms(after: after, limit: limit))
    }

    /// A 403 unless `grant` is admin of `room` (of every room when `everyRoom`); nil
    /// when allowed, or when no credentials are configured (`grant` nil).
    private static func forbidden(_ grant: Grant?, everyRoom: Bool, _ what: String, room: RoomID? = nil) -> APIError? {
        guard let grant else { return nil }
        if everyRoom ? grant.isAdminOfEveryRoom : grant.role(in: room!) == .admin { return nil }
        let needs = everyRoom ? "an admin token for every room (room \"*\")" : "an admin token for this room"
        let holds = grant.scope.map { $0 == .every ? "every room" : "room '\($0)'" } ?? "no room"
        return APIError(403, "forbidden", "\(what) needs \(needs); this token is \(grant.role.rawValue) of \(holds)")
    }
}

/// An answer of the HTTP API that is an error: `{"type":"error","code":…,"message":…}`
/// with its status (and headers: `Allow` for a 405, the challenge of a 401).
package struct APIError: Error, Equatable, Sendable {
    package let status: Int
    package let code: String
    package let message: String
    package var headers: [Header] = []

    package struct Header: Equatable, Sendable {
        package let name: String
        package let value: String
    }

    package init(_ status: Int, _ code: String, _ message: String, headers: [Header] = []) {
        self.status = status; self.code = code; self.message = message; self.headers = headers
    }

    package static func notFound(_ path: String) -> APIError {
        APIError(404, "not_found", "no such API path: \(path.prefix(100))")
    }

    package static func notAllowed(_ allow: String) -> APIError {
        APIError(405, "method_not_allowed", "allowed: \(allow)", headers: [Header(name: "allow", value: allow)])
    }

    /// A 401 with the `WWW-Authenticate` challenge of RFC 6750.
    package static func unauthorized(_ error: AuthError) -> APIError {
        APIError(401, "unauthorized", "\(error)", headers: [Header(name: "www-authenticate", value: Authenticator.challenge(error))])
    }

    package var response: HTTPResponse {
        var response = HTTPResponse(status: status, contentType: "application/json", body: JSONValue.object([
            ("type", .string("error")), ("code", .string(code)), ("message", .string(message)),
        ]).compactBytes)
        response.headers += headers.map { ($0.name, $0.value) }
        return response
    }
}
