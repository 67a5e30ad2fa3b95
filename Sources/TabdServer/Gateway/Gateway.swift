import Auth
import Cluster
import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import Locking
import Synchronization
import WebSockets

/// The libwebsockets side of tabd: decides who may connect and to which room, answers
/// `/healthz`, `/metrics` and the HTTP API (``RoomsAPI``), and turns connections and
/// messages into the input of their ``Room``.
///
/// Called on the server's service thread, so it never waits: it checks, counts, parses
/// and gathers. Each frame is rate-limited (frames and bytes) and parsed here, as it
/// arrives: parsing is linear in the input, and libwebsockets reads the connections in
/// turn, so one connection's costly frames delay another's by at most a few parses, and
/// the core only ever sees parsed commands. What one pass of the service thread gathers
/// is handed over at its end, room by room, in order: the commands and refusals, then one
/// `presence` with the pass's joins and leaves (so connections that arrive together share
/// one `clientJoined` batch, and a leave comes after the leaving connection's last command).
///
/// A connection's frames that arrive before its welcome are kept (up to
/// ``maxEarlyFrames``) and read once it is welcomed, before any later frame of it.
final class Gateway: WebSocketServerHandler {
    struct Leave: Sendable {
        let connection: ConnectionID
        /// How it ended: the close code and reason, for the log.
        let how: String
        /// The close code alone (a log line's `code` field).
        var code: String?
    }

    struct Join: Sendable {
        let connection: ConnectionID
        let request: Coordinator.JoinRequest
        let peer: String
        /// What the connection may do in its room (said in its welcome).
        let role: Role
        /// When its upgrade was accepted (`tabd_welcome_seconds`).
        var at = ContinuousClock.now
    }

    /// Frames kept for a connection before its welcome; more are answered `rate_limited`.
    static let maxEarlyFrames = 64

    /// An open WebSocket connection.
    private struct Connection {
        /// Nil when its room could not be taken (it is being closed).
        var room: Room?
        /// `view` may send only `sync`, `ping` and `clients`.
        let role: Role
        /// Closes it when its signed token runs out; cancelled when it goes.
        var expiry: (any DispatchSourceTimer)?
        /// Set when its token ran out: its frames are not read while it closes.
        var expired = false
        /// Nil until the connection is welcomed.
        var client: ClientID?
        var limiter: RateLimiter
        /// Frames not read yet because they came before the welcome, in order.
        var early: [[UInt8]] = []
        /// Frames beyond ``maxEarlyFrames`` before the welcome.
        var refusedEarly = 0
        /// When each command with a `ref` now on its way arrived (`tabd_command_seconds`), at
        /// most ``maxTimedCommands``: a client's own refs name its commands.
        var timed: [String: ContinuousClock.Instant] = [:]
    }

    /// Commands of one connection timed at once; more are not timed.
    static let maxTimedCommands = 256

    /// What one pass produced for one room.
    private struct RoomInputs {
        let room: Room
        var inputs: [Room.Input] = []
        var presence = PresenceChanges()
    }

    /// What the service thread and the rooms share.
    private struct State {
        var connections: [ConnectionID: Connection] = [:]
        /// Welcomed connections whose early frames are to be read at the end of this pass.
        var welcomed: [ConnectionID] = []
        /// What this pass produced so far, by room.
        var pass: [ObjectIdentifier: RoomInputs] = [:]

        mutating func add(_ input: Room.Input, for room: Room) {
            pass[ObjectIdentifier(room), default: RoomInputs(room: room)].inputs.append(input)
        }
    }

    let options: Options
    let auth: Authenticator
    let metrics: Metrics
    let log: Log
    let registry: RoomRegistry
    /// The cluster this tabd is a node of, if it is one (`/healthz`, `/metrics`).
    let cluster: ClusterNode?
    let api: RoomsAPI
    /// Other web sites fenced out (``screen(_:)``).
    let fence: SiteFence
    /// Set when the daemon stops: `/healthz` answers 503 and upgrades are refused.
    let stopping = Atomic<Bool>(false)
    private let connections = Atomic<Int>(0)
    private let state = Locked(State())

    /// The outbox's webhooks, for `/metrics` (nil in a cluster).
    let webhooks: Webhooks?

