import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The bound on a room's state in bytes: what it counts, that the running count never drifts
/// from a recount, and what a room at its bound refuses and accepts.
struct StateWeightTests {
    /// The compact JSON size of each tab as the snapshot writes it.
    private func wireSizes(_ snapshot: Snapshot) -> [Int] {
        guard case let .object(fields) = snapshot.json(capped: false),
              case let .array(tabs)? = fields.first(where: { $0.0 == "tabs" })?.1 else { return [] }
        return tabs.map { $0.compactSize(limit: Int.max - 1) }
    }

    @Test func aTabWeighsAtLeastItsSnapshotJSONAndNotMuchMore() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: "home", route: "a \"quoted\" route\nwith escapes \u{1}"))
        try await run(c, .push(tab: "home", route: "ünïcödé"))
        try await run(c, .set(tab: "home", key: "k\u{7}", value: .string(String(repeating: "x", count: 4000))))
        try await run(c, .set(tab: "home", key: "obj", value: .object([("a", .array([.int(1), .bool(true), .null]))])))
        try await run(c, .updateTab(TabUpdate(id: "favorites", title: "Likes", badge: .some("9+"))))
        try await run(c, .scroll(tab: "profile", offset: 123456.789))
        let snapshot = await c.snapshot()
        for (tab, wire) in zip(snapshot.tabs, wireSizes(snapshot)) {
            let weight = StateWeight.tab(tab)
            #expect(weight >= wire, "tab '\(tab.id)' weighs \(weight), its JSON is \(wire) bytes")
            #expect(weight <= wire + 160 + 64 * tab.stack.count, "tab '\(tab.id)' weighs \(weight) for \(wire) bytes of JSON")
        }
    }

    @Test(arguments: 1...5 as ClosedRange<UInt64>)
    func theRunningWeightEqualsARecountAfterEveryCommand(seed: UInt64) async throws {
        let c = try freshCoordinator()
        var rng = SeededRandom(seed: seed)
        for _ in 0..<400 {
            _ = try? await c.execute(randomCommand(&rng), by: "c1", ref: nil)
            let recount = await c.snapshot().tabs.reduce(0) { $0 + StateWeight.tab($1) }
            let running = await c.stateWeight
            #expect(running == recount, "seed \(seed)")
            if running != recount { return }
        }
    }

    @Test func aCommandThatWouldPassTheBoundIsInvalidAndChangesNothingWhileShrinkingAlwaysPasses() async throws {
        let c = try Coordinator(tabs: TabInfo.defaults, configuration: .init(maxStateBytes: 20_000))
        let big = JSONValue.string(String(repeating: "v", count: 4000))
        var stored = 0
        while stored < 10 {
            guard (try? await c.execute(.set(tab: "home", key: "k\(stored)", value: big), by: "c1")) != nil else { break }
            stored += 1
        }
        #expect(stored == 4, "20,000 bytes hold the three tabs and four values of 4 KB")
        await expectRefused(c, .set(tab: "home", key: "more", value: big), .invalid)
        await expectRefused(c, .set(tab: "favorites", key: "more", value: big), .invalid)
        // Pages count too: pushes fill what is left, then one is refused for the bound (not the depth).
        var pushes = 0
        while pushes < 40, (try? await c.execute(.push(tab: "profile", route: String(repeating: "r", count: 128)), by: "c1")) != nil {
            pushes += 1
        }
        #expect((1..<40).contains(pushes), "\(pushes) pages of 128 characters pushed")
        await expectRefused(c, .push(tab: "profile", route: String(repeating: "r", count: 128)), .invalid)
        await expectRefused(c, .addTab(TabInfo(id: "new", title: "New", icon: "star", color: "#112233"), index: nil), .invalid)
        do {
            _ = try await c.execute(.set(tab: "home", key: "more", value: big), by: "c1")
        } catch {
            #expect(error.message.contains("limit of 20000"), "\(error.message)")
        }
        // Nothing grows it: replacing with a smaller value, removing one, scrolling, selecting.
        try await run(c, .set(tab: "home", key: "k0", value: .string("small")))
        try await run(c, .scroll(tab: "home", offset: 10))
        try await run(c, .select(tab: "favorites"))
        try await run(c, .popToRoot(tab: "profile"))
        try await run(c, .set(tab: "home", key: "k1", value: .null))
        // Now there is room again.
        try await run(c, .set(tab: "home", key: "again", value: big))
    }

    @Test func aStateStoredOverTheBoundLoadsAndMayOnlyShrink() async throws {
        let roomy = try freshCoordinator()
        for i in 0..<8 { try await run(roomy, .set(tab: "home", key: "k\(i)", value: .string(String(repeating: "v", count: 4000)))) }
        let snapshot = await roomy.snapshot()
        let store = ScriptedStore(StoredState(epoch: "e1", snapshot: snapshot, nextPage: 4, nextClient: 1, history: []))
        let c = Coordinator(restoring: store.committedState(), durability: store, configuration: .init(maxStateBytes: 16_384))
        try await c.start()
        await expectRefused(c, .set(tab: "home", key: "k8", value: .int(1)), .invalid)
        try await run(c, .set(tab: "home", key: "k0", value: .null))
        try await run(c, .select(tab: "favorites"))
    }

    @Test func aResumeWhoseMissedBatchesWeighMoreThanTheBoundGetsASnapshotInstead() async throws {
        let c = try Coordinator(tabs: TabInfo.defaults, configuration: .init(maxStateBytes: 16_384))
        let start = await c.snapshot().seq
        // Ten batches of ~3 KB each: the state stays small, the history does not.
        for i in 0..<10 {
            try await run(c, .set(tab: "home", key: "k", value: .string(String(repeating: "\(i)", count: 3000))))
        }
        let recent = await c.snapshot().seq - 2
        let old = try await c.connect(.init(resume: start, epoch: c.epoch))
        #expect(!old.resumed && old.snapshot != nil, "30 KB of missed batches, a room bounded to 16 KiB")
        let near = try await c.connect(.init(resume: recent, epoch: c.epoch))
        #expect(near.resumed && near.snapshot == nil, "a few KB of missed batches replay")
        #expect(!near.replay.isEmpty)
    }
}
