import Coordinator
import WebSockets

/// The daemon's core loop: takes what the gateway parsed, in arrival order, into the
/// coordinator, and turns joins and leaves into presence batches and welcomes.
///
/// Commands take the short road: ``Coordinator/enqueue(_:by:ref:replyTo:)`` applies a
/// command and returns at once; its answer reaches the coordinator's publisher (see
/// ``attach(to:)``) together with the batch it acknowledges, after the commit, and goes
/// to the sockets in the same hand-over as the batch's frame. Nobody waits for a
/// commit, so the store commits as many batches per transaction as arrive meanwhile.
actor Dispatcher {
    private let coordinator: Coordinator
    private let server: WebSocketServer
    private let gateway: Gateway
    private let log: Log
    /// The client of every welcomed connection.
    private var clients: [ConnectionID: ClientID] = [:]
    /// Clients whose departure could not be stored yet; retried with the next presence.
    private var unrecordedLeaves: [ClientID] = []
    init(coordinator: Coordinator, server: WebSocketServer, gateway: Gateway) {
        self.coordinator = coordinator
        self.server = server
        self.gateway = gateway
        self.log = gateway.log
    }

    /// Hands every publication to the server: the batches' frames (encoded once, the
    /// same bytes for every connection), then the answers, with one wake-up.
    static func attach(to coordinator: Coordinator, server: WebSocketServer, metrics: Metrics, log: Log) async {
        await coordinator.addPublisher { batches, answers in
            for batch in batches { metrics.published(batch) }
            for answer in answers {
                guard case let .error(_, e) = answer.frame else { continue }
                metrics.error(e.code)
                log.info("client \(answer.client): \(e.code.rawValue): \(e.message)")
            }
            server.publish(batches.map { (OutgoingFrame($0.frameBytes), $0.lastSeq) },
                           replies: answers.map { (ConnectionID(rawValue: $0.to), OutgoingFrame($0.frame.bytes)) })
        }
    }

    /// Runs until the input stream finishes.
    ///
    /// Everything that arrived while the last inputs were handled is taken at once, and
    /// all its joins and leaves become one presence batch, after its commands: a leave
    /// may come later than it happened, never before the leaving client's commands, and
    /// a joining connection sends nothing before its welcome. So clients that arrive
    /// together, over many passes of the network thread, share one `clientJoined` batch.
    func run(_ inbox: Inbox<Gateway.Input>) async {
        while let inputs = await inbox.takeAll() {
            var joins: [Gateway.Join] = []
            var leaves: [Gateway.Leave] = []
            for input in inputs {
                switch input {
                case let .presence(j, l):
                    joins += j
                    for leave in l {
                        // Joined and left before the join was applied: it never joins.
                        if let i = joins.firstIndex(where: { $0.connection == leave.connection }) {
                            joins.remove(at: i)
                            log.info("connection #\(leave.connection.rawValue) closed before its welcome, \(leave.how)")
                        } else {
                            leaves.append(leave)
                        }
                    }
                case let .command(id, client, envelope):
                    await coordinator.enqueue(envelope.command, by: client, ref: envelope.ref, replyTo: id.rawValue)
                case let .refused(id, client, frame):
                    await coordinator.answer(frame, client: client, to: id.rawValue)
                }
            }
            if !joins.isEmpty || !leaves.isEmpty { await presence(joins: joins, leaves: leaves) }
        }
    }

    private func presence(joins: [Gateway.Join], leaves: [Gateway.Leave]) async {
        var leaving = unrecordedLeaves
        for leave in leaves {
            guard let client = clients.removeValue(forKey: leave.connection) else { continue }
            leaving.append(client)
            log.info("client \(client) left (connection #\(leave.connection.rawValue)), \(leave.how)")
        }
        guard !joins.isEmpty || !leaving.isEmpty else { return }
        let welcomes: [Welcome]
        do {
            welcomes = try await coordinator.presence(joining: joins.map(\.request), leaving: leaving)
            unrecordedLeaves = []
        } catch {
            // Nothing was applied: the joins cannot be welcomed, the leaves are tried again.
            unrecordedLeaves = leaving
            log.error("presence could not be stored: \(error.message)")
            for join in joins { server.close(join.connection, code: .internalError, reason: "state unavailable") }
            return
        }
        for (join, welcome) in zip(joins, welcomes) {
            clients[join.connection] = welcome.client.id
            gateway.beginSession(join.connection, client: welcome.client.id)
            var frames = [OutgoingFrame(ServerFrame.welcome(welcome, server: "tabd \(Options.version)").bytes)]
            frames += welcome.replay.map { OutgoingFrame($0.frameBytes) }
            server.activate(join.connection, first: frames, afterSeq: welcome.seq)
            log.info("connection #\(join.connection.rawValue) from \(join.peer) is client \(welcome.client.id) '\(welcome.client.name)', "
                + (welcome.resumed ? "resumed with \(welcome.replay.count) missed batches" : "sent a snapshot at seq \(welcome.seq)"))
        }
    }
}
