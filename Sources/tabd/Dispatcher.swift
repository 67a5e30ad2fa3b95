import Coordinator
import WebSockets

/// Applies what connections send, one input at a time, in arrival order, and answers
/// each sender with `ack`, `error`, `snapshot` or `pong`.
///
/// Two stages, two tasks: ``run(_:)`` submits commands to the coordinator one after
/// another (so each connection's commands take effect in the order it sent them), and
/// a reply stage awaits their outcomes in the same order and sends the replies. With a
/// durable store, the next commands are applied while earlier ones are being committed,
/// which is what lets the store commit many per transaction. The coordinator publishes
/// every batch itself (see `main.swift`) before the outcome returns, so a sender sees its
/// events before its ack.
actor Dispatcher {
    private struct Session {
        let client: ClientID
        var limiter: RateLimiter
    }

    /// A reply to send once its command's outcome is known.
    private struct Reply: Sendable {
        let connection: ConnectionID
        let client: ClientID
        let ref: String?
        let answer: Answer
    }

    private enum Answer: Sendable {
        case now(ServerFrame)
        case after(Receipt)
    }

    private let coordinator: Coordinator
    private let server: WebSocketServer
    private let gateway: Gateway
    private let metrics: Metrics
    private let log: Log
    private var sessions: [ConnectionID: Session] = [:]
    /// Clients whose departure could not be stored yet; retried with the next presence.
    private var unrecordedLeaves: [ClientID] = []
    private let replies: AsyncStream<Reply>.Continuation
    private let replyStream: AsyncStream<Reply>

    init(coordinator: Coordinator, server: WebSocketServer, gateway: Gateway) {
        self.coordinator = coordinator
        self.server = server
        self.gateway = gateway
        self.metrics = gateway.metrics
        self.log = gateway.log
        (replyStream, replies) = AsyncStream.makeStream(of: Reply.self)
    }

    /// Runs until the input stream finishes and every reply is sent.
    func run(_ inputs: AsyncStream<Gateway.Input>) async {
        let replying = Task { [replyStream, coordinator, server, metrics, log] in
            for await reply in replyStream {
                let frame: ServerFrame
                switch reply.answer {
                case let .now(f): frame = f
                case let .after(receipt):
                    do throws(CommandError) {
                        switch try await coordinator.outcome(of: receipt) {
                        case let .applied(seq, _): frame = .ack(ref: reply.ref, seq: seq)
                        case let .snapshot(snapshot): frame = .snapshot(ref: reply.ref, snapshot)
                        case .pong: frame = .pong(ref: reply.ref)
                        }
                    } catch {
                        frame = .error(ref: reply.ref, error)
                    }
                }
                if case let .error(_, e) = frame {
                    metrics.error(e.code)
                    log.info("client \(reply.client): \(e.code.rawValue): \(e.message)")
                }
                server.send(OutgoingFrame(frame.bytes), to: reply.connection)
            }
        }
        for await input in inputs {
            switch input {
            case .presence: await presence()
            case let .message(id, bytes): await message(bytes, from: id)
            }
        }
        replies.finish()
        await replying.value
    }

    private func presence() async {
        let (joins, leaves) = gateway.takePresence()
        var leaving = unrecordedLeaves
        for leave in leaves {
            guard let session = sessions.removeValue(forKey: leave.connection) else { continue }
            leaving.append(session.client)
            log.info("client \(session.client) left (connection #\(leave.connection.rawValue)), \(leave.how)")
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
            sessions[join.connection] = Session(client: welcome.client.id, limiter: RateLimiter(rate: gateway.options.rateLimit))
            var frames = [OutgoingFrame(ServerFrame.welcome(welcome, server: "tabd \(Options.version)").bytes)]
            frames += welcome.replay.map { OutgoingFrame($0.frameBytes) }
            server.activate(join.connection, first: frames, afterSeq: welcome.seq)
            log.info("connection #\(join.connection.rawValue) from \(join.peer) is client \(welcome.client.id) '\(welcome.client.name)', "
                + (welcome.resumed ? "resumed with \(welcome.replay.count) missed batches" : "sent a snapshot at seq \(welcome.seq)"))
        }
    }

    private func message(_ bytes: [UInt8], from id: ConnectionID) async {
        guard var session = sessions[id] else { return } // closed, or not yet welcomed (cannot send before)
        let allowed = session.limiter.allow()
        sessions[id] = session
        func answer(_ ref: String?, _ answer: Answer) {
            replies.yield(Reply(connection: id, client: session.client, ref: ref, answer: answer))
        }
        guard allowed else {
            answer(nil, .now(.error(ref: nil, CommandError(.rateLimited, "more than \(gateway.options.rateLimit) commands per second"))))
            return
        }
        let envelope: CommandEnvelope
        do { envelope = try CommandEnvelope.parse(bytes) } catch {
            answer(error.ref, .now(.error(ref: error.ref, error.error)))
            return
        }
        metrics.command(envelope.command.type)
        if gateway.stopping.load(ordering: .relaxed) {
            answer(envelope.ref, .now(.error(ref: envelope.ref, .unavailable("tabd is shutting down"))))
            return
        }
        answer(envelope.ref, .after(await coordinator.submit(envelope.command, by: session.client, ref: envelope.ref)))
    }
}
