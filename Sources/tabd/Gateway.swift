import Locking
import Coordinator
import Synchronization
import WebSockets

/// The libwebsockets side of tabd: decides who may connect, answers `/healthz` and
/// `/metrics`, and turns connections and messages into ``Dispatcher`` input.
///
/// Called on the server's service thread, so it never waits: it checks, counts, parses
/// and gathers. Each frame is rate-limited (frames and bytes) and parsed here, as it
/// arrives: parsing is linear in the input, and libwebsockets reads the connections in
/// turn, so one connection's costly frames delay another's by at most a few parses, and
/// the core only ever sees parsed commands. What one pass of the service thread gathers
/// is handed over at its end, in order: the commands and refusals, then one `presence`
/// with the pass's joins and leaves (so connections that arrive together share one
/// `clientJoined` batch, and a leave comes after the leaving connection's last command).
///
/// A connection's frames that arrive before its welcome are kept (up to
/// ``maxEarlyFrames``) and read once it is welcomed, before any later frame of it.
final class Gateway: WebSocketServerHandler {
    enum Input: Sendable {
        /// Joins and leaves, in this order of application: leaves, then joins.
        case presence(joins: [Join], leaves: [Leave])
        /// A parsed command of a welcomed connection.
        case command(ConnectionID, ClientID, CommandEnvelope)
        /// A frame refused before it became a command, and the error frame to answer.
        case refused(ConnectionID, ClientID, ServerFrame)
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

    /// Frames kept for a connection before its welcome; more are answered `rate_limited`.
    static let maxEarlyFrames = 64

    /// An open WebSocket connection.
    private struct Connection {
        /// Nil until the connection is welcomed.
        var client: ClientID?
        var limiter: RateLimiter
        /// Frames not read yet because they came before the welcome, in order.
        var early: [[UInt8]] = []
        /// Frames beyond ``maxEarlyFrames`` before the welcome.
        var refusedEarly = 0
    }

    /// What the service thread and the dispatcher share.
    private struct State {
        var connections: [ConnectionID: Connection] = [:]
        /// Welcomed connections whose early frames are to be read at the end of this pass.
        var welcomed: [ConnectionID] = []
        /// What this pass produced so far.
        var inputs: [Input] = []
        var joins: [Join] = []
        var leaves: [Leave] = []
    }

    let options: Options
    let metrics: Metrics
    let log: Log
    let inbox: Inbox<Input>
    /// Set when the daemon stops: `/healthz` answers 503 and upgrades are refused.
    let stopping = Atomic<Bool>(false)
    private let connections = Atomic<Int>(0)
    private let state = Locked(State())

    init(options: Options, metrics: Metrics, log: Log, inbox: Inbox<Input>) {
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
        let limiter = RateLimiter(rate: options.rateLimit, byteRate: options.byteRateLimit)
        state.withLock { s in
            s.connections[id] = Connection(client: nil, limiter: limiter)
            s.joins.append(join)
        }
    }

    func received(_ id: ConnectionID, message: [UInt8]) {
        enum Admission { case gone, kept, read(ClientID, allowed: Bool) }
        let admission = state.withLock { s -> Admission in
            guard var c = s.connections[id] else { return .gone }
            guard let client = c.client, c.early.isEmpty else {
                // Not welcomed yet, or its early frames are still to be read: after them.
                if c.early.count < Self.maxEarlyFrames { c.early.append(message) } else { c.refusedEarly += 1 }
                s.connections[id] = c
                return .kept
            }
            let allowed = c.limiter.allow(bytes: message.count)
            s.connections[id] = c
            return .read(client, allowed: allowed)
        }
        guard case let .read(client, allowed) = admission else { return }
        let input = read(message, from: id, client: client, allowed: allowed)
        state.withLock { $0.inputs.append(input) }
    }

    /// One frame of a welcomed connection as input: refused (rate, parse, stopping) or a command.
    private func read(_ message: [UInt8], from id: ConnectionID, client: ClientID, allowed: Bool) -> Input {
        guard allowed else {
            let error = CommandError(.rateLimited, "more than \(options.rateLimit) commands or \(options.byteRateLimit) bytes per second")
            return .refused(id, client, .error(ref: nil, error))
        }
        let envelope: CommandEnvelope
        do { envelope = try CommandEnvelope.parse(message) } catch {
            return .refused(id, client, .error(ref: error.ref, error.error))
        }
        metrics.command(envelope.command.type)
        if stopping.load(ordering: .relaxed) {
            return .refused(id, client, .error(ref: envelope.ref, .unavailable("tabd is shutting down")))
        }
        return .command(id, client, envelope)
    }

    /// From the dispatcher: the connection is welcomed as `client`; its frames are read from
    /// now on, those that came before first (at the end of the service thread's pass that
    /// the welcome wakes).
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
        let neverJoined = state.withLock { s -> Bool in
            s.connections[id] = nil
            // Gone before its join was handed over: it never joins, so it does not leave either.
            if let i = s.joins.firstIndex(where: { $0.connection == id }) {
                s.joins.remove(at: i)
                return true
            }
            s.leaves.append(Leave(connection: id, how: how))
            return false
        }
        if neverJoined { log.info("connection #\(id.rawValue) closed before its welcome, \(how)") }
    }

    /// The end of a pass: reads the early frames of connections welcomed since, then hands
    /// everything over, the pass's joins and leaves last.
    func serviceCycleEnded() {
        let early = state.withLock { s -> [(ConnectionID, ClientID, [[UInt8]], Int)] in
            guard !s.welcomed.isEmpty else { return [] }
            defer { s.welcomed = [] }
            return s.welcomed.compactMap { id in
                guard var c = s.connections[id], let client = c.client else { return nil }
                defer { c.early = []; c.refusedEarly = 0; s.connections[id] = c }
                return (id, client, c.early, c.refusedEarly)
            }
        }
        for (id, client, frames, refused) in early {
            var inputs: [Input] = []
            for frame in frames {
                let allowed = state.withLock { $0.connections[id]?.limiter.allow(bytes: frame.count) ?? false }
                inputs.append(read(frame, from: id, client: client, allowed: allowed))
            }
            let tooMany = CommandError(.rateLimited, "more than \(Self.maxEarlyFrames) frames before the welcome")
            inputs += Array(repeating: .refused(id, client, .error(ref: nil, tooMany)), count: refused)
            state.withLock { $0.inputs += inputs }
        }
        let inputs = state.withLock { s -> [Input] in
            var all = s.inputs
            if !s.joins.isEmpty || !s.leaves.isEmpty { all.append(.presence(joins: s.joins, leaves: s.leaves)) }
            s.inputs.removeAll(keepingCapacity: true)
            s.joins = []
            s.leaves = []
            return all
        }
        inbox.put(inputs)
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
