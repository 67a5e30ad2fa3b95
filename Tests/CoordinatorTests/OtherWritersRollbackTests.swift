import Dispatch
import Locking
import Testing
@testable import Coordinator
@testable import TabdProtocol

/// A log with other writers (a cluster's engine, scripted): each append is committed at
/// once, or committed with its report held back (the report still on its way from
/// another thread), or refused as a conflict (another writer took its place).
final class OtherWritersStore: Durability {
    enum Verdict { case commit, commitReportingLater, conflict }
    private struct State {
        var committed: StoredState
        var script: [Verdict] = []
        var heldReports: [@Sendable () -> Void] = []
        var minGeneration = 0
        var conflictsReported = 0
    }
    private let state: Locked<State>
    private let queue = DispatchQueue(label: "other-writers-store")

    init(_ initial: StoredState) { state = Locked(State(committed: initial)) }

    var hasOtherWriters: Bool { true }
    /// The next appends' verdicts, in order (then `commit`).
    func script(_ verdicts: Verdict...) { state.withLock { $0.script += verdicts } }
    var heldCount: Int { state.withLock { $0.heldReports.count } }
    var conflictsReported: Int { state.withLock { $0.conflictsReported } }

    /// Another writer's batch, committed at the next seq (this coordinator hears of it
    /// only when its own append there conflicts).
    func commitOther(_ events: [Event]) throws {
        try state.withLock { s in
            let first = s.committed.snapshot.seq + 1
            let batch = EventBatch(by: "tabd", ref: nil, events: events.enumerated().map { SequencedEvent(seq: first + $0.offset, event: $0.element) })
            try s.committed.apply(batch)
            s.committed.history.append(batch)
        }
    }

    func releaseReports() {
        let reports = state.withLock { s -> [@Sendable () -> Void] in
            defer { s.heldReports = [] }
            return s.heldReports
        }
        for report in reports { queue.async(execute: report) }
    }

    func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        let verdict = state.withLock { s -> Verdict? in
            guard generation >= s.minGeneration else { return nil }
            return s.script.isEmpty ? .commit : s.script.removeFirst()
        }
        guard let verdict else { return queue.async { done(.unavailable("rolled back")) } }
        if verdict == .conflict {
            return queue.async { [state] in
                done(.conflict())
                state.withLock { $0.conflictsReported += 1 }
            }
        }
        state.withLock { s in
            try? s.committed.apply(batch)
            s.committed.history.append(batch)
        }
        if verdict == .commitReportingLater {
            state.withLock { $0.heldReports.append { done(nil) } }
        } else {
            queue.async { done(nil) }
        }
    }

    func committedState() -> StoredState { state.withLock { $0.committed } }
    func reset(generation: Int) { state.withLock { $0.minGeneration = generation } }
}

@Suite struct OtherWritersRollbackTests {
    /// Around a paused writer the engine's reports reach the coordinator in any order: a
    /// later batch's conflict may come before an earlier batch's commit. The rollback then
    /// must not decide again the earlier command, whose batch the committed state holds
    /// already: it would stand in the room twice.
    @Test func aCommittedBatchWhoseReportIsLateIsNotDecidedAgainByALaterConflict() async throws {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let store = OtherWritersStore(StoredState(epoch: "e1", snapshot: origin, nextPage: 4, nextClient: 1, history: []))
        let c = Coordinator(restoring: store.committedState(), durability: store)
        try await c.start()
        let seen = Locked<[EventBatch]>([])
        await c.addObserver { batch in seen.withLock { $0.append(batch) } }
        store.script(.commitReportingLater, .conflict)
        await c.enqueue(.push(tab: nil, route: "a"), by: "c1", ref: "a", replyTo: 1)
        await c.enqueue(.push(tab: nil, route: "b"), by: "c1", ref: "b", replyTo: 1)
        // A snapshot behind them waits for them (``Coordinator/snapshot()``): it meets the
        // conflict while the first batch's report is still held back, and the reports are
        // performed in their order, so nothing is published or rolled back until it comes.
        let sync = Task { _ = await c.snapshot() }
        try await until { store.conflictsReported == 1 }
        #expect(seen.withLock { $0 }.allSatisfy { $0.ref == nil }, "nothing of a or b is published before a's report")
        store.releaseReports()
        await sync.value
        let pushes = seen.withLock { $0 }.flatMap(\.events).compactMap { e -> String? in
            if case let .pushed(_, _, route) = e.event { route } else { nil }
        }
        #expect(pushes == ["a", "b"], "each command once, in its order")
        #expect(await c.snapshot().tabs[0].stack.dropFirst().map(\.route) == ["a", "b"])
    }

    /// Two writers of a room may cross the presence limit at once and reserve the very same
    /// client numbers. The one whose batch lost the race must not keep the block it
    /// decided on: its next join gets a number from a block it reserved itself.
    @Test func aReservedBlockWhoseBatchLostTheRaceIsDroppedEvenWhenTheWinnerReservedTheSameNumbers() async throws {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let store = OtherWritersStore(StoredState(epoch: "e1", snapshot: origin, nextPage: 4, nextClient: 1, history: []))
        let c = Coordinator(restoring: store.committedState(), durability: store, configuration: .init(presenceLimit: 1, node: "n0"))
        try await c.start()
        _ = try await c.connect(.init(name: "a")) // listed: c1
        // n1 crosses the limit first and reserves c2…c1001; n0's crossing, at the same seq, conflicts.
        try store.commitOther([.clientIdsReserved(node: "n1", from: 2, count: 1_000),
                               .presenceCounted(count: 2, nodes: ["n0": 1, "n1": 1])])
        store.script(.conflict)
        let joined = try await c.connect(.init(name: "b")).client.id
        let second = try await c.connect(.init(name: "c")).client.id
        let blocks = store.committedState().history.flatMap(\.events).compactMap { e -> (String?, Range<Int>)? in
            if case let .clientIdsReserved(node, from, count) = e.event { (node, from..<from + count) } else { nil }
        }
        for id in [joined, second] {
            let owners = blocks.filter { $0.1.contains(Int(id.dropFirst())!) }.map(\.0)
            #expect(owners == ["n0"], "\(id), joined on n0, is in the blocks of \(owners)")
        }
    }
}
