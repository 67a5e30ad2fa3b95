import Synchronization

/// Owns the tab order, the selection and the event history, applies commands one at
/// a time, stamps their events with gap-free seqs and publishes each command's events
/// as one batch.
///
/// Tab state lives in one ``TabActor`` per tab and the scroll-to-top counter in
/// ``ScrollCounter``; they run on the coordinator's serial executor (``RoomExecutor``), and
/// the coordinator visits them synchronously (``LiveRoom``). So a command is decided and
/// applied in one step, without a suspension point: commands never interleave, and a
/// snapshot never sees half a command, with no gate.
///
/// With a ``Durability`` store, a batch is published (and its command answered) only
/// once it is committed. Commands keep being applied while earlier batches commit, so
/// the store can commit many per transaction; if a commit fails, the coordinator rolls
/// back to the store's last committed state and those commands answer `unavailable`.
/// What waits for a commit (a welcome, a snapshot) is taken first, at the seq it holds,
/// and handed out once that seq is published.
public actor Coordinator {
    /// The `by` of events the daemon causes itself (presence, the first appear).
    public static let daemonID: ClientID = "tabd"

    public struct Configuration: Sendable {
        /// How many of the latest events are kept for `resume` (PROTOCOL.md's `--resume-window`).
        public var resumeWindow = 10_000
        /// A listed room past this many clients counts them instead (`--presence-limit`, 1–100).
        public var presenceLimit = Limits.maxClientsInSnapshot
        /// A counted room reports a changed count at most this often (`--presence-interval`).
        public var presenceInterval: Duration = .seconds(1)
        /// In a cluster, this node's name: counted presence is reported per node.
        public var node: String?
        /// What the room's tabs, stacks and values may weigh together (``StateWeight``):
        /// a command that would take it past this is `invalid`. A state that weighs more
        /// already (stored under a higher bound) still loads; only what would grow it is refused.
        public var maxStateBytes: Int
        /// The default bound on a room's state: 2 MiB.
        public static let defaultMaxStateBytes = 2 << 20
        /// Kept up to date with the room's state's weight, for readers on other threads.
        public var stateBytesGauge: StateBytesGauge?
        /// The actor whose serial executor the coordinator, its tab actors and its counter
        /// run on (the daemon's room, so that the room calls it without a hop); nil: a
        /// ``RoomExecutor`` of their own.
        public var executor: (any Actor)?
        public init(resumeWindow: Int = 10_000, presenceLimit: Int = Limits.maxClientsInSnapshot,
                    presenceInterval: Duration = .seconds(1), node: String? = nil,
                    maxStateBytes: Int = Configuration.defaultMaxStateBytes) {
            self.resumeWindow = resumeWindow
            self.presenceLimit = min(max(presenceLimit, 1), Limits.maxClientsInSnapshot)
            self.presenceInterval = presenceInterval
            self.node = node
            self.maxStateBytes = maxStateBytes
        }
    }

    /// How many client numbers a counted room reserves at a time (one `clientIdsReserved`).
    static let idBlock = 1_000

    /// Names this history; see PROTOCOL.md's `epoch`.
    public nonisolated let epoch: String
    /// The scroll-to-top counter.
    public nonisolated let counter: ScrollCounter
    /// The state this coordinator started from (seq 0 for a new history): replaying
    /// every batch published since reproduces the current snapshot.
    public nonisolated let origin: Snapshot
    /// In a cluster, this node's name (``Configuration/node``).
    public nonisolated var node: String? { presenceRules.node }
    private nonisolated let home: any Actor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { home.unownedExecutor }

    /// The room as commands have been applied to it (ahead of ``output`` while commits are pending).
    var live: LiveRoom
    /// What has been published, and to whom it goes.
    var output: Publication
    /// The clients connected here, live: what `clients` lists and a counted room counts.
    var members = Members()
    /// A counted room's reserved client numbers not handed out yet, and the commit of
    /// the decision that last changed them (nil: committed): if it fails, they are dropped.
    var reservedIDs: Range<Int> = 0..<0
    var reservedBy: CommitWait?
    /// When this coordinator's count was last reported (`presenceCounted`, `clientCount`).
    var lastCountReport: ContinuousClock.Instant?
    nonisolated let presenceRules: PresenceRules
    /// Answers of ``enqueue(_:by:ref:replyTo:commandKey:)``, released as what they report is published.
    var answers = AnswerQueues()
    /// Callers in this process waiting for their answers (``submit(_:by:ref:)``).
    var own = OwnAnswers()
    let durability: (any Durability)?
    /// Applied batches and outcome records waiting for their commit, and the generation of the
    /// store's work (bumped on every rollback): what their reports come to.
    var pipeline = CommitPipeline()
    /// The store's thread signals finished commits here; a task on the coordinator's
    /// executor performs them (``committed()``), so nobody has to await each commit.
    private let commitSignals: AsyncStream<Void>.Continuation
    /// Set while a signal is on its way: the store's reports of one transaction wake the
    /// commit task once, not once per batch.
    private let commitSignalled = SignalFlag()
    /// A task to answer the due `sync`s is on its way (``scheduleDueSyncs()``).
    var dueSyncsScheduled = false

    /// A new in-memory history: the tabs as given (validated), the first one selected,
    /// and its root page's `firstAppear` + `appear` as batch 1 (by `tabd`).
    public init(tabs infos: [TabInfo] = TabInfo.defaults, configuration: Configuration = .init()) throws(CommandError) {
        var stored = try StoredState.genesis(tabs: infos, epoch: Self.newEpoch())
        let origin = stored.snapshot
        let first = Self.stamp(origin.tabs[0].appearEvents(), after: 0, by: Self.daemonID, ref: nil)
        do { try stored.apply(first) } catch { preconditionFailure("the first appear does not fold: \(error)") }
        stored.history = [first]
        self.init(stored: stored, origin: origin, durability: nil, configuration: configuration)
    }

    /// Continues a stored history. Call ``start(forgetting:forgettingNodes:)`` before anything else:
    /// it publishes the first appear of a new history, or the departure of the clients a restart forgot.
    public init(restoring stored: StoredState, durability: any Durability, configuration: Configuration = .init()) {
        self.init(stored: stored, origin: stored.snapshot, durability: durability, configuration: configuration)
    }

    private init(stored: StoredState, origin: Snapshot, durability: (any Durability)?, configuration: Configuration) {
        epoch = stored.epoch
        self.origin = origin
        let home = configuration.executor ?? RoomExecutor()
        self.home = home
        counter = ScrollCounter(value: stored.snapshot.scrollToTop, home: home)
        live = LiveRoom(stored, counter: counter, home: home, maxWeight: configuration.maxStateBytes, gauge: configuration.stateBytesGauge)
        output = Publication(seq: stored.snapshot.seq, count: stored.snapshot.scrollToTop, window: configuration.resumeWindow,
                             history: stored.history)
        presenceRules = PresenceRules(limit: configuration.presenceLimit, interval: configuration.presenceInterval,
                                      node: configuration.node, block: Self.idBlock)
        self.durability = durability
        let (signals, commitSignals) = AsyncStream.makeStream(of: Void.self)
        self.commitSignals = commitSignals
        if durability != nil {
            let me = WeakCoordinator(self)
            Task { await Self.hearCommits(signals, on: home, coordinator: me) }
        }
    }

    deinit { commitSignals.finish() }

    /// The state before any event of a new history (``Snapshot/origin(tabs:)``).
    public static func origin(tabs infos: [TabInfo]) throws(CommandError) -> Snapshot { try Snapshot.origin(tabs: infos) }

    public static func newEpoch() -> String {
        let hex = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Publishes what a durable start needs: on a new history the first tab's root
    /// page appears; after a restart, every client the stored state listed leaves.
    /// `forgetting`: the clients to let go (nil: every client the stored state lists, as
    /// after a restart of a single tabd; a cluster node names those of dead nodes).
    /// `forgettingNodes`: in a cluster's counted room, the nodes whose shares go to 0.
    public func start(forgetting: Set<ClientID>? = nil, forgettingNodes: Set<String> = []) async throws(CommandError) {
        let now = ContinuousClock.now
        while true {
            var events: [Event] = []
            if live.seq == 0, let first = live.state(of: live.bar.selected) { events = first.appearEvents() }
            let gone = live.roster.clients.map(\.id).filter { forgetting?.contains($0) ?? true }
            let decision = presenceRules.decide(presenceState, joining: [], leaving: gone, forgettingNodes: forgettingNodes, now: now)
            live.apply(events + decision.events)
            let wait = record(events + decision.events, by: Self.daemonID, ref: nil)?.1 ?? lastUnpublished?.wait
            if let wait, let error = await waitForCommit(wait) {
                if error.isConflict { continue } // another writer took the seq: decide again on what it left
                throw error
            }
            if decision.reported { lastCountReport = now }
            return
        }
    }

    // MARK: Recording and committing

    static func stamp(_ events: [Event], after seq: Int, by: ClientID, ref: String?) -> EventBatch {
        let first = seq + 1
        return EventBatch(by: by, ref: ref, events: events.enumerated().map { SequencedEvent(seq: first + $0.offset, event: $0.element) })
    }

    /// Stamps applied events as the next batch. In memory it is published at once (and
    /// no wait returned); with a store it is queued for commit and its wait returned.
    @discardableResult
    func record(_ events: [Event], by: ClientID, ref: String?, commandKey: String? = nil) -> (EventBatch, CommitWait?)? {
        guard !events.isEmpty else { return nil }
        let batch = Self.stamp(events, after: live.seq, by: by, ref: ref)
        live.seq = batch.lastSeq
        guard let durability else {
            publish([batch])
            return (batch, nil)
        }
        let (wait, done) = commitWait()
        pipeline.recorded(batch, wait: wait)
        if let commandKey {
            durability.append(batch, generation: pipeline.generation, commandKey: commandKey, done: done)
        } else {
            durability.append(batch, generation: pipeline.generation, done: done)
        }
        return (batch, wait)
    }

    /// A new commit wait, and the store's report that fulfils it and wakes the commit task.
    func commitWait() -> (CommitWait, @Sendable (CommandError?) -> Void) {
        let wait = CommitWait()
        return (wait, { [commitSignals, commitSignalled] error in
            wait.fulfil(error)
            if commitSignalled.raise() { commitSignals.yield() }
        })
    }

    /// The commit task: one hop from the store's thread onto the coordinator's executor per
    /// signal (its stream resumes it there), and it keeps nothing alive.
    private static func hearCommits(_ signals: AsyncStream<Void>, on home: isolated any Actor, coordinator: WeakCoordinator) async {
        for await _ in signals {
            guard let coordinator = coordinator.value else { return }
            committed(coordinator)
        }
    }

    /// ``committed()``, from the commit task: on the coordinator's executor already.
    private static func committed(_ coordinator: Coordinator) { coordinator.assumeIsolated { $0.committed() } }

    /// Called on every signal of the store: performs what the reports come to.
    private func committed() {
        // Reports after this point signal again; those before it are all seen below.
        commitSignalled.lower()
        performReports()
    }

    /// Performs what the store's reports so far come to (``CommitPipeline/reportsArrived()``):
    /// publishes what committed, rolls back a failure, takes in other writers' batches.
    func performReports() {
        for action in pipeline.reportsArrived() {
            switch action {
            case let .publish(batches, outcomeRecords): publishTaken(batches, outcomeRecords: outcomeRecords)
            case let .rollBack(error, failed): rollBack(error, failed: failed)
            case .takeInOthers: absorb()
            }
        }
    }

    /// Waits until the entry `wait` names has left the pipeline, performing the store's
    /// reports in their order as they come (the first entry without one holds back the
    /// rest): published, or rolled back. Returns the failure, once rolled back.
    func waitForCommit(_ wait: CommitWait) async -> CommandError? {
        while pipeline.isWaiting(wait) {
            _ = await (pipeline.firstUnreported ?? wait).wait()
            performReports()
        }
        return wait.value ?? nil
    }

    /// What the room's state weighs now (``LiveRoom/weight``).
    var stateWeight: Int { live.weight }

    /// Answers the committed outcome records, then publishes the committed batches taken out of the
    /// pipeline.
    func publishTaken(_ batches: [EventBatch], outcomeRecords: [Unpublished.OutcomeRecord]) {
        for outcomeRecord in outcomeRecords { answers.settle(outcomeRecord.address, order: outcomeRecord.order, outcomeRecord.answer) }
        publish(batches)
    }

    /// The commit wait and last seq of the last applied batch, if it is not published yet.
    var lastUnpublished: (wait: CommitWait, seq: Int)? { pipeline.last.map { ($0.wait, $0.lastSeq) } }

    // MARK: Publishing

    /// What a publisher gets: committed batches in seq order (possibly none) and the
    /// answers that can be sent after them (possibly none).
    public typealias Publisher = @Sendable (_ batches: [EventBatch], _ answers: [Answer]) -> Void

    /// Records and delivers committed batches, in order, with the answers that can go
    /// now: publishers get both in one call, so an `ack` travels with its events.
    func publish(_ batches: [EventBatch]) {
        if let last = batches.last, let durability, durability.hasOtherWriters { durability.published(through: last.lastSeq) }
        output.append(batches, counter: counter)
        let released = answers.isEmpty ? [] : answers.release(published: output.seq)
        scheduleDueSyncs()
        output.deliver(batches, own.take(released))
    }

    /// Hands the publishers what `address` can be answered now (no batch was published:
    /// only that address's answers can have become ready).
    func publishAnswers(to address: UInt64) {
        let released = answers.release(address, published: output.seq)
        scheduleDueSyncs()
        output.deliver([], own.take(released))
    }

    /// Calls `publisher` on the coordinator's executor with every later publication:
    /// batches once they are published, and the answers of commands submitted with
    /// ``enqueue(_:by:ref:replyTo:commandKey:)`` once they can go. It must be quick and never block:
    /// the daemon hands the bytes to its sockets, answers after the batches, in one go.
    public func addPublisher(_ publisher: @escaping Publisher) { output.addPublisher(publisher) }

    /// Calls `observer` with every later batch, in seq order, on the coordinator's
    /// executor, when it is published (committed, with a store). It must be quick and
    /// never block: the daemon uses it to encode each batch once and hand it to its sockets.
    public func addObserver(_ observer: @escaping @Sendable (EventBatch) -> Void) { output.addObserver(observer) }

    /// Subscribes to the stream from a snapshot (`after` nil) or from the batches after
    /// a seq, when they are all retained (otherwise from a snapshot). Returns once what
    /// its start holds is committed. `replayAtMostSnapshot`: a replay that would weigh more
    /// than a snapshot is one (as a connection's resume).
    public func subscribe(after: Int? = nil, bufferLimit: Int = 10_000, replayAtMostSnapshot: Bool = false) async -> Subscription {
        while true {
            let start: Subscription.Start
            let within = replayAtMostSnapshot ? max(live.maxWeight, live.weight) : .max
            if let after, let missed = output.missed(after: after, pending: pipeline.pendingBatches, within: within) {
                start = .replay(missed)
            } else {
                start = .snapshot(live.snapshot())
            }
            let me = WeakCoordinator(self)
            let (id, stream, status) = output.subscribe(after: live.seq, bufferLimit: bufferLimit) { id in
                Task { await me.value?.unsubscribe(id) }
            }
            if let wait = lastUnpublished?.wait, await waitForCommit(wait) != nil {
                output.unsubscribe(id) // its start was rolled back: take another
                continue
            }
            return Subscription(start: start, batches: stream, status: status)
        }
    }

    private func unsubscribe(_ id: Int) { output.unsubscribe(id) }

    // MARK: Reading

    /// The current state, consistent: taken between commands, and (with a store) returned
    /// once every event in it is committed.
    public func snapshot() async -> Snapshot {
        while true {
            let snapshot = live.snapshot()
            guard let wait = lastUnpublished?.wait, await waitForCommit(wait) != nil else { return snapshot }
        }
    }

    /// The last seq published.
    public var currentSeq: Int { output.seq }
}

/// A flag raised from any thread and lowered by the one who acts on it.
final class SignalFlag: Sendable {
    private let raised = Atomic<Bool>(false)

    /// Raises the flag; true when it was down (the caller must signal).
    func raise() -> Bool { !raised.exchange(true, ordering: .acquiringAndReleasing) }

    func lower() { raised.store(false, ordering: .sequentiallyConsistent) }
}

/// A coordinator that tasks of its own refer to without keeping it alive.
final class WeakCoordinator: Sendable {
    weak let value: Coordinator?
    init(_ value: Coordinator) { self.value = value }
}

extension Array {
    /// The first index whose element satisfies `isAbove`, for a predicate that is false
    /// then true along the array (a binary search).
    package func partitioningIndex(where isAbove: (Element) -> Bool) -> Int {
        var low = 0, high = count
        while low < high {
            let mid = (low + high) / 2
            if isAbove(self[mid]) { high = mid } else { low = mid + 1 }
        }
        return low
    }
}
