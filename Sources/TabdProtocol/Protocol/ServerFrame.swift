/// The first frame a connection gets: who it is, and either a snapshot or the
/// batches it missed (which follow as `events` frames).
public struct Welcome: Sendable, Equatable {
    public var client: ClientInfo
    public var epoch: String
    public var resumed: Bool
    /// Present when `resumed` is false.
    public var snapshot: Snapshot?
    /// When `resumed`, the missed batches, to send right after the welcome.
    public var replay: [EventBatch]
    /// The last seq the welcome covers: later batches are the connection's live stream.
    public var seq: Int
    /// The room it joined and the role it has there (the daemon fills them in; a
    /// coordinator knows nothing of rooms).
    public var room: RoomID? = nil
    public var role: String? = nil

    package init(client: ClientInfo, epoch: String, resumed: Bool, snapshot: Snapshot?, replay: [EventBatch], seq: Int,
                 room: RoomID? = nil, role: String? = nil) {
        self.client = client; self.epoch = epoch; self.resumed = resumed; self.snapshot = snapshot; self.replay = replay
        self.seq = seq; self.room = room; self.role = role
    }
}

/// Every frame the server sends (PROTOCOL.md "Server → client").
public enum ServerFrame: Sendable, Equatable {
    case welcome(Welcome, server: String)
    case events(EventBatch)
    case ack(ref: String?, seq: Int)
    case error(ref: String?, CommandError)
    case snapshot(ref: String?, Snapshot)
    case pong(ref: String?)
    /// The answer to `clients`: one page of connected clients (a cluster node's own, named
    /// by `node`) and the cursor of the next page (nil at the end).
    case clients(ref: String?, node: String?, ClientPage)

    public static let protocolVersion = 1

    public var json: JSONValue {
        switch self {
        case let .welcome(w, server):
            var m: [(String, JSONValue)] = [
                ("type", .string("welcome")), ("protocol", .int(Self.protocolVersion)), ("server", .string(server)),
                ("client", .string(w.client.id)),
            ]
            if let room = w.room { m.append(("room", .string(room))) }
            if let role = w.role { m.append(("role", .string(role))) }
            m += [("epoch", .string(w.epoch)), ("resumed", .bool(w.resumed))]
            if let s = w.snapshot { m.append(("snapshot", s.json)) }
            return .object(m)
        case let .events(b):
            return .object([("type", .string("events")), ("by", .string(b.by)), ("ref", .string(b.ref)),
                            ("events", .array(b.events.map(\.json)))])
        case let .ack(ref, seq):
            return .object([("type", .string("ack")), ("ref", .string(ref)), ("seq", .int(seq))])
        case let .error(ref, e):
            return .object([("type", .string("error")), ("ref", .string(ref)), ("code", .string(e.code.rawValue)),
                            ("message", .string(e.message))])
        case let .snapshot(ref, s):
            return .object([("type", .string("snapshot")), ("ref", .string(ref)), ("snapshot", s.json)])
        case let .pong(ref):
            return .object([("type", .string("pong")), ("ref", .string(ref))])
        case let .clients(ref, node, page):
            return .object([("type", .string("clients")), ("ref", .string(ref))]
                + (node.map { [("node", .string($0))] } ?? [])
                + [("clients", .array(page.clients.map(\.json))), ("next", .string(page.next))])
        }
    }

    /// The frame's compact UTF-8 text, ready to send.
    public var bytes: [UInt8] { json.compactBytes }

    /// Decodes a frame a client received (tests, tools). A welcome's `replay` is
    /// empty here: on the wire the missed batches follow as `events` frames.
    public init(json j: JSONValue) throws(WireError) {
        switch try j.string("type") {
        case "welcome":
            let snapshot: Snapshot? = try j["snapshot"].map { (s) throws(WireError) in try Snapshot(json: s) }
            let w = Welcome(client: ClientInfo(id: try j.string("client"), name: ""), epoch: try j.string("epoch"),
                            resumed: try j.field("resumed").boolValue ?? false, snapshot: snapshot, replay: [],
                            seq: snapshot?.seq ?? 0, room: try j.optionalString("room"), role: try j.optionalString("role"))
            self = .welcome(w, server: try j.string("server"))
        case "events":
            var events: [SequencedEvent] = []
            for e in try j.array("events") { events.append(try SequencedEvent(json: e)) }
            guard !events.isEmpty else { throw WireError("empty events frame") }
            self = .events(EventBatch(by: try j.string("by"), ref: try j.optionalString("ref"), events: events))
        case "ack": self = .ack(ref: try j.optionalString("ref"), seq: try j.int("seq"))
        case "error":
            guard let code = ErrorCode(rawValue: try j.string("code")) else { throw WireError("unknown error code") }
            self = .error(ref: try j.optionalString("ref"), CommandError(code, try j.string("message")))
        case "snapshot": self = .snapshot(ref: try j.optionalString("ref"), try Snapshot(json: try j.field("snapshot")))
        case "pong": self = .pong(ref: try j.optionalString("ref"))
        case "clients":
            var clients: [ClientInfo] = []
            for c in try j.array("clients") { clients.append(try ClientInfo(json: c)) }
            self = .clients(ref: try j.optionalString("ref"), node: try j.optionalNode(),
                            ClientPage(clients: clients, next: try j.optionalString("next")))
        case let type: throw WireError("unknown frame type '\(type)'")
        }
    }

    public init(bytes: [UInt8]) throws(WireError) {
        let json: JSONValue
        do { json = try JSONParser.parse(bytes) } catch { throw WireError("not JSON: \(error)") }
        try self.init(json: json)
    }
}
