/// Owns the tab order, the selection and the event history, applies commands one at
/// a time, stamps their events with gap-free seqs and publishes each command's events
/// as one batch.
///
/// Tab state lives in one ``TabActor`` per tab and the shared counter in
/// ``ScrollCounter``. Applying a command awaits those actors, and an actor is
/// reentrant while it awaits, so every operation that reads or changes state runs
/// inside a FIFO gate (``enter()``/``leave()``): commands never interleave, and a
/// snapshot never sees half a command.
public actor Coordinator {
    /// The `by` of events the daemon causes itself (presence, the first appear).
    public static let daemonID: ClientID = "tabd"

    public struct Configuration: Sendable {
        /// How many of the latest events are kept for `resume` (PROTOCOL.md's `--resume-window`).
        public var resumeWindow = 10_000
        public init(resumeWindow: Int = 10_000) { self.resumeWindow = resumeWindow }
    }

    /// Names this history; see PROTOCOL.md's `epoch`.
    public nonisolated let epoch: String
    /// The shared scroll-to-top counter.
    public nonisolated let counter: ScrollCounter
    /// The state before the first event (seq 0): replaying every batch from here
    /// reproduces the current snapshot.
    public nonisolated let origin: Snapshot

    var bar: TabBar
    var tabs: [TabID: TabActor]
    private(set) var seq = 0
    var nextPage: Int
    private var nextClient = 1
    var clients: [ClientInfo] = []
    private var history: EventHistory
    private var observers: [@Sendable (EventBatch) -> Void] = []
    private var subscribers: [Int: (AsyncStream<EventBatch>.Continuation, SubscriptionStatus)] = [:]
    private var nextSubscriber = 0
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private var waitingHead = 0

    /// A new history: the tabs as given (validated), the first one selected, and its
    /// root page's `firstAppear` + `appear` as batch 1 (by `tabd`).
    public init(tabs infos: [TabInfo] = TabInfo.defaults, configuration: Configuration = .init()) throws(CommandError) {
        guard !infos.isEmpty else { throw .invalid("there must be at least one tab") }
        guard infos.count <= Limits.maxTabs else { throw .invalid("at most \(Limits.maxTabs) tabs") }
        var states: [TabState] = []
        for (i, info) in infos.enumerated() {
            let info = try Limits.validate(info)
            guard !states.contains(where: { $0.id == info.id }) else { throw .invalid("duplicate tab id '\(info.id)'") }
            states.append(TabState(info: info, rootPage: "p\(i + 1)"))
        }
        epoch = Self.newEpoch()
        counter = ScrollCounter()
        origin = Snapshot(seq: 0, selected: states[0].id, scrollToTop: 0, tabs: states, clients: [])
        let firstAppear = states[0].appear()
        bar = TabBar(order: states.map(\.id), selected: states[0].id)
        self.tabs = Dictionary(uniqueKeysWithValues: states.map { ($0.id, TabActor(state: $0)) })
        nextPage = states.count + 1
        history = EventHistory(window: configuration.resumeWindow)
        let batch = Self.stamp(firstAppear, after: 0, by: Self.daemonID, ref: nil)
        seq = batch.lastSeq
        history.append(batch)
    }

    private static func newEpoch() -> String {
        let hex = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    // MARK: The gate

    /// Waits until no other operation is running, in arrival order.
    func enter() async {
        guard busy else { busy = true; return }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Hands the gate to the next waiter, or opens it.
    func leave() {
        guard waitingHead < waiting.count else {
            busy = false
            waiting.removeAll(keepingCapacity: true)
            waitingHead = 0
            return
        }
        let next = waiting[waitingHead]
        waitingHead += 1
        next.resume()
    }

    // MARK: Publishing

    private static func stamp(_ events: [Event], after seq: Int, by: ClientID, ref: String?) -> EventBatch {
        let first = seq + 1
        return EventBatch(by: by, ref: ref, events: events.enumerated().map { SequencedEvent(seq: first + $0.offset, event: $0.element) })
    }

    /// Stamps, records and delivers one batch; nil (and nothing sent) when there are no events.
    func publish(_ events: [Event], by: ClientID, ref: String?) -> EventBatch? {
        guard !events.isEmpty else { return nil }
        let batch = Self.stamp(events, after: seq, by: by, ref: ref)
        seq = batch.lastSeq
        history.append(batch)
        for observer in observers { observer(batch) }
        for (id, (continuation, status)) in subscribers {
            if case .dropped = continuation.yield(batch) {
                status.lagged.store(true, ordering: .releasing)
                subscribers[id] = nil
                continuation.finish()
            }
        }
        return batch
    }

    /// Calls `observer` with every later batch, in seq order, on the coordinator's
    /// executor, before the command that caused it returns. It must be quick and never
    /// block: the daemon uses it to encode each batch once and hand it to its sockets.
    public func addObserver(_ observer: @escaping @Sendable (EventBatch) -> Void) {
        observers.append(observer)
    }

    /// Subscribes to the stream from a snapshot (`after` nil) or from the batches after
    /// a seq, when they are all retained (otherwise from a snapshot).
    public func subscribe(after: Int? = nil, bufferLimit: Int = 10_000) async -> Subscription {
        await enter(); defer { leave() }
        let start: Subscription.Start
        if let after, let missed = history.batches(after: after, current: seq) {
            start = .replay(missed)
        } else {
            start = .snapshot(await buildSnapshot())
        }
        let (stream, continuation) = AsyncStream.makeStream(of: EventBatch.self, bufferingPolicy: .bufferingOldest(max(1, bufferLimit)))
        let status = SubscriptionStatus()
        let id = nextSubscriber
        nextSubscriber += 1
        subscribers[id] = (continuation, status)
        continuation.onTermination = { [weak self] _ in
            Task { await self?.unsubscribe(id) }
        }
        return Subscription(start: start, batches: stream, status: status)
    }

    private func unsubscribe(_ id: Int) { subscribers[id] = nil }

    // MARK: Reading

    /// The current state, consistent: taken between commands.
    public func snapshot() async -> Snapshot {
        await enter(); defer { leave() }
        return await buildSnapshot()
    }

    /// The last seq applied.
    public var currentSeq: Int { seq }

    func buildSnapshot() async -> Snapshot {
        var states: [TabState] = []
        states.reserveCapacity(bar.order.count)
        for id in bar.order { states.append(await tabs[id]!.state) }
        return Snapshot(seq: seq, selected: bar.selected, scrollToTop: await counter.value, tabs: states, clients: clients)
    }

    // MARK: Presence

    /// A connection that wants to join: its display name and where it wants to resume.
    public struct JoinRequest: Sendable {
        public var name: String?
        public var resume: Int?
        public var epoch: String?
        public init(name: String? = nil, resume: Int? = nil, epoch: String? = nil) {
            self.name = name; self.resume = resume; self.epoch = epoch
        }
    }

    /// Registers joining clients and forgets leaving ones in one batch (by `tabd`),
    /// and returns a welcome per join, in order. Each welcome includes the whole batch:
    /// a snapshot at its last seq, or a replay that ends with it.
    public func presence(joining: [JoinRequest], leaving: [ClientID] = []) async -> [Welcome] {
        await enter(); defer { leave() }
        var events: [Event] = []
        let known = Set(clients.map(\.id))
        let gone = Set(leaving.filter { known.contains($0) })
        if !gone.isEmpty {
            for id in leaving where gone.contains(id) { events.append(.clientLeft(id)) }
            clients.removeAll { gone.contains($0.id) }
        }
        var joined: [ClientInfo] = []
        for request in joining {
            let id = "c\(nextClient)"
            nextClient += 1
            let name = request.name.map { String(String.UnicodeScalarView($0.unicodeScalars.prefix(Limits.maxClientNameLength))) }
            let client = ClientInfo(id: id, name: (name?.isEmpty ?? true) ? id : name!)
            joined.append(client)
            clients.append(client)
            events.append(.clientJoined(client))
        }
        _ = publish(events, by: Self.daemonID, ref: nil)
        var shared: Snapshot?
        var welcomes: [Welcome] = []
        for (request, client) in zip(joining, joined) {
            if let resume = request.resume, request.epoch == nil || request.epoch == epoch,
               let missed = history.batches(after: resume, current: seq) {
                welcomes.append(Welcome(client: client, epoch: epoch, resumed: true, snapshot: nil, replay: missed, seq: seq))
            } else {
                if shared == nil { shared = await buildSnapshot() }
                welcomes.append(Welcome(client: client, epoch: epoch, resumed: false, snapshot: shared, replay: [], seq: seq))
            }
        }
        return welcomes
    }

    /// One client joins (see ``presence(joining:leaving:)``).
    public func connect(_ request: JoinRequest = .init()) async -> Welcome {
        await presence(joining: [request])[0]
    }

    /// One client leaves: `clientLeft`, unless it was not connected.
    public func disconnect(_ id: ClientID) async {
        _ = await presence(joining: [], leaving: [id])
    }
}
