import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The commit pipeline as a value (``CommitPipeline``): what the store's reports on the
/// coordinator's waiting batches and outcomeRecords come to, decided without an actor or a store.
@Suite struct CommitPipelineTests {
    static func batch(_ seq: Int, offset: Double = 1) -> EventBatch {
        EventBatch(by: "c1", ref: "r\(seq)", events: [SequencedEvent(seq: seq, event: .scrolled(tab: "home", offset: offset))])
    }

    static func outcomeRecord(_ address: UInt64) -> Unpublished.OutcomeRecord {
        Unpublished.OutcomeRecord(address: address, order: 0, record: .unchanged(seq: 0), ref: nil)
    }

    static func stored(through seq: Int, history: [EventBatch]) -> StoredState {
        StoredState(epoch: "e", snapshot: Snapshot(seq: seq, selected: "home", scrollToTop: 0, tabs: [], clients: []),
                    nextPage: 1, nextClient: 1, history: history)
    }

    /// Three batches and a outcomeRecord recorded, with their waits.
    static func pipeline() -> (CommitPipeline, [CommitWait]) {
        var p = CommitPipeline()
        let waits = (0..<4).map { _ in CommitWait() }
        p.recorded(batch(1), wait: waits[0])
        p.recorded(batch(2), wait: waits[1])
        p.recordingOutcome(after: 2, wait: waits[2], outcomeRecord: outcomeRecord(7))
        p.recorded(batch(3), wait: waits[3])
        return (p, waits)
    }

    @Test func theReportsSayHowFarTheyCommittedAndTheFirstFailure() {
        let (p, waits) = Self.pipeline()
        #expect(p.reported.committedThrough == nil && p.reported.failure == nil, "no report yet")
        _ = waits[1].fulfil(nil)
        #expect(p.reported.committedThrough == nil, "a later report does not commit what comes before it")
        _ = waits[0].fulfil(nil)
        #expect(p.reported.committedThrough == 2)
        _ = waits[2].fulfil(.unavailable("disk"))
        _ = waits[3].fulfil(nil)
        let reported = p.reported
        #expect(reported.committedThrough == 2 && reported.failure?.wait === waits[2], "the first failure ends the committed prefix")
    }

    @Test func theCommittedPrefixIsTakenInOrderAndAFenceNotCommittedHoldsBackWhatFollows() {
        var (p, waits) = Self.pipeline()
        for w in [waits[0], waits[1], waits[3]] { _ = w.fulfil(nil) }
        var taken = p.takeCommitted(through: 3)
        #expect(taken.batches.map(\.lastSeq) == [1, 2] && taken.outcomeRecords.isEmpty, "the outcomeRecord at 2 has no report: seq 3 waits behind it")
        #expect(p.last?.lastSeq == 3 && !p.isEmpty)
        _ = waits[2].fulfil(nil)
        taken = p.takeCommitted(through: 3)
        #expect(taken.batches.map(\.lastSeq) == [3] && taken.outcomeRecords.map(\.address) == [7])
        #expect(p.isEmpty)
    }

    @Test func atARollbackABatchTheStoreHoldsCountsAsCommittedBeforeItsReportComes() {
        let (p, waits) = Self.pipeline()
        _ = waits[0].fulfil(nil)
        // Batch 2's report is on its way, but the store's committed state holds it: decided
        // again, it would be applied twice.
        let held = Self.stored(through: 2, history: [Self.batch(1), Self.batch(2)])
        var own = p.ownCommitted(after: 0, stored: held)
        #expect(own.seq == 2 && own.outcomeRecords.isEmpty, "the outcomeRecord after 2 has no report: it ends there")
        // Another writer's batch at seq 2 is not this one.
        let other = Self.stored(through: 2, history: [Self.batch(1), Self.batch(2, offset: 99)])
        own = p.ownCommitted(after: 0, stored: other)
        #expect(own.seq == 1)
        _ = waits[1].fulfil(nil)
        _ = waits[2].fulfil(nil)
        own = p.ownCommitted(after: 0, stored: other)
        #expect(own.seq == 2 && own.outcomeRecords.map(\.address) == [7], "a committed outcomeRecord's answer stands")
    }

