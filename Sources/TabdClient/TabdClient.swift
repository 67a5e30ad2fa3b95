/// A connection to one room of a tabd, kept up to date: `state` is the room's tab bar as
/// of the last event received, folded by the same functions the server folds with.
///
/// ```swift
/// let client = try await TabdClient.connect(url: "ws://127.0.0.1:8080", room: "kiosk", name: "script")
/// let seq = try await client.tap("profile")   // the ack's seq; `state` already has its events
/// for await update in await client.updates() { ... }
/// await client.close()
/// ```
///
/// **Reconnects.** When the connection drops (tabd restarts, the network hiccups, tabd
/// closes a client that fell behind), the client reconnects with growing, jittered
/// delays and `resume`s from the last seq it folded, so it misses nothing; if tabd no
/// longer keeps those events it sends a snapshot, and `state` is replaced (an
/// ``Update/snapshot(_:)``). Commands issued while disconnected wait and are sent once the
/// new connection is welcomed; a command in flight when the connection dropped fails with
/// ``TabdClientError/connectionLost`` (it may or may not have taken effect). The client
/// gives up, and closes for good, only when a reconnect cannot help: the room was deleted
/// (4404), the token ran out (4001), or tabd refused the credentials, the room or the
/// origin (HTTP 400, 401, 403, 404).
///
/// **Order.** Frames are handled one at a time, in the order tabd sent them: when a
/// command's method returns, `state` already holds that command's events, and every
/// subscriber has been handed them.
///
/// Call ``close()`` when done: the client holds a network thread until then.
public actor TabdClient {
    /// How a client behaves; the defaults suit most programs.
    public struct Options: Sendable {
        /// Reconnect (with `resume`) when the connection drops. When false, a drop closes
        /// the client.
        public var reconnects: Bool
        /// The first reconnect waits up to this long; each next one twice as long, up to
        /// `maxBackoff`. Every delay is jittered down by up to half.
        public var initialBackoff: Duration
        public var maxBackoff: Duration
        /// How long opening a connection and getting its welcome may take.
        public var connectTimeout: Duration
        /// How to reach tabd; nil: ``WebSocketTransport`` (libwebsockets).
        public var transport: (any TabdTransport)?

        public init(reconnects: Bool = true, initialBackoff: Duration = .milliseconds(100), maxBackoff: Duration = .seconds(5),
                    connectTimeout: Duration = .seconds(10), transport: (any TabdTransport)? = nil) {
            self.reconnects = reconnects; self.initialBackoff = initialBackoff; self.maxBackoff = maxBackoff
            self.connectTimeout = connectTimeout; self.transport = transport
        }
    }

    /// Who this client is in its room, from the last welcome.
    public struct Session: Sendable, Equatable {
        /// This connection's client id (each connection gets a new one).
        public var client: ClientID
        public var room: RoomID
        /// `view`, `control` or `admin`.
        public var role: String
        /// The incarnation of the room's history: seqs are meaningful only within it. A
        /// room deleted and created again has a new one.
        public var epoch: String
        /// The server's name and version, e.g. `tabd/0.1.0`.
        public var server: String
    }

    /// The connection as the client sees it.
    public enum ConnectionState: Sendable, Equatable {
        case connected
        /// The connection dropped; the `attempt`th reconnect is under way or waiting.
        case reconnecting(attempt: Int)
        /// For good; the error says why.
        case closed(TabdClientError)
    }

    /// What a subscriber of ``updates()`` hears, in order.
    public enum Update: Sendable, Equatable {
        /// The state as a whole: first thing of every subscription, and again whenever
        /// it was replaced (a reconnect that could not resume, a new epoch).
        case snapshot(Snapshot)
        /// One command's (or presence change's) events, already folded into `state`.
        case events(EventBatch)
        /// A connection was welcomed: the first one, or a reconnect (`resumed`: the
        /// missed events follow as `events`).
        case connected(Session, resumed: Bool)
        /// The connection dropped; a reconnect follows unless `closed` does.
        case disconnected(TransportClose)
        /// The `attempt`th reconnect starts after `delay`.
        case reconnecting(attempt: Int, delay: Duration)
        /// The client is closed for good; the sequence ends.
        case closed(TabdClientError)
    }

    /// The room's state as of the last event folded.
    public private(set) var state: Snapshot
    /// Who this client is, from the last welcome.
    public private(set) var session: Session
    public private(set) var connection: ConnectionState

    let endpoint: Endpoint
    private let options: Options
    private let transport: any TabdTransport
    private var link: Link?
    private var generation = 0
    /// Commands sent on the current connection, awaiting their answers, oldest first
    /// (tabd answers each connection's commands in the order it sent them).
    private var inFlight: [Pending] = []
    /// Commands issued while there was no welcomed connection.
    private var waiting: [Pending] = []
    private var subscribers: [Int: Subscriber] = [:]
    private var nextSubscriber = 0
    private var nextRef = 0
    private var attempt = 0
    /// The first connection's welcome (or its failure), awaited by `connect`.
    private var welcomeWaiter: CheckedContinuation<Result<Void, TabdClientError>, Never>?
    /// Set by `close()`: a drop now ends the client instead of reconnecting.
    private var closing = false
    /// Every `close()` waiting for the end (a second call waits for the first).
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var shutdown: Task<Void, Never>?
    /// Answers that came while a resync was due (their command's batch did not fold):
    /// handed out once the snapshot is in, so a command never returns before `state`
    /// holds its events.
    private var parked: [(CheckedContinuation<Result<Reply, TabdClientError>, Never>, Result<Reply, TabdClientError>)] = []

    private struct Link {
        let connection: any TabdConnection
        let generation: Int
        var welcomed = false
        /// A `sync` of the client's own is out because a batch did not fold.
        var resyncing = false
    }

    private struct Pending {
        let ref: String
        let frame: [UInt8]
        /// Nil for the client's own `sync` after a batch that did not fold.
        let reply: CheckedContinuation<Result<Reply, TabdClientError>, Never>?
    }

    enum Reply {
        case ack(Int)
        case snapshot(Snapshot)
        case pong
    }

    private struct Subscriber {
        let yield: @Sendable (Update) -> Void
        let finish: @Sendable () -> Void
    }

    /// Connects to `url` (`ws://HOST:PORT[/ws]` or the `http://HOST:PORT/` tabd prints) and
    /// returns once tabd has welcomed the client, with `state` set.
    /// - Parameters:
    ///   - room: the room to join (default: tabd's `main`).
    ///   - token: a token, when tabd requires one.
    ///   - name: the name other clients see (`clientJoined`).
    public static func connect(url: String, room: RoomID? = nil, token: String? = nil, name: String? = nil,
                               options: Options = .init()) async throws(TabdClientError) -> TabdClient {
        let endpoint = try Endpoint(url: url, room: room, name: name, token: token)
        let transport: any TabdTransport
        if let given = options.transport {
            transport = given
        } else {
            let seconds = max(1, Int(options.connectTimeout.components.seconds))
            do { transport = try WebSocketTransport(connectTimeoutSeconds: seconds) } catch {
                throw .connectFailed(status: nil, reason: error.description)
            }
        }
        let client = TabdClient(endpoint: endpoint, options: options, transport: transport)
        do throws(TabdClientError) {
            try await client.start()
        } catch {
            await client.shutDownTransport()
            throw error
        }
        return client
    }

    private init(endpoint: Endpoint, options: Options, transport: any TabdTransport) {
        self.endpoint = endpoint
        self.options = options
        self.transport = transport
        state = Snapshot(seq: 0, selected: "", scrollToTop: 0, tabs: [], clients: [])
        session = Session(client: "", room: endpoint.room ?? "main", role: "", epoch: "", server: "")
        connection = .reconnecting(attempt: 0)
    }

    private func start() async throws(TabdClientError) {
        let result = await withCheckedContinuation { (waiter: CheckedContinuation<Result<Void, TabdClientError>, Never>) in
            welcomeWaiter = waiter
            open(resume: nil)
        }
        try result.get()
    }

    // MARK: Subscribing

    /// Every change from now on, starting with the current state as a `snapshot`. Each
    /// call makes a new, independent sequence; it ends after `closed` (or when the
    /// consumer stops iterating). Updates are buffered without bound for a slow consumer.
    public func updates() -> AsyncStream<Update> {
        let (stream, continuation) = AsyncStream.makeStream(of: Update.self)
        continuation.yield(.snapshot(state))
        subscribe(stream: continuation) { continuation.yield($0) }
        return stream
    }

    /// The room's events from now on, one by one (each batch's events in seq order). Ends
    /// when the client closes. After a replaced state (see ``updates()``) the seqs jump.
    public func events() -> AsyncStream<SequencedEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: SequencedEvent.self)
        subscribe(stream: continuation) { update in
            if case let .events(batch) = update { for e in batch.events { continuation.yield(e) } }
        }
        return stream
    }

    private func subscribe<T>(stream continuation: AsyncStream<T>.Continuation, yield: @escaping @Sendable (Update) -> Void) {
        if case .closed = connection {
            continuation.finish()
            return
        }
        let id = nextSubscriber
        nextSubscriber += 1
        subscribers[id] = Subscriber(yield: yield, finish: { continuation.finish() })
        continuation.onTermination = { [weak self] _ in
            Task { await self?.unsubscribe(id) }
        }
    }

    private func unsubscribe(_ id: Int) { subscribers[id] = nil }

    private func publish(_ update: Update) {
        for s in subscribers.values { s.yield(update) }
    }

    // MARK: Commands

    /// Sends `command` and waits for its answer: the ack's seq (for `sync`, the
    /// snapshot's seq; for `ping`, the seq folded when the pong came; ``sync()`` and
    /// ``ping()`` give more). Throws ``TabdClientError/refused(_:)`` with the protocol's
    /// code when tabd refuses it.
    @discardableResult
    public func perform(_ command: Command) async throws(TabdClientError) -> Int {
        switch try await request(command) {
        case let .ack(seq): seq
        case let .snapshot(snapshot): snapshot.seq
        case .pong: state.seq
        }
    }

    func request(_ command: Command) async throws(TabdClientError) -> Reply {
        if case let .closed(error) = connection { throw error }
        nextRef += 1
        let ref = "\(nextRef)"
        let frame = CommandEnvelope(ref: ref, command: command).json.compactBytes
        let result = await withCheckedContinuation { (reply: CheckedContinuation<Result<Reply, TabdClientError>, Never>) in
            let pending = Pending(ref: ref, frame: frame, reply: reply)
            if link?.welcomed == true { transmit(pending) } else { waiting.append(pending) }
        }
        return try result.get()
    }

    private func transmit(_ pending: Pending) {
        inFlight.append(pending)
        link?.connection.send(pending.frame)
    }

    // MARK: Closing

    /// Closes the connection (close code 1000) and the client: later commands throw
    /// ``TabdClientError/closed(code:reason:)``, subscriptions end. Waits (at most 2 s)
    /// for tabd to acknowledge the close, then for the network thread to stop. Safe to
    /// call more than once, from several tasks: each returns once the client is closed.
    public func close() async {
        if case .closed = connection {
            await shutDownTransport()
            return
        }
        if !closing, let link {
            closing = true
            link.connection.close(code: 1000, reason: "")
            Task { [weak self] in
                try? await Task.sleep(for: .seconds(2))
                await self?.closeTimedOut()
            }
        }
        closing = true
        if link != nil { await withCheckedContinuation { closeWaiters.append($0) } }
        finish(Self.closedByClient)
        await shutDownTransport()
    }

    static let closedByClient = TabdClientError.closed(code: 1000, reason: "closed by this client")

    /// tabd did not answer the close in time: end without it.
    private func closeTimedOut() {
        guard closing else { return }
        finish(Self.closedByClient)
    }

    /// Stops the transport once; every caller returns when it has stopped.
    private func shutDownTransport() async {
        if shutdown == nil {
            let transport = transport
            shutdown = Task { await transport.shutdown() }
        }
        await shutdown?.value
    }

    /// Closes for good: fails whatever waits, ends every subscription.
    private func finish(_ error: TabdClientError) {
        if case .closed = connection { return }
        connection = .closed(error)
        link?.connection.close(code: 1000, reason: "")
        link = nil
        generation += 1
        handOutParked()
        for p in inFlight + waiting { p.reply?.resume(returning: .failure(error)) }
        inFlight = []
        waiting = []
        publish(.closed(error))
        for s in subscribers.values { s.finish() }
        subscribers = [:]
        let waiters = closeWaiters
        closeWaiters = []
        for w in waiters { w.resume() }
        Task { await self.shutDownTransport() }
    }

    private func handOutParked() {
        let answers = parked
        parked = []
        for (reply, result) in answers { reply.resume(returning: result) }
    }
}

