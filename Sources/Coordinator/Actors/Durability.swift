import Locking


/// The state a durable store holds at its last commit: what tabd restarts from, and
/// what the coordinator falls back to when a commit fails.
public struct StoredState: Sendable, Equatable {
    /// Names the history; kept across restarts on the same store.
    public var epoch: String
    /// The state at the last committed seq, every client listed.
    public var snapshot: Snapshot
    /// The next page number (`p<n>`) and client number (`c<n>`) to hand out.
    public var nextPage: Int
    public var nextClient: Int
    /// The retained batches (the resume window), oldest first, the last one ending at
    /// `snapshot.seq`. Empty when it is only a fallback.
    public var history: [EventBatch]

    public init(epoch: String, snapshot: Snapshot, nextPage: Int, nextClient: Int, history: [EventBatch]) {
        self.epoch = epoch; self.snapshot = snapshot; self.nextPage = nextPage; self.nextClient = nextClient; self.history = history
    }
}

extension StoredState {
    /// Whether the kept history holds this very batch (its seqs, events, author and ref).
    public func holds(_ batch: EventBatch) -> Bool {
        guard batch.lastSeq <= snapshot.seq else { return false }
        let i = history.partitioningIndex { $0.lastSeq >= batch.lastSeq }
        return i < history.count && history[i] == batch
    }

    /// The stored state after one batch: the snapshot folded, and the id counters past
    /// every id the batch hands out.
    public mutating func apply(_ batch: EventBatch) throws(ReplayError) {
        try snapshot.apply(batch)
        var ids = IDCounters(nextPage: nextPage, nextClient: nextClient)
        for e in batch.events { ids.apply(e.event) }
        (nextPage, nextClient) = (ids.nextPage, ids.nextClient)
    }
}

/// The room's log: a store that makes batches durable before the coordinator publishes
/// them. Two implementations: the state file (or memory) of a single tabd, which only this
/// coordinator writes, and a cluster's engine, which other writers append to as well.
///
/// **Keyed commands.** A command may come with a key (a writer that took it over from
/// another, or that another handed over): the log remembers each key's outcome, its batch or,
/// for a decision that changed nothing, a record of that outcome, in the log's order, so
/// that whichever writer decides the command again finds it decided
/// (``storedOutcome(_:)``) and nothing is applied twice. A log without other writers never
/// sees a key twice and keeps nothing for it.
///
/// Batches are committed in the order they are appended, many per transaction. Each
/// append's `done` is called exactly once, from the store's own thread: with nil once
/// the batch is durable, or with an error. After a failure, every batch already queued
/// fails too (it was built on state that is being rolled back) until ``reset(generation:)``.
public protocol Durability: Sendable {
    func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void)
    /// The state as of the last successful commit.
    func committedState() -> StoredState
    /// Accepts batches of `generation` (and later) again; fails what is left of older ones.
    func reset(generation: Int)
    /// Whether other writers append to the same log. Then a conflict is decided again (its commands get the answers of their
    /// new decisions, not `unavailable`), and ``committedState()``'s history holds every
    /// batch past what this coordinator published, other writers' batches included. A
    /// store of its own (false) only ever holds this coordinator's batches.
    var hasOtherWriters: Bool { get }
    /// With other writers, the writer that owns a listed client (the one it joined), if known.
    func owner(of client: ClientID) -> String?
    /// Like ``append(_:generation:done:)``, for the batch of a keyed command: the log
    /// records `commandKey` with it, and ``storedOutcome(_:)`` finds it from then on.
    func append(_ batch: EventBatch, generation: Int, commandKey: String, done: @escaping @Sendable (CommandError?) -> Void)
    /// What the log holds of the keyed command `commandKey` (its batch, or the record of
    /// a decision that changed nothing), if anything: that command is never decided
    /// again, and its answer is the one recorded.
    func storedOutcome(_ commandKey: String) -> KeyedOutcome?
    /// Records, in the log's order after `seq`, that the keyed command `commandKey` was
    /// decided here and changed nothing (`record` says how: unchanged at `seq`, or
    /// refused). Another writer that decides the same command afterwards finds it
    /// (``storedOutcome(_:)``); one that recorded it first makes this record fail
    /// as a conflict (the command is then decided again, and finds that record). `done`
    /// as for ``append(_:generation:done:)``, in order with the batches.
    func recordOutcome(after seq: Int, record: KeyedOutcome, generation: Int, commandKey: String, done: @escaping @Sendable (CommandError?) -> Void)
    /// The coordinator has published every batch up to `seq`: with other writers, the
    /// history of ``committedState()`` may drop batches up to it, and must keep every one
    /// after it, however far the coordinator lags (paused while the others wrote).
    func published(through seq: Int)
}

extension Durability {
    public var hasOtherWriters: Bool { false }
    public func owner(of client: ClientID) -> String? { nil }
    /// A log with no other writers never meets a key twice: nothing to keep.
    public func append(_ batch: EventBatch, generation: Int, commandKey: String, done: @escaping @Sendable (CommandError?) -> Void) {
        append(batch, generation: generation, done: done)
    }
    public func storedOutcome(_ commandKey: String) -> KeyedOutcome? { nil }
    /// Without other writers nobody else can decide the command: nothing to record.
    public func recordOutcome(after seq: Int, record: KeyedOutcome, generation: Int, commandKey: String,
                      done: @escaping @Sendable (CommandError?) -> Void) {
        done(nil)
    }
    /// A store of its own keeps no history for the coordinator.
    public func published(through seq: Int) {}
}

/// What a log holds of a keyed command's decision: its batch, or the record of a decision
/// that changed nothing (``Durability/recordOutcome(after:record:generation:commandKey:done:)``).
public enum KeyedOutcome: Sendable, Equatable {
    /// Applied: its batch ends at `seq`.
    case applied(seq: Int)
    /// Changed nothing, decided on the state at `seq`: its answer is `ack` at `seq`.
    case unchanged(seq: Int)
    /// Refused: its answer is this error.
    case refused(CommandError)
}

/// A batch's commit, reported once from the store's thread: nil when durable, else why
/// not. Any number of tasks may wait on it (the command's own outcome, a `sync` settling,
/// a no-op command queued behind it).
typealias CommitWait = OneShot<CommandError?>
