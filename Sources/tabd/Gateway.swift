import Locking
import Coordinator
import Synchronization
import WebSockets

/// The libwebsockets side of tabd: decides who may connect, answers `/healthz` and
/// `/metrics`, and turns connections and messages into ``Dispatcher`` input.
///
/// Called on the server's service thread, so it never waits: it checks, counts, parses
/// and queues. Each frame is rate-limited (frames and bytes) and parsed here, as it
/// arrives: parsing is linear in the input, and libwebsockets reads the connections in
/// turn, so one connection's costly frames delay another's by at most a few parses,
/// and the core only ever sees parsed commands. Joins and leaves are gathered in a
/// pending list and handed over as one `presence` item, so connections that arrive
/// together share one `clientJoined` batch.
final class Gateway: WebSocketServerHandler {
    enum Input: Sendable {
        /// Take the pending joins and leaves (see ``takePresence()``).
        case presence
        /// A parsed command of a welcomed connection.
        case command(ConnectionID, ClientID, CommandEnvelope)
        /// A frame refused before it became a command, and the error frame to answer.
        case refused(ConnectionID, ClientID, ServerFrame)
    }

    /// A welcomed connection.
    private struct Session {
        let client: ClientID
        var limiter: RateLimiter
    }

    struct Leave: Sendable {
        let connection: ConnectionID
        /// How it ended: the close code and reason, for the log.
        let how: String
    }

    struct Join: Sendable {
        let connection: ConnectionID
        let request: Coordinator.JoinRequest
        let peer: String
    }

    private struct Pending {
        var joins: [Join] = []
        var leaves: [Leave] = []
        var scheduled = false
    }

    let options: Options
    let metrics: Metrics
    let log: Log
    let inbox: AsyncStream<[Input]>.Continuation
    /// Set when the daemon stops: `/healthz` answers 503 and upgrades are refused.
    let stopping = Atomic<Bool>(false)
    private let connections = Atomic<Int>(0)
    private let pending = Locked(Pending())
    private let sessions = Locked<[ConnectionID: Session]>([:])
    /// What this pass of the service thread produced, handed over at its end.
    private let gathered = Locked<[Input]>([])

    init(options: Options, metrics: Metrics, log: Log, inbox: AsyncStream<[Input]>.Continuation) {
        self.options = options; self.metrics = metrics; self.log = log; self.inbox = inbox
    }

    // MARK: Who may connect

    func shouldAccept(_ request: UpgradeRequest) -> UpgradeDecision {
        if !authorized(query: request.query, authorization: request.authorization) {
            log.warn("refused upgrade from \(request.peer): missing or wrong token (401)")
            return .reject(status: 401)
        }
        if let origin = request.origin, !originAllowed(origin, host: request.host) {
            log.warn("refused upgrade from \(request.peer): origin '\(origin)' does not match host '\(request.host ?? "")' (403)")
            return .reject(status: 403)
        }
        if stopping.load(ordering: .relaxed) { return .reject(status: 503) }
        if connections.load(ordering: .relaxed) >= options.maxClients {
            log.warn("refused upgrade from \(request.peer): --max-clients \(options.maxClients) reached (503)")
            return .reject(status: 503)
        }
        return .accept
    }

    func authorized(query: [String: String], authorization: String?) -> Bool {
        guard let token = options.token else { return true }
        return query["token"] == token || authorization == "Bearer \(token)"
    }

    /// A browser is accepted from the address it asked for, or from an `--allow-origin`.
    func originAllowed(_ origin: String, host: String?) -> Bool {
        if options.allowOrigins.contains(origin) { return true }
        guard let host, !host.isEmpty else { return false }
        return origin == "http://\(host)" || origin == "https://\(host)"
    }

    // MARK: Connections

    func connected(_ id: ConnectionID, request: UpgradeRequest) {
        connections.add(1, ordering: .relaxed)
        metrics.clientsChanged(by: 1)
        let resume = request.query["resume"].flatMap { Int($0) }
        let join = Join(connection: id, request: .init(name: request.query["name"], resume: resume, epoch: request.query["epoch"]),
                        peer: request.peer)
        schedule { $0.joins.append(join) }
    }