    init(options: Options, auth: Authenticator, metrics: Metrics, log: Log, registry: RoomRegistry, cluster: ClusterNode? = nil,
         webhooks: Webhooks? = nil) {
        self.options = options; self.auth = auth; self.metrics = metrics; self.log = log; self.registry = registry; self.cluster = cluster
        self.webhooks = webhooks
        api = RoomsAPI(registry: registry, auth: auth, log: log)
        fence = SiteFence(options: options, credentials: auth.isOn)
    }

    // MARK: Who may connect

    /// The upgrade's decision (``Admission/decide(grant:origin:host:room:context:roomRefusal:)``),
    /// counted and logged.
    func shouldAccept(_ request: UpgradeRequest) -> UpgradeDecision {
        let context = Admission.Context(allowOrigins: options.allowOrigins, stopping: stopping.load(ordering: .relaxed),
                                        connections: connections.load(ordering: .relaxed), maxClients: options.maxClients,
                                        maxRooms: registry.settings.maxRooms)
        let room = Admission.room(query: request.query)
        let client = forwarding(of: request, logging: true)
        let credentials = Admission.credentialQuery(request.query, offeredSubprotocols: request.offeredSubprotocols)
        guard let refusal = Admission.decide(grant: auth.grant(query: credentials, authorization: request.authorization),
                                             origin: request.origin, host: client.host, room: room, context: context,
                                             roomRefusal: { registry.admission(room) }) else { return .accept }
        if refusal.ofCredentials { metrics.authRefused(status: refusal.status) }
        if let why = refusal.why { log.warn("refused upgrade from \(client.client): \(why) (\(refusal.status))", LogFields(room: room, peer: client.client, code: String(refusal.status), kind: "auth")) }
        return .reject(status: refusal.status)
    }

    /// The client behind the request: from a `--trusted-proxy`, as its forwarding headers
    /// say (``ProxyForwarding``); from anyone else, the peer and its `Host`.
    private func forwarding(of request: UpgradeRequest, logging: Bool) -> ProxyForwarding {
        let f = ProxyForwarding.resolve(peer: request.peer, host: request.host, scheme: options.tls == nil ? "http" : "https", headers: request.forwarding,
                                   trusted: options.trustedProxies)
        if logging, let problem = f.problem { log.warn("upgrade from \(request.peer): \(problem)", LogFields(peer: request.peer, kind: "proxy")) }
        return f
    }

    // MARK: Connections

    func connected(_ id: ConnectionID, request: UpgradeRequest) {
        connections.add(1, ordering: .relaxed)
        metrics.clientsChanged(by: 1)
        let roomID = Admission.room(query: request.query)
        let limiter = RateLimiter(rate: options.rateLimit, byteRate: options.byteRateLimit)
        // Checked again: the token may have run out since the upgrade was decided.
        let checked = auth.grant(query: Admission.credentialQuery(request.query, offeredSubprotocols: request.offeredSubprotocols),
                                 authorization: request.authorization)
        let grant = (try? checked.get()) ?? nil
        let role = Admission.role(checked, in: roomID)
        let room: Room?
        if role == nil {
            room = nil
            metrics.tokenExpired()
            registry.close(id, code: .tokenExpired, reason: "token expired")
        } else {
            switch registry.acquire(roomID, creating: registry.settings.creation == .auto) {
            case let .success(r): room = r
            case let .failure(refusal):
                // Refused between the upgrade and now (deleted, or the last room slot taken).
                room = nil
                let (code, reason): (CloseCode, String) = switch refusal {
                case .full: (.tryAgainLater, "too many rooms")
                case .unknown, .deleting, .exists: (.roomGone, "no such room")
                }
                registry.close(id, code: code, reason: reason)
            }
        }
        let resume = request.query["resume"].flatMap { Int($0) }
        let name = grant?.name ?? request.query["name"]
        let join = Join(connection: id, request: .init(name: name, resume: resume, epoch: request.query["epoch"]),
                        peer: forwarding(of: request, logging: false).client, role: role ?? .control)
        state.withLock { s in
            s.connections[id] = Connection(room: room, role: role ?? .control, client: nil, limiter: limiter)
            if let room { s.pass[ObjectIdentifier(room), default: RoomInputs(room: room)].presence.join(join) }
        }
        if room != nil, let expires = grant?.expires { closeWhenExpired(id, at: expires) }
    }