// MARK: - The connection's life

extension TabdClient {
    /// Opens a connection; `resume` continues from the last seq folded.
    private func open(resume: (seq: Int, epoch: String)?) {
        generation += 1
        let g = generation
        let connection = transport.open(endpoint.url(resume: resume))
        link = Link(connection: connection, generation: g)
        Task { [weak self] in
            for await event in connection.events {
                guard let self else { return }
                await self.handle(event, generation: g)
            }
        }
        let timeout = options.connectTimeout
        Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.welcomeTimedOut(g)
        }
    }

    private func welcomeTimedOut(_ g: Int) {
        guard let link, link.generation == g, !link.welcomed else { return }
        // Counts as a failed connection: dropped, then reconnected (or, on the first, thrown).
        link.connection.close(code: 1000, reason: "")
        lost(TransportClose(code: nil, reason: "no welcome within \(options.connectTimeout)", wasOpen: false), timedOut: true)
    }

    private func handle(_ event: TransportEvent, generation g: Int) {
        guard let link, link.generation == g else { return }
        switch event {
        case .opened: break // the welcome says more
        case let .message(bytes): receive(bytes)
        case let .closed(close): lost(close, timedOut: false)
        }
    }

    /// The connection is gone (or never came): fail what was in flight, then reconnect
    /// or close for good.
    private func lost(_ close: TransportClose, timedOut: Bool) {
        link = nil
        generation += 1
        if closing { return finish(Self.closedByClient) }
        handOutParked()
        for p in inFlight { p.reply?.resume(returning: .failure(.connectionLost)) }
        inFlight = []
        if let waiter = welcomeWaiter {
            welcomeWaiter = nil
            let error: TabdClientError = timedOut ? .timedOut : Self.error(for: close)
            finish(error)
            waiter.resume(returning: .failure(error))
            return
        }
        publish(.disconnected(close))
        if Self.isFinal(close) || !options.reconnects {
            finish(Self.error(for: close))
            return
        }
        attempt += 1
        let delay = backoff(attempt)
        connection = .reconnecting(attempt: attempt)
        publish(.reconnecting(attempt: attempt, delay: delay))
        let g = generation
        Task { [weak self] in
            try? await Task.sleep(for: delay)
            await self?.reconnect(g)
        }
    }

    private func reconnect(_ g: Int) {
        guard generation == g, case .reconnecting = connection else { return }
        open(resume: session.epoch.isEmpty ? nil : (state.seq, session.epoch))
    }

    private func backoff(_ attempt: Int) -> Duration {
        var delay = options.initialBackoff
        for _ in 1..<min(attempt, 30) where delay < options.maxBackoff { delay *= 2 }
        return min(delay, options.maxBackoff) * Double.random(in: 0.5...1.0)
    }

    /// Whether a reconnect cannot help: the room is gone, the token ran out, or tabd
    /// refused who or where we are.
    static func isFinal(_ close: TransportClose) -> Bool {
        if let status = close.httpStatus { return [400, 401, 403, 404].contains(status) }
        return close.code == 4404 || close.code == 4001
    }

    static func error(for close: TransportClose) -> TabdClientError {
        if !close.wasOpen { return .connectFailed(status: close.httpStatus, reason: close.reason) }
        return .closed(code: close.code.map(Int.init), reason: close.reason.isEmpty ? close.description : close.reason)
    }
}

