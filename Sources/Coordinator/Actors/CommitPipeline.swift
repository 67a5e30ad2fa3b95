/// The coordinator's batches (and outcome records) waiting for their commit, as a value: what the
/// store's reports come to. Its inputs: a batch or an outcome record recorded, the store's reports
/// arrived, other writers' batches stored, a failed commit, a reset. Its decisions: what
/// can be published (the committed prefix, in order; an outcome record not committed holds back what
/// follows it), when to roll back, when to take in the other writers' batches, and at a
/// rollback how far this coordinator's own work really committed (``Rollback``). The
/// coordinator performs them (publishes, answers, rolls its state back, tells the store).
///
/// Reports come from the store's thread into each entry's ``CommitWait``; every decision
/// reads them as they are when it is made.
struct CommitPipeline {
    /// Recorded and not published yet, in the order they were recorded.
    private var waiting: [Unpublished] = []
    /// Bumped on every rollback; the store drops work of older generations.
    private(set) var generation = 0
    /// Other writers stored batches while this coordinator's own were waiting: taken in
    /// once those have settled.
    private var othersPending = false

    /// What the coordinator is to do, in order, after the store's reports arrived.
    enum Action {
        /// Publish these committed batches, in order, and answer these committed outcome records.
        case publish([EventBatch], outcomeRecords: [Unpublished.OutcomeRecord])
        /// A commit failed (`failed` is its entry's wait): roll back
        /// (``CommitPipeline/rollback(after:stored:publishedSeq:otherWriters:)`` decides how).
        case rollBack(CommandError, failed: CommitWait)
        /// Take in what other writers stored (``CommitPipeline/othersStored()``).
        case takeInOthers
    }

    var isEmpty: Bool { waiting.isEmpty }
    /// The last recorded entry.
    var last: Unpublished? { waiting.last }

    /// The batches recorded and not published yet, in seq order.
    var pendingBatches: [EventBatch] { waiting.isEmpty ? [] : waiting.compactMap(\.batch) }

    /// A batch handed to the store, committed when `wait` says so.
    mutating func recorded(_ batch: EventBatch, wait: CommitWait) {
        waiting.append(Unpublished(lastSeq: batch.lastSeq, batch: batch, wait: wait))
    }

    /// An outcome record after `seq` (a keyed command that changed nothing), committed when `wait` says so.
    mutating func recordingOutcome(after seq: Int, wait: CommitWait, outcomeRecord: Unpublished.OutcomeRecord) {
        waiting.append(Unpublished(lastSeq: seq, batch: nil, wait: wait, outcomeRecord: outcomeRecord))
    }

    /// Takes the entries up to `seq` out, in order (they are committed), and returns their
    /// batches and outcome records. An outcome record not committed yet stops it there: it comes after every
    /// batch up to its seq, so nothing of `seq` is held back.
    mutating func takeCommitted(through seq: Int) -> (batches: [EventBatch], outcomeRecords: [Unpublished.OutcomeRecord]) {
        var n = 0
        var outcomeRecords: [Unpublished.OutcomeRecord] = []
        while n < waiting.count, waiting[n].lastSeq <= seq {
            if let outcomeRecord = waiting[n].outcomeRecord {
                guard case .some(nil) = waiting[n].wait.value else { break }
                outcomeRecords.append(outcomeRecord)
            }
            n += 1
        }
        let batches = waiting.prefix(n).compactMap(\.batch)
        waiting.removeFirst(n)
        return (batches, outcomeRecords)
    }

    /// What the reports so far say: the last seq of the committed prefix (nil when the
    /// first entry has no report yet, or failed), and the first failure after it.
    var reported: (committedThrough: Int?, failure: (error: CommandError, wait: CommitWait)?) {
        var n = 0
        while n < waiting.count, let result = waiting[n].wait.value {
            if let error = result { return (n > 0 ? waiting[n - 1].lastSeq : nil, (error, waiting[n].wait)) }
            n += 1
        }
        return (n > 0 ? waiting[n - 1].lastSeq : nil, nil)
    }

    /// The store's reports arrived (its thread signalled): the committed prefix goes out; a
    /// failure rolls back; with nothing of its own left waiting, the coordinator takes in
    /// what other writers stored meanwhile.
    mutating func reportsArrived() -> [Action] {
        var actions: [Action] = []
        let reported = reported
        if let through = reported.committedThrough {
            let (batches, outcomeRecords) = takeCommitted(through: through)
            actions.append(.publish(batches, outcomeRecords: outcomeRecords))
        }
        if let failure = reported.failure {
            actions.append(.rollBack(failure.error, failed: failure.wait))
        } else if othersPending, waiting.isEmpty {
            actions.append(.takeInOthers)
        }
        return actions
    }

