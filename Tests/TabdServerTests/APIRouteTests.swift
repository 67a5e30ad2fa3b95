import Auth
import Testing
import WebSockets
@testable import TabdServer

/// The HTTP API's routing: method, path, query and credentials → a route or a typed error.
@Suite struct APIRouteTests {
    let open: Result<Grant?, AuthError> = .success(nil)
    let adminOfAll: Result<Grant?, AuthError> = .success(.operatorToken)

    func resolve(_ method: HTTPMethod, _ path: String, _ query: [String: String] = [:],
                 grant: Result<Grant?, AuthError>? = nil, bodyTooLarge: Bool = false) -> Result<APIRoute, APIError> {
        APIRoute.resolve(method: method, path: path, query: query, grant: grant ?? open, bodyTooLarge: bodyTooLarge)
    }

    func status(_ r: Result<APIRoute, APIError>) -> Int? {
        if case let .failure(e) = r { return e.status }
        return nil
    }

    @Test func everyRouteOfTheAPI() {
        #expect(resolve(.get, "/api/rooms") == .success(.listRooms(after: nil, limit: 100)))
        #expect(resolve(.head, "/api/rooms/") == .success(.listRooms(after: nil, limit: 100)))
        #expect(resolve(.get, "/api/rooms", ["after": "b", "limit": "1000"]) == .success(.listRooms(after: "b", limit: 1000)))
        #expect(resolve(.get, "/api/rooms/kiosk") == .success(.readRoom("kiosk")))
        #expect(resolve(.head, "/api/rooms/kiosk") == .success(.readRoom("kiosk")))
        #expect(resolve(.put, "/api/rooms/kiosk") == .success(.createRoom("kiosk")))
        #expect(resolve(.delete, "/api/rooms/kiosk") == .success(.deleteRoom("kiosk")))
        #expect(resolve(.post, "/api/rooms/kiosk/commands") == .success(.postCommand("kiosk")))
    }

    @Test func pathsOutsideTheAPIAre404() {
        for path in ["/api", "/api/", "/api/room", "/api/rooms/a/commands/x", "/api/rooms/a/other", "/apix/rooms", "/api/Rooms"] {
            let r = resolve(.get, path)
            #expect(status(r) == 404, "\(path)")
            if case let .failure(e) = r { #expect(e.code == "not_found") }
        }
    }

    @Test func methodsNotAllowedSayWhatIs() {
        let cases: [(HTTPMethod, String, String)] = [
            (.post, "/api/rooms", "GET"), (.delete, "/api/rooms/", "GET"),
            (.post, "/api/rooms/a", "GET, PUT, DELETE"), (.patch, "/api/rooms/a", "GET, PUT, DELETE"),
            (.get, "/api/rooms/a/commands", "POST"), (.put, "/api/rooms/a/commands", "POST"),
        ]
        for (method, path, allow) in cases {
            #expect(resolve(method, path) == .failure(.notAllowed(allow)), "\(method) \(path)")
            #expect(APIError.notAllowed(allow).response.headers.contains { $0.0 == "allow" && $0.1 == allow })
        }
    }

    @Test func badRoomIdsAndQueriesAre400() {
        #expect(status(resolve(.get, "/api/rooms/a.b")) == 400)
        #expect(status(resolve(.post, "/api/rooms/\(String(repeating: "x", count: 65))/commands")) == 400)
        for limit in ["0", "1001", "-1", "ten", ""] {
            #expect(status(resolve(.get, "/api/rooms", ["limit": limit])) == 400, "limit \(limit)")
        }
        #expect(status(resolve(.get, "/api/rooms", ["after": "a b"])) == 400)
        #expect(resolve(.get, "/api/rooms", ["limit": "1"]) == .success(.listRooms(after: nil, limit: 1)))
    }

    @Test func credentialsAreCheckedAfterThePathAndBeforeEverythingElse() {
        let refused: Result<Grant?, AuthError> = .failure(.missing)
        // An unknown path is 404 whoever asks; a known one is 401 before its method or room id is read.
        #expect(status(resolve(.get, "/api/nothing", grant: refused)) == 404)
        let r = resolve(.patch, "/api/rooms/bad.id", grant: refused)
        #expect(status(r) == 401)
        if case let .failure(e) = r { #expect(e.headers == [.init(name: "www-authenticate", value: "Bearer")]) }
        if case let .failure(e) = resolve(.get, "/api/rooms", grant: .failure(.expired)) {
            #expect(e.headers == [.init(name: "www-authenticate", value: "Bearer error=\"invalid_token\"")])
        } else { Issue.record("an expired token was let in") }
        // A body too large comes after the credentials, before the method.
        #expect(status(resolve(.patch, "/api/rooms/a", grant: refused, bodyTooLarge: true)) == 401)
        #expect(status(resolve(.patch, "/api/rooms/a", bodyTooLarge: true)) == 413)
    }

    @Test func rolesDecideWhoMayDoWhat() {
        let viewer: Result<Grant?, AuthError> = .success(Grant(role: .view, scope: .room("a")))
        let control: Result<Grant?, AuthError> = .success(Grant(role: .control, scope: .every))
        let adminOfA: Result<Grant?, AuthError> = .success(Grant(role: .admin, scope: .room("a")))
        // Listing and creating need admin of every room.
        #expect(status(resolve(.get, "/api/rooms", grant: adminOfA)) == 403)
        #expect(status(resolve(.put, "/api/rooms/a", grant: adminOfA)) == 403)
        #expect(resolve(.put, "/api/rooms/a", grant: adminOfAll) == .success(.createRoom("a")))
        // The rest needs admin of the room.
        #expect(resolve(.get, "/api/rooms/a", grant: adminOfA) == .success(.readRoom("a")))
        #expect(resolve(.delete, "/api/rooms/a", grant: adminOfA) == .success(.deleteRoom("a")))
        #expect(status(resolve(.get, "/api/rooms/b", grant: adminOfA)) == 403)
        #expect(status(resolve(.post, "/api/rooms/a/commands", grant: viewer)) == 403)
        #expect(status(resolve(.post, "/api/rooms/a/commands", grant: control)) == 403)
        // The room id is checked before the role, the rest of the path and the method after it.
        #expect(status(resolve(.get, "/api/rooms/a.b", grant: viewer)) == 400)
        #expect(status(resolve(.get, "/api/rooms/b/other", grant: adminOfA)) == 403)
        #expect(status(resolve(.get, "/api/rooms/a/other", grant: adminOfA)) == 404)
        #expect(status(resolve(.get, "/api/rooms/a/commands", grant: adminOfA)) == 405)
        // The query of a listing is read last.
        #expect(status(resolve(.get, "/api/rooms", ["limit": "0"], grant: adminOfA)) == 403)
        if case let .failure(e) = resolve(.get, "/api/rooms/b", grant: viewer) {
            #expect(e.message == "room 'b' needs an admin token for this room; this token is view of room 'a'")
        }
    }

    @Test func errorsAreTheProtocolsJSON() throws {
        let response = APIError(409, "room_exists", "room 'a' exists").response
        #expect(response.status == 409)
        #expect(response.contentType == "application/json")
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"type":"error","code":"room_exists","message":"room 'a' exists"}"#)
    }
}
