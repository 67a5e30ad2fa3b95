import Coordinator
import WebSockets

/// Applies what connections send, one input at a time, in arrival order: so each
/// connection's commands take effect in the order it sent them and its replies go back
/// in that order. The coordinator itself publishes every batch (see `main.swift`);
/// the dispatcher answers the sender with `ack`, `error`, `snapshot` or `pong`.
actor Dispatcher {
    private struct Session {
        let client: ClientID
        var limiter: RateLimiter
    }

    private let coordinator: Coordinator
    private let server: WebSocketServer
    private let gateway: Gateway
    private let metrics: Metrics
    private let log: Log
    private var sessions: [ConnectionID: Session] = [:]

    init(coordinator: Coordinator, server: WebSocketServer, gateway: Gateway) {
        self.coordinator = coordinator
        self.server = server
        self.gateway = gateway
        self.metrics = gateway.metrics
        self.log = gateway.log
    }

    /// Runs until the input stream finishes.
    func run(_ inputs: AsyncStream<Gateway.Input>) async {
        for await input in inputs {
            switch input {
            case .presence: await presence()
            case let .message(id, bytes): await message(bytes, from: id)
            }
        }
    }

    private func presence() async {
        let (joins, leaves) = gateway.takePresence()
        var leaving: [ClientID] = []
        for leave in leaves {
            guard let session = sessions.removeValue(forKey: leave.connection) else { continue }
            leaving.append(session.client)
            log.info("client \(session.client) left (connection #\(leave.connection.rawValue)), \(leave.how)")
        }
        guard !joins.isEmpty || !leaving.isEmpty else { return }
        let welcomes = await coordinator.presence(joining: joins.map(\.request), leaving: leaving)
        for (join, welcome) in zip(joins, welcomes) {
            sessions[join.connection] = Session(client: welcome.client.id, limiter: RateLimiter(rate: gateway.options.rateLimit))
            var frames = [OutgoingFrame(ServerFrame.welcome(welcome, server: "tabd \(Options.version)").bytes)]
            frames += welcome.replay.map { OutgoingFrame(ServerFrame.events($0).bytes) }
            server.activate(join.connection, first: frames, afterSeq: welcome.seq)
            log.info("connection #\(join.connection.rawValue) from \(join.peer) is client \(welcome.client.id) '\(welcome.client.name)', "
                + (welcome.resumed ? "resumed with \(welcome.replay.count) missed batches" : "sent a snapshot at seq \(welcome.seq)"))
        }
    }

    private func message(_ bytes: [UInt8], from id: ConnectionID) async {
        guard var session = sessions[id] else { return } // closed, or not yet welcomed (cannot send before)
        let allowed = session.limiter.allow()
        sessions[id] = session
        guard allowed else {
            reply(.error(ref: nil, CommandError(.rateLimited, "more than \(gateway.options.rateLimit) commands per second")), to: id, client: session.client)
            return
        }
        let envelope: CommandEnvelope
        do { envelope = try CommandEnvelope.parse(bytes) } catch {
            reply(.error(ref: error.ref, error.error), to: id, client: session.client)
            return
        }
        metrics.command(envelope.command.type)
        if gateway.stopping.load(ordering: .relaxed) {
            reply(.error(ref: envelope.ref, .unavailable("tabd is shutting down")), to: id, client: session.client)
            return
        }
        do {
            switch try await coordinator.execute(envelope.command, by: session.client, ref: envelope.ref) {
            case let .applied(seq, _): reply(.ack(ref: envelope.ref, seq: seq), to: id, client: session.client)
            case let .snapshot(snapshot): reply(.snapshot(ref: envelope.ref, snapshot), to: id, client: session.client)
            case .pong: reply(.pong(ref: envelope.ref), to: id, client: session.client)
            }
        } catch {
            reply(.error(ref: envelope.ref, error), to: id, client: session.client)
        }
    }

    private func reply(_ frame: ServerFrame, to id: ConnectionID, client: ClientID) {
        if case let .error(_, e) = frame {
            metrics.error(e.code)
            log.info("client \(client): \(e.code.rawValue): \(e.message)")
        }
        server.send(OutgoingFrame(frame.bytes), to: id)
    }
}