// MARK: - Frames

extension TabdClient {
    private static let frameTypes: Set<String> = ["welcome", "events", "ack", "error", "snapshot", "pong"]

    private func receive(_ bytes: [UInt8]) {
        let frame: ServerFrame
        do {
            let json = try JSONParser.parse(bytes)
            // A frame type this client does not know (a newer tabd) is not its business.
            guard let type = json["type"]?.stringValue, Self.frameTypes.contains(type) else { return }
            frame = try ServerFrame(json: json)
        } catch {
            violation("unreadable frame: \(error)")
            return
        }
        switch frame {
        case let .welcome(welcome, server): welcomed(welcome, server: server)
        case let .events(batch): fold(batch)
        case let .ack(ref, seq): answer(ref, .success(.ack(seq)))
        case let .error(ref, error): answer(ref, .failure(.refused(error)))
        case let .snapshot(ref, snapshot): answer(ref, .success(.snapshot(snapshot)))
        case let .pong(ref): answer(ref, .success(.pong))
        }
    }

    private func welcomed(_ welcome: Welcome, server: String) {
        guard link?.welcomed == false else { return violation("a second welcome") }
        let sameHistory = welcome.epoch == session.epoch
        if welcome.resumed {
            guard sameHistory, !session.epoch.isEmpty else { return violation("a resumed welcome for a history this client does not have") }
        } else {
            guard let snapshot = welcome.snapshot else { return violation("a welcome with neither snapshot nor resume") }
            state = snapshot
        }
        link?.welcomed = true
        session = Session(client: welcome.client.id, room: welcome.room ?? endpoint.room ?? "main", role: welcome.role ?? "control",
                          epoch: welcome.epoch, server: server)
        connection = .connected
        attempt = 0
        publish(.connected(session, resumed: welcome.resumed))
        if !welcome.resumed { publish(.snapshot(state)) }
        let queued = waiting
        waiting = []
        for p in queued { transmit(p) }
        if let waiter = welcomeWaiter {
            welcomeWaiter = nil
            waiter.resume(returning: .success(()))
        }
    }