    func serviceCycleEnded() {
        let inputs = gathered.withLock { g -> [Input] in
            defer { g.removeAll(keepingCapacity: true) }
            return g
        }
        if !inputs.isEmpty { inbox.yield(inputs) }
    }

    private func hand(_ input: Input) { gathered.withLock { $0.append(input) } }

    func received(_ id: ConnectionID, message: [UInt8]) {
        let admitted = sessions.withLock { s -> (client: ClientID, allowed: Bool)? in
            guard s[id] != nil else { return nil }
            return (s[id]!.client, s[id]!.limiter.allow(bytes: message.count))
        }
        guard let (client, allowed) = admitted else { return } // not welcomed yet (cannot send before), or gone
        guard allowed else {
            let error = CommandError(.rateLimited, "more than \(options.rateLimit) commands or \(options.byteRateLimit) bytes per second")
            hand(.refused(id, client, .error(ref: nil, error)))
            return
        }
        let envelope: CommandEnvelope
        do { envelope = try CommandEnvelope.parse(message) } catch {
            hand(.refused(id, client, .error(ref: error.ref, error.error)))
            return
        }
        metrics.command(envelope.command.type)
        if stopping.load(ordering: .relaxed) {
            hand(.refused(id, client, .error(ref: envelope.ref, .unavailable("tabd is shutting down"))))
            return
        }
        hand(.command(id, client, envelope))
    }

    /// A joined connection's frames are read from now on, as `client`'s.
    func beginSession(_ id: ConnectionID, client: ClientID) {
        let limiter = RateLimiter(rate: options.rateLimit, byteRate: options.byteRateLimit)
        sessions.withLock { $0[id] = Session(client: client, limiter: limiter) }
    }

    /// Forgets a connection's session; returns its client, if it had joined.
    func endSession(_ id: ConnectionID) -> ClientID? {
        sessions.withLock { $0.removeValue(forKey: id)?.client }
    }

    func disconnected(_ id: ConnectionID, code: CloseCode?, reason: String) {
        connections.subtract(1, ordering: .relaxed)
        metrics.clientsChanged(by: -1)
        if code == .policyViolation, reason == "too slow" { metrics.slowClientClosed() }
        let how = "code \(code.map { String($0.rawValue) } ?? "none")\(reason.isEmpty ? "" : " (\(reason))")"
        var neverJoined = false
        schedule { p in
            // Gone before it was welcomed: it never joined, so it does not leave either.
            if let i = p.joins.firstIndex(where: { $0.connection == id }) {
                p.joins.remove(at: i)
                neverJoined = true
            } else {
                p.leaves.append(Leave(connection: id, how: how))
            }
        }
        if neverJoined { log.info("connection #\(id.rawValue) closed before its welcome, \(how)") }
    }

    private func schedule(_ change: (inout Pending) -> Void) {
        let wake = pending.withLock { p in
            change(&p)
            defer { p.scheduled = true }
            return !p.scheduled
        }
        if wake { hand(.presence) }
    }

    /// Everything that connected or disconnected since the last call.
    func takePresence() -> (joins: [Join], leaves: [Leave]) {
        pending.withLock { p in
            defer { p = Pending() }
            return (p.joins, p.leaves)
        }
    }

    // MARK: HTTP

    func httpRequest(_ request: HTTPRequest) -> HTTPResponse? {
        switch request.path {
        case "/healthz":
            return stopping.load(ordering: .relaxed)
                ? HTTPResponse(status: 503, contentType: "text/plain", body: Array("stopping\n".utf8))
                : HTTPResponse(status: 200, contentType: "text/plain", body: Array("ok".utf8))
        case "/metrics":
            guard authorized(query: request.query, authorization: request.authorization) else {
                return HTTPResponse(status: 401, contentType: "text/plain", body: Array("token required\n".utf8))
            }
            return HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4", body: Array(metrics.render().utf8))
        default:
            return nil
        }
    }
}