    /// Closes connection `id` with 4001 `token expired` once its token runs out. The
    /// timer belongs to the connection: ``disconnected(_:code:reason:)`` cancels it.
    private func closeWhenExpired(_ id: ConnectionID, at expires: Double) {
        // At most a day at a time, so huge expiries cannot overflow the timer.
        let delay = min(max(expires - Date().timeIntervalSince1970, 0), 86_400)
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(wallDeadline: .now() + delay)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            guard Date().timeIntervalSince1970 >= expires else { return self.closeWhenExpired(id, at: expires) }
            let open = self.state.withLock { s -> Bool in
                guard s.connections[id] != nil else { return false }
                s.connections[id]!.expired = true
                s.connections[id]!.expiry = nil
                return true
            }
            guard open else { return }
            self.metrics.tokenExpired()
            self.log.info("connection #\(id.rawValue): its token expired, closing with 4001", LogFields(connection: Int(id.rawValue), code: "4001"))
            self.registry.close(id, code: .tokenExpired, reason: "token expired")
        }
        let kept = state.withLock { s -> Bool in
            guard s.connections[id] != nil else { return false }
            s.connections[id]!.expiry = timer
            return true
        }
        if kept { timer.resume() }
    }

    func received(_ id: ConnectionID, message: [UInt8]) {
        /// What becomes of the frame: dropped (the connection is gone), held (it came early),
        /// or read now.
        enum Arrival { case gone, kept, read(Room, ClientID, Role, allowed: Bool) }
        let arrival = state.withLock { s -> Arrival in
            guard var c = s.connections[id], let room = c.room, !c.expired else { return .gone }
            guard let client = c.client, c.early.isEmpty else {
                // Not welcomed yet, or its early frames are still to be read: after them.
                // What is kept counts in the server's bounds on bytes until the welcome.
                defer { s.connections[id] = c }
                guard c.early.count < Self.maxEarlyFrames else {
                    c.refusedEarly += 1
                    return .gone
                }
                c.early.append(message)
                return .kept
            }
            let allowed = c.limiter.allow(bytes: message.count)
            s.connections[id] = c
            return .read(room, client, c.role, allowed: allowed)
        }
        if case .kept = arrival { registry.server?.holdEarly(id, bytes: message.count) }
        guard case let .read(room, client, role, allowed) = arrival else { return }
        let input = read(message, from: id, in: room, client: client, role: role, allowed: allowed)
        state.withLock { $0.add(input, for: room) }
    }

    /// One frame of a welcomed connection as input: refused or a command
    /// (``FrameReader/read(_:role:allowed:stopping:limits:)``).
    /// A `sync` is charged what its snapshot weighs to the connection's byte budget
    /// (`--rate-limit-bytes`): asking costs a few bytes, the answer the whole room.
    private func read(_ message: [UInt8], from id: ConnectionID, in room: Room, client: ClientID, role: Role, allowed: Bool) -> Room.Input {
        let limits = FrameReader.Limits(commandsPerSecond: options.rateLimit, bytesPerSecond: options.byteRateLimit)
        switch FrameReader.read(message, role: role, allowed: allowed, stopping: stopping.load(ordering: .relaxed), limits: limits) {
        case let .command(envelope):
            metrics.command(envelope.command.type)
            if let ref = envelope.ref {
                let now = ContinuousClock.now
                state.withLock { s in
                    if let n = s.connections[id]?.timed.count, n < Self.maxTimedCommands { s.connections[id]?.timed[ref] = now }
                }
            }
            if case .sync = envelope.command {
                let weight = room.stateBytes.value - message.count
                if weight > 0 { state.withLock { $0.connections[id]?.limiter.charge(bytes: weight) } }
            }
            return .command(id, client, envelope)
        case let .refused(frame, parsed):
            if let parsed { metrics.command(parsed) }
            return .refused(id, client, frame)
        case let .refresh(ref, token):
            return refresh(id, client: client, room: room.id, role: role, ref: ref, token: token)
        }
    }

    /// The answer to command `ref` of connection `id` is on its way: how long it took, into
    /// `tabd_command_seconds` (the command's arrival to its ack or error, its commit included).
    func answered(_ id: ConnectionID, ref: String) {
        guard let start = state.withLock({ $0.connections[id]?.timed.removeValue(forKey: ref) }) else { return }
        metrics.commandTimes.observe(since: start)
    }

    /// A `refresh`: the connection takes `token` if it is valid and gives the connection's
    /// role in its room; it then lives as long as that token (the old one's end no longer
    /// closes it). Refused `unauthorized` (the token is not accepted) or `forbidden` (another
    /// role or room); the connection keeps its token either way.
    private func refresh(_ id: ConnectionID, client: ClientID, room: RoomID, role: Role, ref: String?, token: String) -> Room.Input {
        guard auth.isOn else { return .refreshed(id, client, ref: ref) } // no credentials: nothing runs out
        let grant: Grant
        switch auth.authenticate(token, now: Date().timeIntervalSince1970) {
        case let .failure(error):
            metrics.tokenRefreshed(accepted: false)
            return .refused(id, client, .error(ref: ref, CommandError(.unauthorized, "\(error)")))
        case let .success(g): grant = g
        }
        guard let given = grant.role(in: room), given == role else {
            metrics.tokenRefreshed(accepted: false)
            let why = grant.role(in: room).map { "it gives the role \($0.rawValue), and this connection has \(role.rawValue)" } ?? "it is not for room '\(room)'"
            return .refused(id, client, .error(ref: ref, .forbidden("a refreshed token must give the connection's role in its room: \(why)")))
        }
        let kept = state.withLock { s -> Bool in
            guard s.connections[id] != nil, !s.connections[id]!.expired else { return false }
            s.connections[id]!.expiry?.cancel()
            s.connections[id]!.expiry = nil
            return true
        }
        guard kept else { return .refreshed(id, client, ref: ref) } // closing anyway: the answer will not go out
        metrics.tokenRefreshed(accepted: true)
        if let expires = grant.expires { closeWhenExpired(id, at: expires) }
        return .refreshed(id, client, ref: ref)
    }

    /// From a room: what was sent to the connection in answer to a frame already let through
    /// (a `clients` page) is charged to its byte budget (`--rate-limit-bytes`): its next
    /// frames wait until that is paid back.
    func charge(_ id: ConnectionID, bytes: Int) {
        state.withLock { $0.connections[id]?.limiter.charge(bytes: bytes) }
    }

    /// From a room: the connection is welcomed as `client`; its frames are read from now
    /// on, those that came before first (at the end of the service thread's pass that the
    /// welcome wakes).
    func beginSession(_ id: ConnectionID, client: ClientID) {
        state.withLock { s in
            guard s.connections[id] != nil else { return } // gone meanwhile
            s.connections[id]!.client = client
            if !s.connections[id]!.early.isEmpty || s.connections[id]!.refusedEarly > 0 { s.welcomed.append(id) }
        }
    }

    func disconnected(_ id: ConnectionID, code: CloseCode?, reason: String) {
        connections.subtract(1, ordering: .relaxed)
        metrics.clientsChanged(by: -1)
        if code == .policyViolation, reason == "too slow" { metrics.slowClientClosed() }
        let how = "code \(code.map { String($0.rawValue) } ?? "none")\(reason.isEmpty ? "" : " (\(reason))")"
        let neverJoined = state.withLock { s -> Room? in
            let gone = s.connections.removeValue(forKey: id)
            gone?.expiry?.cancel()
            guard let room = gone?.room else { return nil }
            // Gone before its join was handed over: it never joins, so it does not leave either.
            return s.pass[ObjectIdentifier(room), default: RoomInputs(room: room)].presence.leave(Leave(connection: id, how: how, code: code.map { String($0.rawValue) })) ? nil : room
        }
        if let room = neverJoined {
            log.info("connection #\(id.rawValue) closed before its welcome, \(how)", LogFields(connection: Int(id.rawValue), code: code.map { String($0.rawValue) }))
            if registry.release(room, 1) { room.armIdleTimer(after: .seconds(registry.settings.idleSeconds)) }
        }
    }

    /// The end of a pass: reads the early frames of connections welcomed since, then hands
    /// every room what the pass brought it, its joins and leaves last.
    func serviceCycleEnded() {
        let early = state.withLock { s -> [(ConnectionID, Room, ClientID, Role, [[UInt8]], Int)] in
            guard !s.welcomed.isEmpty else { return [] }
            defer { s.welcomed = [] }
            return s.welcomed.compactMap { id in
                guard var c = s.connections[id], let room = c.room, let client = c.client, !c.expired else { return nil }
                defer { c.early = []; c.refusedEarly = 0; s.connections[id] = c }
                return (id, room, client, c.role, c.early, c.refusedEarly)
            }
        }
        for (id, room, client, role, frames, refused) in early {
            var inputs: [Room.Input] = []
            for frame in frames {
                let allowed = state.withLock { $0.connections[id]?.limiter.allow(bytes: frame.count) ?? false }
                inputs.append(read(frame, from: id, in: room, client: client, role: role, allowed: allowed))
            }
            let tooMany = CommandError(.rateLimited, "more than \(Self.maxEarlyFrames) frames before the welcome")
            inputs += Array(repeating: .refused(id, client, .error(ref: nil, tooMany)), count: refused)
            state.withLock { s in for input in inputs { s.add(input, for: room) } }
        }
        let pass = state.withLock { s -> [RoomInputs] in
            guard !s.pass.isEmpty else { return [] }
            defer { s.pass.removeAll(keepingCapacity: true) }
            return Array(s.pass.values)
        }
        for var p in pass {
            if !p.presence.isEmpty { p.inputs.append(.presence(joins: p.presence.joins, leaves: p.presence.leaves)) }
            p.room.submit(p.inputs)
        }
    }

    // MARK: HTTP

    func httpRequest(_ request: HTTPRequest, responder: HTTPResponder) {
        switch request.path {
        case "/healthz":
            if stopping.load(ordering: .relaxed) {
                responder.respond(HTTPResponse(status: 503, contentType: "text/plain", body: Array("stopping\n".utf8)))
            } else if let cluster, !cluster.connected {
                responder.respond(HTTPResponse(status: 503, text: "engine unreachable (node \(cluster.name))\n"))
            } else if let cluster {
                responder.respond(HTTPResponse(status: 200, contentType: "text/plain", body: Array("ok node \(cluster.name)".utf8)))
            } else {
                responder.respond(HTTPResponse(status: 200, contentType: "text/plain", body: Array("ok".utf8)))
            }
        case "/livez":
            // The process answers: nothing else is asked (a restart would not help anything else).
            responder.respond(HTTPResponse(status: 200, contentType: "text/plain", body: Array("ok\n".utf8)))
        case "/readyz":
            // Ready to serve: listening (or nobody would ask), the state loaded (before tabd
            // listens), not stopping, and on a cluster the engine reachable.
            var waiting: [String] = []
            if stopping.load(ordering: .relaxed) { waiting.append("stopping") }
            if let cluster, !cluster.connected { waiting.append("engine unreachable (node \(cluster.name))") }
            responder.respond(waiting.isEmpty
                ? HTTPResponse(status: 200, contentType: "text/plain", body: Array("ready\n".utf8))
                : HTTPResponse(status: 503, text: "not ready: \(waiting.joined(separator: "; "))\n"))
        case "/metrics":
            switch auth.grant(query: request.query, authorization: request.authorization) {
            case let .failure(error):
                metrics.authRefused(status: 401)
                return responder.respond(HTTPResponse(status: 401, text: "\(error)\n", headers: [("www-authenticate", Authenticator.challenge(error))]))
            case let .success(grant?) where grant.role != .admin || grant.scope == nil:
                metrics.authRefused(status: 403)
                return responder.respond(HTTPResponse(status: 403, text: "/metrics needs an admin token\n"))
            case .success: break
            }
            let text = metrics.render(rooms: registry.counts, incompleteRequests: registry.server?.incompleteRequests ?? 0,
                                      queuedBytes: registry.server?.queuedBytes ?? 0,
                                      queuedAnswerBytes: registry.server?.queuedAnswerBytes ?? 0,
                                      droppedAnswers: registry.server?.droppedAnswers ?? 0)
                + (cluster?.metricsText ?? "") + (webhooks?.metricsText ?? "")
                + (registry.store?.commitTimes.text ?? "")
                + ProcessMetrics.text(certificateNotAfter: registry.server?.certificate?.notAfter)
            responder.respond(HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4", body: Array(text.utf8)))
        default:
            if request.path.hasPrefix(RoomsAPI.prefix) {
                if stopping.load(ordering: .relaxed) {
                    return responder.respond(RoomsAPI.error(503, "unavailable", "tabd is shutting down"))
                }
                return api.handle(request, responder: responder)
            }
            responder.respond(HTTPResponse(status: 404, text: "404 Not Found\n"))
        }
    }
}