    @Test func aRollbackAloneKeepsWhatTheStoreCommittedAndFailsTheRest() {
        let (p, _) = Self.pipeline()
        let stored = Self.stored(through: 1, history: [Self.batch(1)])
        #expect(p.rollback(after: .unavailable("disk"), stored: stored, publishedSeq: 0, otherWriters: false) == .alone(committed: 1))
    }

    @Test func withOtherWritersAConflictIsDecidedAgainAndAnyOtherFailureFails() {
        let (p, waits) = Self.pipeline()
        _ = waits[0].fulfil(nil)
        _ = waits[1].fulfil(nil)
        _ = waits[2].fulfil(nil)
        // Another writer took seq 3: the store holds its batch, not this coordinator's.
        let stored = Self.stored(through: 3, history: [Self.batch(1), Self.batch(2), Self.batch(3, offset: 99)])
        let conflict = p.rollback(after: .conflict(), stored: stored, publishedSeq: 0, otherWriters: true)
        #expect(conflict == .shared(ownCommitted: 2, standingOutcomes: [Self.outcomeRecord(7)], redo: true, publishStoredAfter: 0))
        let failed = p.rollback(after: .unavailable("engine"), stored: stored, publishedSeq: 0, otherWriters: true)
        #expect(failed == .shared(ownCommitted: 2, standingOutcomes: [Self.outcomeRecord(7)], redo: false, publishStoredAfter: 0))
    }

    /// The actions as text: `publish 1,2 outcomeRecords 7`, `rollBack unavailable`, `takeInOthers`.
    static func described(_ actions: [CommitPipeline.Action]) -> [String] {
        actions.map { action in
            switch action {
            case let .publish(batches, outcomeRecords):
                "publish \(batches.map { String($0.lastSeq) }.joined(separator: ",")) outcomeRecords \(outcomeRecords.map { String($0.address) }.joined(separator: ","))"
            case let .rollBack(error, _): "rollBack \(error.isConflict ? "conflict" : error.code.rawValue)"
            case .takeInOthers: "takeInOthers"
            }
        }
    }

    @Test func reportsThatArrivedPublishTheCommittedPrefixAndAFailureRollsBackAfterIt() {
        var (p, waits) = Self.pipeline()
        let none = p.reportsArrived()
        #expect(none.isEmpty, "no report yet")
        _ = waits[0].fulfil(nil)
        _ = waits[1].fulfil(nil)
        let first = p.reportsArrived()
        #expect(Self.described(first) == ["publish 1,2 outcomeRecords "])
        _ = waits[2].fulfil(nil)
        _ = waits[3].fulfil(.unavailable("disk"))
        let actions = p.reportsArrived()
        #expect(Self.described(actions) == ["publish  outcomeRecords 7", "rollBack unavailable"], "the outcomeRecord is answered before the rollback")
        if case let .rollBack(_, failed)? = actions.last { #expect(failed === waits[3]) }
    }

    @Test func otherWritersBatchesAreTakenInOnceTheCoordinatorsOwnHaveSettled() {
        var (p, waits) = Self.pipeline()
        let atOnce = p.othersStored()
        #expect(!atOnce, "not while its own batches wait: their seqs may be the others' too")
        for w in waits { _ = w.fulfil(nil) }
        let settled = p.reportsArrived()
        #expect(Self.described(settled) == ["publish 1,2,3 outcomeRecords 7", "takeInOthers"])
        let now = p.othersStored()
        #expect(now, "nothing of its own waits: at once")
        let again = p.reportsArrived()
        #expect(again.isEmpty, "taken in: not asked for again")
        // A failure rolls back instead; the others' batches come in with the store's history.
        var (q, qWaits) = Self.pipeline()
        _ = q.othersStored()
        _ = qWaits[0].fulfil(.conflict())
        let failed = q.reportsArrived()
        #expect(Self.described(failed) == ["rollBack conflict"])
    }

    @Test func aResetForgetsEveryEntryAndStartsANewGeneration() {
        var (p, waits) = Self.pipeline()
        #expect(p.isWaiting(waits[1]))
        #expect(p.reset(failing: .unavailable("disk full")) == 1 && p.generation == 1)
        #expect(p.isEmpty && !p.isWaiting(waits[1]), "a second report of the same failure finds nothing to roll back")
    }
}
