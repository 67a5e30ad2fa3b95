import Coordinator
import Outbox
import Dispatch
import Locking
import Synchronization
import WebSockets

/// One loaded room: its coordinator, and the loop that feeds it what the gateway and the
/// HTTP API hand over, in arrival order.
///
/// The loop takes everything that arrived while it was busy at once: commands go to the
/// coordinator on the short road (``Coordinator/enqueue(_:by:ref:replyTo:)``: applied at
/// once, answered by the publisher with the batch they caused, after its commit), and all
/// joins and leaves become one presence batch after the commands. So a reconnect storm of N
/// clients costs a few `clientJoined` batches, not N.
///
/// Rooms share nothing but the state file's writer and the sockets' thread: each has its
/// own loop, coordinator, broadcast channel and ids. A room is loaded by its first join or
/// API call, and retires when it has had no user for `--room-idle` (``RoomRegistry``).
actor Room: DirectoryRoom {
    enum Input: Sendable {
        /// Joins and leaves, in this order of application: leaves, then joins.
        case presence(joins: [Gateway.Join], leaves: [Gateway.Leave])
        /// A parsed command of a welcomed connection.
        case command(ConnectionID, ClientID, CommandEnvelope)
        /// A frame refused before it became a command, and the error frame to answer.
        case refused(ConnectionID, ClientID, ServerFrame)
        /// A `refresh` whose token the gateway took: acknowledged in its turn.
        case refreshed(ConnectionID, ClientID, ref: String?)
        /// A request of the HTTP API.
        case api(APICall)
        /// The idle timer ran out: retire if the room still has no user.
        case idleCheck
        /// The room is being deleted: close its clients with 4404 and stop.
        case delete(OneShot<Void>)
        /// A shared log: other writers' batches arrived; take them in.
        case absorb
        /// A shared log: clients of writers that died leave (checked every second).
        case sweep
        /// A shared log: the room may have ended there (a deletion, a move, or the log was
        /// out of reach and one may have been missed): its standing is checked.
        case verifyStanding
        /// A counted room's changed count is due to be reported.
        case presenceReport
        /// A shared log: another writer's message for the room's ``CommandRouter``.
        case peer(any PeerMessage)
        /// A shared log: commands handed to another writer may be late.
        case peerCheck
        /// The last read's answer has been kept long enough (``readKept``).
        case dropRead
        /// A reader of the room's event stream is gone (``APICall/follow(after:epoch:_:)``).
        case followerLeft(ObjectIdentifier)
    }

    enum APICall: Sendable {
        /// `POST /api/rooms/ID/commands`, its body: answered with the frame a connection
        /// would get, in the same precedence (the rate limit before the body is read).
        case command(body: [UInt8], HTTPResponder)
        /// `GET /api/rooms/ID`.
        case read(HTTPResponder)
        /// `PUT /api/rooms/ID`: the room was created for this call.
        case created(HTTPResponder)
        /// `GET /api/rooms/ID/clients`: one page of the connected clients.
        case clients(after: ClientID?, limit: Int, HTTPResponder)
        /// `GET /api/rooms/ID/events`: the room's stream as server-sent events, from a
        /// snapshot or resumed after `after` (in `epoch`, when named). The reader stays a user
        /// of the room (it is not unloaded under it) until its stream ends; it is no client.
        case follow(after: Int?, epoch: String?, HTTPResponder)

        var responder: HTTPResponder {
            switch self {
            case let .command(_, r), let .read(r), let .created(r), let .clients(_, _, r), let .follow(_, _, r): r
            }
        }
    }

    /// Inputs handled between two yields of the loop.
    static let inputsPerYield = 64

    /// Who events of the HTTP API are `by`.
    static let apiClient: ClientID = "api"

    package nonisolated let id: RoomID
    nonisolated let channel: ChannelID
    nonisolated let inbox = Inbox<Input>()
    /// Signalled when the loop has ended and the room's state is out of memory.
    nonisolated let finished = OneShot<Void>()
    /// For listings: connected clients and the last published seq.
    nonisolated let clientCount = Atomic<Int>(0)
    nonisolated let publishedSeq = Atomic<Int>(0)
    /// What the room's state weighs (its coordinator keeps it current): a `sync` costs that
    /// much of the connection's byte budget.
    nonisolated let stateBytes = StateBytesGauge()

    private nonisolated let registry: RoomRegistry
    private nonisolated let server: WebSocketServer
    /// How input that comes after the room ended is refused: the close code and reason.
    private nonisolated let ending = Locked<(code: CloseCode, reason: String)>((.internalError, "room unavailable"))
    /// The tabs a new room starts with; nil when the room is stored already.
    nonisolated let template: [TabInfo]?
    nonisolated var isCreating: Bool { template != nil }
    /// The previous incarnation of this room, still writing its last batches (forgotten
    /// once it has finished, so incarnations never keep each other in memory).
    private var predecessor: Room?
    private var coordinator: Coordinator?
    /// The room as its home loaded it (how to unload it, and its shared log if it has one).
    private var loaded: LoadedRoom?
    /// What other writers of the room's log add to the room (a cluster's engine); nil when
    /// only this room writes its log.
    private var shared: (any SharedLog)? { loaded?.shared }
    /// Where this room's commands are decided, when one writer of a shared log decides them.
    private var router: (any CommandRouter)?
    /// The client of every welcomed connection.
    private var clients: [ConnectionID: ClientID] = [:]
    /// Clients whose departure could not be stored yet; retried with the next presence.
    private var unrecordedLeaves: [ClientID] = []
    /// The room's HTTP API: its budgets, its calls waiting for answers, its last read.
    private var api: RoomAPI
    /// The room's timers that run on its loop: a counted room's count report, the check of
    /// commands handed to another writer. (The idle check is armed by the registry's count
    /// of users.)
    private var timers = RoomTimers<Timer>()
    /// The readers of the room's event stream, each until its stream ends.
    private var followers: [ObjectIdentifier: HTTPStream] = [:]
    enum Timer: Hashable, Sendable { case presenceReport, peerCheck, dropRead }
    /// Time for this room (``RoomRegistry/clock``).
    private nonisolated var clock: any RoomClock { registry.clock }

    init(id: RoomID, channel: ChannelID, registry: RoomRegistry, server: WebSocketServer, template: [TabInfo]?, predecessor: Room?) {
        self.id = id
        self.channel = channel
        self.registry = registry
        self.server = server
        self.template = template
        self.predecessor = predecessor
        api = RoomAPI(rate: registry.settings.rateLimit, byteRate: registry.settings.byteRateLimit)
    }

    private nonisolated var log: Log { registry.log }

    /// Hands the room its input; once the room has ended, the input is refused at once
    /// (joins closed, HTTP calls answered), so nothing waits for a room that is gone.
    nonisolated func submit(_ inputs: [Input]) {
        guard !inbox.put(inputs) else { return }
        let (code, reason) = ending.withLock { $0 }
        refuse(inputs, code: code, reason: reason)
    }

    // MARK: The loop

    func run() async {
        defer { finished.signal() }
        guard let coordinator = await load() else {
            registry.failed(self)
            await refuseEverything(code: .internalError, reason: "room unavailable")
            registry.retired(self)
            return
        }
        self.coordinator = coordinator
        while let inputs = await inbox.takeAll() {
            var presence = PresenceChanges()
            var retire = false
            for (n, input) in inputs.enumerated() {
                // A long take (a flood) lets other rooms' work onto the cooperative threads
                // now and then: a room must not hold a thread for its whole backlog.
                if n % Self.inputsPerYield == Self.inputsPerYield - 1 { await Task.yield() }
                if case .api(.read) = input {} else { api.changed() }
                switch input {
                case let .presence(joins, leaves):
                    for join in joins { presence.join(join) }
                    for leave in leaves where !presence.leave(leave) {
                        log.info("connection #\(leave.connection.rawValue) closed before its welcome, \(leave.how)", LogFields(connection: Int(leave.connection.rawValue), code: leave.code))
                        released(1)
                    }
                case .command, .refused, .refreshed:
                    await route(input, coordinator: coordinator)
                case let .peer(message):
                    guard let router else {
                        message.refuse(room: id)
                        break
                    }
                    await router.receive(message, coordinator: coordinator, decideHere: { await self.decideHere($0, coordinator) }, isolation: self)
                case .peerCheck:
                    guard timers.fired(.peerCheck, now: clock.now) else { break }
                    await router?.check(coordinator: coordinator, decideHere: { await self.decideHere($0, coordinator) }, isolation: self)
                case let .api(call):
                    await handle(call, coordinator: coordinator)
                case .idleCheck:
                    switch registry.retireIfIdle(self) {
                    case .retire: retire = true
                    case let .checkAgain(after): armIdleTimer(after: after)
                    case .inUse: break
                    }
                case .absorb:
                    await coordinator.absorb()
                    await armPresenceReport(coordinator)
                case .dropRead:
                    if timers.fired(.dropRead, now: clock.now) { api.dropRead() }
                case let .followerLeft(key):
                    if followers.removeValue(forKey: key) != nil { released(1) }
                case .presenceReport:
                    guard timers.fired(.presenceReport, now: clock.now) else { break }
                    do { try await coordinator.reportPresence(now: clock.now) } catch {
                        log.error("room '\(id)': the client count could not be stored: \(error.message)", LogFields(room: id, kind: "state"))
                    }
                    await armPresenceReport(coordinator)
                case .sweep:
                    let (gone, deadNodes) = shared?.departed(includingOwn: false) ?? ([], [])
                    if !gone.isEmpty || !deadNodes.isEmpty {
                        if !gone.isEmpty { log.info("room '\(id)': clients \(gone.sorted().joined(separator: ", ")) of nodes that stopped answering leave", LogFields(room: id)) }
                        if !deadNodes.isEmpty { log.info("room '\(id)': the clients counted on nodes \(deadNodes.sorted().joined(separator: ", ")), which stopped answering, leave", LogFields(room: id)) }
                        do { _ = try await coordinator.presence(joining: [], leaving: Array(gone), forgettingNodes: deadNodes, now: clock.now) } catch {
                            log.error("room '\(id)': could not record the departure of a dead node's clients: \(error.message)", LogFields(room: id, kind: "state"))
                        }
                        await armPresenceReport(coordinator)
                    }
                case .verifyStanding:
                    guard let shared else { break }
                    switch await shared.standing() {
                    case .gone?:
                        // Not awaited: the deletion comes back to this loop as `.delete`.
                        Task { [registry, id, self] in await registry.deletedElsewhere(id, found: self) }
                    case .moved?:
                        // Moved into its shard: the same life, epoch and seqs. Its clients
                        // reconnect and resume; the next of them loads it from there.
                        log.info("room '\(id)' moved into its shard: its clients reconnect to it there", LogFields(room: id))
                        await stop(coordinator, closing: presence.joins.map(\.connection), code: .goingAway, reason: "room moved",
                                   leftovers: Array(inputs[(n + 1)...]))
                        return
                    case .current?, nil:
                        break
                    }
                case let .delete(done):
                    // What came after the deletion is refused like what comes later.
                    await stop(coordinator, closing: presence.joins.map(\.connection), code: .roomGone, reason: "room deleted",
                               leftovers: Array(inputs[(n + 1)...]))
                    done.signal()
                    return
                }
            }
            router?.endOfTurn()
            armPeerCheck()
            if !presence.isEmpty {
                api.changed()
                await self.presence(coordinator, joins: presence.joins, leaves: presence.leaves)
            }
            if retire {
                log.info("room '\(id)' unloaded after \(registry.settings.idleSeconds) s without clients", LogFields(room: id))
                await stop(coordinator, closing: [], code: .goingAway, reason: "room unloaded")
                return
            }
        }
        // The daemon stops: a count that waits for its interval goes now (in a cluster,
        // the other nodes hear at once that this node's clients are gone).
        do { try await coordinator.reportPresence(immediately: true, now: clock.now) } catch {
            log.error("room '\(id)': the last client count could not be stored: \(error.message)", LogFields(room: id, kind: "state"))
        }
        _ = await coordinator.snapshot()
    }

    /// Loads the room from its home (``RoomHome``: memory, the state file or the engine),
    /// or creates it there, and starts serving it.
    private func load() async -> Coordinator? {
        if let predecessor {
            await predecessor.finished.wait()
            self.predecessor = nil
        }
        let settings = registry.settings
        var configuration = Coordinator.Configuration(resumeWindow: settings.resumeWindow, presenceLimit: settings.presenceLimit,
                                                      presenceInterval: .milliseconds(settings.presenceIntervalMS),
                                                      maxStateBytes: settings.maxStateBytes)
        configuration.stateBytesGauge = stateBytes
        // The coordinator and its tab actors run on this room's executor: the loop hands
        // them commands without a hop, and rooms stay as fair to each other as actors are.
        configuration.executor = self
        let loaded: LoadedRoom
        do { loaded = try await registry.home.load(id, template: template, configuration: configuration) } catch {
            log.error(error.description, LogFields(room: id, kind: "state"))
            return nil
        }
        self.loaded = loaded
        let coordinator = loaded.coordinator
        publishedSeq.store(await coordinator.currentSeq, ordering: .relaxed)
        if let summary = loaded.summary { log.info(summary, LogFields(room: id)) }
        router = loaded.shared?.makeRouter(room: id, clock: clock)
        await attach(coordinator)
        if let shared = loaded.shared {
            // Other writers' batches from now on, and those that arrived while loading.
            let inbox = inbox
            shared.onForeignBatches { inbox.put([.absorb]) }
            // Its end in the log (another writer deleted or moved it): checked, then closed.
            shared.onEnded { inbox.put([.verifyStanding]) }
            await coordinator.absorb()
        }
        return coordinator
    }

    /// Hands every publication out (``RoomOutput``).
    private func attach(_ coordinator: Coordinator) async {
        var made = RoomOutput(room: id, channel: channel, server: server, registry: registry, api: api.shared,
                              peerAnswers: router?.answers, counter: coordinator.counter)
        if let outbox = registry.memoryOutbox { made.outbox = (outbox, coordinator.epoch) }
        let output = made
        let registry = registry
        await coordinator.addPublisher { [weak self] batches, answers in
            let answeredCalls = output.publish(batches, answers)
            guard let self else { return }
            if let last = batches.last { self.publishedSeq.store(last.lastSeq, ordering: .relaxed) }
            if answeredCalls > 0, registry.release(self, answeredCalls) { self.armIdleTimer(after: .seconds(registry.settings.idleSeconds)) }
        }
    }

    // MARK: Where commands are decided

    /// A client's command (or a frame refused before it became one), in its turn: decided
    /// here, or, with a shared log whose commands one writer decides, as its router says.
    private func route(_ input: Input, coordinator: Coordinator) async {
        guard let router else { return await decideHere(input, coordinator) }
        await router.route(input, coordinator: coordinator, decideHere: { await self.decideHere($0, coordinator) }, isolation: self)
    }

    private func decideHere(_ input: Input, _ coordinator: Coordinator) async {
        switch input {
        case let .command(connection, client, envelope):
            // A snapshot for a connection being closed (too slow, say, after the snapshots of
            // its earlier `sync`s) could not go out: it is not built.
            if case .sync = envelope.command, !server.isOpen(connection) { return }
            await coordinator.enqueue(envelope.command, by: client, ref: envelope.ref, replyTo: AnswerAddress.connection(connection).rawValue)
        case let .refused(connection, client, frame):
            await coordinator.answer(frame, client: client, to: connection.rawValue)
        case let .refreshed(connection, client, ref):
            await coordinator.acknowledge(ref: ref, client: client, to: connection.rawValue)
        default:
            break
        }
    }

    /// Checks the commands handed to another writer for late answers every so often while
    /// there are any.
    private func armPeerCheck() {
        guard let router, router.wantsCheck, !timers.isArmed(.peerCheck) else { return }
        arm(.peerCheck, at: clock.now + .milliseconds(250))
    }

    /// Arms `timer` for `deadline` (see ``RoomTimers``): its input comes back to the loop.
    private func arm(_ timer: Timer, at deadline: ContinuousClock.Instant) {
        guard timers.arm(timer, at: deadline) else { return }
        let inbox = inbox
        let input: Input = switch timer {
        case .presenceReport: .presenceReport
        case .peerCheck: .peerCheck
        case .dropRead: .dropRead
        }
        clock.wake(at: deadline) { inbox.put([input]) }
    }

    // MARK: HTTP calls

    private func handle(_ call: APICall, coordinator: Coordinator) async {
        switch call {
        case let .command(body, responder):
            guard allowAPICall(bytes: body.count, responder, asFrame: true) else { return }
            let envelope: CommandEnvelope
            do { envelope = try CommandEnvelope.parse(body) } catch {
                registry.metrics.error(error.error.code)
                responder.respond(RoomsAPI.response(for: .error(ref: error.ref, error.error)))
                released(1)
                return
            }
            registry.metrics.command(envelope.command.type)
            if case .sync = envelope.command {
                // Asking costs a few bytes, the answer the whole room (as on a connection).
                let weight = stateBytes.value - body.count
                if weight > 0 { api.shared.charge(weight) }
            }
            await coordinator.enqueue(envelope.command, by: Self.apiClient, ref: envelope.ref, replyTo: api.park(responder))
        case let .read(responder):
            guard allowAPICall(bytes: 0, responder) else { return }
            var body = api.currentRead
            if body == nil {
                let snapshot = await coordinator.snapshot()
                let read = api.read(snapshot, room: id, epoch: coordinator.epoch)
                if read.made, !timers.isArmed(.dropRead) { arm(.dropRead, at: clock.now + RoomAPI.readKept) }
                body = read.body
            }
            let answer = HTTPResponse(status: 200, contentType: "application/json", body: body!)
            api.shared.charge(answer.body.count)
            responder.respond(answer)
            released(1)
        case let .clients(after, limit, responder):
            guard allowAPICall(bytes: 0, responder) else { return }
            let answer: HTTPResponse
            do {
                guard case let .clients(page) = try await coordinator.execute(.clients(after: after, limit: limit), by: Self.apiClient) else {
                    preconditionFailure("clients answered with something else")
                }
                answer = RoomsAPI.response(for: .clients(ref: nil, node: coordinator.node, page))
            } catch {
                answer = RoomsAPI.response(for: .error(ref: nil, error))
            }
            api.shared.charge(answer.body.count)
            responder.respond(answer)
            released(1)
        case let .follow(after, epoch, responder):
            guard allowAPICall(bytes: 0, responder) else { return }
            await follow(after: epoch == nil || epoch == coordinator.epoch ? after : nil, responder, coordinator)
        case let .created(responder):
            if loaded?.created == false {
                responder.respond(RoomsAPI.error(409, "room_exists", "room '\(id)' exists"))
            } else {
                responder.respond(RoomsAPI.json(201, .object([
                    ("room", .string(id)), ("epoch", .string(coordinator.epoch)), ("seq", .int(await coordinator.currentSeq)),
                ])))
            }
            released(1)
        }
    }

    /// A reader of the room's stream: first the batches after `after` when they are all
    /// kept (and weigh no more than a snapshot), else a snapshot event; then every batch as
    /// it is published, each an event whose `id` is its last seq. The stream ends when the
    /// reader falls too far behind (it resumes from its last id), or the room stops.
    private func follow(after: Int?, _ responder: HTTPResponder, _ coordinator: Coordinator) async {
        let subscription = await coordinator.subscribe(after: after, replayAtMostSnapshot: true)
        let stream = responder.stream(RoomsAPI.eventStreamHead, limit: registry.settings.streamBytes)
        let key = ObjectIdentifier(stream)
        followers[key] = stream
        registry.metrics.streamOpened()
        var first: [UInt8] = []
        switch subscription.start {
        case let .snapshot(snapshot):
            let data = JSONValue.object([("type", .string("snapshot")), ("room", .string(id)), ("epoch", .string(coordinator.epoch)),
                                         ("snapshot", snapshot.json(capped: false))]).compactBytes
            first = RoomsAPI.sse(id: snapshot.seq, data: data)
        case let .replay(batches):
            for batch in batches { first += RoomsAPI.sse(id: batch.lastSeq, data: batch.frameBytes) }
        }
        stream.send(first)
        let pump = Task {
            for await batch in subscription.batches {
                guard stream.send(RoomsAPI.sse(id: batch.lastSeq, data: batch.frameBytes)) else { break }
            }
            stream.finish() // fell behind, or the room stopped: the reader resumes from its last id
        }
        let (inbox, metrics) = (inbox, registry.metrics)
        stream.onClose {
            pump.cancel()
            metrics.streamClosed()
            inbox.put([.followerLeft(key)])
        }
    }

    /// Takes one call of `bytes` from the room's API budgets, or answers 429 `rate_limited`
    /// (before the body is parsed or anything is built) and returns false: for a command,
    /// as the `error` frame a connection would get (its ref null), for a read as an error
    /// of the API (`{"type","code","message"}`, as every other error of a read).
    private func allowAPICall(bytes: Int, _ responder: HTTPResponder, asFrame: Bool = false) -> Bool {
        if api.shared.allow(bytes: bytes) { return true }
        let settings = registry.settings
        let error = CommandError(.rateLimited, "more than \(settings.rateLimit) API calls or \(settings.byteRateLimit) bytes (answers included) per second in room '\(id)'")
        registry.metrics.error(error.code)
        responder.respond(asFrame ? RoomsAPI.response(for: .error(ref: nil, error)) : RoomsAPI.error(429, error.code.rawValue, error.message))
        released(1)
        return false
    }

    // MARK: Presence

    private func presence(_ coordinator: Coordinator, joins: [Gateway.Join], leaves: [Gateway.Leave]) async {
        var leaving = unrecordedLeaves
        for leave in leaves {
            guard let client = clients.removeValue(forKey: leave.connection) else { continue }
            leaving.append(client)
            log.info("room '\(id)': client \(client) left (connection #\(leave.connection.rawValue)), \(leave.how)",
                     LogFields(room: id, client: client, connection: Int(leave.connection.rawValue), code: leave.code))
        }
        defer {
            clientCount.store(clients.count, ordering: .relaxed)
            released(leaves.count)
        }
        guard !joins.isEmpty || !leaving.isEmpty else { return }
        let welcomes: [Welcome]
        do {
            welcomes = try await coordinator.presence(joining: joins.map(\.request), leaving: leaving, now: clock.now)
            unrecordedLeaves = []
        } catch {
            // Nothing was applied: the joins cannot be welcomed, the leaves are tried again.
            unrecordedLeaves = leaving
            log.error("room '\(id)': presence could not be stored: \(error.message)", LogFields(room: id, kind: "state"))
            for join in joins { server.close(join.connection, code: .internalError, reason: "state unavailable") }
            return
        }
        await armPresenceReport(coordinator)
        let gateway = registry.gateway
        for (join, var welcome) in zip(joins, welcomes) {
            welcome.room = id
            welcome.role = join.role.rawValue
            clients[join.connection] = welcome.client.id
            // Counted before its welcome can go out: a client that lists the rooms as soon as
            // it is welcomed finds itself (a fresh make test once listed a room without it).
            clientCount.store(clients.count, ordering: .relaxed)
            gateway?.beginSession(join.connection, client: welcome.client.id)
            var frames = [OutgoingFrame(ServerFrame.welcome(welcome, server: "tabd \(Options.version)").bytes)]
            frames += welcome.replay.map { OutgoingFrame($0.frameBytes) }
            server.activate(join.connection, on: channel, first: frames, afterSeq: welcome.seq)
            registry.metrics.welcomeTimes.observe(since: join.at)
            log.info("connection #\(join.connection.rawValue) from \(join.peer) is client \(welcome.client.id) '\(welcome.client.name)' in room '\(id)', "
                + (welcome.resumed ? "resumed with \(welcome.replay.count) missed batches" : "sent a snapshot at seq \(welcome.seq)"),
                LogFields(room: id, client: welcome.client.id, connection: Int(join.connection.rawValue), peer: join.peer))
        }
    }

    /// Arms the report of a counted room's changed count for when it is due (one timer
    /// at a time; an earlier due time than the armed one arms another).
    private func armPresenceReport(_ coordinator: Coordinator) async {
        guard let due = await coordinator.presenceReportDue else { return }
        arm(.presenceReport, at: due)
    }

    // MARK: Users, idling, stopping

    /// `n` users (connections that left, HTTP calls answered) are done with the room.
    private func released(_ n: Int) {
        if n > 0, registry.release(self, n) { armIdleTimer(after: .seconds(registry.settings.idleSeconds)) }
    }

    /// After `delay`, checks whether the room is still without users (one timer at a time:
    /// the registry arms it only when none is pending).
    nonisolated func armIdleTimer(after delay: Duration) {
        guard registry.settings.idleSeconds > 0, registry.persistent else { return }
        let inbox = inbox
        clock.wake(at: clock.now + delay) { inbox.put([.idleCheck]) }
    }

    /// Closes the room's connections, waits for its last commits, and forgets it.
    private func stop(_ coordinator: Coordinator, closing joining: [ConnectionID], code: CloseCode, reason: String,
                      leftovers: [Input] = []) async {
        for connection in Array(clients.keys) + joining { server.close(connection, code: code, reason: reason) }
        for stream in followers.values { stream.finish() }
        followers = [:]
        refuse(leftovers, code: code, reason: reason)
        // A deleted room's log is gone: what it still writes can never be stored.
        if code == .roomGone { shared?.abandon() }
        _ = await coordinator.snapshot() // settles what is still committing
        if code == .roomGone, let outbox = registry.memoryOutbox, outbox.kinds.contains(.roomDeleted) {
            outbox.append([.roomDeleted(id, epoch: coordinator.epoch, seq: await coordinator.currentSeq)])
        }
        await loaded?.unload()
        server.removeChannel(channel, code: code, reason: reason)
        await refuseEverything(code: code, reason: reason)
        // Nothing of the room stays in memory, even while a connection still refers to it.
        self.coordinator = nil
        loaded = nil
        router = nil
        clients = [:]
        registry.retired(self)
    }

    /// Answers what is left in the inbox of a room that is gone or never loaded.
    private func refuseEverything(code: CloseCode, reason: String) async {
        ending.withLock { $0 = (code, reason) }
        inbox.finish()
        while let inputs = await inbox.takeAll() { refuse(inputs, code: code, reason: reason) }
    }

    /// Closes joining connections and answers HTTP calls of a room that is gone.
    private nonisolated func refuse(_ inputs: [Input], code: CloseCode, reason: String) {
        for input in inputs {
            switch input {
            case let .presence(joins, _):
                for join in joins { server.close(join.connection, code: code, reason: reason) }
            case let .api(call):
                call.responder.respond(code == .roomGone
                    ? RoomsAPI.error(404, "unknown_room", "room '\(id)' was deleted")
                    : RoomsAPI.error(503, "unavailable", "room '\(id)' is unavailable"))
            case let .delete(done):
                done.signal()
            case let .peer(message):
                message.refuse(room: id)
            case .command, .refused, .refreshed, .idleCheck, .absorb, .sweep, .verifyStanding, .presenceReport, .peerCheck, .dropRead,
                 .followerLeft:
                break
            }
        }
    }
}
