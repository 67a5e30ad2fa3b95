import Foundation
import Testing
import Coordinator
import Conformance
@testable import StateStore

/// Many rooms in one state file: independence, group commit across rooms, unloading,
/// deletion, and the upgrade of a single-room file.
@Suite struct RoomStoreTests {
    private func tempPath() -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-rooms-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent("state.sqlite").path
    }

    /// A copy of the file the single-room tabd wrote (Tests/fixtures/README.md).
    private func copyOfV1Fixture() throws -> String {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fixtures/v1-state.sqlite")
        let path = tempPath()
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: fixture.path, toPath: path)
        return path
    }

    private func coordinator(_ room: RoomStore) -> Coordinator { Coordinator(restoring: room.loaded, durability: room) }

    @Test func aSingleRoomFileOpensAsRoomMainWithItsWholeHistory() async throws {
        let path = try copyOfV1Fixture()
        let store = try StateStore(options: .init(path: path))
        #expect(try await store.roomIDs() == ["main"])
        let main = try #require(try await store.openRoom("main"))
        #expect(main.loaded.epoch == "53ba5d13eec1b364")
        #expect(main.loaded.snapshot.seq == 18)
        #expect(main.loaded.history.first?.firstSeq == 1 && main.loaded.history.last?.lastSeq == 18)
        let favorites = try #require(main.loaded.snapshot.tab("favorites"))
        #expect(favorites.values["greeting"] == .string("Tapped"))
        #expect(favorites.stack.map(\.route) == ["root", "detail"])
        #expect(main.loaded.nextPage == 6, "pages p4 and p5 were handed out before the upgrade")

        // A client of the old version that saw seq 12 resumes across the upgrade.
        let c = coordinator(main)
        try await c.start()
        let back = try await c.connect(.init(resume: 12, epoch: "53ba5d13eec1b364"))
        #expect(back.resumed)
        #expect(back.replay.first?.firstSeq == 13)
        #expect(back.client.id == "c2", "client numbering continues")
        store.close()

        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.integer("PRAGMA user_version") == StateStore.schemaVersion)
        #expect(try db.query("SELECT name FROM sqlite_master WHERE name = 'meta'").isEmpty, "the single-room tables are gone")
    }

    @Test func roomsShareTheFileAndNothingElse() async throws {
        let path = tempPath()
        let store = try StateStore(options: .init(path: path))
        let a = coordinator(try await store.createRoom("a", tabs: TabInfo.defaults))
        let b = coordinator(try await store.createRoom("b", tabs: [TabInfo(id: "only", title: "Only", icon: "star", color: "#000000")]))
        try await a.start()
        try await b.start()
        #expect(a.epoch != b.epoch)
        for i in 0..<5 { _ = try await a.execute(.scroll(tab: nil, offset: Double(i))) }
        _ = try await b.execute(.push(tab: nil, route: "x"))
        let (sa, sb) = (await a.snapshot(), await b.snapshot())
        #expect(sa.seq == 7, "each room counts its own seqs: the start's two events and five scrolls")
        do {
            _ = try await store.createRoom("a", tabs: TabInfo.defaults)
            Issue.record("a second room 'a' was created")
        } catch { #expect(error.roomExists) }
        let listed = try await store.listRooms(after: nil, limit: 10)
        #expect(listed.map(\.id) == ["a", "b"] && listed.map(\.seq) == [sa.seq, sb.seq])
        #expect(try await store.listRooms(after: "a", limit: 10).map(\.id) == ["b"])
        store.close()

        let again = try StateStore(options: .init(path: path))
        let a2 = try #require(try await again.openRoom("a"))
        let b2 = try #require(try await again.openRoom("b"))
        #expect(a2.loaded.snapshot == sa && a2.loaded.epoch == a.epoch)
        #expect(b2.loaded.snapshot == sb && b2.loaded.epoch == b.epoch)
        #expect(try await again.openRoom("c") == nil)
    }

    @Test func groupCommitAcrossRoomsKeepsEveryRoomExact() async throws {
        let path = tempPath()
        let store = try StateStore(options: .init(path: path, snapshotEvery: 50))
        var rooms: [Coordinator] = []
        for r in 0..<8 {
            let c = coordinator(try await store.createRoom("room-\(r)", tabs: TabInfo.defaults))
            try await c.start()
            rooms.append(c)
        }
        await withTaskGroup(of: Void.self) { group in
            for (r, c) in rooms.enumerated() {
                for t in 0..<3 {
                    group.addTask {
                        var rng = SeededRandom(seed: UInt64(r * 10 + t) &+ 5)
                        for _ in 0..<60 { _ = try? await c.execute(randomCommand(&rng), by: "c\(t)") }
                    }
                }
            }
        }
        var finals: [Snapshot] = []
        for c in rooms { finals.append(await c.snapshot()) }
        store.close()
        let again = try StateStore(options: .init(path: path, snapshotEvery: 50))
        for (r, final) in finals.enumerated() {
            let loaded = try #require(try await again.openRoom("room-\(r)"))
            #expect(loaded.loaded.snapshot == final, "room-\(r) holds exactly what was published")
        }
    }

    @Test func anUnloadedRoomOpensAgainWhereItStopped() async throws {
        let path = tempPath()
        let store = try StateStore(options: .init(path: path))
        let first = try await store.createRoom("kiosk", tabs: TabInfo.defaults)
        let c = coordinator(first)
        try await c.start()
        _ = try await c.connect(.init(name: "k"))
        _ = try await c.execute(.push(tab: nil, route: "a"))
        let before = await c.snapshot()
        await first.unload()
        #expect(store.writer.isOpen("kiosk") == false, "an unloaded room holds no memory in the writer")
        let second = try #require(try await store.openRoom("kiosk"))
        #expect(second.loaded.snapshot == before && second.loaded.epoch == c.epoch)
        #expect(second.loaded.history.last?.lastSeq == before.seq)
    }

    @Test func aDeletedRoomIsGoneAndComesBackAsANewHistory() async throws {
        let path = tempPath()
        let store = try StateStore(options: .init(path: path))
        let room = try await store.createRoom("gone", tabs: TabInfo.defaults)
        let c = coordinator(room)
        try await c.start()
        await room.unload()
        #expect(try await store.deleteRoom("gone"))
        #expect(try await store.deleteRoom("gone") == false)
        #expect(try await store.openRoom("gone") == nil)
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.integer("SELECT count(*) FROM batches WHERE room = 'gone'") == 0)
        #expect(try db.integer("SELECT count(*) FROM snapshots WHERE room = 'gone'") == 0)
        let reborn = try await store.createRoom("gone", tabs: TabInfo.defaults)
        #expect(reborn.loaded.epoch != c.epoch && reborn.loaded.snapshot.seq == 0)
    }
}
