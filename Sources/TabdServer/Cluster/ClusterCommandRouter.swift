import Cluster
import Coordinator
import Locking

/// A room's commands in a cluster: with forwarding on (`--cluster-forwarding`, the
/// default), a client's command goes to the node that writes the room (most of its latest
/// messages), which decides it with its own, while that node lives and answers. Whether or
/// not this node forwards, it decides what other nodes forward to it. The rules are
/// ``ForwardingPlan``'s and ``ForwardSessions``' (`Sources/Cluster/Forwarding.swift`);
/// this is their shell on the room's actor: it sends, receives and answers over the
/// cluster's core subjects, and hands the coordinator what it decides.
final class ClusterCommandRouter: CommandRouter {
    private let room: RoomID
    private let node: ClusterNode
    private let log: SharedRoomLog
    private let clock: any RoomClock
    private let origin: ContinuousClock.Instant
    /// Where this node's clients' commands go, and which inputs wait meanwhile.
    private var plan: ForwardingPlan<Room.Input>
    /// The sessions of the nodes that forward commands to this one.
    private var sessions = ForwardSessions()
    /// Forwards made in this turn of the room's loop, sent together at its end (one message).
    private var outgoing: (to: String, requests: [ForwardRequest])?
    private var nextAddress: UInt64 = 0
    private let replies: ForwardReplies
    /// Whether this node's clients' commands go to the room's writer.
    private let forwards: Bool

    init(room: RoomID, node: ClusterNode, log: SharedRoomLog, clock: any RoomClock, forwards: Bool) {
        self.room = room
        self.forwards = forwards
        self.node = node
        self.log = log
        self.clock = clock
        origin = clock.now
        plan = ForwardingPlan(node: node.name, incarnation: node.incarnation, room: room)
        replies = ForwardReplies(room: room, node: node)
    }

    var answers: any PeerAnswers { replies }

    /// Now, for the plan and the sessions: nanoseconds since the room loaded.
    private func uptime() -> UInt64 { clock.nanoseconds(since: origin) }

    var wantsCheck: Bool { !plan.isIdle }

    /// `sync`, `ping`, `clients` and refusals are answered here, in their turn among the
    /// connection's answers; while commands are held, everything after them is held too.
    func route(_ input: Room.Input, coordinator: Coordinator, decideHere: (Room.Input) async -> Void,
               isolation: isolated (any Actor)? = #isolation) async {
        guard forwards else { return await decideHere(input) }
        if plan.holdBehindWaiting(input) { return }
        guard case let .command(connection, client, envelope) = input, !envelope.command.isQuery else {
            return await decideHere(input)
        }
        switch plan.route(writer: log.room.writer, isAlive: { node.isAlive($0) }, now: uptime()) {
        case .local:
            await decideHere(input)
        case .hold:
            plan.hold(input)
        case let .forward(to, fresh):
            // None of this node's own batches may come after the first forward.
            if fresh, await coordinator.hasUnpublished { await coordinator.settled() }
            let id = plan.nextID()
            let order = await coordinator.expectElsewhere(envelope.command, by: client, ref: envelope.ref,
                                                          replyTo: AnswerAddress.connection(connection).rawValue, commandKey: id)
            let request = plan.forward(envelope, client: client, to: to, fresh: fresh, address: connection.rawValue, order: order,
                                       reply: node.forwardReply, now: uptime())
            if outgoing?.to != to { endOfTurn() }
            outgoing = (to, (outgoing?.requests ?? []) + [request])
        }
    }

    func receive(_ message: any PeerMessage, coordinator: Coordinator, decideHere: (Room.Input) async -> Void,
                 isolation: isolated (any Actor)? = #isolation) async {
        switch message {
        case let request as ForwardedCommand:
            await decide(request.request, coordinator: coordinator)
        case let answer as ForwardedAnswer:
            await perform(plan.answered(answer.answer, now: uptime()), coordinator: coordinator, decideHere: decideHere)
        default:
            break
        }
    }

    func check(coordinator: Coordinator, decideHere: (Room.Input) async -> Void, isolation: isolated (any Actor)? = #isolation) async {
        let (steps, resend) = plan.check(now: uptime(), isAlive: { node.isAlive($0) })
        if let target = plan.target, !resend.isEmpty { node.forward(resend, to: target, incarnation: log.room.incarnation(of: target)) }
        await perform(steps, coordinator: coordinator, decideHere: decideHere)
    }

