import Auth
import Coordinator
import WebSockets

/// The HTTP API for back ends and operators (docs/PROTOCOL.md "HTTP API"): list, read,
/// create and delete rooms, and post a command to a room.
///
/// Called on the sockets' thread: it checks the request and answers at once, or hands the
/// call to the room (whose loop answers it in order with the room's other input) or to a
/// task (listing, deleting). Every answer is JSON; an error is
/// `{"type":"error","code":…,"message":…}`.
struct RoomsAPI: Sendable {
    let registry: RoomRegistry
    let auth: Authenticator
    let log: Log

    static let prefix = "/api/"

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // "/api/rooms[/ID[/commands]]" → ["", "api", "rooms", ID, "commands"]
        guard parts.count >= 3, parts[1] == "api", parts[2] == "rooms", parts.count <= 5 else {
            return responder.respond(Self.error(404, "not_found", "no such API path: \(request.path.prefix(100))"))
        }
        let grant: Grant?
        switch auth.grant(query: request.query, authorization: request.authorization) {
        case let .success(g): grant = g
        case let .failure(error):
            registry.metrics.authRefused(status: 401)
            return responder.respond(Authenticator.unauthorized(error, json: true))
        }
        if request.bodyTooLarge {
            return responder.respond(Self.error(413, "too_large", "a request body may have at most 65536 bytes"))
        }
        if parts.count == 3 || (parts.count == 4 && parts[3].isEmpty) {
            guard request.method == .get || request.method == .head else { return responder.respond(Self.notAllowed("GET")) }
            if let refusal = forbidden(grant, everyRoom: true, "listing rooms") { return responder.respond(refusal) }
            return list(request, responder: responder)
        }
        let id = parts[3]
        guard Limits.isRoomID(id) else {
            return responder.respond(Self.error(400, "invalid", "'\(id.prefix(80))' is not a room id: use 1 to 64 of A-Z a-z 0-9 _ -"))
        }
        let creating = parts.count == 4 && request.method == .put
        if let refusal = forbidden(grant, everyRoom: creating, creating ? "creating rooms" : "room '\(id)'", room: id) {
            return responder.respond(refusal)
        }
        if parts.count == 5 {
            guard parts[4] == "commands" else {
                return responder.respond(Self.error(404, "not_found", "no such API path: \(request.path.prefix(100))"))
            }
            guard request.method == .post else { return responder.respond(Self.notAllowed("POST")) }
            return command(request, room: id, responder: responder)
        }
        switch request.method {
        case .get, .head: read(id, responder: responder)
        case .put: create(id, body: request.body, responder: responder)
        case .delete: delete(id, responder: responder)
        default: responder.respond(Self.notAllowed("GET, PUT, DELETE"))
        }
    }

    /// A 403 unless `grant` is admin of `room` (of every room when `everyRoom`); nil
    /// when allowed, or when no credentials are configured (`grant` nil).
    private func forbidden(_ grant: Grant?, everyRoom: Bool, _ what: String, room: RoomID? = nil) -> HTTPResponse? {
        guard let grant else { return nil }
        if everyRoom ? grant.isAdminOfEveryRoom : grant.role(in: room!) == .admin { return nil }
        registry.metrics.authRefused(status: 403)
        let needs = everyRoom ? "an admin token for every room (room \"*\")" : "an admin token for this room"
        return Self.error(403, "forbidden", "\(what) needs \(needs); this token is \(grant.role.rawValue) of \(grant.scope.map { $0 == .every ? "every room" : "room '\($0)'" } ?? "no room")")
    }

    // MARK: Calls

    private func list(_ request: HTTPRequest, responder: HTTPResponder) {
        var limit = 100
        if let text = request.query["limit"] {
            guard let n = Int(text), (1...1000).contains(n) else {
                return responder.respond(Self.error(400, "invalid", "limit must be an integer from 1 to 1000"))
            }
            limit = n
        }
        let after = request.query["after"]
        if let after, !Limits.isRoomID(after) {
            return responder.respond(Self.error(400, "invalid", "after must be a room id"))
        }
        Task {
            do {
                let (rooms, more) = try await registry.list(after: after, limit: limit)
                let items: [JSONValue] = rooms.map { r in
                    .object([("id", .string(r.id)), ("clients", .int(r.clients)), ("seq", .int(r.seq)), ("loaded", .bool(r.loaded))])
                }
                responder.respond(Self.json(200, .object([
                    ("rooms", .array(items)), ("next", more ? .string(rooms.last!.id) : .null),
                ])))
            } catch {
                responder.respond(Self.error(503, "unavailable", "\(error)"))
            }
        }
    }

    private func read(_ id: RoomID, responder: HTTPResponder) {
        switch registry.acquire(id, creating: false) {
        case let .success(room): room.submit([.api(.read(responder))])
        case let .failure(refusal): responder.respond(Self.refusal(refusal, id))
        }
    }

    private func create(_ id: RoomID, body: [UInt8], responder: HTTPResponder) {
        var tabs = registry.settings.template
        if !body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            let json: JSONValue
            do { json = try JSONParser.parse(body) } catch {
                return responder.respond(Self.error(400, "bad_json", "the body is not JSON: \(error)"))
            }
            guard json.objectValue != nil, json["tabs"] != nil else {
                return responder.respond(Self.error(400, "invalid", "the body must be {\"tabs\":[…]} or empty"))
            }
            do {
                tabs = try TabInfo.list(from: json, source: "tabs")
                _ = try Coordinator.origin(tabs: tabs)
            } catch let error as WireError {
                return responder.respond(Self.error(400, "invalid", error.message))
            } catch let error as CommandError {
                return responder.respond(Self.error(400, "invalid", error.message))
            } catch {
                return responder.respond(Self.error(400, "invalid", "\(error)"))
            }
        }
        switch registry.acquire(id, creating: true, template: tabs, exclusive: true) {
        case let .success(room): room.submit([.api(.created(responder))])
        case let .failure(refusal): responder.respond(Self.refusal(refusal, id))
        }
    }

    private func delete(_ id: RoomID, responder: HTTPResponder) {
        Task {
            switch await registry.delete(id) {
            case .deleted: responder.respond(HTTPResponse(status: 204, contentType: "application/json", body: []))
            case .unknown: responder.respond(Self.error(404, "unknown_room", "no room '\(id)'"))
            case let .failed(why): responder.respond(Self.error(503, "unavailable", "room '\(id)' could not be deleted: \(why)"))
            }
        }
    }

    private func command(_ request: HTTPRequest, room id: RoomID, responder: HTTPResponder) {
        let envelope: CommandEnvelope
        do { envelope = try CommandEnvelope.parse(request.body) } catch {
            registry.metrics.error(error.error.code)
            return responder.respond(Self.response(for: .error(ref: error.ref, error.error)))
        }
        switch registry.acquire(id, creating: registry.settings.creation == .auto) {
        case let .success(room): room.submit([.api(.command(envelope, responder))])
        case let .failure(refusal): responder.respond(Self.refusal(refusal, id))
        }
    }

    // MARK: Answers

    static func refusal(_ refusal: RoomRegistry.Refusal, _ id: RoomID) -> HTTPResponse {
        switch refusal {
        case .unknown: error(404, "unknown_room", "no room '\(id)'")
        case .exists: error(409, "room_exists", "room '\(id)' exists")
        case .full: error(503, "unavailable", "--max-rooms rooms exist; delete one first")
        case .deleting: error(503, "unavailable", "room '\(id)' is being deleted; try again")
        }
    }

    /// The frame a WebSocket client would get, with its status.
    static func response(for frame: ServerFrame) -> HTTPResponse {
        guard case let .error(_, e) = frame else { return HTTPResponse(status: 200, contentType: "application/json", body: frame.bytes) }
        let status = switch e.code {
        case .badJSON, .badCommand, .invalid: 400
        case .unknownTab: 404
        case .rateLimited: 429
        case .unavailable: 503
        case .forbidden: 403
        }
        return HTTPResponse(status: status, contentType: "application/json", body: frame.bytes)
    }

    static func json(_ status: Int, _ value: JSONValue) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json", body: value.compactBytes)
    }

    static func error(_ status: Int, _ code: String, _ message: String, headers: [(String, String)] = []) -> HTTPResponse {
        var response = json(status, .object([("type", .string("error")), ("code", .string(code)), ("message", .string(message))]))
        response.headers += headers
        return response
    }

    static func notAllowed(_ allow: String) -> HTTPResponse {
        var response = error(405, "method_not_allowed", "allowed: \(allow)")
        response.headers.append(("allow", allow))
        return response
    }
}
