import Dispatch
import Locking
import Testing
@testable import Coordinator
@testable import TabdProtocol

/// A store that keeps committed state in memory, commits on its own queue, and fails
/// on demand: enough to drive the coordinator's commit pipeline and its rollback.
final class ScriptedStore: Durability {
    private struct State {
        var committed: StoredState
        var failing = false
        var failed = false
        var minGeneration = 0
        var commits: [[Int]] = []
        /// While holding, finished commits wait here instead of being reported.
        var holding = false
        var held: [@Sendable () -> Void] = []
        /// While holding commits, appended batches wait here before they are even written.
        var holdingCommits = false
        var heldCommits: [@Sendable () -> Void] = []
        /// Forwarded commands committed, by id: their batch's last seq.
        var forwards: [String: KeyedOutcome] = [:]
    }
    // `Locked` (a pthread mutex), not `Mutex`: the TSan run must see this synchronisation.
    private let state: Locked<State>
    private let queue = DispatchQueue(label: "scripted-store")

    init(_ initial: StoredState) { state = Locked(State(committed: initial)) }

    /// While true, every commit fails (a full disk).
    func setFailing(_ failing: Bool) { state.withLock { $0.failing = failing } }
    var committedSeqs: [[Int]] { state.withLock { $0.commits } }

    /// Holds back commit reports until ``release(_:)``: a slow disk.
    func hold() { state.withLock { $0.holding = true } }

    /// Reports the first `n` held commits, in order (all when nil), and stops holding.
    func release(_ n: Int? = nil) {
        let ready = state.withLock { s -> [@Sendable () -> Void] in
            let k = min(n ?? s.held.count, s.held.count)
            let ready = Array(s.held.prefix(k))
            s.held.removeFirst(k)
            if n == nil { s.holding = false }
            return ready
        }
        for report in ready { report() }
    }

    var heldCount: Int { state.withLock { $0.held.count } }

    /// Holds appended batches back before they are written: a writer busy elsewhere.
    func holdCommits() { state.withLock { $0.holdingCommits = true } }
    var heldCommitCount: Int { state.withLock { $0.heldCommits.count } }

    /// Writes the held batches, in order, and stops holding them.
    func releaseCommits() {
        let commits = state.withLock { s -> [@Sendable () -> Void] in
            s.holdingCommits = false
            defer { s.heldCommits = [] }
            return s.heldCommits
        }
        for commit in commits { queue.async(execute: commit) }
    }

    func append(_ batch: EventBatch, generation: Int, commandKey: String, done: @escaping @Sendable (CommandError?) -> Void) {
        append(batch, generation: generation) { [state] error in
            if error == nil { state.withLock { $0.forwards[commandKey] = .applied(seq: batch.lastSeq) } }
            done(error)
        }
    }

    func storedOutcome(_ commandKey: String) -> KeyedOutcome? { state.withLock { $0.forwards[commandKey] } }

    func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        // Whether the disk is full is decided when the batch arrives, so tests are deterministic.
        let diskFull = state.withLock { $0.failing }
        let commit: @Sendable () -> Void = {
            let error = self.state.withLock { s -> CommandError? in
                if s.failed || generation < s.minGeneration { return .unavailable("earlier failure") }
                if diskFull { s.failed = true; return .unavailable("disk full") }
                do { try s.committed.snapshot.apply(batch) } catch { return .unavailable("\(error)") }
                s.committed.snapshot.seq = batch.lastSeq
                for e in batch.events {
                    if case let .pushed(_, page, _) = e.event { s.committed.nextPage = Int(page.dropFirst())! + 1 }
                    if case let .clientJoined(c) = e.event { s.committed.nextClient = Int(c.id.dropFirst())! + 1 }
                }
                s.commits.append([batch.firstSeq, batch.lastSeq])
                return nil
            }
            let report: @Sendable () -> Void = { done(error) }
            let held = self.state.withLock { s -> Bool in
                guard s.holding else { return false }
                s.held.append(report)
                return true
            }
            if !held { report() }
        }
        let later = state.withLock { s -> Bool in
            guard s.holdingCommits else { return false }
            s.heldCommits.append(commit)
            return true
        }
        if !later { queue.async(execute: commit) }
    }

    func committedState() -> StoredState { state.withLock { $0.committed } }
    func reset(generation: Int) { state.withLock { $0.failed = false; $0.minGeneration = generation } }
}

@Suite struct DurabilityTests {
    func durable() async throws -> (Coordinator, ScriptedStore) {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let store = ScriptedStore(StoredState(epoch: "e1", snapshot: origin, nextPage: 4, nextClient: 1, history: []))
        let c = Coordinator(restoring: store.committedState(), durability: store)
        try await c.start()
        return (c, store)
    }

