import Coordinator

// Forwarding: a node sends its clients' commands for a room to the node that writes the
// room's stream (``ClusterRoomMachine/writer``: most of its latest messages), which decides them with its own and
// appends them in its groups, so that the nodes of a room with clients everywhere do not
// race each other for every seq. The rules (docs/CLUSTER.md, "Writers on several nodes"):
//
// - A command goes over core NATS with an id. The batch it comes to carries that id in
//   its message's header, so every node knows which forwarded commands the stream holds.
//   A node that decides a command with an id the stream holds already does not apply it
//   again: its answer is the ack of the stored batch. The stream's compare-and-set makes
//   sure that the one who decides it has read everything stored before.
// - The commands a node forwards for a room are one session, numbered from 0; the
//   writer decides them only in that order (a gap, a message lost by NATS, is refused).
// - A command not answered is sent again, with the same id and number, while its writer
//   lives (the writer answers a command it has answered already again). One the writer
//   refused, or whose writer died, is decided by the node that forwarded it, in its order,
//   after every earlier one; new commands wait meanwhile. Nothing is lost, nothing applied
//   twice, and each client's commands keep their order. (Not after a mere timeout: the
//   writer may still decide a command it was slow to answer, and a decision here that
//   changes nothing leaves no trace in the stream to stop it.)

/// A client's command, forwarded to the node that writes the room.
package struct ForwardRequest: Sendable, Equatable {
    /// Unique to the forwarding node's life: the id the stream records the batch under.
    package var id: String
    package var room: RoomID
    package var client: ClientID
    package var envelope: CommandEnvelope
    /// The forwarding node's session for this room, and the command's number in it.
    package var session: String
    package var order: Int
    /// Where the answer goes (``EngineNames/forwardAnswers(node:incarnation:)``).
    package var reply: String

    package init(id: String, room: RoomID, client: ClientID, envelope: CommandEnvelope, session: String, order: Int, reply: String) {
        self.id = id; self.room = room; self.client = client; self.envelope = envelope
        self.session = session; self.order = order; self.reply = reply
    }

    package var bytes: [UInt8] {
        JSONValue.object([
            ("id", .string(id)), ("room", .string(room)), ("client", .string(client)), ("command", envelope.json),
            ("session", .string(session)), ("order", .int(order)), ("reply", .string(reply)),
        ]).compactBytes
    }

    package init(bytes: [UInt8]) throws {
        let json = try JSONParser.parse(bytes)
        guard let id = json["id"]?.stringValue, let room = json["room"]?.stringValue, let client = json["client"]?.stringValue,
              let command = json["command"], let session = json["session"]?.stringValue, let order = json["order"]?.intValue,
              let reply = json["reply"]?.stringValue
        else { throw WireError("not a forwarded command") }
        self.init(id: id, room: room, client: client, envelope: try CommandEnvelope.parse(command), session: session,
                  order: order, reply: reply)
    }
}

/// The writer's answer to a ``ForwardRequest``: the frame for the client (`ack` or
/// `error`), or `refused` (not decided there: the forwarding node decides it itself).
package struct ForwardAnswer: Sendable, Equatable {
    package var id: String
    package var room: RoomID
    package var frame: ServerFrame?
    package var refused: String?

    package init(id: String, room: RoomID, frame: ServerFrame) { self.id = id; self.room = room; self.frame = frame }
    package init(id: String, room: RoomID, refused: String) { self.id = id; self.room = room; self.refused = refused }

    package var bytes: [UInt8] {
        var members: [(String, JSONValue)] = [("id", .string(id)), ("room", .string(room))]
        if let frame { members.append(("frame", frame.json)) }
        if let refused { members.append(("refused", .string(refused))) }
        return JSONValue.object(members).compactBytes
    }

    package init(bytes: [UInt8]) throws {
        let json = try JSONParser.parse(bytes)
        guard let id = json["id"]?.stringValue, let room = json["room"]?.stringValue else { throw WireError("not a forward answer") }
        self.id = id
        self.room = room
        if let frame = json["frame"] {
            let parsed = try ServerFrame(bytes: frame.compactBytes)
            switch parsed {
            case .ack, .error: self.frame = parsed
            default: throw WireError("a forward answer is an ack or an error")
            }
        } else if let refused = json["refused"]?.stringValue {
            self.refused = refused
        } else {
            throw WireError("a forward answer without frame or refusal")
        }
    }
}