    /// Folds one batch into `state`, all or nothing. A batch that does not follow on
    /// (a gap) or does not fold means this client's state is wrong: it asks for a
    /// snapshot and skips batches until it comes.
    private func fold(_ batch: EventBatch) {
        guard link?.welcomed == true else { return violation("events before the welcome") }
        if batch.lastSeq <= state.seq { return } // already folded
        var next = state
        do {
            try next.apply(batch)
        } catch {
            if link?.resyncing == false {
                link?.resyncing = true
                nextRef += 1
                transmit(Pending(ref: "\(nextRef)", frame: CommandEnvelope(ref: "\(nextRef)", command: .sync).json.compactBytes, reply: nil))
            }
            return
        }
        state = next
        publish(.events(batch))
    }

    private func answer(_ ref: String?, _ result: Result<Reply, TabdClientError>) {
        guard !inFlight.isEmpty else { return violation("an answer to no command (ref \(ref ?? "null"))") }
        let pending = inFlight.removeFirst()
        // Refusals before parsing (rate_limited, bad_json) carry no ref; the rest echo it.
        if let ref, ref != pending.ref {
            pending.reply?.resume(returning: .failure(.connectionLost))
            return violation("answer for ref \(ref) where \(pending.ref) was due")
        }
        guard let reply = pending.reply else {
            // The client's own sync after a batch that did not fold.
            if case let .success(.snapshot(snapshot)) = result {
                state = snapshot
                publish(.snapshot(snapshot))
            } // else refused (rate_limited): the next batch that does not fold asks again
            link?.resyncing = false
            handOutParked()
            return
        }
        if link?.resyncing == true {
            parked.append((reply, result))
        } else {
            reply.resume(returning: result)
        }
    }

    /// tabd broke the protocol: this connection cannot be trusted. Drop it; the reconnect
    /// starts over from a snapshot.
    private func violation(_ message: String) {
        guard let link else { return }
        link.connection.close(code: 1002, reason: "")
        session.epoch = "" // no resume: the state may be wrong
        lost(TransportClose(code: 1002, reason: "protocol violation: \(message)", wasOpen: true), timedOut: false)
    }
}