    /// Other writers stored batches: whether to take them in now. Not while batches of this
    /// coordinator's own wait for their commit (their seqs may be the others' too: the
    /// rollback sorts that out), and then once they have settled
    /// (``reportsArrived()`` says ``Action/takeInOthers``).
    mutating func othersStored() -> Bool {
        othersPending = !waiting.isEmpty
        return !othersPending
    }

    /// Whether `wait` is still waiting: when not, a report of the same failure has rolled
    /// back already, and what was recorded since (on the restored state) must stay.
    func isWaiting(_ wait: CommitWait) -> Bool { waiting.contains { $0.wait === wait } }

    /// What a failed commit (`error`) comes to, decided before anything changes. `stored` is
    /// the store's committed state, `publishedSeq` the last seq published, `otherWriters`
    /// whether other writers append to the same log.
    func rollback(after error: CommandError, stored: StoredState, publishedSeq: Int, otherWriters: Bool) -> Rollback {
        guard otherWriters else { return .alone(committed: stored.snapshot.seq) }
        let own = ownCommitted(after: publishedSeq, stored: stored)
        return .shared(ownCommitted: own.seq, standingOutcomes: own.outcomeRecords, redo: error.isConflict, publishStoredAfter: publishedSeq)
    }

    /// How far this coordinator's own entries really committed, from `publishedSeq` on, and
    /// the committed outcome records among them. An entry counts as committed when its report came,
    /// or (the report still on its way) when `stored`, the store's committed state, holds
    /// this very batch: decided again, it would be applied twice. The first entry that is
    /// neither ends it.
    func ownCommitted(after publishedSeq: Int, stored: StoredState) -> (seq: Int, outcomeRecords: [Unpublished.OutcomeRecord]) {
        var seq = publishedSeq
        var outcomeRecords: [Unpublished.OutcomeRecord] = []
        for entry in waiting {
            if case .some(nil) = entry.wait.value {} else if let batch = entry.batch, stored.holds(batch) {} else { break }
            seq = entry.lastSeq
            if let outcomeRecord = entry.outcomeRecord { outcomeRecords.append(outcomeRecord) }
        }
        return (seq, outcomeRecords)
    }

    /// The wait of the first entry whose report has not come: what holds back every
    /// entry after it.
    var firstUnreported: CommitWait? {
        waiting.first { if case .none = $0.wait.value { true } else { false } }?.wait
    }

    /// Forgets every entry and starts a new generation, returned. The entries through
    /// `committed` (a rollback counted them as committed: the store's state holds them,
    /// their reports still on their way) say so at once; the others were built on state
    /// that is gone: the store fails them, and their waits say `error` at once, whatever
    /// the store reports later.
    mutating func reset(failing error: CommandError, committed: Int? = nil) -> Int {
        var prefix = true
        for entry in waiting {
            prefix = prefix && committed.map { entry.lastSeq <= $0 } ?? false
            entry.wait.fulfil(prefix ? nil : error)
        }
        waiting = []
        generation += 1
        return generation
    }
}

/// What a failed commit comes to (``CommitPipeline/rollback(after:stored:publishedSeq:otherWriters:)``).
/// The coordinator performs it: publishes, answers, puts its state back to the store's
/// last commit, tells the store the new generation.
enum Rollback: Equatable {
    /// The coordinator writes alone: what the store committed, through `committed`, is
    /// published; every answer after it fails with the error.
    case alone(committed: Int)
    /// Other writers append too. This coordinator's own work committed through
    /// `ownCommitted` (``CommitPipeline/ownCommitted(after:stored:)``): the outcome records among it
    /// stand; the answers after it are decided again on the restored state when `redo` (a
    /// conflict: another writer took the seq, the command may still apply) and fail
    /// otherwise, taken before anything is published (another writer's batch may end at a
    /// seq one of them waits for). Then the store's history after `publishStoredAfter` (the
    /// last seq published) goes out in its order: this coordinator's committed batches and
    /// the others'.
    case shared(ownCommitted: Int, standingOutcomes: [Unpublished.OutcomeRecord], redo: Bool, publishStoredAfter: Int)
}

/// A batch or an outcome record recorded and waiting for its commit.
struct Unpublished {
    /// The batch's last seq; an outcome record's place (the seq it follows).
    let lastSeq: Int
    /// Nil for an outcome record.
    let batch: EventBatch?
    let wait: CommitWait
    var outcomeRecord: OutcomeRecord? = nil

    /// A keyed command's decision that changed nothing, and where its answer waits.
    struct OutcomeRecord: Equatable {
        let address: UInt64
        let order: Int
        let record: KeyedOutcome
        let ref: String?

        /// The answer the command gets once the outcome record is committed.
        var answer: AnswerQueues.Pending {
            switch record {
            case let .applied(seq), let .unchanged(seq): .unchanged(after: seq)
            case let .refused(error): .ready(.error(ref: ref, error))
            }
        }
    }
}