/// The writer's side: which forwarded commands it decides, in each session's order.
package struct ForwardSessions: Sendable {
    package enum Admission: Equatable, Sendable {
        /// Its turn: decide it.
        case decide
        /// Seen already (its number is behind the session's): nothing to do.
        case seen
        /// An earlier one of its session never came: refused, the sender decides it.
        case gap
    }

    /// Each session's next number, and when it was last used.
    private var next: [String: (order: Int, used: UInt64)] = [:]
    /// Sessions are forgotten after this long unused (a sender starts a new one after
    /// any failure, so a forgotten one is never continued).
    package static let idleNanoseconds: UInt64 = 300_000_000_000

    package init() {}

    package mutating func admit(_ request: ForwardRequest, now: UInt64) -> Admission {
        let expected = next[request.session]?.order ?? 0
        if request.order < expected { return .seen }
        guard request.order == expected else { return .gap }
        next[request.session] = (expected + 1, now)
        if next.count > 1024 { next = next.filter { now &- $0.value.used < Self.idleNanoseconds } }
        return .decide
    }
}

/// The forwarding side, for one room: where its clients' commands go, which forwards
/// are in flight, what to do when one is answered, refused, unanswered, or its writer dies,
/// and which of the room's inputs (`Held`) wait meanwhile.
package struct ForwardingPlan<Held: Sendable>: Sendable {
    /// Where a new command of a client goes.
    package enum Route: Equatable, Sendable {
        /// Decided here.
        case local
        /// Forwarded to this node; `fresh`: the first of a new session (wait until this
        /// node's own batches have committed first, so that none of them comes after it).
        case forward(to: String, fresh: Bool)
        /// Waits: earlier forwards are being decided here after a failure, or this node
        /// became the writer while forwards of its own were in flight.
        case hold
    }

    /// What the room does with an answer, a refusal or a writer's death.
    package enum Step: Equatable, Sendable {
        /// The writer's answer: the forward's wait takes it.
        case settle(address: UInt64, order: Int, frame: ServerFrame)
        /// Not decided there (refused, or its writer died): decide it here, now.
        case decideHere(address: UInt64, order: Int)
    }

    private struct InFlight: Sendable {
        let request: ForwardRequest
        var id: String { request.id }
        let address: UInt64
        /// The coordinator's name for the forward's wait.
        let order: Int
        /// When it was first sent, and when it is sent again if no answer has come.
        let sentAt: UInt64
        var resendAt: UInt64
        var decideHere = false
    }

    /// How long a forward waits for its answer before it is sent again.
    package static var resendNanoseconds: UInt64 { 1_000_000_000 }
    /// A writer that refused a command is not forwarded to again for this long.
    package static var penaltyNanoseconds: UInt64 { 5_000_000_000 }
    /// A node that has never answered a forward of this room and leaves one unanswered this
    /// long does not take forwards (a tabd from before forwarding): given up on, and not
    /// forwarded to again for ``silentPenaltyNanoseconds``.
    package static var silentNanoseconds: UInt64 { 10_000_000_000 }
    package static var silentPenaltyNanoseconds: UInt64 { 600_000_000_000 }
    /// A node that was forwarded commands this recently writes its own clients' too.
    package static var writerNanoseconds: UInt64 { 1_000_000_000 }

    /// This node, and the prefix of its forward ids and sessions (its name and life).
    package let node: String
    package let room: RoomID
    private let prefix: String
    private var sessions = 0
    private var session = ""
    private var nextOrder = 0
    private var forwarded = 0
    /// The node the forwards in flight went to.
    package private(set) var target: String?
    private var inFlight: [InFlight] = []
    /// Set after a refusal or a writer's death until every forward in flight is settled or decided here.
    package private(set) var draining = false
    private var penalties: [String: UInt64] = [:]
    /// The nodes that have answered a forward (or refused one): they take forwards.
    private var answering: Set<String> = []
    private var lastForwardedTo: UInt64?
    /// Inputs that wait (``Route/hold``), in their order; with any held, every later input waits too.
    private var held: [Held] = []

    package init(node: String, incarnation: String, room: RoomID) {
        self.node = node
        self.room = room
        prefix = "\(node):\(incarnation):\(room)"
    }

    package var isIdle: Bool { inFlight.isEmpty }

    /// Holds `input` when inputs are already waiting, so that none overtakes them (a
    /// connection's answers come in the order of its frames); false when none waits.
    package mutating func holdBehindWaiting(_ input: Held) -> Bool {
        guard !held.isEmpty else { return false }
        held.append(input)
        return true
    }

    /// Holds `input`, as ``route(writer:isAlive:now:)`` said.
    package mutating func hold(_ input: Held) { held.append(input) }

    /// The waiting inputs, in order, to route again, once no forward is being decided here
    /// any more (none while draining). One that is held again holds the rest behind it
    /// (``holdBehindWaiting(_:)``).
    package mutating func release() -> [Held] {
        guard !draining, !held.isEmpty else { return [] }
        defer { held = [] }
        return held
    }

    /// Where a command goes at `now`, given the room's writer and whether it is alive.
    package mutating func route(writer: String?, isAlive: (String) -> Bool, now: UInt64) -> Route {
        if draining { return .hold }
        // Commands are forwarded to this node: it is the writer, whatever it has seen last
        // (its own forwards still in flight are let finish first).
        let writes = lastForwardedTo.map { now &- $0 < Self.writerNanoseconds } ?? false
        if let target, !inFlight.isEmpty { return writes ? .hold : .forward(to: target, fresh: false) }
        target = nil
        guard !writes, let writer, writer != node, isAlive(writer) else { return .local }
        if let until = penalties[writer], now < until { return .local }
        return .forward(to: writer, fresh: true)
    }

    /// A command forwarded to `to` (after ``route(writer:isAlive:now:)`` said so), its
    /// answer awaited by the coordinator's wait `order` at `address`.
    package mutating func forward(_ envelope: CommandEnvelope, client: ClientID, to: String, fresh: Bool, address: UInt64,
                                  order: Int, reply: String, now: UInt64) -> ForwardRequest {
        if fresh || target != to {
            sessions += 1
            session = "\(prefix):\(sessions)"
            nextOrder = 0
            target = to
        }
        forwarded += 1
        let id = "\(prefix):f\(forwarded)"
        let request = ForwardRequest(id: id, room: room, client: client, envelope: envelope, session: session, order: nextOrder, reply: reply)
        nextOrder += 1
        inFlight.append(InFlight(request: request, address: address, order: order, sentAt: now, resendAt: now + Self.resendNanoseconds))
        return request
    }

    /// The id the next forward will have (the coordinator's wait is made before it).
    package func nextID() -> String { "\(prefix):f\(forwarded + 1)" }

    /// This node was forwarded a command at `now`: it writes the room.
    package mutating func wasForwarded(now: UInt64) { lastForwardedTo = now }

    /// The writer's answer.
    package mutating func answered(_ answer: ForwardAnswer, now: UInt64) -> [Step] {
        guard let i = inFlight.firstIndex(where: { $0.id == answer.id }) else { return [] }
        if let target { answering.insert(target) }
        if let frame = answer.frame {
            let settled = inFlight.remove(at: i)
            return [.settle(address: settled.address, order: settled.order, frame: frame)] + decideDue()
        }
        return fail(from: i, now: now)
    }

    /// The check at `now`: when the writer is dead (`isAlive` says so), every forward in
    /// flight is decided here (`steps`); else the forwards unanswered for a while are sent
    /// again (`resend`, in order, unchanged).
    package mutating func check(now: UInt64, isAlive: (String) -> Bool) -> (steps: [Step], resend: [ForwardRequest]) {
        guard let target, !inFlight.isEmpty else { return ([], []) }
        if !isAlive(target), let i = inFlight.firstIndex(where: { !$0.decideHere }) { return (fail(from: i, now: now), []) }
        if !answering.contains(target), let i = inFlight.firstIndex(where: { !$0.decideHere }), now &- inFlight[i].sentAt >= Self.silentNanoseconds {
            let steps = fail(from: i, now: now)
            penalties[target] = now + Self.silentPenaltyNanoseconds
            return (steps, [])
        }
        var resend: [ForwardRequest] = []
        for i in inFlight.indices where !inFlight[i].decideHere && now >= inFlight[i].resendAt {
            inFlight[i].resendAt = now + Self.resendNanoseconds
            resend.append(inFlight[i].request)
        }
        return ([], resend)
    }

    /// Forward `i` was refused or its writer died: it and every later one are decided here
    /// (the writer decides a session only in order: after a refused one, none). A dead
    /// writer may have decided some of them: the stream's record of their ids says so.
    private mutating func fail(from i: Int, now: UInt64) -> [Step] {
        for j in i..<inFlight.count { inFlight[j].decideHere = true }
        draining = true
        if let target { penalties[target] = now + Self.penaltyNanoseconds }
        if penalties.count > 64 { penalties = penalties.filter { now < $0.value } }
        return decideDue()
    }

    /// The forwards to decide here whose earlier ones are all settled, in order.
    private mutating func decideDue() -> [Step] {
        var steps: [Step] = []
        while let first = inFlight.first, first.decideHere {
            inFlight.removeFirst()
            steps.append(.decideHere(address: first.address, order: first.order))
        }
        if inFlight.isEmpty {
            draining = false
            target = nil
        }
        return steps
    }
}
