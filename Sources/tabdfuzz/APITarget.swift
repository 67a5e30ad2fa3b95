import Auth
import Coordinator
import TabdServer
import WebSockets

/// The HTTP API's routing (`APIRoute.resolve`) on any request target through the front's
/// own decoding (`RequestTarget`), any method and any credential: a route holds only
/// valid room ids and limits and is only given to whom the roles allow; an error is one of
/// the API's statuses, with `Allow` on a 405 and the challenge on a 401.
/// Input: a method byte, the target (`/api/…?…`), optionally 0x00 and an `Authorization`
/// header, optionally 0x00 and a `Last-Event-ID`.
enum APITarget {
    static let methods: [HTTPMethod] = [.get, .head, .post, .put, .delete, .patch, .options]

    static func run(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let method = methods[Int(first) % methods.count]
        let parts = pieces(Array(bytes.dropFirst()), separator: 0, limit: 3)
        let header: String? = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : nil
        let lastEventID: String? = parts.count > 2 ? String(decoding: parts[2], as: UTF8.self) : nil
        let target: RequestTarget
        do { target = try RequestTarget(String(decoding: parts[0], as: UTF8.self)) } catch {
            require(error.status == 400, "a target refused with \(error.status)")
            return
        }
        let grant = QueryTarget.auth.authenticate(Authenticator.credential(authorization: header, query: target.query), now: fuzzNow)
            .map { Optional($0) }
        let granted = try? grant.get()
        let bodyTooLarge = first & 0x80 != 0
        switch APIRoute.resolve(method: method, path: target.path, query: target.query, grant: grant, bodyTooLarge: bodyTooLarge,
                                lastEventID: lastEventID) {
        case let .success(route):
            require(target.path.hasPrefix("/api/rooms") || target.path == "/api/events", "\(target.path) routed to \(route)")
            require(!bodyTooLarge, "a body too large was routed")
            switch route {
            case let .listRooms(after, limit):
                require(method == .get || method == .head, "\(method) lists rooms")
                require((1...APIRoute.maxLimit).contains(limit), "a listing of \(limit)")
                if let after { require(Limits.isRoomID(after), "a listing after '\(after)'") }
                if let g = granted ?? nil { require(g.isAdminOfEveryRoom, "\(g) lists rooms") }
            case let .createRoom(id):
                require(method == .put && Limits.isRoomID(id), "\(method) creates '\(id)'")
                if let g = granted ?? nil { require(g.isAdminOfEveryRoom, "\(g) creates rooms") }
            case let .readClients(id, after, limit):
                require(Limits.isRoomID(id) && (1...Limits.maxClientsPage).contains(limit), "a page of \(limit) clients of '\(id)'")
                if let after { require(Members.isCursor(after), "a page after '\(after)'") }
                if let g = granted ?? nil { require(g.role(in: id) == .admin, "\(g) may use room '\(id)'") }
            case let .readRoom(id), let .deleteRoom(id), let .postCommand(id):
                require(Limits.isRoomID(id), "a route for '\(id)'")
                if let g = granted ?? nil { require(g.role(in: id) == .admin, "\(g) may use room '\(id)'") }
            case let .followRoom(id, after, _):
                require((method == .get || method == .head) && Limits.isRoomID(id), "\(method) follows '\(id)'")
                if let after { require(after >= 0, "a stream resumed after \(after)") }
                if let g = granted ?? nil { require(g.role(in: id) == .admin, "\(g) may follow room '\(id)'") }
            case let .followOutbox(after):
                require((method == .get || method == .head) && target.path == "/api/events", "\(method) follows the outbox")
                if let after { require(after >= 0, "the outbox followed after \(after)") }
                if let g = granted ?? nil { require(g.isAdminOfEveryRoom, "\(g) follows every room") }
            }
        case let .failure(error):
            require([400, 401, 403, 404, 405, 413].contains(error.status), "the API answered \(error.status)")
            if error.status == 405 { require(error.headers.contains { $0.name == "allow" }, "a 405 without Allow") }
            if error.status == 401 {
                require(granted == nil && error.headers.contains { $0.name == "www-authenticate" }, "a 401 for a grant, or without its challenge")
            }
            if error.status == 413 { require(bodyTooLarge, "413 for a body that fits") }
            _ = error.response
        }
    }
}
