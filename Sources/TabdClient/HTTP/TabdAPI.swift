import Dispatch
import WebSocketsClient

/// tabd's HTTP API, for back ends and operators: list, read, create and delete rooms, and
/// send one command to a room without a WebSocket. With credentials on, it needs an admin
/// token (of every room, `"*"`, to list and create rooms).
///
/// Each call is one HTTP request on a fresh connection, run off the caller's thread.
public struct TabdAPI: Sendable {
    /// One room of a listing.
    public struct RoomSummary: Sendable, Equatable {
        public var id: RoomID
        /// Clients connected to it now.
        public var clients: Int
        /// Its last seq.
        public var seq: Int
        /// Whether it is in tabd's memory (an idle room is unloaded and stays stored).
        public var loaded: Bool
    }

    private let host: String
    private let port: Int
    private let token: String?
    /// Set for `https://` (and `wss://`): the trust the server's certificate is checked against.
    private let tls: TLSTrust?

    /// `url` is tabd's address, `http://HOST:PORT/` or `ws://HOST:PORT/…` (only host and
    /// port are used), or `https://`/`wss://` for TLS, verified against `tls` (the system's
    /// store by default; ``TLSTrust`` adds a private CA).
    public init(url: String, token: String? = nil, tls: TLSTrust = .system) throws(TabdClientError) {
        let endpoint = try Endpoint(url: url, room: nil, name: nil, token: nil)
        guard let target = WebSocketURL(endpoint.base) else { throw .invalidURL("'\(url)'") }
        host = target.host
        port = target.port
        self.token = token
        self.tls = target.secure ? tls : nil
    }

    /// One page of rooms in id order, after `after`, at most `limit` (1–1000; tabd's
    /// default 100); `next` is the `after` of the following page, nil at the end.
    public func rooms(after: RoomID? = nil, limit: Int? = nil) async throws(TabdClientError) -> (rooms: [RoomSummary], next: RoomID?) {
        var query: [String] = []
        if let after { query.append("after=\(Endpoint.encode(after))") }
        if let limit { query.append("limit=\(limit)") }
        let json = try await call("GET", "/api/rooms" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")), expect: 200)
        guard let list = json["rooms"]?.arrayValue else { throw .protocolViolation("a room list without 'rooms'") }
        var rooms: [RoomSummary] = []
        for r in list {
            guard let id = r["id"]?.stringValue, let clients = r["clients"]?.intValue, let seq = r["seq"]?.intValue,
                  let loaded = r["loaded"]?.boolValue
            else { throw .protocolViolation("a room entry without id, clients, seq or loaded") }
            rooms.append(RoomSummary(id: id, clients: clients, seq: seq, loaded: loaded))
        }
        return (rooms, json["next"]?.stringValue)
    }

    /// Every room, page after page.
    public func allRooms() async throws(TabdClientError) -> [RoomSummary] {
        var all: [RoomSummary] = []
        var after: RoomID?
        repeat {
            let page = try await rooms(after: after, limit: 1000)
            all += page.rooms
            after = page.next
        } while after != nil
        return all
    }

    /// A room's epoch and state (tabd loads it if needed).
    public func room(_ id: RoomID) async throws(TabdClientError) -> (epoch: String, snapshot: Snapshot) {
        let json = try await call("GET", "/api/rooms/\(Endpoint.encode(id))", expect: 200)
        guard let epoch = json["epoch"]?.stringValue, let s = json["snapshot"] else { throw .protocolViolation("a room without epoch or snapshot") }
        do { return (epoch, try Snapshot(json: s)) } catch { throw .protocolViolation("a room's snapshot: \(error)") }
    }

    /// Creates a room with `tabs` (nil: tabd's template); returns its epoch and seq.
    @discardableResult
    public func createRoom(_ id: RoomID, tabs: [TabInfo]? = nil) async throws(TabdClientError) -> (epoch: String, seq: Int) {
        var body: [UInt8] = []
        if let tabs {
            body = JSONValue.object([("tabs", .array(tabs.map { t in
                var m: [(String, JSONValue)] = [("id", .string(t.id)), ("title", .string(t.title)), ("icon", .string(t.icon)),
                                                ("color", .string(t.color))]
                if let badge = t.badge { m.append(("badge", .string(badge))) }
                return .object(m)
            }))]).compactBytes
        }
        let json = try await call("PUT", "/api/rooms/\(Endpoint.encode(id))", body: body, expect: 201)
        guard let epoch = json["epoch"]?.stringValue, let seq = json["seq"]?.intValue else { throw .protocolViolation("a created room without epoch or seq") }
        return (epoch, seq)
    }

    /// Deletes a room: its clients are closed with 4404, its state removed.
    public func deleteRoom(_ id: RoomID) async throws(TabdClientError) {
        _ = try await call("DELETE", "/api/rooms/\(Endpoint.encode(id))", expect: 204)
    }

    /// Sends one command to `room`; returns the ack's seq once its events are durable.
    @discardableResult
    public func perform(_ command: Command, in room: RoomID) async throws(TabdClientError) -> Int {
        let body = CommandEnvelope(ref: nil, command: command).json.compactBytes
        let json = try await call("POST", "/api/rooms/\(Endpoint.encode(room))/commands", body: body, expect: 200)
        guard let seq = json["seq"]?.intValue else { throw .protocolViolation("a command answered without an ack") }
        return seq
    }

    /// One request; an answer other than `expect` becomes the error it carries.
    private func call(_ method: String, _ path: String, body: [UInt8] = [], expect: Int) async throws(TabdClientError) -> JSONValue {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        let request = HTTPCall(method: method, host: host, port: port, path: path, body: body, headers: headers, tls: tls)
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<HTTPCall.Response, HTTPCall.Failure>, Never>) in
            DispatchQueue.global().async { done.resume(returning: Result { () throws(HTTPCall.Failure) in try request.send() }) }
        }
        let response: HTTPCall.Response
        switch result {
        case let .success(r): response = r
        case let .failure(failure): throw .connectFailed(status: nil, reason: failure.description)
        }
        let json = response.body.isEmpty ? JSONValue.null : ((try? JSONParser.parse(Array(response.body.utf8))) ?? .null)
        guard response.status == expect else {
            let code = json["code"]?.stringValue ?? "http_\(response.status)"
            let message = json["message"]?.stringValue ?? response.body
            if let known = ErrorCode(rawValue: code) { throw .refused(CommandError(known, message)) }
            throw .api(status: response.status, code: code, message: message)
        }
        return json
    }
}
