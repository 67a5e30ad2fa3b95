import Auth
import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Outbox
import WebSockets

/// The HTTP API for back ends and operators (docs/PROTOCOL.md "HTTP API"): list, read,
/// create and delete rooms, post a command to a room, and page through who is in it.
///
/// Called on the sockets' thread: it checks the request and answers at once, or hands the
/// call to the room (whose loop answers it in order with the room's other input) or to a
/// task (listing, deleting). Every answer is JSON; an error is
/// `{"type":"error","code":…,"message":…}`.
struct RoomsAPI: Sendable {
    let registry: RoomRegistry
    let auth: Authenticator
    let log: Log

    static let prefix = APIRoute.prefix

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        let grant = auth.grant(query: request.query, authorization: request.authorization)
        let route: APIRoute
        switch APIRoute.resolve(method: request.method, path: request.path, query: request.query, grant: grant,
                                bodyTooLarge: request.bodyTooLarge, lastEventID: request.lastEventID) {
        case let .success(r): route = r
        case let .failure(error):
            if error.status == 401 || error.status == 403 { registry.metrics.authRefused(status: error.status) }
            return responder.respond(error.response)
        }
        switch route {
        case let .listRooms(after, limit): list(after: after, limit: limit, responder: responder)
        case let .readRoom(id): read(id, responder: responder)
        case let .readClients(id, after, limit): clients(id, after: after, limit: limit, responder: responder)
        case let .createRoom(id): create(id, body: request.body, responder: responder)
        case let .deleteRoom(id): delete(id, responder: responder)
        case let .postCommand(id): command(request, room: id, responder: responder)
        case let .followRoom(id, after, epoch): follow(id, after: after, epoch: epoch, responder: responder)
        case let .followOutbox(after): followOutbox(after: after, responder: responder)
        }
    }

    // MARK: Calls

    private func list(after: RoomID?, limit: Int, responder: HTTPResponder) {
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

    private func follow(_ id: RoomID, after: Int?, epoch: String?, responder: HTTPResponder) {
        switch registry.acquire(id, creating: false) {
        case let .success(room): room.submit([.api(.follow(after: after, epoch: epoch, responder))])
        case let .failure(refusal): responder.respond(Self.refusal(refusal, id))
        }
    }

    /// Every room's events as webhooks get them: each outbox entry an event whose `id` is its
    /// position, from `after` on (nil: from the next one written); positions dropped before
    /// the reader got them come first as one `gap` event (its `id` the last dropped).
    private func followOutbox(after: Int?, responder: HTTPResponder) {
        guard let outbox = registry.outbox else {
            return responder.respond(Self.error(404, "not_found", "this tabd keeps no outbox: start it with --webhook URL, or --webhook-events LIST for this stream alone"))
        }
        let limit = registry.settings.streamBytes
        let stream = responder.stream(Self.eventStreamHead, limit: limit)
        let metrics = registry.metrics
        metrics.streamOpened()
        stream.onClose {
            metrics.streamClosed()
            outbox.wakeAll() // the pump below may be waiting for news
        }
        let start = after ?? outbox.lastPosition
        Task {
            var cursor = start
            while stream.isOpen {
                let read = outbox.read(after: cursor, maxBytes: max(1, limit / 4))
                if let gap = read.gap {
                    stream.send(Self.sse(id: gap.upperBound, data: OutboxEvent.gap(from: gap.lowerBound, through: gap.upperBound, outbox: outbox.id,
                                                                                 time: Date().timeIntervalSince1970)))
                    cursor = gap.upperBound
                }
                var bytes: [UInt8] = []
                for entry in read.entries {
                    bytes += Self.sse(id: entry.position, data: entry.body)
                    cursor = entry.position
                }
                stream.send(bytes)
                if read.gap == nil, read.entries.isEmpty {
                    await outbox.news(after: cursor)
                } else {
                    await stream.waitForSpace()
                }
            }
        }
    }

    /// The head of a stream of server-sent events.
    static let eventStreamHead = HTTPResponse(status: 200, contentType: "text/event-stream; charset=utf-8", body: [],
                                              headers: [("cache-control", "no-store"), ("x-accel-buffering", "no")])

    /// One server-sent event: `id:` (when given) and `data:` (JSON, one line: the compact
    /// writer escapes every line break), LF line endings.
    static func sse(id: Int?, data: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(data.count + 32)
        if let id { bytes += Array("id: \(id)\n".utf8) }
        bytes += Array("data: ".utf8)
        bytes += data
        bytes += [0x0A, 0x0A]
        return bytes
    }

    private func clients(_ id: RoomID, after: ClientID?, limit: Int, responder: HTTPResponder) {
        switch registry.acquire(id, creating: false) {
        case let .success(room): room.submit([.api(.clients(after: after, limit: limit, responder))])
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

    /// A loaded room checks its rate limit, then parses the body (a connection's
    /// precedence). For a room not loaded (no recent commands, so nothing to limit) the
    /// body is parsed first: bad input loads, creates and looks up no room.
    private func command(_ request: HTTPRequest, room id: RoomID, responder: HTTPResponder) {
        if !registry.isLoaded(id) {
            do { _ = try CommandEnvelope.parse(request.body) } catch {
                registry.metrics.error(error.error.code)
                return responder.respond(Self.response(for: .error(ref: error.ref, error.error)))
            }
        }
        switch registry.acquire(id, creating: registry.settings.creation == .auto) {
        case let .success(room): room.submit([.api(.command(body: request.body, responder))])
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
        case .unauthorized: 401
        }
        return HTTPResponse(status: status, contentType: "application/json", body: frame.bytes)
    }

    static func json(_ status: Int, _ value: JSONValue) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json", body: value.compactBytes)
    }

    static func error(_ status: Int, _ code: String, _ message: String) -> HTTPResponse {
        APIError(status, code, message).response
    }
}
