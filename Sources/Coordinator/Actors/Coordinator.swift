import Synchronization

/// Owns the tab order, the selection and the event history, applies commands one at
/// a time, stamps their events with gap-free seqs and publishes each command's events
/// as one batch.
///
/// Tab state lives in one ``TabActor`` per tab and the scroll-to-top counter in
/// ``ScrollCounter``. Applying a command awaits those actors, and an actor is
/// reentrant while it awaits, so every operation that reads or changes state runs
/// inside a FIFO gate (``enter()``/``leave()``): commands never interleave, and a
/// snapshot never sees half a command.
///
/// With a ``Durability`` store, a batch is published (and its command answered) only
/// once it is committed. Commands keep being applied while earlier batches commit, so
/// the store can commit many per transaction; if a commit fails, the coordinator rolls
/// back to the store's last committed state and those commands answer `unavailable`.
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

    var bar: TabBar
    var tabs: [TabID: TabActor]
    /// Each tab's weight as of the last event applied to it, and their sum: the room's
    /// state as the bound on it (``Configuration/maxStateBytes``) counts it.
    private var tabWeights: [TabID: Int] = [:]
    private(set) var stateWeight = 0 { didSet { stateBytesGauge?.set(stateWeight) } }
    let maxStateBytes: Int
    private nonisolated let stateBytesGauge: StateBytesGauge?
    /// The last seq applied (ahead of ``publishedSeq`` while commits are pending).
    private(set) var seq: Int
    /// The last seq published.
    private(set) var publishedSeq: Int
    /// The scroll-to-top counter as of ``publishedSeq`` (what ``ScrollCounter/value``
    /// shows), folded by ``ScrollCounter/apply(_:to:)`` like every other reading of it.
    private var publishedCount: Int
    /// The next page and client numbers.
    var ids: IDCounters
    /// Who is connected, as the stream says (in a counted room: the count it last reported).
    var roster: Roster
    /// The clients connected here, live: what `clients` lists and a counted room counts.
    var members = Members()
    /// A counted room's reserved client numbers not handed out yet.
    var reservedIDs: Range<Int> = 0..<0
    /// When this coordinator's count was last reported (`presenceCounted`, `clientCount`).
    var lastCountReport: ContinuousClock.Instant?
    nonisolated let presenceRules: PresenceRules
    private var history: EventHistory
    private var observers: [@Sendable (EventBatch) -> Void] = []
    private var publishers: [Publisher] = []
    /// Answers of ``enqueue(_:by:ref:replyTo:)``, released as what they report is published.
    var answers = AnswerQueues()
    /// The store's thread signals every finished commit here; a task of the coordinator
    /// publishes what committed (or rolls back), so nobody has to await each commit.
    private let commitSignals: AsyncStream<Void>.Continuation
    /// Set while a signal is on its way: the store's reports of one transaction wake the
    /// commit task once, not once per batch.
    private let commitSignalled = SignalFlag()
    private var subscribers: [Int: (AsyncStream<EventBatch>.Continuation, SubscriptionStatus)] = [:]
    private var nextSubscriber = 0
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private var waitingHead = 0
    private let durability: (any Durability)?
    /// Applied batches and outcome records waiting for their commit, and the generation of the
    /// store's work (bumped on every rollback): what their reports come to.
    private var pipeline = CommitPipeline()
    /// A task to answer the due `sync`s is on its way (``scheduleDueSyncs()``): at most one
    /// waits for the gate, however many batches are published meanwhile.
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

    /// Continues a stored history. Call ``start()`` before anything else: it publishes
    /// the first appear of a new history, or the departure of the clients a restart forgot.
    public init(restoring stored: StoredState, durability: any Durability, configuration: Configuration = .init()) {
        self.init(stored: stored, origin: stored.snapshot, durability: durability, configuration: configuration)
    }

    private init(stored: StoredState, origin: Snapshot, durability: (any Durability)?, configuration: Configuration) {
        epoch = stored.epoch
        self.origin = origin
        counter = ScrollCounter(value: stored.snapshot.scrollToTop)
        (bar, tabs, tabWeights) = Self.actors(for: stored.snapshot)
        maxStateBytes = configuration.maxStateBytes
        stateBytesGauge = configuration.stateBytesGauge
        seq = stored.snapshot.seq
        publishedSeq = stored.snapshot.seq
        publishedCount = stored.snapshot.scrollToTop
        ids = IDCounters(covering: stored.snapshot, nextPage: stored.nextPage, nextClient: stored.nextClient)
        roster = stored.snapshot.roster
        presenceRules = PresenceRules(limit: configuration.presenceLimit, interval: configuration.presenceInterval,
                                      node: configuration.node, block: Self.idBlock)
        history = EventHistory(window: configuration.resumeWindow)
        for batch in stored.history { history.append(batch) }
        stateWeight = tabWeights.values.reduce(0, +)
        configuration.stateBytesGauge?.set(stateWeight)
        self.durability = durability
        let (signals, commitSignals) = AsyncStream.makeStream(of: Void.self)
        self.commitSignals = commitSignals
        if durability != nil {
            Task { [weak self] in
                for await _ in signals { await self?.committed() }
            }
        }
    }

    deinit { commitSignals.finish() }

    /// The state before any event of a new history (``Snapshot/origin(tabs:)``).
    public static func origin(tabs infos: [TabInfo]) throws(CommandError) -> Snapshot { try Snapshot.origin(tabs: infos) }

    public static func newEpoch() -> String {
        let hex = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// The bar, an actor per tab, and each tab weighed in full (once: its actor keeps it).
    private static func actors(for snapshot: Snapshot) -> (TabBar, [TabID: TabActor], [TabID: Int]) {
        let weights = Dictionary(uniqueKeysWithValues: snapshot.tabs.map { ($0.id, StateWeight.tab($0)) })
        return (TabBar(order: snapshot.tabs.map(\.id), selected: snapshot.selected),
                Dictionary(uniqueKeysWithValues: snapshot.tabs.map { ($0.id, TabActor(state: $0, weight: weights[$0.id])) }),
                weights)
    }

    /// Publishes what a durable start needs: on a new history the first tab's root
    /// page appears; after a restart, every client the stored state listed leaves.
    /// `forgetting`: the clients to let go (nil: every client the stored state lists, as
    /// after a restart of a single tabd; a cluster node names those of dead nodes).
    /// `forgettingNodes`: in a cluster's counted room, the nodes whose shares go to 0.
    public func start(forgetting: Set<ClientID>? = nil, forgettingNodes: Set<String> = []) async throws(CommandError) {
        await enter(); defer { leave() }
        let now = ContinuousClock.now
        while true {
            var events: [Event] = []
            if seq == 0, let first = tabs[bar.selected] { events = await first.state.appearEvents() }
            let gone = roster.clients.map(\.id).filter { forgetting?.contains($0) ?? true }
            let decision = presenceRules.decide(presenceState, joining: [], leaving: gone, forgettingNodes: forgettingNodes, now: now)
            events += decision.events
            do { try await applyAndSettle(events, by: Self.daemonID, ref: nil) } catch where error.isConflict { continue }
            if decision.reported { lastCountReport = now }
            return
        }
    }

    /// What the presence rules read.
    private var presenceState: PresenceRules.State {
        PresenceRules.State(roster: roster, members: members, nextClient: ids.nextClient, reserved: reservedIDs,
                            lastReport: lastCountReport, owner: { [durability] in durability?.owner(of: $0) })
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

    // MARK: Applying and publishing

    /// The one road by which decided events change the live state: each event goes to
    /// the owner of what it changes, and each owner changes by its own `apply` — the same
    /// functions that fold a stream on replay (``Snapshot/apply(_:)-(SequencedEvent)``).
    /// Consecutive events of one tab reach its actor in one visit.
    func apply(_ events: [Event]) async {
        func fold(_ body: () throws(FoldError) -> Void) {
            do { try body() } catch { preconditionFailure("a decided event does not fold: \(error)") }
        }
        var i = 0
        while i < events.count {
            let event = events[i]
            ids.apply(event)
            switch event.part {
            case .bar:
                fold { () throws(FoldError) in _ = try bar.apply(event) }
                // The bar's order changed: a tab's actor comes or goes with it.
                if case let .tabAdded(state, _) = event {
                    let weight = StateWeight.tab(state)
                    tabs[state.id] = TabActor(state: state, weight: weight)
                    tabWeights[state.id] = weight
                    stateWeight += weight
                } else if case let .tabRemoved(id) = event {
                    tabs[id] = nil
                    stateWeight -= tabWeights.removeValue(forKey: id) ?? 0
                }
            case .presence:
                fold { () throws(FoldError) in try roster.apply(event) }
            case let .tab(id):
                if case .scrollToTop = event { await counter.apply(event) }
                // The tab's events that follow go to its actor in one call (up to the next
                // scroll-to-top, which the counter sees first).
                var end = i + 1
                while end < events.count, events[end].tabScope == id {
                    if case .scrollToTop = events[end] { break }
                    ids.apply(events[end])
                    end += 1
                }
                let weight = await tabs[id]!.apply(events[i..<end], selected: id == bar.selected)
                stateWeight += weight - (tabWeights.updateValue(weight, forKey: id) ?? 0)
                i = end
                continue
            }
            i += 1
        }
    }

    private static func stamp(_ events: [Event], after seq: Int, by: ClientID, ref: String?) -> EventBatch {
        let first = seq + 1
        return EventBatch(by: by, ref: ref, events: events.enumerated().map { SequencedEvent(seq: first + $0.offset, event: $0.element) })
    }

    /// Stamps applied events as the next batch. In memory it is published at once (and
    /// nil returned); with a store it is queued for commit and its wait returned.
    func record(_ events: [Event], by: ClientID, ref: String?, commandKey: String? = nil) -> (EventBatch, CommitWait?)? {
        guard !events.isEmpty else { return nil }
        let batch = Self.stamp(events, after: seq, by: by, ref: ref)
        seq = batch.lastSeq
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
    private func commitWait() -> (CommitWait, @Sendable (CommandError?) -> Void) {
        let wait = CommitWait()
        return (wait, { [commitSignals, commitSignalled] error in
            wait.fulfil(error)
            if commitSignalled.raise() { commitSignals.yield() }
        })
    }

    /// Records an outcome (``Durability/recordOutcome(after:record:generation:commandKey:done:)``) for a
    /// keyed command that changed nothing (`record`) on the state at the current seq:
    /// its answer, waiting as ``AnswerQueues/Pending/recordingOutcome`` at `address` and `order`,
    /// is released once the outcome record is committed, and decided again if the outcome record fails.
    func storeOutcome(_ record: KeyedOutcome, commandKey: String, address: UInt64, order: Int, ref: String?) {
        guard let durability else { return }
        let (wait, done) = commitWait()
        pipeline.recordingOutcome(after: seq, wait: wait, outcomeRecord: .init(address: address, order: order, record: record, ref: ref))
        durability.recordOutcome(after: seq, record: record, generation: pipeline.generation, commandKey: commandKey, done: done)
    }

    /// Records events and, with a store, waits (holding the gate) until they are
    /// committed and published; rolls back and throws `unavailable` if not.
    /// A conflict (another writer took the seq) is thrown too: the caller decides again.
    func applyAndSettle(_ events: [Event], by: ClientID, ref: String?) async throws(CommandError) {
        await apply(events)
        let recorded = record(events, by: by, ref: ref)
        if let error = await settle() { throw error }
        // Settled, but this batch itself may have been rolled back by a conflict.
        if let wait = recorded?.1, case let .some(.some(error)) = wait.value { throw error }
    }

    /// Waits, holding the gate, until every applied batch is committed and published.
    /// Returns the failure (after rolling back) if a commit failed. After a conflict, the
    /// commands decided again are waited for too.
    func settle() async -> CommandError? {
        while let last = pipeline.last {
            if let error = await last.wait.wait() {
                await rollBackHoldingGate(error, failed: last.wait)
                if error.isConflict { continue }
                return error
            }
            publishCommitted(through: last.lastSeq)
            return nil
        }
        return nil
    }

    /// Publishes, in order, the waiting batches up to `seq` (they are committed), and
    /// answers the committed outcome records among them. An outcome record not committed yet stops it there: it
    /// comes after every batch up to its seq, so nothing of `seq` is held back.
    func publishCommitted(through seq: Int) {
        let (ready, outcomeRecords) = pipeline.takeCommitted(through: seq)
        publishTaken(ready, outcomeRecords: outcomeRecords)
    }

    /// Answers the committed outcome records, then publishes the committed batches taken out of the
    /// pipeline.
    private func publishTaken(_ batches: [EventBatch], outcomeRecords: [Unpublished.OutcomeRecord]) {
        for outcomeRecord in outcomeRecords { answers.settle(outcomeRecord.address, order: outcomeRecord.order, outcomeRecord.answer) }
        publish(batches)
    }

    /// Called on every signal of the store: performs what the reports come to
    /// (``CommitPipeline/reportsArrived()``).
    private func committed() async {
        // Reports after this point signal again; those before it are all seen below.
        commitSignalled.lower()
        for action in pipeline.reportsArrived() {
            switch action {
            case let .publish(batches, outcomeRecords): publishTaken(batches, outcomeRecords: outcomeRecords)
            case let .rollBack(error, failed): await rollBack(error, failed: failed)
            case .takeInOthers: await absorb()
            }
        }
    }

    /// After a failed commit: publishes what did commit, then puts the state back to the
    /// store's last commit. The batches still waiting were built on state that is gone:
    /// the store fails them, and they are never published.
    ///
    /// `failed` is the wait of the batch whose failure is reported: when it is no longer
    /// waiting, another report of the same failure has rolled back already, and batches
    /// applied since (on the restored state) must not be thrown away.
    func rollBackHoldingGate(_ error: CommandError, failed: CommitWait) async {
        guard let durability, pipeline.isWaiting(failed) else { return }
        let stored = durability.committedState()
        let plan = pipeline.rollback(after: error, stored: stored, publishedSeq: publishedSeq, otherWriters: durability.hasOtherWriters)
        var held: [AnswerQueues.Redo] = []
        switch plan {
        case let .alone(committed):
            publishCommitted(through: committed)
        case let .shared(ownCommitted, standingOutcomes, redo, publishStoredAfter):
            // Answers past what really committed must not be released by what is published
            // below.
            for outcomeRecord in standingOutcomes { answers.settle(outcomeRecord.address, order: outcomeRecord.order, outcomeRecord.answer) }
            if redo {
                held = answers.takeRedo(after: ownCommitted)
            } else {
                answers.rollBack(to: ownCommitted, error: error)
            }
            publish(stored.history.filter { $0.lastSeq > publishStoredAfter })
        }
        let generation = pipeline.reset()
        (bar, tabs, tabWeights) = Self.actors(for: stored.snapshot)
        stateWeight = tabWeights.values.reduce(0, +)
        seq = stored.snapshot.seq
        ids = IDCounters(covering: stored.snapshot, nextPage: stored.nextPage, nextClient: stored.nextClient)
        roster = stored.snapshot.roster
        // A block the restored state does not hold reserved is no longer this coordinator's.
        if ids.nextClient < reservedIDs.upperBound { reservedIDs = 0..<0 }
        publishedCount = stored.snapshot.scrollToTop
        await counter.reset(to: stored.snapshot.scrollToTop)
        durability.reset(generation: generation)
        switch plan {
        case .shared: await redecide(held)
        case let .alone(committed): answers.rollBack(to: committed, error: error)
        }
        publish([])
    }

    /// Takes in what other writers stored: every batch of the
    /// store's committed state past this coordinator's, applied and published in order.
    /// While batches of this coordinator's own are pending, nothing is taken in and the
    /// gate is not held for their commit: once they have all committed, the commit task
    /// takes the others' batches in; if another writer took their seqs, the rollback does
    /// (and the commands are decided again after the others' batches). Waiting here for
    /// the commit, as before, stopped every command for a round trip to the engine at
    /// each batch of another node: with writers on every node, a node decided one
    /// command per round trip.
    public func absorb() async {
        await enter(); defer { leave() }
        guard let durability, pipeline.othersStored() else { return }
        let stored = durability.committedState()
        // The history is in seq order: start at the first batch past this seq (a binary
        // search; the history holds at least the resume window).
        let start = stored.history.partitioningIndex { $0.lastSeq > seq }
        for batch in stored.history[start...] {
            guard batch.events.first?.seq == seq + 1 else { break } // not contiguous: wait for more
            await apply(batch.events.map(\.event))
            seq = batch.lastSeq
            publish([batch])
        }
    }

    func rollBack(_ error: CommandError, failed: CommitWait) async {
        await enter(); defer { leave() }
        await rollBackHoldingGate(error, failed: failed)
    }

    /// What the log holds of the keyed command `id`, if anything.
    func storedOutcome(_ id: String) -> KeyedOutcome? { durability?.storedOutcome(id) }

    /// Whether a keyed command's decisions that change nothing are recorded: another writer may decide it too.
    var recordsOutcomes: Bool { durability?.hasOtherWriters ?? false }

    /// The commit wait and last seq of the last applied batch, if it is not published yet.
    var lastUnpublished: (wait: CommitWait, seq: Int)? { pipeline.last.map { ($0.wait, $0.lastSeq) } }

    /// Records and delivers committed batches, in order, with the answers that can go
    /// now: publishers get both in one call, so an `ack` travels with its events.
    func publish(_ batches: [EventBatch]) {
        if let last = batches.last, let durability, durability.hasOtherWriters { durability.published(through: last.lastSeq) }
        for batch in batches {
            publishedSeq = batch.lastSeq
            history.append(batch)
            for e in batch.events {
                do { try ScrollCounter.apply(e.event, to: &publishedCount) } catch {
                    preconditionFailure("a published event does not fold: \(error)")
                }
            }
            counter.announce(publishedCount)
            for observer in observers { observer(batch) }
            for (id, (continuation, status)) in subscribers {
                if case .dropped = continuation.yield(batch) {
                    status.lagged.store(true, ordering: .releasing)
                    subscribers[id] = nil
                    continuation.finish()
                }
            }
        }
        let released = answers.isEmpty ? [] : answers.release(published: publishedSeq)
        scheduleDueSyncs()
        guard !batches.isEmpty || !released.isEmpty else { return }
        for publisher in publishers { publisher(batches, released) }
    }

    /// Hands the publishers what `address` can be answered now (no batch was published:
    /// only that address's answers can have become ready).
    func publishAnswers(to address: UInt64) {
        let released = answers.release(address, published: publishedSeq)
        scheduleDueSyncs()
        guard !released.isEmpty else { return }
        for publisher in publishers { publisher([], released) }
    }

    /// Answers the due `sync`s in a task of their own (they wait for the commits before
    /// them), unless one is on its way already.
    func scheduleDueSyncs() {
        guard answers.hasDueSyncs, !dueSyncsScheduled else { return }
        dueSyncsScheduled = true
        Task { await answerDueSyncs() }
    }

    /// What a publisher gets: committed batches in seq order (possibly none) and the
    /// answers that can be sent after them (possibly none).
    public typealias Publisher = @Sendable (_ batches: [EventBatch], _ answers: [Answer]) -> Void

    /// Calls `publisher` on the coordinator's executor with every later publication:
    /// batches once they are published, and the answers of commands submitted with
    /// ``enqueue(_:by:ref:replyTo:)`` once they can go. It must be quick and never block:
    /// the daemon hands the bytes to its sockets, answers after the batches, in one go.
    public func addPublisher(_ publisher: @escaping Publisher) {
        publishers.append(publisher)
    }

    /// Calls `observer` with every later batch, in seq order, on the coordinator's
    /// executor, when it is published (committed, with a store). It must be quick and
    /// never block: the daemon uses it to encode each batch once and hand it to its sockets.
    public func addObserver(_ observer: @escaping @Sendable (EventBatch) -> Void) {
        observers.append(observer)
    }

    /// Subscribes to the stream from a snapshot (`after` nil) or from the batches after
    /// a seq, when they are all retained (otherwise from a snapshot).
    public func subscribe(after: Int? = nil, bufferLimit: Int = 10_000) async -> Subscription {
        await enter(); defer { leave() }
        _ = await settle()
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

    /// The current state, consistent: taken between commands, and (with a store) with
    /// every event in it committed.
    public func snapshot() async -> Snapshot {
        await enter(); defer { leave() }
        _ = await settle()
        return await buildSnapshot()
    }

    /// The last seq published.
    public var currentSeq: Int { publishedSeq }

    func buildSnapshot() async -> Snapshot {
        var states: [TabState] = []
        states.reserveCapacity(bar.order.count)
        for id in bar.order { states.append(await tabs[id]!.state) }
        return Snapshot(seq: seq, selected: bar.selected, scrollToTop: await counter.working, tabs: states, clients: roster.clients,
                        clientCount: roster.count, presence: roster.mode, nodes: roster.nodes)
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
    /// a snapshot at its last seq, or a replay that ends with it. Throws `unavailable`
    /// (and changes nothing) when the store cannot commit the batch.
    ///
    /// A listed room's batch lists each leave and join; a counted room's emits what
    /// ``PresenceRules`` decide (a reserved block of ids, a count now and then, or the
    /// room listed again). `now` is when the batch is decided, for the count's interval.
    public func presence(joining: [JoinRequest], leaving: [ClientID] = [], forgettingNodes: Set<String> = [],
                         immediately: Bool = false, now: ContinuousClock.Instant = .now) async throws(CommandError) -> [Welcome] {
        await enter(); defer { leave() }
        if let error = await settle() { throw error }
        let requests = joining.map { request -> PresenceRules.Join in
            let name = request.name.map { String(String.UnicodeScalarView($0.unicodeScalars.prefix(Limits.maxClientNameLength))) }
            return PresenceRules.Join(name: (name?.isEmpty ?? true) ? nil : name)
        }
        var decision: PresenceRules.Decision
        while true {
            decision = presenceRules.decide(presenceState, joining: requests, leaving: leaving, forgettingNodes: forgettingNodes,
                                            immediately: immediately, now: now)
            // Another writer took the seq: decide again on the state it left.
            do { try await applyAndSettle(decision.events, by: Self.daemonID, ref: nil); break } catch where error.isConflict { continue }
        }
        for id in decision.left { members.remove(id) }
        for client in decision.joined { members.add(client) }
        reservedIDs = decision.reserved
        if decision.reported { lastCountReport = now }
        var shared: Snapshot?
        var welcomes: [Welcome] = []
        for (request, client) in zip(joining, decision.joined) {
            // A replay may cost what a snapshot may (the bound on the room's state): past
            // that, the snapshot is the cheaper answer, and as good a one.
            if let resume = request.resume, request.epoch == nil || request.epoch == epoch,
               let missed = history.batches(after: resume, current: seq),
               Self.replayFits(missed, within: max(maxStateBytes, stateWeight)) {
                welcomes.append(Welcome(client: client, epoch: epoch, resumed: true, snapshot: nil, replay: missed, seq: seq))
            } else {
                if shared == nil { shared = await buildSnapshot() }
                welcomes.append(Welcome(client: client, epoch: epoch, resumed: false, snapshot: shared, replay: [], seq: seq))
            }
        }
        return welcomes
    }

    /// Whether `batches`' frames weigh at most `budget` bytes (stops counting past it).
    private static func replayFits(_ batches: [EventBatch], within budget: Int) -> Bool {
        var bytes = 0
        for batch in batches {
            bytes += batch.frameBytes.count
            if bytes > budget { return false }
        }
        return true
    }

    /// When a counted room's changed count is due to be reported (``reportPresence(now:)``),
    /// or nil when the stream's count is current.
    public var presenceReportDue: ContinuousClock.Instant? {
        presenceRules.reportDue(roster: roster, members: members, lastReport: lastCountReport)
    }

    /// Reports a counted room's count if it changed and its interval has passed (or at
    /// once, `immediately`), and lists again in a listed room the clients connected here
    /// that it does not list.
    public func reportPresence(immediately: Bool = false, now: ContinuousClock.Instant = .now) async throws(CommandError) {
        _ = try await presence(joining: [], leaving: [], immediately: immediately, now: now)
    }

    /// One client joins (see ``presence(joining:leaving:)``).
    public func connect(_ request: JoinRequest = .init()) async throws(CommandError) -> Welcome {
        try await presence(joining: [request])[0]
    }

    /// One client leaves: `clientLeft`, unless it was not connected.
    public func disconnect(_ id: ClientID) async throws(CommandError) {
        _ = try await presence(joining: [], leaving: [id])
    }
}

/// A flag raised from any thread and lowered by the one who acts on it.
final class SignalFlag: Sendable {
    private let raised = Atomic<Bool>(false)

    /// Raises the flag; true when it was down (the caller must signal).
    func raise() -> Bool { !raised.exchange(true, ordering: .acquiringAndReleasing) }

    func lower() { raised.store(false, ordering: .sequentiallyConsistent) }
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
