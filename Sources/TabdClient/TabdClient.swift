import FoundationEssentials
import Glibc
import Dispatch

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
/// **Tokens.** With ``Options/tokenProvider``, every connection asks the app for a token,
/// and a while before that token runs out (a quarter of its life, between half a second
/// and a minute) the client asks again and hands tabd the new one on the open connection
/// (a `refresh` frame): a planned refresh costs no reconnect. If tabd refuses it, the
/// provider fails, or the connection dropped meanwhile, the client reconnects with a fresh
/// token and resumes, missing nothing; a token that ran out (4001) or was refused (401)
/// is then no reason to close.
///
/// **Cancelling.** A command whose task is cancelled before it was sent is withdrawn (it is
/// never sent) and throws `CancellationError`; one already sent throws `CancellationError`
/// at once, and its outcome is still folded into `state` when tabd answers. A deadline
/// (``Options/commandTimeout``, or ``perform(_:timeout:)``) fails it with
/// ``TabdClientError/deadlineExceeded`` the same way.
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
        /// Whom a `wss://` (or `https://`) tabd's certificate must chain to: the system's
        /// store, and the CAs ``TLSTrust`` adds (for the default transport).
        public var tls: TLSTrust
        /// Gives a token for each connection and, before it runs out, the next one (see
        /// **Tokens** above); it wins over `connect`'s `token`. Return nil when there is no
        /// token to give any more: the client closes. A provider that throws, or takes
        /// longer than `connectTimeout`, counts as a failed attempt (tried again after the
        /// backoff; for the first connection, `connect` throws, as for any failed first attempt).
        public var tokenProvider: TokenProvider?
        /// A deadline for every command: past it, the command fails with
        /// ``TabdClientError/deadlineExceeded`` (nil: none).
        public var commandTimeout: Duration?
        /// How many updates (``updates()``) or events (``events()``) one subscription holds
        /// for a consumer that does not keep up (at least 2). Past it, an `updates()`
        /// consumer skips ahead: what it missed is replaced by one `.snapshot` of the state
        /// as it is once there is room again; an `events()` consumer misses the events (the
        /// seqs jump). Memory stays bounded whatever the consumer does.
        public var bufferLimit: Int
        /// Where the client says what it does (connects, loses its connection and why,
        /// reconnects, refreshes its token, closes), for an app's logger; nil: nowhere.
        public var log: (@Sendable (LogRecord) -> Void)?

        public init(reconnects: Bool = true, initialBackoff: Duration = .milliseconds(100), maxBackoff: Duration = .seconds(5),
                    connectTimeout: Duration = .seconds(10), transport: (any TabdTransport)? = nil, tls: TLSTrust = .system,
                    tokenProvider: TokenProvider? = nil, commandTimeout: Duration? = nil, bufferLimit: Int = 1024,
                    log: (@Sendable (LogRecord) -> Void)? = nil) {
            self.reconnects = reconnects; self.initialBackoff = initialBackoff; self.maxBackoff = maxBackoff
            self.connectTimeout = connectTimeout; self.transport = transport; self.tls = tls
            self.tokenProvider = tokenProvider; self.commandTimeout = commandTimeout
            self.bufferLimit = max(2, bufferLimit)
            self.log = log
        }
    }

    /// One line of the client's log (``Options/log``), with the fields tabd's own log lines
    /// carry: the room, and a close code when a connection ended.
    public struct LogRecord: Sendable, Equatable {
        public enum Level: String, Sendable, Equatable { case info, warn }
        public let level: Level
        public let message: String
        public let room: RoomID
        /// The close code of a connection that ended (nil: none came, or none is concerned).
        public let code: Int?
    }

    private func log(_ level: LogRecord.Level, _ message: String, code: Int? = nil) {
        options.log?(LogRecord(level: level, message: message, room: machine.session.room, code: code))
    }

    /// Why the client asks for a token, and for which room.
    public struct TokenRequest: Sendable, Equatable {
        public enum Reason: String, Sendable, Equatable {
            /// For a new connection (the first, or a reconnect).
            case connect
            /// For the open connection, before its token runs out.
            case refresh
        }
        public var room: RoomID
        public var reason: Reason
    }

    /// An app's source of tokens (its back end, an identity provider's SDK).
    public typealias TokenProvider = @Sendable (TokenRequest) async throws -> String?

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
        /// The server's name and version, e.g. `tabd 0.2.0`.
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
        /// missed events follow as `events`, then ``caughtUp``).
        case connected(Session, resumed: Bool)
        /// After a resumed welcome: the missed events have all come. Every `events` update
        /// between `connected(_, resumed: true)` and this one was a replay of what happened
        /// while disconnected; those after it are live.
        case caughtUp
        /// The connection dropped; a reconnect follows unless `closed` does.
        case disconnected(TransportClose)
        /// The `attempt`th reconnect starts after `delay`.
        case reconnecting(attempt: Int, delay: Duration)
        /// The client is closed for good; the sequence ends.
        case closed(TabdClientError)
    }

    /// The room's state as of the last event folded.
    public var state: Snapshot { machine.state }
    /// Who this client is, from the last welcome.
    public var session: Session { machine.session }
    public var connection: ConnectionState { machine.connection }

    /// Every decision: this actor only performs what it returns.
    private var machine: ClientMachine
    private let options: Options
    private let transport: any TabdTransport
    /// The connection the machine's current generation names.
    private var current: (any TabdConnection)?
    /// Commands waiting for their answers, by the id the machine knows them by.
    /// (Nil: the command's task was cancelled.)
    private var replies: [ClientMachine.RequestID: CheckedContinuation<Result<Reply, TabdClientError>?, Never>] = [:]
    private var nextRequest = 0
    private var subscribers: [Int: Subscriber] = [:]
    private var nextSubscriber = 0
    /// The first connection's welcome (or its failure), awaited by `connect`.
    private var welcomeWaiter: CheckedContinuation<Result<Void, TabdClientError>, Never>?
    /// Every `close()` waiting for the end (a second call waits for the first).
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var shutdown: Task<Void, Never>?

    typealias Reply = ClientMachine.Reply

    private enum Subscriber {
        case updates(SubscriptionBuffer<Update>)
        case events(SubscriptionBuffer<SequencedEvent>)

        func finish() {
            switch self {
            case let .updates(b): b.finish()
            case let .events(b): b.finish()
            }
        }
    }

    /// Connects to `url` (`ws://HOST:PORT[/ws]` or the `http://HOST:PORT/` tabd prints) and
    /// returns once tabd has welcomed the client, with `state` set (see the `String` form).
    public static func connect(url: URL, room: RoomID? = nil, token: String? = nil, name: String? = nil,
                               options: Options = .init()) async throws(TabdClientError) -> TabdClient {
        try await connect(url: url.absoluteString, room: room, token: token, name: name, options: options)
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
            do { transport = try WebSocketTransport(connectTimeoutSeconds: seconds, tls: options.tls) } catch {
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
        self.options = options
        self.transport = transport
        var settings = ClientMachine.Settings(
            reconnects: options.reconnects, initialBackoff: options.initialBackoff, maxBackoff: options.maxBackoff,
            connectTimeout: options.connectTimeout)
        settings.tokenProvider = options.tokenProvider != nil
        machine = ClientMachine(endpoint: endpoint, settings: settings)
    }

    private func start() async throws(TabdClientError) {
        let result = await withCheckedContinuation { (waiter: CheckedContinuation<Result<Void, TabdClientError>, Never>) in
            welcomeWaiter = waiter
            perform(machine.start(now: Self.now()))
        }
        try result.get()
    }

    // MARK: Subscribing

    /// Every change from now on, starting with the current state as a `snapshot`. Each
    /// call makes a new, independent sequence; it ends after `closed` (or when the
    /// consumer stops iterating). A consumer more than ``Options/bufferLimit`` updates
    /// behind skips ahead: it gets one `snapshot` of the state instead of what it missed.
    /// A subscription made while the client catches up after a resume hears
    /// `connected(session, resumed: true)` right after its snapshot: the events up to
    /// ``Update/caughtUp`` are replays.
    public func updates() -> AsyncStream<Update> { follow().updates }

    /// ``updates()``, and what the client was when it subscribed, read in the same turn.
    package func follow() -> (updates: AsyncStream<Update>, session: Session, connection: ConnectionState, catchingUp: Bool) {
        let buffer = SubscriptionBuffer<Update>(limit: options.bufferLimit)
        buffer.push(.snapshot(state)) { $0 }
        let catchingUp = machine.isCatchingUp
        if catchingUp { buffer.push(.connected(session, resumed: true)) { $0 } }
        subscribe(.updates(buffer))
        return (buffer.stream, session, connection, catchingUp)
    }

    /// The room's events from now on, one by one (each batch's events in seq order). Ends
    /// when the client closes. After a replaced state (see ``updates()``) the seqs jump,
    /// and so they do for a consumer more than ``Options/bufferLimit`` events behind: it
    /// misses the events that did not fit.
    public func events() -> AsyncStream<SequencedEvent> {
        let buffer = SubscriptionBuffer<SequencedEvent>(limit: options.bufferLimit)
        subscribe(.events(buffer))
        return buffer.stream
    }

    private func subscribe(_ subscriber: Subscriber) {
        if case .closed = connection {
            subscriber.finish()
            return
        }
        subscribers[nextSubscriber] = subscriber
        nextSubscriber += 1
    }


    /// Hands `update` to every subscription. An `updates()` one whose consumer is
    /// ``Options/bufferLimit`` behind holds instead a snapshot of the state (which holds
    /// every batch it held, and this one) and where the connection is; an `events()` one
    /// drops the newest events.
    private func publish(_ update: Update) {
        var gone: [Int] = []
        for (id, subscriber) in subscribers {
            switch subscriber {
            case let .updates(buffer):
                if buffer.isFinished { gone.append(id); continue }
                buffer.push(update) { _ in caughtUp() }
            case let .events(buffer):
                if buffer.isFinished { gone.append(id); continue }
                guard case let .events(batch) = update else { continue }
                for e in batch.events { buffer.push(e) { Array($0.dropLast()) } }
            }
        }
        for id in gone { subscribers[id] = nil }
    }

    /// What a subscription that fell behind holds instead of what it missed: the state,
    /// and where the connection is now.
    private func caughtUp() -> [Update] {
        var updates: [Update] = [.snapshot(state)]
        switch connection {
        case .connected: updates.append(.connected(session, resumed: machine.isCatchingUp))
        case let .reconnecting(attempt): updates.append(.reconnecting(attempt: attempt, delay: .zero))
        case let .closed(error): updates.append(.closed(error))
        }
        return updates
    }

    // MARK: Commands

    /// Sends `command` and waits for its answer: the ack's seq (for `sync`, the
    /// snapshot's seq; for `ping`, the seq folded when the pong came; ``sync()`` and
    /// ``ping()`` give more). Throws ``TabdClientError/refused(_:)`` with the protocol's
    /// code when tabd refuses it.
    ///
    /// Throws `CancellationError` when the task is cancelled (see **Cancelling** above), and
    /// ``TabdClientError/deadlineExceeded`` past `timeout` (default:
    /// ``Options/commandTimeout``).
    @discardableResult
    public func perform(_ command: Command, timeout: Duration? = nil) async throws -> Int {
        switch try await request(command, timeout: timeout) {
        case let .ack(seq): seq
        case let .snapshot(snapshot): snapshot.seq
        case .pong, .clients: state.seq
        }
    }

    func request(_ command: Command, timeout: Duration? = nil) async throws -> Reply {
        // A task cancelled already: the command is never sent.
        try Task.checkCancellation()
        nextRequest += 1
        let id = nextRequest
        var deadline: Task<Void, Never>?
        if let timeout = timeout ?? options.commandTimeout {
            deadline = Task { [weak self] in
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                await self?.step { $0.cancel(request: id, error: .deadlineExceeded) }
            }
        }
        defer { deadline?.cancel() }
        // The handler runs after the continuation is stored: the actor runs `cancel` after
        // this turn, which stored it.
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (reply: CheckedContinuation<Result<Reply, TabdClientError>?, Never>) in
                replies[id] = reply
                perform(machine.request(command, id: id))
            }
        } onCancel: {
            Task { await self.step { $0.cancel(request: id, error: nil) } }
        }
        guard let result else { throw CancellationError() }
        return try result.get()
    }

    /// Asks the token provider for a fresh token now and hands it to tabd on the open
    /// connection (as the client does on its own before a token runs out). Without a
    /// provider, or while not connected, it does nothing.
    public func refreshToken() {
        guard let generation = machine.currentGeneration else { return }
        perform(machine.refreshDue(generation: generation))
    }

    // MARK: Closing

    /// Closes the connection (close code 1000) and the client: later commands throw
    /// ``TabdClientError/closed(code:reason:)``, subscriptions end. Waits (at most 2 s)
    /// for tabd to acknowledge the close, then for the network thread to stop. Safe to
    /// call more than once, from several tasks: each returns once the client is closed.
    public func close() async {
        if machine.isClosed {
            await shutDownTransport()
            return
        }
        perform(machine.closeRequested())
        if machine.hasConnection { await withCheckedContinuation { closeWaiters.append($0) } }
        perform(machine.finish(ClientMachine.closedByClient))
        await shutDownTransport()
    }

    static let closedByClient = ClientMachine.closedByClient

    /// Stops the transport once; every caller returns when it has stopped.
    private func shutDownTransport() async {
        if shutdown == nil {
            let transport = transport
            shutdown = Task { await transport.shutdown() }
        }
        await shutdown?.value
    }

    // MARK: Performing the machine's actions

    private func perform(_ actions: [ClientMachine.Action]) {
        for action in actions {
            switch action {
            case let .open(url, authorization, generation):
                // Without its query: a token never goes into a log line.
                log(.info, "connecting to \(url.prefix { $0 != "?" })")
                let connection = transport.open(url, authorization: authorization)
                current = connection
                Task { [weak self] in
                    for await event in connection.events {
                        guard let self else { return }
                        await self.handle(event, generation: generation)
                    }
                }
            case let .scheduleWelcomeTimeout(generation, after):
                Task { [weak self] in
                    try? await Task.sleep(for: after)
                    await self?.step { $0.welcomeTimedOut(generation: generation, jitter: Self.jitter()) }
                }
            case let .send(frame):
                current?.send(frame)
            case let .closeConnection(code):
                current?.close(code: code, reason: "")
            case let .scheduleReconnect(generation, after):
                log(.info, "reconnecting in \(after)")
                Task { [weak self] in
                    try? await Task.sleep(for: after)
                    await self?.step { $0.reconnectDue(generation: generation) }
                }
            case let .scheduleResync(generation, after):
                Task { [weak self] in
                    try? await Task.sleep(for: after)
                    await self?.step { $0.resyncDue(generation: generation) }
                }
            case .scheduleCloseTimeout:
                Task { [weak self] in
                    try? await Task.sleep(for: .seconds(2))
                    await self?.step { $0.closeTimedOut() }
                }
            case let .reply(id, result):
                replies.removeValue(forKey: id)?.resume(returning: result)
            case let .withdrawn(id):
                replies.removeValue(forKey: id)?.resume(returning: nil)
            case let .fetchToken(generation, reason):
                fetchToken(generation: generation, reason: reason)
            case let .scheduleRefresh(generation, after):
                Task { [weak self] in
                    try? await Task.sleep(for: after)
                    await self?.step { $0.refreshDue(generation: generation) }
                }
            case let .publish(update):
                publish(update)
            case let .firstWelcome(error):
                welcomeWaiter?.resume(returning: error.map { .failure($0) } ?? .success(()))
                welcomeWaiter = nil
            case .finished:
                log(.info, "closed")
                current = nil
                for s in subscribers.values { s.finish() }
                subscribers = [:]
                let waiters = closeWaiters
                closeWaiters = []
                for w in waiters { w.resume() }
                Task { await self.shutDownTransport() }
            }
        }
    }

    private func step(_ input: (inout ClientMachine) -> [ClientMachine.Action]) {
        perform(input(&machine))
    }

    /// Asks the provider, bounded by the connect timeout; the answer goes to the machine.
    private func fetchToken(generation: Int, reason: ClientMachine.TokenReason) {
        guard let provider = options.tokenProvider else { return }
        let request = TokenRequest(room: machine.session.room, reason: reason == .connect ? .connect : .refresh)
        let bound = options.connectTimeout
        Task { [weak self] in
            let outcome: Result<String?, any Error> = await withTaskGroup(of: Result<String?, any Error>?.self) { group in
                group.addTask {
                    do { return .success(try await provider(request)) } catch { return .failure(error) }
                }
                group.addTask {
                    guard (try? await Task.sleep(for: bound)) != nil else { return nil }
                    return .failure(TabdClientError.timedOut)
                }
                defer { group.cancelAll() }
                while let first = await group.next() {
                    if let first { return first }
                }
                return .failure(CancellationError())
            }
            guard let self else { return }
            switch outcome {
            case let .success(token): await self.step { $0.tokenReady(generation: generation, token: token, now: Self.now()) }
            case let .failure(error): await self.step { $0.tokenFailed(generation: generation, reason: "\(error)", jitter: Self.jitter()) }
            }
        }
    }

    /// Now, in seconds since 1970 (tokens' `exp` is in that clock).
    private static func now() -> Double { Date().timeIntervalSince1970 }

    /// What a reconnect's delay is multiplied by: up to half shorter, so that clients that
    /// dropped together do not come back together.
    private static func jitter() -> Double { Double.random(in: 0.5...1.0) }

    private func handle(_ event: TransportEvent, generation: Int) {
        switch event {
        case .opened: break // the welcome says more
        case let .message(bytes): step { $0.received(bytes, generation: generation, jitter: Self.jitter(), now: Self.now()) }
        case let .closed(close):
            log(close.code == 1000 ? .info : .warn, "connection ended: \(close)", code: close.code.map(Int.init))
            step { $0.closed(close, generation: generation, jitter: Self.jitter()) }
        }
    }
}