    /// Sends the forwards of this turn of the loop, in their order, in one message.
    func endOfTurn() {
        guard let (to, requests) = outgoing else { return }
        outgoing = nil
        node.forward(requests, to: to, incarnation: log.room.incarnation(of: to))
    }

    /// Performs what the plan said of answers, refusals and a writer's death, then lets held
    /// commands go once nothing is being decided here any more.
    private func perform(_ steps: [ForwardingPlan<Room.Input>.Step], coordinator: Coordinator, decideHere: (Room.Input) async -> Void,
                         isolation: isolated (any Actor)? = #isolation) async {
        let here = steps.count { if case .decideHere = $0 { true } else { false } }
        if here > 0 {
            node.log("room '\(room)': \(here) forwarded command\(here == 1 ? "" : "s") refused by the room's writer (or it died); deciding \(here == 1 ? "it" : "them") here")
        }
        for step in steps {
            switch step {
            case let .settle(address, order, frame):
                await coordinator.settleElsewhere(address, order: order, frame: frame)
            case let .decideHere(address, order):
                node.stats.forwardDecidedHere()
                await coordinator.decideInstead(address, order: order)
            }
        }
        for input in plan.release() { await route(input, coordinator: coordinator, decideHere: decideHere) }
    }

    /// A command another node forwarded: decided here in its session's order.
    private func decide(_ request: ForwardRequest, coordinator: Coordinator, isolation: isolated (any Actor)? = #isolation) async {
        let now = uptime()
        plan.wasForwarded(now: now)
        node.stats.forwardReceived()
        switch sessions.admit(request, now: now) {
        case .seen:
            // Sent again (its answer was lost, or is slow): answered again once answered.
            replies.answerAgain(request)
        case .gap:
            node.answer([ForwardAnswer(id: request.id, room: room, refused: "an earlier command of its session did not arrive")], to: request.reply)
        case .decide:
            nextAddress += 1
            replies.expect(nextAddress, request)
            await coordinator.enqueue(request.envelope.command, by: request.client, ref: request.envelope.ref,
                                      replyTo: AnswerAddress.peer(nextAddress).rawValue, commandKey: request.id)
        }
    }
}

/// A command another node forwarded to this room (``Room/Input/peer(_:)``).
struct ForwardedCommand: PeerMessage {
    let request: ForwardRequest
    let node: ClusterNode

    /// The room is not open here (any more): the sender decides it itself.
    func refuse(room: RoomID) {
        node.answer([ForwardAnswer(id: request.id, room: request.room, refused: "room '\(room)' is not open here")], to: request.reply)
    }
}

/// The writer's answer to a command this room forwarded.
struct ForwardedAnswer: PeerMessage {
    let answer: ForwardAnswer
    func refuse(room: RoomID) {}
}

/// Where the answer of each forwarded command goes, by answer address, and the latest
/// answers sent (a command sent again is answered again). The publisher answers from its
/// thread; the router registers from the room's.
final class ForwardReplies: PeerAnswers {
    private struct State {
        var pending: [UInt64: (id: String, reply: String)] = [:]
        var sent: [String: ForwardAnswer] = [:]
        var sentOrder: [String] = []
        var unsent: [String: [ForwardAnswer]] = [:]
    }
    static let kept = 10_000

    private let room: RoomID
    private let node: ClusterNode
    private let state = Locked(State())

    init(room: RoomID, node: ClusterNode) {
        self.room = room
        self.node = node
    }

    func expect(_ n: UInt64, _ request: ForwardRequest) {
        state.withLock { $0.pending[n] = (request.id, request.reply) }
    }

    func answerAgain(_ request: ForwardRequest) {
        if let answer = state.withLock({ $0.sent[request.id] }) { node.answer([answer], to: request.reply) }
    }

    func answer(_ n: UInt64, _ frame: ServerFrame) {
        state.withLock { s in
            guard let (id, reply) = s.pending.removeValue(forKey: n) else { return }
            let answer = ForwardAnswer(id: id, room: room, frame: frame)
            if s.sent.updateValue(answer, forKey: id) == nil { s.sentOrder.append(id) }
            if s.sentOrder.count > Self.kept * 2 {
                for id in s.sentOrder.prefix(Self.kept) { s.sent[id] = nil }
                s.sentOrder.removeFirst(Self.kept)
            }
            s.unsent[reply, default: []].append(answer)
        }
    }

    func flush() {
        let unsent = state.withLock { s in
            defer { s.unsent = [:] }
            return s.unsent
        }
        for (reply, answers) in unsent { node.answer(answers, to: reply) }
    }
}
