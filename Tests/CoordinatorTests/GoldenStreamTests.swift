import Conformance
import Foundation
import Locking
import Testing
@testable import Coordinator

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
    /// clients, so presence beyond the 100 listed is covered), every batch after it, and
    /// the coordinator's own final snapshot.
    static func session(seed: UInt64, commands: Int, joinFirst: Int) async throws -> (start: Snapshot, batches: [EventBatch], end: Snapshot) {
        let c = try Coordinator()
        var rng = SeededRandom(seed: seed)
        var connected: [ClientID] = []
        for n in 0..<joinFirst { connected.append(try await c.connect(.init(name: "early \(n)")).client.id) }
        let start = await c.snapshot()
        let batches = Locked<[EventBatch]>([])
        await c.addObserver { batch in batches.withLock { $0.append(batch) } }
        for _ in 0..<commands {
            switch Int.random(in: 0..<10, using: &rng) {
            case 0: connected.append(try await c.connect(.init(name: "n\(Int.random(in: 0..<99, using: &rng))")).client.id)
            case 1 where !connected.isEmpty:
                try await c.disconnect(connected.remove(at: Int.random(in: 0..<connected.count, using: &rng)))
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

    static let sessions: [(seed: UInt64, joinFirst: Int)] = [(1, 0), (2, 0), (3, 3), (4, 0), (5, 0), (6, 0), (7, 120), (8, 0)]

    @Test func theSessionsCoverEveryEventKind() async throws {
        var kinds = Set<String>()
        for (seed, joinFirst) in Self.sessions {
            let batches = try await Self.session(seed: seed, commands: 400, joinFirst: joinFirst).batches
            kinds.formUnion(batches.flatMap { $0.events.map(\.event.kind) })
        }
        #expect(kinds == ["selected", "firstAppear", "appear", "disappear", "pushed", "popped", "scrollToTop",
                          "scrolled", "valueSet", "tabAdded", "tabUpdated", "tabMoved", "tabRemoved",
                          "clientJoined", "clientLeft"])
    }

    @Test(arguments: sessions)
    func randomSessionsFoldToTheCoordinatorsSnapshot(seed: UInt64, joinFirst: Int) async throws {
        let (start, batches, end) = try await Self.session(seed: seed, commands: 400, joinFirst: joinFirst)
        // The full start folds to exactly the coordinator's state.
        #expect(try Self.fold(start, batches).get() == end)
        // The wire start lists at most 100 clients: its fold is what a browser holds.
        let wireStart = try Snapshot(json: start.json)
        let folded = try Self.fold(wireStart, batches).get()
        #expect(folded.clientCount == end.clientCount)
        try Self.write(name: "session-\(seed)", start: wireStart, batches: batches, end: folded, refusedAt: nil)
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
