import Conformance
import Foundation
import Locking
import Testing
@testable import Coordinator
@testable import TabdProtocol

/// Golden event streams for the browser's fold (`web/model.js`): random sessions of every
/// command and of presence, folded here by the Swift fold and written where
/// `node --test Tests/web/` reads them (`$TABD_GOLDEN_DIR`, else `test-output/golden`).
/// Both languages must fold each stream to the same snapshot, or refuse a broken one at
/// the same seq; `make test` runs this test before the node suite.
@Suite(.serialized) struct GoldenStreamTests {
    static var directory: URL {
        if let dir = ProcessInfo.processInfo.environment["TABD_GOLDEN_DIR"], !dir.isEmpty { return URL(fileURLWithPath: dir) }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("test-output/golden")
    }

    /// One random session: the snapshot a client would start from (after `joinFirst`
    /// clients), every batch after it, and
    /// the coordinator's own final snapshot.
    ///
    /// `presenceLimit` below 100 makes a big room of a small one: joins come in bursts,
    /// time passes (in steps the session draws), and counts are reported, so the room
    /// switches to counted and back, with every presence event kind.
    /// `node` names the coordinator a cluster's node: its counts are then per node.
    static func session(seed: UInt64, commands: Int, joinFirst: Int, presenceLimit: Int = Limits.maxClientsInSnapshot,
                        node: String? = nil) async throws -> (start: Snapshot, batches: [EventBatch], end: Snapshot) {
        let c = try Coordinator(configuration: .init(presenceLimit: presenceLimit, presenceInterval: .seconds(1), node: node))
        var rng = SeededRandom(seed: seed)
        var connected: [ClientID] = []
        var now = ContinuousClock.now
        for n in 0..<joinFirst { connected.append(try await c.connect(.init(name: "early \(n)")).client.id) }
        let start = await c.snapshot()
        let batches = Locked<[EventBatch]>([])
        await c.addObserver { batch in batches.withLock { $0.append(batch) } }
        let bursts = presenceLimit < Limits.maxClientsInSnapshot
        for _ in 0..<commands {
            now += .milliseconds(Int.random(in: 0..<300, using: &rng))
            switch Int.random(in: 0..<10, using: &rng) {
            case 0:
                let n = bursts ? Int.random(in: 1...6, using: &rng) : 1
                let joins = (0..<n).map { _ in Coordinator.JoinRequest(name: "n\(Int.random(in: 0..<99, using: &rng))") }
                connected += try await c.presence(joining: joins, now: now).map(\.client.id)
            case 1 where !connected.isEmpty:
                let n = bursts ? Int.random(in: 1...min(8, connected.count), using: &rng) : 1
                let gone = (0..<n).map { _ in connected.remove(at: Int.random(in: 0..<connected.count, using: &rng)) }
                _ = try await c.presence(joining: [], leaving: gone, now: now)
            case 2 where bursts:
                try await c.reportPresence(now: now)
            default:
                _ = try? await c.execute(randomCommand(&rng), by: "c1")
            }
        }
        return (start, batches.withLock { $0 }, await c.snapshot())
    }

    static func write(name: String, start: Snapshot, batches: [EventBatch], end: Snapshot?, refusedAt: Int?) throws {
        let frames = batches.map { String(decoding: $0.frameBytes, as: UTF8.self) }.joined(separator: ",\n")
        let text = """
        {"name":\(JSONValue.string(name).compactString),
        "start":\(start.json.compactString),
        "frames":[
        \(frames)],
        "end":\(end.map { $0.json(capped: false).compactString } ?? "null"),
        "refusedAt":\(refusedAt.map(String.init) ?? "null")}

        """
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try text.write(to: directory.appendingPathComponent("\(name).json"), atomically: true, encoding: .utf8)
    }

    /// Folds with the Swift fold; returns the end state or the seq it refused.
    static func fold(_ start: Snapshot, _ batches: [EventBatch]) -> Result<Snapshot, ReplayError> {
        var s = start
        do { for b in batches { try s.apply(b) } } catch { return .failure(error) }
        return .success(s)
    }

