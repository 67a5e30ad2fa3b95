import Coordinator
import Testing
import WebSockets
@testable import TabdServer

/// The registry's rules for rooms (creation, users, idle unloading, incarnations, deletion),
/// driven with a clock of the test's own: idle unloading without waiting.
@Suite struct RoomDirectoryTests {
    final class FakeRoom: DirectoryRoom {
        let id: RoomID
        let channel: ChannelID
        let predecessor: FakeRoom?
        init(_ id: RoomID, _ channel: ChannelID, _ predecessor: FakeRoom?) { self.id = id; self.channel = channel; self.predecessor = predecessor }
    }

    typealias Directory = RoomDirectory<FakeRoom>
    let t0 = ContinuousClock.now

    func take(_ d: inout Directory, _ id: RoomID, creating: Bool = true, exclusive: Bool = false) -> Result<Directory.Acquired, RoomRefusal> {
        d.acquire(id, creating: creating, exclusive: exclusive) { channel, predecessor, _ in FakeRoom(id, channel, predecessor) }
    }

    func room(_ r: Result<Directory.Acquired, RoomRefusal>) -> FakeRoom? {
        switch r {
        case let .success(.loaded(room)), let .success(.new(room, _)): room
        case .failure: nil
        }
    }

    @Test func aRoomIsLoadedOnceAndCountsItsUsers() throws {
        var d = Directory(settings: .init(), existing: ["stored"])
        guard case let .success(.new(first, creates)) = take(&d, "stored") else { Issue.record("not loaded"); return }
        #expect(!creates, "a stored room is loaded, not created")
        guard case let .success(.loaded(again)) = take(&d, "stored") else { Issue.record("loaded twice"); return }
        #expect(again === first)
        #expect(d.users(of: "stored") == 2)
        guard case .success(.new(_, creates: true)) = take(&d, "fresh") else { Issue.record("not created"); return }
        #expect(d.existing == ["stored", "fresh"])
        #expect(room(take(&d, "other"))?.channel != first.channel, "every incarnation has a channel of its own")
    }

    @Test func refusalsOfTakingARoom() {
        var d = Directory(settings: .init(creation: .api, maxRooms: 2), existing: ["a"])
        #expect(d.admission("a") == nil)
        #expect(d.admission("b") == .unknown, "--rooms api: joins do not create rooms")
        guard case .failure(.unknown) = take(&d, "b", creating: false) else { Issue.record("an unknown room was taken"); return }
        guard case .failure(.exists) = take(&d, "a", exclusive: true) else { Issue.record("created twice"); return }
        guard case .success = take(&d, "b", exclusive: true) else { Issue.record("PUT refused"); return }
        guard case .failure(.full) = take(&d, "c") else { Issue.record("--max-rooms not kept"); return }
        var auto = Directory(settings: .init(creation: .auto, maxRooms: 1), existing: ["a"])
        #expect(auto.admission("b") == .full)
        #expect(auto.admission("a") == nil)
        _ = auto.beginDeletion("a")
        #expect(auto.admission("a") == .deleting)
        guard case .failure(.deleting) = take(&auto, "a") else { Issue.record("a room being deleted was taken"); return }
    }

    @Test func anIdleRoomRetiresAfterTheIdleTimeAndNotBefore() throws {
        var d = Directory(settings: .init(idle: .seconds(300)), existing: [])
        let r = try #require(room(take(&d, "a")))
        let asked = d.release(r, 1, now: t0)
        #expect(asked, "the last user gone: a check is asked for")
        let early = d.idleCheck(r, now: t0 + .seconds(100))
        #expect(early == .checkAgain(after: .seconds(200)))
        #expect(d.loadedRoom("a") === r)
        let due = d.idleCheck(r, now: t0 + .seconds(300))
        #expect(due == .retire)
        #expect(d.loadedRoom("a") == nil)
        #expect(d.existing.contains("a"), "a retired room still exists (stored)")
        // The next user makes a new incarnation that waits for the retiring one.
        let next = try #require(room(take(&d, "a")))
        #expect(next !== r && next.predecessor === r)
        d.retired(r)
        let third = try #require(room(take(&d, "b")))
        #expect(third.predecessor == nil)
    }

