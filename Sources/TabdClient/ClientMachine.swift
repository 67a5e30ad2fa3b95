/// Every decision of a ``TabdClient`` as a value: what a frame means (welcome, a batch to
/// fold or a gap to resync, the answer of which command), when to reconnect and whether to
/// resume, what a drop fails, and what closing does. It takes inputs (a command, a frame,
/// a drop, a timer) and returns ``Action``s; the actor around it performs them (the
/// transport, timers, continuations, subscribers) and decides nothing.
///
/// Commands are named by ``RequestID``s the actor hands in; the machine holds no
/// continuation. Connections are named by generation: input from an older one is ignored.
package struct ClientMachine: Sendable {
    package typealias RequestID = Int

    /// What a command was answered with.
    package enum Reply: Sendable, Equatable {
        case ack(Int)
        case snapshot(Snapshot)
        case pong
        /// A page of the room's connected clients (in a cluster, of `node`'s).
        case clients(ClientPage, node: String?)
    }

    package enum Action: Sendable, Equatable {
        /// Open a connection to `url` with this `Authorization` header; its events come
        /// back tagged with `generation`.
        case open(url: String, authorization: String?, generation: Int)
        /// After `after`, tell ``welcomeTimedOut(generation:)`` (if no welcome came).
        case scheduleWelcomeTimeout(generation: Int, after: Duration)
        /// Send a frame on the current connection.
        case send([UInt8])
        /// Close the current connection with this code.
        case closeConnection(code: UInt16)
        /// After `after`, call ``reconnectDue(generation:)``.
        case scheduleReconnect(generation: Int, after: Duration)
        /// After `after`, call ``resyncDue(generation:)`` (tabd refused the client's own `sync`).
        case scheduleResync(generation: Int, after: Duration)
        /// After 2 s, call ``closeTimedOut()`` (tabd did not answer the close).
        case scheduleCloseTimeout
        /// The command's outcome.
        case reply(RequestID, Result<Reply, TabdClientError>)
        /// The command's task was cancelled: it throws `CancellationError` (and, if it was
        /// not sent yet, never will be).
        case withdrawn(RequestID)
        /// Ask the app's token provider for a token (`reason`: a connection, or a refresh of
        /// the open one); its answer goes to ``tokenReady(generation:token:)`` or
        /// ``tokenFailed(generation:reason:jitter:)``.
        case fetchToken(generation: Int, reason: TokenReason)
        /// After `after`, call ``refreshDue(generation:)``.
        case scheduleRefresh(generation: Int, after: Duration)
        /// Tell every subscriber.
        case publish(TabdClient.Update)
        /// The first connection's outcome, awaited by `connect`: welcomed (nil), or why not.
        case firstWelcome(TabdClientError?)
        /// Closed for good: end the subscriptions, release whoever waits for the close and
        /// the transport.
        case finished(TabdClientError)
    }

    /// Why the token provider is asked.
    package enum TokenReason: String, Sendable, Equatable {
        case connect, refresh
    }

    package struct Settings: Sendable {
        package var reconnects = true
        /// The app gives tokens: every connection asks for one, and the open connection's is
        /// refreshed before it runs out.
        package var tokenProvider = false
        package var initialBackoff: Duration = .milliseconds(100)
        package var maxBackoff: Duration = .seconds(5)
        package var connectTimeout: Duration = .seconds(10)
        /// How long after tabd refused the client's own `sync` (`rate_limited`) it asks again.
        package var resyncRetry: Duration = .milliseconds(500)

        package init(reconnects: Bool = true, initialBackoff: Duration = .milliseconds(100), maxBackoff: Duration = .seconds(5),
                     connectTimeout: Duration = .seconds(10), resyncRetry: Duration = .milliseconds(500)) {
            self.reconnects = reconnects; self.initialBackoff = initialBackoff; self.maxBackoff = maxBackoff
            self.connectTimeout = connectTimeout; self.resyncRetry = resyncRetry
        }
    }

    private struct Link: Sendable {
        let generation: Int
        var welcomed = false
        /// A batch did not fold: the state waits for a snapshot of the client's own `sync`.
        /// Until it comes, batches are skipped and answers held.
        var resync: Resync?
    }

    private enum Resync: Sendable {
        /// The `sync` is out.
        case asked
        /// tabd refused it (`rate_limited`): asked again at ``resyncDue(generation:)``.
        case refused
    }

    /// What a frame the client sent on its own is for.
    private enum Own: Sendable, Equatable {
        /// A `sync` after a batch that did not fold.
        case resync
        /// The `ping` after a resumed welcome: every batch before its pong is a replay.
        case catchUp
        /// A `refresh` handing tabd this token.
        case refresh(String)
        /// A command of the program's that it stopped waiting for: its answer goes nowhere.
        case abandoned
    }

    private struct Pending: Sendable {
        let ref: String
        let frame: [UInt8]
        /// Nil for a frame of the client's own (`own` says which).
        let request: RequestID?
        var own: Own? = nil
    }

    package static let closedByClient = TabdClientError.closed(code: 1000, reason: "closed by this client")
    private static let frameTypes: Set<String> = ["welcome", "events", "ack", "error", "snapshot", "pong", "clients"]

    private(set) var endpoint: Endpoint
    let settings: Settings
    /// When the connection's token came (for its life: the refresh is due a while before
    /// it runs out).
    private var tokenSince: Double = 0
    /// A token asked of the provider and not given yet.
    private var fetching: (generation: Int, reason: TokenReason)?
    /// The room's state as of the last event folded.
    package private(set) var state: Snapshot
    /// Who this client is, from the last welcome.
    package private(set) var session: TabdClient.Session
    package private(set) var connection: TabdClient.ConnectionState = .reconnecting(attempt: 0)
    private var link: Link?
    private var generation = 0
    /// Commands sent on the current connection, awaiting their answers, oldest first
    /// (tabd answers each connection's commands in the order it sent them).
    private var inFlight: [Pending] = []
    /// Commands issued while there was no welcomed connection.
    private var waiting: [Pending] = []
    /// Answers that came and are not handed out yet, in the order they came. Each goes out
    /// once every answer before it has, no resync is due, and (an ack) `state` holds its
    /// seq: a command never returns before `state` holds its events, across a resync, a
    /// drop and a resume, and commands return in the order they were sent.
    private var held: [(request: RequestID?, result: Result<Reply, TabdClientError>)] = []
    /// tabd broke the protocol: the next connection starts from a snapshot (no resume).
    private var untrusted = false
    private var nextRef = 0
    private var attempt = 0
    /// `connect` waits for the first welcome.
    private var awaitingFirstWelcome = false
    /// Set by a close: a drop now ends the client instead of reconnecting.
    package private(set) var closing = false

    init(endpoint: Endpoint, settings: Settings) {
        self.endpoint = endpoint
        self.settings = settings
        state = Snapshot(seq: 0, selected: "", scrollToTop: 0, tabs: [], clients: [])
        session = TabdClient.Session(client: "", room: endpoint.room ?? "main", role: "", epoch: "", server: "")
    }

    package var isClosed: Bool {
        if case .closed = connection { return true }
        return false
    }

    /// Whether the connection was resumed and the missed batches are still coming: the
    /// catch-up ping is not answered yet.
    package var isCatchingUp: Bool { inFlight.contains { $0.own == .catchUp } }

    /// Whether there is a connection (welcomed or not) a close must wait for.
    package var hasConnection: Bool { link != nil }

    // MARK: Inputs

    /// The first connection; `connect` waits for ``Action/firstWelcome(_:)``.
    package mutating func start(now: Double = 0) -> [Action] {
        awaitingFirstWelcome = true
        tokenSince = now
        return open(resume: nil)
    }

    /// A command of the program's, to be answered as `request`.
    package mutating func request(_ command: Command, id request: RequestID) -> [Action] {
        if case let .closed(error) = connection { return [.reply(request, .failure(error))] }
        nextRef += 1
        let ref = "\(nextRef)"
        let pending = Pending(ref: ref, frame: CommandEnvelope(ref: ref, command: command).json.compactBytes, request: request)
        if link?.welcomed == true { return transmit(pending) }
        waiting.append(pending)
        return []
    }

    /// A message of connection `generation`. `jitter` (0.5…1) shortens the delay of the
    /// reconnect that follows if the message breaks the protocol.
    /// `now` (seconds since 1970) times the refresh of the connection's token.
    package mutating func received(_ bytes: [UInt8], generation g: Int, jitter: Double = 1, now: Double = 0) -> [Action] {
        guard let link, link.generation == g else { return [] }
        let frame: ServerFrame
        do {
            let json = try JSONParser.parse(bytes)
            guard let type = json["type"]?.stringValue else { return violation("a frame without a type", jitter: jitter) }
            // A frame type this client does not know (a newer tabd) is not its business.
            guard Self.frameTypes.contains(type) else { return [] }
            frame = try ServerFrame(json: json)
        } catch {
            return violation("unreadable frame: \(error)", jitter: jitter)
        }
        switch frame {
        case let .welcome(welcome, server): return welcomed(welcome, server: server, jitter: jitter) + scheduleRefresh(now: now)
        case let .events(batch): return fold(batch, jitter: jitter)
        case let .ack(ref, seq): return answer(ref, .success(.ack(seq)), jitter: jitter, now: now)
        case let .error(ref, error): return answer(ref, .failure(.refused(error)), jitter: jitter, now: now)
        case let .snapshot(ref, snapshot): return answer(ref, .success(.snapshot(snapshot)), jitter: jitter, now: now)
        case let .pong(ref): return answer(ref, .success(.pong), jitter: jitter, now: now)
        case let .clients(ref, node, page): return answer(ref, .success(.clients(page, node: node)), jitter: jitter, now: now)
        }
    }

    /// Connection `generation` is gone. `jitter` (0.5…1) shortens the reconnect's delay.
    package mutating func closed(_ close: TransportClose, generation g: Int, jitter: Double) -> [Action] {
        guard let link, link.generation == g else { return [] }
        return lost(close, timedOut: false, jitter: jitter)
    }

    /// The welcome of connection `generation` is overdue: it counts as a failed
    /// connection (dropped, then reconnected; on the first, `connect` throws).
    package mutating func welcomeTimedOut(generation g: Int, jitter: Double) -> [Action] {
        guard let link, link.generation == g, !link.welcomed else { return [] }
        return [.closeConnection(code: 1000)]
            + lost(TransportClose(code: nil, reason: "no welcome within \(settings.connectTimeout)", wasOpen: false), timedOut: true, jitter: jitter)
    }

    /// The provider gave `token` for the ``Action/fetchToken(generation:reason:)`` of
    /// `generation` (at `now`, seconds since 1970). Nil: it has none to give any more; the
    /// client closes as if its token had run out.
    package mutating func tokenReady(generation g: Int, token: String?, now: Double) -> [Action] {
        guard let asked = fetching, asked.generation == g, !isClosed else { return [] }
        fetching = nil
        guard let token, !token.isEmpty else {
            let error = TabdClientError.closed(code: nil, reason: "the token provider has no token to give")
            if awaitingFirstWelcome {
                awaitingFirstWelcome = false
                return finish(error) + [.firstWelcome(error)]
            }
            return finish(error)
        }
        switch asked.reason {
        case .refresh:
            guard let link, link.generation == g, link.welcomed, !closing else { return [] }
            nextRef += 1
            let frame = JSONValue.object([("type", .string("refresh")), ("ref", .string("\(nextRef)")), ("token", .string(token))])
            return transmit(Pending(ref: "\(nextRef)", frame: frame.compactBytes, request: nil, own: .refresh(token)))
        case .connect:
            endpoint.token = token
            tokenSince = now
            return connect(resume: pendingResume)
        }
    }

    /// The provider failed for the ``Action/fetchToken(generation:reason:)`` of
    /// `generation`: a refresh drops the connection (the next one goes with a fresh token and
    /// resumes); a connection counts as a failed attempt, tried again after the backoff.
    package mutating func tokenFailed(generation g: Int, reason: String, jitter: Double) -> [Action] {
        guard let asked = fetching, asked.generation == g, !isClosed else { return [] }
        fetching = nil
        let close = TransportClose(code: nil, reason: "the token provider failed: \(reason)", wasOpen: false)
        switch asked.reason {
        case .refresh:
            guard let link, link.generation == g else { return [] }
            return [.closeConnection(code: 4000)] + lost(TransportClose(code: 4000, reason: close.reason, wasOpen: true), timedOut: false, jitter: jitter)
        case .connect:
            link = Link(generation: g) // the attempt that could not be made
            return lost(close, timedOut: false, jitter: jitter)
        }
    }

    /// The refresh of the open connection's token is due (or the app asked for one): the
    /// provider is asked for a fresh token, handed to tabd as a `refresh`.
    package mutating func refreshDue(generation g: Int) -> [Action] {
        guard settings.tokenProvider, let link, link.generation == g, link.welcomed, fetching == nil, !closing else { return [] }
        fetching = (g, .refresh)
        return [.fetchToken(generation: g, reason: .refresh)]
    }

    /// The current connection's generation, for ``refreshDue(generation:)`` asked by the app.
    package var currentGeneration: Int? { link?.generation }

    /// The program stops waiting for `request`: one not sent yet is withdrawn (never sent);
    /// one sent is answered all the same (its events are folded) but the answer goes
    /// nowhere. `error` nil: the task was cancelled; else the command failed with it (a
    /// deadline).
    package mutating func cancel(request: RequestID, error: TabdClientError?) -> [Action] {
        let outcome: Action = error.map { .reply(request, .failure($0)) } ?? .withdrawn(request)
        if let n = waiting.firstIndex(where: { $0.request == request }) {
            waiting.remove(at: n)
            return [outcome]
        }
        var found = false
        if let n = inFlight.firstIndex(where: { $0.request == request }) {
            inFlight[n] = Pending(ref: inFlight[n].ref, frame: inFlight[n].frame, request: nil, own: .abandoned)
            found = true
        }
        if let n = held.firstIndex(where: { $0.request == request }) {
            held[n].request = nil
            found = true
        }
        return found ? [outcome] : []
    }

    /// The reconnect's delay is over.
    package mutating func reconnectDue(generation g: Int) -> [Action] {
        guard generation == g, case .reconnecting = connection else { return [] }
        return open(resume: session.epoch.isEmpty || untrusted ? nil : (state.seq, session.epoch))
    }

    /// The delay after a refused `sync` of the client's own is over: it asks again.
    package mutating func resyncDue(generation g: Int) -> [Action] {
        guard let link, link.generation == g, link.resync == .refused, !closing else { return [] }
        return askForSnapshot()
    }

    /// The program closes the client: a close frame if connected (and a timeout for
    /// tabd's answer). Once the connection is gone (``hasConnection`` false), ``finish(_:)``.
    package mutating func closeRequested() -> [Action] {
        if isClosed || closing {
            closing = true
            return []
        }
        closing = true
        return link == nil ? [] : [.closeConnection(code: 1000), .scheduleCloseTimeout]
    }

    /// tabd did not answer the close in time: end without it.
    package mutating func closeTimedOut() -> [Action] {
        guard closing else { return [] }
        return finish(Self.closedByClient)
    }

    /// Closes for good: fails whatever waits, ends every subscription.
    package mutating func finish(_ error: TabdClientError) -> [Action] {
        if isClosed { return [] }
        connection = .closed(error)
        var actions: [Action] = link == nil ? [] : [.closeConnection(code: 1000)]
        link = nil
        fetching = nil
        generation += 1
        actions += handOutHeld(failingUnreached: error)
        actions += (inFlight + waiting).compactMap { p in p.request.map { .reply($0, .failure(error)) } }
        inFlight = []
        waiting = []
        return actions + [.publish(.closed(error)), .finished(error)]
    }

    // MARK: The connection's life

    private mutating func open(resume: (seq: Int, epoch: String)?) -> [Action] {
        generation += 1
        if settings.tokenProvider {
            // Every connection goes with a fresh token: the provider is asked first.
            link = nil
            pendingResume = resume
            fetching = (generation, .connect)
            return [.fetchToken(generation: generation, reason: .connect)]
        }
        return connect(resume: resume)
    }

    /// Where the connection being made (its token asked for) resumes from.
    private var pendingResume: (seq: Int, epoch: String)?

    private mutating func connect(resume: (seq: Int, epoch: String)?) -> [Action] {
        link = Link(generation: generation)
        return [.open(url: endpoint.url(resume: resume), authorization: endpoint.authorization, generation: generation),
                .scheduleWelcomeTimeout(generation: generation, after: settings.connectTimeout)]
    }

    /// The next refresh of the connection's token, a while before it runs out
    /// (``refreshLead(lifetime:)``); none without a provider or for a token that never runs out.
    private func scheduleRefresh(now: Double) -> [Action] {
        guard settings.tokenProvider, let token = endpoint.token, let expiry = TokenExpiry.of(token), let link else { return [] }
        let lead = Self.refreshLead(lifetime: expiry - tokenSince)
        return [.scheduleRefresh(generation: link.generation, after: .milliseconds(Int(max(0, expiry - lead - now) * 1000)))]
    }

    /// How long (seconds) before a token of `lifetime` seconds runs out the client asks for
    /// the next one: a quarter of its life, at least half a second, at most a minute.
    package static func refreshLead(lifetime: Double) -> Double { min(60, max(0.5, lifetime / 4)) }

    /// The connection is gone (or never came): fail what was in flight, then reconnect
    /// or close for good.
    private mutating func lost(_ close: TransportClose, timedOut: Bool, jitter: Double) -> [Action] {
        link = nil
        generation += 1
        if closing { return finish(Self.closedByClient) }
        // Held answers stay: the resume (or a snapshot) brings the state to their seqs.
        var actions: [Action] = inFlight.compactMap { p in p.request.map { .reply($0, .failure(.connectionLost)) } }
        inFlight = []
        if awaitingFirstWelcome {
            awaitingFirstWelcome = false
            let error: TabdClientError = timedOut ? .timedOut : Self.error(for: close)
            return actions + finish(error) + [.firstWelcome(error)]
        }
        actions.append(.publish(.disconnected(close)))
        if isFinal(close) || !settings.reconnects { return actions + finish(Self.error(for: close)) }
        attempt += 1
        let delay = backoff(attempt) * jitter
        connection = .reconnecting(attempt: attempt)
        return actions + [.publish(.reconnecting(attempt: attempt, delay: delay)), .scheduleReconnect(generation: generation, after: delay)]
    }

    /// The `attempt`th delay before jitter: `initialBackoff`, doubled each time, at most `maxBackoff`.
    package func backoff(_ attempt: Int) -> Duration {
        var delay = settings.initialBackoff
        for _ in 1..<min(max(attempt, 1), 30) where delay < settings.maxBackoff { delay *= 2 }
        return min(delay, settings.maxBackoff)
    }

    /// Whether a reconnect cannot help: the room is gone, the token ran out, or tabd
    /// refused who or where we are. With a token provider, a token that ran out or was
    /// refused (4001, 401) is not final: the next connection asks for a fresh one.
    package func isFinal(_ close: TransportClose) -> Bool {
        if let status = close.httpStatus { return (settings.tokenProvider ? [400, 403, 404] : [400, 401, 403, 404]).contains(status) }
        return close.code == 4404 || (close.code == 4001 && !settings.tokenProvider)
    }

    package static func error(for close: TransportClose) -> TabdClientError {
        if !close.wasOpen { return .connectFailed(status: close.httpStatus, reason: close.reason) }
        return .closed(code: close.code.map(Int.init), reason: close.reason.isEmpty ? close.description : close.reason)
    }

    // MARK: Frames

    private mutating func transmit(_ pending: Pending) -> [Action] {
        inFlight.append(pending)
        return [.send(pending.frame)]
    }

    private mutating func welcomed(_ welcome: Welcome, server: String, jitter: Double) -> [Action] {
        guard link?.welcomed == false else { return violation("a second welcome", jitter: jitter) }
        let sameHistory = welcome.epoch == session.epoch
        var failed: [Action] = []
        if welcome.resumed {
            guard sameHistory, !session.epoch.isEmpty, !untrusted else { return violation("a resumed welcome for a history this client does not have", jitter: jitter) }
        } else {
            guard let snapshot = welcome.snapshot else { return violation("a welcome with neither snapshot nor resume", jitter: jitter) }
            // A new history: the acks held cannot be waited for (judged by the old state's seq).
            if !sameHistory { failed = handOutHeld(failingUnreached: .connectionLost) }
            state = snapshot
        }
        untrusted = false
        link?.welcomed = true
        session = TabdClient.Session(client: welcome.client.id, room: welcome.room ?? endpoint.room ?? "main",
                                     role: welcome.role ?? "control", epoch: welcome.epoch, server: server)
        connection = .connected
        attempt = 0
        var actions: [Action] = [.publish(.connected(session, resumed: welcome.resumed))] + failed
        if welcome.resumed {
            // The missed batches follow: replays, until the pong of this ping.
            nextRef += 1
            actions += transmit(Pending(ref: "\(nextRef)", frame: CommandEnvelope(ref: "\(nextRef)", command: .ping).json.compactBytes,
                                        request: nil, own: .catchUp))
        } else {
            actions.append(.publish(.snapshot(state)))
            actions += releaseHeld()
        }
        let queued = waiting
        waiting = []
        for p in queued { actions += transmit(p) }
        if awaitingFirstWelcome {
            awaitingFirstWelcome = false
            actions.append(.firstWelcome(nil))
        }
        return actions
    }

    /// Folds one batch into `state`, all or nothing. A batch that does not follow on
    /// (a gap) or does not fold means this client's state is wrong: it asks for a
    /// snapshot once and skips batches until it comes.
    private mutating func fold(_ batch: EventBatch, jitter: Double) -> [Action] {
        guard link?.welcomed == true else { return violation("events before the welcome", jitter: jitter) }
        if batch.lastSeq <= state.seq { return [] } // already folded
        var next = state
        do {
            try next.apply(batch)
        } catch {
            guard link?.resync == nil else { return [] }
            return askForSnapshot()
        }
        state = next
        return [.publish(.events(batch))] + releaseHeld()
    }

    /// Sends a `sync` of the client's own; until its snapshot comes, batches are skipped
    /// (it holds them) and answers are held.
    private mutating func askForSnapshot() -> [Action] {
        link?.resync = .asked
        nextRef += 1
        return transmit(Pending(ref: "\(nextRef)", frame: CommandEnvelope(ref: "\(nextRef)", command: .sync).json.compactBytes,
                                request: nil, own: .resync))
    }

    private mutating func answer(_ ref: String?, _ result: Result<Reply, TabdClientError>, jitter: Double, now: Double) -> [Action] {
        // An error frame that names no command of this client's (sent on its connection behind
        // its back) is passed over; any other answer to no command, or out of its turn,
        // breaks the protocol.
        let named = ref.map { r in inFlight.contains { $0.ref == r } } ?? !inFlight.isEmpty
        if !named, case .failure(.refused) = result { return [] }
        guard !inFlight.isEmpty else { return violation("an answer to no command (ref \(ref ?? "null"))", jitter: jitter) }
        let pending = inFlight.removeFirst()
        // Refusals before parsing (rate_limited, bad_json) carry no ref; the rest echo it.
        if let ref, ref != pending.ref {
            return (pending.request.map { [.reply($0, .failure(.connectionLost))] } ?? [])
                + violation("answer for ref \(ref) where \(pending.ref) was due", jitter: jitter)
        }
        guard let request = pending.request else {
            // The catch-up ping: answered (or refused, rate_limited), the replays are over.
            if pending.own == .catchUp { return [.publish(.caughtUp)] }
            if pending.own == .abandoned { return [] } // its events are folded; no one waits
            if case let .refresh(token) = pending.own {
                guard case .success = result else {
                    // Refused: drop the connection; the next goes with a fresh token and resumes.
                    return [.closeConnection(code: 4000)]
                        + lost(TransportClose(code: 4000, reason: "token refresh refused: \(result)", wasOpen: true), timedOut: false, jitter: jitter)
                }
                endpoint.token = token
                tokenSince = now
                return scheduleRefresh(now: now)
            }
            // The client's own sync after a batch that did not fold. Refused (rate_limited,
            // or any other error): it asks again after a while, and what came meanwhile stays
            // held; the answers go out once a snapshot holds their seqs, as in the JavaScript
            // client.
            guard case let .success(.snapshot(snapshot)) = result else {
                link?.resync = .refused
                return [.scheduleResync(generation: generation, after: settings.resyncRetry)]
            }
            state = snapshot
            link?.resync = nil
            return [.publish(.snapshot(snapshot))] + releaseHeld()
        }
        held.append((request, result))
        return releaseHeld()
    }

    /// The seq `state` must hold before `result` goes out: an ack's, else 0.
    private static func awaitedSeq(_ result: Result<Reply, TabdClientError>) -> Int {
        if case let .success(.ack(seq)) = result { seq } else { 0 }
    }

    /// The held answers that can go out now, in order (see ``held``).
    private mutating func releaseHeld() -> [Action] {
        guard !held.isEmpty, link?.resync == nil else { return [] }
        var n = 0
        while n < held.count, Self.awaitedSeq(held[n].result) <= state.seq { n += 1 }
        defer { held.removeFirst(n) }
        return held.prefix(n).compactMap { h in h.request.map { .reply($0, h.result) } }
    }

    /// Every held answer, now: an ack whose seq `state` does not hold fails with `error`
    /// (the client closed, or the room's history started over).
    private mutating func handOutHeld(failingUnreached error: TabdClientError) -> [Action] {
        defer { held = [] }
        return held.compactMap { h in
            h.request.map { Self.awaitedSeq(h.result) > state.seq ? .reply($0, .failure(error)) : .reply($0, h.result) }
        }
    }

    /// tabd broke the protocol: this connection cannot be trusted. Drop it; the reconnect
    /// starts over from a snapshot.
    private mutating func violation(_ message: String, jitter: Double) -> [Action] {
        guard link != nil else { return [] }
        untrusted = true // no resume: the state may be wrong
        return [.closeConnection(code: 1002)]
            + lost(TransportClose(code: 1002, reason: "protocol violation: \(message)", wasOpen: true), timedOut: false, jitter: jitter)
    }
}