    /// Seeds 21–23 are big rooms in small: limits of 5, 3 and 1 (seed 23 starts counted).
    static let sessions: [(seed: UInt64, joinFirst: Int, presenceLimit: Int)] = [
        (1, 0, 100), (2, 0, 100), (3, 3, 100), (4, 0, 100), (5, 0, 100), (6, 0, 100), (7, 80, 100), (8, 0, 100),
        (21, 0, 5), (22, 2, 3), (23, 4, 1),
    ]

    @Test func theSessionsCoverEveryEventKind() async throws {
        var kinds = Set<String>()
        for (seed, joinFirst, limit) in Self.sessions {
            let batches = try await Self.session(seed: seed, commands: 400, joinFirst: joinFirst, presenceLimit: limit).batches
            kinds.formUnion(batches.flatMap { $0.events.map(\.event.kind) })
        }
        #expect(kinds == ["selected", "firstAppear", "appear", "disappear", "pushed", "popped", "scrollToTop",
                          "scrolled", "valueSet", "tabAdded", "tabUpdated", "tabMoved", "tabRemoved",
                          "clientJoined", "clientLeft", "presenceCounted", "clientCount", "presenceListed", "clientIdsReserved"])
    }

    @Test(arguments: sessions)
    func randomSessionsFoldToTheCoordinatorsSnapshot(seed: UInt64, joinFirst: Int, presenceLimit: Int) async throws {
        let (start, batches, end) = try await Self.session(seed: seed, commands: 400, joinFirst: joinFirst, presenceLimit: presenceLimit)
        // The full start folds to exactly the coordinator's state.
        #expect(try Self.fold(start, batches).get() == end)
        // The wire start lists at most 100 clients: its fold is what a browser holds.
        let wireStart = try Snapshot(json: start.json)
        let folded = try Self.fold(wireStart, batches).get()
        #expect(folded.clientCount == end.clientCount)
        try Self.write(name: "session-\(seed)", start: wireStart, batches: batches, end: folded, refusedAt: nil)
    }

    /// A cluster node's stream: `presenceCounted` with `nodes`, `clientCount`,
    /// `presenceListed` and `clientIdsReserved` with `node`.
    @Test func aClusterNodesSessionFoldsToItsSnapshot() async throws {
        let (start, batches, end) = try await Self.session(seed: 24, commands: 400, joinFirst: 0, presenceLimit: 4, node: "n1")
        let events = batches.flatMap(\.events).map(\.event)
        #expect(events.contains { if case let .presenceCounted(_, nodes?) = $0 { nodes.keys.sorted() == ["n1"] } else { false } })
        #expect(events.contains { if case .clientCount(.some("n1"), _) = $0 { true } else { false } })
        #expect(events.contains { if case .presenceListed(.some("n1"), _) = $0 { true } else { false } })
        #expect(try Self.fold(start, batches).get() == end)
        try Self.write(name: "session-24-node", start: start, batches: batches, end: end, refusedAt: nil)
    }

    /// Broken presence: a `clientJoined` in a counted room, and a `clientCount` in a
    /// listed one, each refused at its seq.
    @Test func presenceEventsOfTheOtherModeAreRefused() async throws {
        let (start, batches, _) = try await Self.session(seed: 21, commands: 400, joinFirst: 0, presenceLimit: 5)
        func isCounted(_ e: SequencedEvent) -> Bool { if case .presenceCounted = e.event { true } else { false } }
        let c = try #require(batches.firstIndex { $0.events.contains(where: isCounted) })
        let countedSeq = batches[c].events.first(where: isCounted)!.seq
        #expect(batches[c].lastSeq == countedSeq, "presenceCounted ends its batch")
        let joined = SequencedEvent(seq: countedSeq + 1, event: .clientJoined(ClientInfo(id: "c999999", name: "late")))
        let broken = Array(batches[...c]) + [EventBatch(by: "tabd", ref: nil, events: [joined])]
        #expect(Self.fold(start, broken).failureSeq == countedSeq + 1)
        try Self.write(name: "broken-counted-join", start: start, batches: broken, end: nil, refusedAt: countedSeq + 1)

        let count = EventBatch(by: "tabd", ref: nil, events: [SequencedEvent(seq: start.seq + 1, event: .clientCount(node: nil, count: 3))])
        #expect(Self.fold(start, [count]).failureSeq == start.seq + 1)
        try Self.write(name: "broken-listed-count", start: start, batches: [count], end: nil, refusedAt: start.seq + 1)
    }

    /// Broken streams: an event for a tab nobody has, a page nobody has, a missing batch.
    @Test(arguments: [UInt64(11), 12, 13])
    func brokenStreamsAreRefusedAtTheEventThatDoesNotFit(seed: UInt64) async throws {
        let (start, batches, _) = try await Self.session(seed: seed, commands: 600, joinFirst: 0)
        var rng = SeededRandom(seed: seed)
        let cut = Int.random(in: batches.count / 2..<batches.count - 1, using: &rng) // a batch follows the cut

        // A tab-scoped event whose tab is unknown.
        var ghost = batches
        let g = try #require(ghost[cut...].firstIndex { $0.events.contains { $0.event.tabScope != nil } })
        let gi = ghost[g].events.firstIndex { $0.event.tabScope != nil }!
        var events = ghost[g].events
        events[gi] = SequencedEvent(seq: events[gi].seq, event: .scrolled(tab: "ghost", offset: 1))
        ghost[g] = EventBatch(by: ghost[g].by, ref: ghost[g].ref, events: events)
        #expect(Self.fold(start, ghost).failureSeq == events[gi].seq)
        try Self.write(name: "broken-tab-\(seed)", start: start, batches: ghost, end: nil, refusedAt: events[gi].seq)

        // A page the tab does not have.
        var page = batches
        let p = try #require(page[cut...].firstIndex { $0.events.contains { if case .appear = $0.event { true } else { false } } })
        let pi = page[p].events.firstIndex { if case .appear = $0.event { true } else { false } }!
        events = page[p].events
        guard case let .appear(tab, _) = events[pi].event else { return }
        events[pi] = SequencedEvent(seq: events[pi].seq, event: .appear(tab: tab, page: "p999999"))
        page[p] = EventBatch(by: page[p].by, ref: page[p].ref, events: events)
        #expect(Self.fold(start, page).failureSeq == events[pi].seq)
        try Self.write(name: "broken-page-\(seed)", start: start, batches: page, end: nil, refusedAt: events[pi].seq)

        // A gap.
        var gap = batches
        gap.remove(at: cut)
        #expect(Self.fold(start, gap).failureSeq == batches[cut + 1].firstSeq)
        try Self.write(name: "broken-gap-\(seed)", start: start, batches: gap, end: nil, refusedAt: batches[cut + 1].firstSeq)

        // The selected tab removed, and the batch ends before anything else is selected.
        let r = try #require(batches.firstIndex { b in
            b.events.indices.dropLast().contains { i in
                if case .tabRemoved = b.events[i].event, case .selected = b.events[i + 1].event { return true }
                return false
            }
        })
        let ri = batches[r].events.firstIndex { if case .tabRemoved = $0.event { true } else { false } }!
        let dangling = Array(batches[..<r]) + [EventBatch(by: batches[r].by, ref: batches[r].ref, events: Array(batches[r].events[...ri]))]
        #expect(Self.fold(start, dangling).failureSeq == batches[r].events[ri].seq)
        try Self.write(name: "broken-selection-\(seed)", start: start, batches: dangling, end: nil,
                       refusedAt: batches[r].events[ri].seq)
    }
}

extension Result where Failure == ReplayError {
    var failureSeq: Int? { if case let .failure(e) = self { e.seq } else { nil } }
}