    @Test func aUserComingBackCancelsTheUnloading() throws {
        var d = Directory(settings: .init(idle: .seconds(10)), existing: [])
        let r = try #require(room(take(&d, "a")))
        var asked = d.release(r, 1, now: t0)
        #expect(asked)
        _ = take(&d, "a")
        var check = d.idleCheck(r, now: t0 + .seconds(60))
        #expect(check == .inUse)
        // Idle again: a new check is asked for, counted from the new idle moment.
        asked = d.release(r, 1, now: t0 + .seconds(61))
        #expect(asked)
        // A user comes and goes while that check is pending: no second check, and the
        // pending one counts from the last departure.
        _ = take(&d, "a")
        asked = d.release(r, 1, now: t0 + .seconds(63))
        #expect(!asked, "one check at a time")
        check = d.idleCheck(r, now: t0 + .seconds(65))
        #expect(check == .checkAgain(after: .seconds(8)))
        check = d.idleCheck(r, now: t0 + .seconds(73))
        #expect(check == .retire)
    }

    @Test func onlyTheCurrentIncarnationIsCounted() throws {
        var d = Directory(settings: .init(idle: .seconds(1)), existing: [])
        let old = try #require(room(take(&d, "a")))
        _ = d.release(old, 1, now: t0)
        var check = d.idleCheck(old, now: t0 + .seconds(2))
        #expect(check == .retire)
        let new = try #require(room(take(&d, "a")))
        let asked = d.release(old, 1, now: t0 + .seconds(3))
        #expect(!asked, "a retired incarnation's users are not the new one's")
        #expect(d.users(of: "a") == 1)
        check = d.idleCheck(old, now: t0 + .seconds(9))
        #expect(check == .inUse)
        #expect(d.loadedRoom("a") === new)
    }

    @Test func aRoomThatFailsToLoadLeaves() throws {
        var d = Directory(settings: .init(), existing: ["stored"])
        let created = try #require(room(take(&d, "new")))
        d.failed(created, persistent: true, wasCreating: true)
        #expect(!d.existing.contains("new"), "a room that could not be created does not exist")
        let stored = try #require(room(take(&d, "stored")))
        d.failed(stored, persistent: true, wasCreating: false)
        #expect(d.existing.contains("stored") && d.loadedRoom("stored") == nil, "a stored room stays stored")
        let memory = try #require(room(take(&d, "stored")))
        d.failed(memory, persistent: false, wasCreating: false)
        #expect(!d.existing.contains("stored"), "in memory, a room that failed is gone")
    }

    @Test func deletion() throws {
        var d = Directory(settings: .init(), existing: ["a", "b"])
        let a = try #require(room(take(&d, "a")))
        let taken = d.beginDeletion("a")
        #expect(taken?.loaded === a && taken?.retiring == nil)
        let twice = d.beginDeletion("a")
        #expect(twice == nil, "deleted once")
        let unknown = d.beginDeletion("nope")
        #expect(unknown == nil)
        d.endDeletion("a", deleted: true)
        #expect(!d.existing.contains("a") && !d.isDeleting("a"))
        _ = d.beginDeletion("b")
        d.endDeletion("b", deleted: false)
        #expect(d.existing.contains("b"), "a deletion that failed leaves the room")
        // Another node's deletion: forgotten here, unless this node is deleting it.
        let b = try #require(room(take(&d, "b")))
        guard case let .forgotten(forgotten) = d.deletedElsewhere("b", found: b) else { Issue.record("b is not forgotten"); return }
        #expect(forgotten === b)
        #expect(!d.existing.contains("b"))
        _ = take(&d, "c")
        _ = d.beginDeletion("c")
        guard case .deletingHere = d.deletedElsewhere("c", found: nil) else { Issue.record("this node is deleting c itself"); return }
        // The engine said 'd' is gone while it was not loaded here; it was created again and
        // loaded before the answer was acted on: that incarnation stays.
        d = Directory(settings: .init(), existing: [])
        let again = try #require(room(take(&d, "d")))
        guard case let .loadedSince(kept) = d.deletedElsewhere("d", found: nil) else { Issue.record("a room loaded since is closed"); return }
        #expect(kept === again && d.loadedRoom("d") === again)
    }
}