    /// Every batch the coordinator publishes, in order, as its observers see them.
    func published(_ c: Coordinator) async -> Locked<[EventBatch]> {
        let seen = Locked<[EventBatch]>([])
        await c.addObserver { batch in seen.withLock { $0.append(batch) } }
        return seen
    }

    @Test func aBatchIsPublishedOnlyAfterItsCommit() async throws {
        let (c, store) = try await durable()
        let seen = await published(c)
        store.hold()
        let receipt = await c.submit(.push(tab: nil, route: "a"))
        try await until { store.heldCount == 1 }
        // Committed, but the store has not said so: nothing may be published yet.
        #expect(store.committedSeqs.last == [3, 6])
        #expect(seen.withLock { $0 }.isEmpty)
        #expect(await c.currentSeq == 2)
        store.release()
        let outcome = try await c.outcome(of: receipt)
        let expected = EventBatch(by: Coordinator.daemonID, ref: nil, events: sequenced(from: 3, [
            .pushed(tab: "home", page: "p4", route: "a"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "home", page: "p4"), .appear(tab: "home", page: "p4"),
        ]))
        #expect(outcome == .applied(seq: 6, batch: expected))
        #expect(seen.withLock { $0 } == [expected])
    }

    @Test func aFailedCommitAnswersUnavailablePublishesNothingAndRollsBack() async throws {
        let (c, store) = try await durable()
        let seen = await published(c)
        let scrolled = try await run(c, .scroll(tab: nil, offset: 5))
        let before = await c.snapshot()
        store.setFailing(true)
        await #expect(throws: CommandError.unavailable("disk full")) {
            try await c.execute(.push(tab: nil, route: "lost"))
        }
        #expect(await c.snapshot() == before, "the failed command left nothing behind")
        #expect(c.counter.value == 0)
        // The disk comes back: the next command follows on the committed seq, no gap.
        store.setFailing(false)
        let kept = try await run(c, .push(tab: nil, route: "kept"))
        #expect(kept == EventBatch(by: "c1", ref: "r", events: sequenced(from: before.seq + 1, [
            .pushed(tab: "home", page: "p4", route: "kept"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "home", page: "p4"), .appear(tab: "home", page: "p4"),
        ])))
        #expect(seen.withLock { $0 } == [scrolled!, kept!], "observers never saw the failed batch")
    }

    @Test func commandsAppliedBehindAFailedOneFailToo() async throws {
        let (c, store) = try await durable()
        // The store's reports are held until all three are applied: each is built on the
        // state of the one before, which the failure takes away.
        store.hold()
        store.setFailing(true)
        let first = await c.submit(.push(tab: nil, route: "a"))
        let second = await c.submit(.scroll(tab: nil, offset: 9))
        store.setFailing(false)
        let third = await c.submit(.tap(tab: "home"))
        try await until { store.heldCount == 3 }
        store.release()
        for receipt in [first, second, third] {
            await #expect(throws: CommandError.self) { try await c.outcome(of: receipt) }
        }
        #expect(await c.snapshot().seq == 2)
        #expect(await c.snapshot().tabs[0].stack.count == 1)
        try await run(c, .tap(tab: "home"))
        #expect(c.counter.value == 1, "the scroll-to-top counter was rolled back and counts on from the committed value")
    }

    /// Reports of commits and of a failure behind them, seen in one pass: what committed
    /// is published, the failure rolls back to it (the failed batch is found by its wait,
    /// not by its place before the committed ones were taken out).
    /// Whether the coordinator sees the three reports in one pass is a race: 20 rounds.
    @Test(arguments: 1...20)
    func commitsAndAFailureReportedTogetherPublishTheCommittedAndFailTheRest(round: Int) async throws {
        let (c, store) = try await durable()
        let seen = await published(c)
        store.hold()
        let first = await c.submit(.scroll(tab: nil, offset: 1))
        let second = await c.submit(.scroll(tab: nil, offset: 2))
        store.setFailing(true)
        let third = await c.submit(.push(tab: nil, route: "lost"))
        try await until { store.heldCount == 3 }
        store.setFailing(false)
        store.release()
        #expect(try await c.outcome(of: first) == .applied(seq: 3, batch: EventBatch(by: Coordinator.daemonID, ref: nil,
                events: [SequencedEvent(seq: 3, event: .scrolled(tab: "home", offset: 1))])))
        #expect(try await c.outcome(of: second) == .applied(seq: 4, batch: EventBatch(by: Coordinator.daemonID, ref: nil,
                events: [SequencedEvent(seq: 4, event: .scrolled(tab: "home", offset: 2))])))
        await #expect(throws: CommandError.unavailable("disk full")) { try await c.outcome(of: third) }
        #expect(seen.withLock { $0.map(\.lastSeq) } == [3, 4])
        let after = await c.snapshot()
        #expect(after.seq == 4 && after.tabs[0].scroll == 2 && after.tabs[0].stack.count == 1)
    }

    @Test func aLateSecondReportOfAFailureDoesNotRollBackWhatWasAppliedSince() async throws {
        let (c, store) = try await durable()
        store.hold()
        store.setFailing(true)
        let a = await c.submit(.push(tab: nil, route: "a"))
        let failedWait = try #require(await c.lastUnpublished?.wait)
        try await until { store.heldCount == 1 }
        store.setFailing(false)
        store.release()
        await #expect(throws: CommandError.unavailable("disk full")) { try await c.outcome(of: a) }
        // Applied on the restored state; the writer has not written it yet.
        store.holdCommits()
        let b = await c.submit(.scroll(tab: nil, offset: 3))
        try await until { store.heldCommitCount == 1 }
        // The same failure reported again, late (as the commit task would): nothing to undo.
        await c.rollBack(.unavailable("disk full"), failed: failedWait)
        store.releaseCommits()
        #expect(try await c.outcome(of: b) == .applied(seq: 3, batch: EventBatch(by: Coordinator.daemonID, ref: nil,
                events: [SequencedEvent(seq: 3, event: .scrolled(tab: "home", offset: 3))])))
        #expect(await c.snapshot().tabs[0].scroll == 3)
    }

    @Test func pipelinedCommandsAreAnsweredInOrderAndAllPublished() async throws {
        let (c, _) = try await durable()
        let seen = await published(c)
        var receipts: [Receipt] = []
        for i in 0..<50 { receipts.append(await c.submit(.scroll(tab: nil, offset: Double(i)), by: "c1", ref: "r\(i)")) }
        var seqs: [Int] = []
        for r in receipts {
            if case let .applied(seq, _) = try await c.outcome(of: r) { seqs.append(seq) }
        }
        #expect(seqs == Array(3...52))
        // Each outcome returns once its batch is published: all 50 are there, in order.
        #expect(seen.withLock { $0 } == (0..<50).map { i in
            EventBatch(by: "c1", ref: "r\(i)", events: [SequencedEvent(seq: 3 + i, event: .scrolled(tab: "home", offset: Double(i)))])
        })
    }

    @Test func aCommandThatChangesNothingWaitsForEarlierCommitsButPublishesNoLaterOne() async throws {
        let (c, store) = try await durable()
        store.hold()
        let a = await c.submit(.push(tab: nil, route: "a"))
        let noop = await c.submit(.select(tab: "home"))
        let b = await c.submit(.push(tab: nil, route: "b"))
        try await until { store.heldCount == 2 }
        store.release(1) // only a's commit is reported
        #expect(try await c.outcome(of: noop) == .applied(seq: 6, batch: nil))
        #expect(await c.currentSeq == 6, "b is applied but not committed: it must not be published")
        store.release()
        _ = try await c.outcome(of: a)
        guard case let .applied(seq, _) = try await c.outcome(of: b) else { Issue.record("b failed"); return }
        #expect(seq == 10)
        #expect(await c.currentSeq == 10)
    }

    @Test func aRestartForgetsConnectionsWithClientLeft() async throws {
        var origin = try Coordinator.origin(tabs: TabInfo.defaults)
        origin.clients = [ClientInfo(id: "c1", name: "a"), ClientInfo(id: "c2", name: "b")]
        origin.clientCount = 2
        let store = ScriptedStore(StoredState(epoch: "e1", snapshot: origin, nextPage: 4, nextClient: 3, history: []))
        let c = Coordinator(restoring: origin.withSeq(0), durability: store)
        try await c.start()
        let snap = await c.snapshot()
        #expect(snap.clients.isEmpty)
        let sub = await c.subscribe(after: 0)
        guard case let .replay(batches) = sub.start else { Issue.record("no replay"); return }
        #expect(batches.map { $0.events.map(\.event) } == [[
            .firstAppear(tab: "home", page: "p1"), .appear(tab: "home", page: "p1"), .clientLeft("c1"), .clientLeft("c2"),
        ]])
    }
}

extension Snapshot {
    func withSeq(_ seq: Int) -> StoredState {
        var s = self
        s.seq = seq
        return StoredState(epoch: "e1", snapshot: s, nextPage: 4, nextClient: 3, history: [])
    }
}

/// Waits, yielding, until `condition` holds; fails after `seconds`.
func until(_ seconds: Double = 10, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("the condition did not hold within \(seconds) s")
            throw CancellationError()
        }
        await Task.yield()
    }
}
