import Foundation
import Testing
import Coordinator
import Conformance
@testable import StateStore

private func tempPath() -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-store-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir.appendingPathComponent("state.sqlite").path
}

/// Opens the file and its room `room` (created with the default tabs if it is not stored).
private func open(_ path: String, room: RoomID = "main", window: Int = 10_000, snapshotEvery: Int = 1_000) async throws -> (StateStore, Coordinator) {
    let store = try StateStore(options: .init(path: path, resumeWindow: window, snapshotEvery: snapshotEvery))
    let opened = try await store.openRoom(room)
    let roomStore = if let opened { opened } else { try await store.createRoom(room, tabs: TabInfo.defaults) }
    return (store, Coordinator(restoring: roomStore.loaded, durability: roomStore))
}

/// The error opening `path` throws (nil when it opens).
private func openingError(_ path: String) async -> String? {
    do { _ = try await open(path) } catch { return "\(error)" }
    return nil
}

/// Everything but presence, which a restart forgets.
private func withoutPresence(_ s: Snapshot) -> Snapshot {
    var s = s
    s.clients = []
    s.clientCount = 0
    s.seq = 0
    return s
}

@Suite struct StateStoreTests {
    @Test func aNewFileStartsANewHistoryWithTheFirstAppear() async throws {
        let path = tempPath()
        let (_, c) = try await open(path)
        try await c.start()
        let snap = await c.snapshot()
        #expect(snap.seq == 2)
        #expect(snap.tabs[0].stack[0] == Page(id: "p1", route: "root", appeared: true, appearCount: 1))
    }

    @Test func aRestartContinuesTheSameHistory() async throws {
        let path = tempPath()
        let (store, c) = try await open(path)
        try await c.start()
        _ = try await c.connect(.init(name: "kiosk"))
        for command: Command in [.select(tab: "favorites"), .select(tab: "home"), .push(tab: nil, route: "a"), .set(tab: nil, key: "greeting", value: .string("Tapped")),
                                 .tap(tab: "home"), .tap(tab: "home"),
                                 .addTab(TabInfo(id: "mail", title: "Mail", icon: "envelope", color: "#000000"), index: nil),
                                 .moveTab(tab: "mail", index: 0), .push(tab: "profile", route: "b")] {
            _ = try await c.execute(command, by: "c1", ref: nil)
        }
        let before = await c.snapshot()
        store.close()

        let (_, again) = try await open(path)
        #expect(again.epoch == c.epoch, "the same history goes on")
        try await again.start()
        let after = await again.snapshot()
        #expect(withoutPresence(after) == withoutPresence(before))
        #expect(after.seq == before.seq + 1, "the restart's first batch is the forgotten client leaving")
        // A root that appeared before the restart does not first-appear again.
        let back = try await again.execute(.select(tab: "favorites"))
        guard case let .applied(_, select?) = back else { Issue.record("no batch"); return }
        #expect(select.events.map(\.event).suffix(1) == [.appear(tab: "favorites", page: "p2")])
        #expect(!select.events.contains { $0.event.kind == "firstAppear" })
        // The next page id follows on.
        let push = try await again.execute(.push(tab: "favorites", route: "c"))
        guard case let .applied(_, batch?) = push else { Issue.record("no batch"); return }
        #expect(batch.events.first?.event == .pushed(tab: "favorites", page: "p7", route: "c"))
        // And clients continue numbering.
        #expect(try await again.connect().client.id == "c2")
    }

    @Test func resumeWorksAcrossARestart() async throws {
        let path = tempPath()
        let (store, c) = try await open(path)
        try await c.start()
        let w = try await c.connect()
        _ = try await c.execute(.push(tab: nil, route: "a"))
        store.close()
        let (_, again) = try await open(path)
        try await again.start()
        let back = try await again.connect(.init(resume: w.seq, epoch: w.client.id == "" ? nil : c.epoch))
        #expect(back.resumed)
        #expect(back.replay.flatMap { $0.events.map(\.event.kind) } == ["pushed", "disappear", "firstAppear", "appear", "clientLeft", "clientJoined"])
    }

    @Test func snapshotsAndPruningKeepTheFileBoundedAndTheStateExact() async throws {
        let path = tempPath()
        let (store, c) = try await open(path, window: 50, snapshotEvery: 40)
        try await c.start()
        for i in 0..<300 { _ = try await c.execute(.scroll(tab: nil, offset: Double(i))) }
        let before = await c.snapshot()
        store.close()
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.integer("SELECT count(*) FROM snapshots") == 1)
        #expect(try db.integer("SELECT count(*) FROM batches") <= 100, "only about the resume window is kept")
        let (_, again) = try await open(path, window: 50, snapshotEvery: 40)
        #expect(withoutPresence(await again.snapshot()) == withoutPresence(before))
        #expect(again.origin.seq == before.seq)
    }

    @Test func groupCommitUnderConcurrencyKeepsEveryGuaranteeAndReloadsExactly() async throws {
        let path = tempPath()
        let (store, c) = try await open(path)
        try await c.start()
        let sub = await c.subscribe(after: 0, bufferLimit: 1_000_000)
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<16 {
                group.addTask {
                    var rng = SeededRandom(seed: UInt64(t) &+ 77)
                    for _ in 0..<100 { _ = try? await c.execute(randomCommand(&rng), by: "c\(t)") }
                }
            }
        }
        let final = await c.snapshot()
        var checker = StreamChecker(origin: c.origin)
        if case let .replay(batches) = sub.start { for b in batches { try checker.check(b) } }
        if checker.state.seq < final.seq {
            for await batch in sub.batches {
                try checker.check(batch)
                if batch.lastSeq >= final.seq { break }
            }
        }
        #expect(checker.state == final)
        store.close()
        let (_, again) = try await open(path)
        #expect(await again.snapshot() == final, "the file holds exactly what was published")
    }

    @Test func aFileFromANewerTabdIsRefusedAndLeftAlone() async throws {
        let path = tempPath()
        _ = try await open(path).0.close()
        let db = try SQLiteConnection(path: path, readOnly: false)
        try db.execute("PRAGMA user_version = 99")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let error = await openingError(path)
        #expect(error?.contains("newer tabd") == true && error?.contains(path) == true, "\(error ?? "opened")")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes)
    }

    @Test func aCorruptFileIsRefusedAndLeftAlone() async throws {
        let path = tempPath()
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        try garbage.write(to: URL(fileURLWithPath: path))
        #expect(await openingError(path)?.contains(path) == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == garbage)
    }

    @Test func anotherApplicationsDatabaseIsRefused() async throws {
        let path = tempPath()
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let other = try SQLiteConnection(path: path, readOnly: false)
        try other.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        #expect(await openingError(path)?.contains("not a tabd state file") == true)
    }

    @Test func anUnwritablePathFailsNamingTheFile() async {
        #expect(await openingError("/proc/tabd-cannot-be-here/state.sqlite")?.contains("/proc/tabd-cannot-be-here/state.sqlite") == true)
    }

    @Test func anEmptyFileIsANewHistory() async throws {
        let path = tempPath()
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: path, contents: Data())
        let (_, c) = try await open(path)
        try await c.start()
        #expect(await c.snapshot().seq == 2)
    }
}
