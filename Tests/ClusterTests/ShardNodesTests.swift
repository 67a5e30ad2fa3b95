import Coordinator
import Foundation
import JetStream
import Locking
import Testing
@testable import Cluster

/// Rooms in shards over a real NATS JetStream server: where a room's life begins, what a
/// load reads, and how rooms of the two layouts live side by side.
@Suite struct ShardNodesTests {
    func eventually(_ what: String, within seconds: Double = 30, _ condition: () async -> Bool) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !(await condition()) {
            guard Date() < deadline else { throw EngineServer.Failure("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Rooms share a few shards: with two shards, a node's rooms are many subjects of each.
    @Test func roomsOfOneShardAreEachTheirOwnHistory() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let node = try ClusterNode(urls: [server.url], name: "n1", trust: testTrust, shards: 2, log: { _ in })
        defer { node.close() }
        #expect(node.layout.shards == 2)
        let ids = (0..<6).map { "room\($0)" }
        var rooms: [(ClusterRoom, Coordinator)] = []
        for id in ids {
            #expect(try node.createRoom(id, tabs: TabInfo.defaults))
            let room = try node.openRoom(id, resumeWindow: 10_000)
            let coordinator = Coordinator(restoring: room.committedState(), durability: room)
            try await coordinator.start(forgetting: [])
            rooms.append((room, coordinator))
        }
        #expect(Set(ids.map { node.layout.shard(of: $0) }).count <= 2)
        for round in 0..<20 {
            for (i, (_, c)) in rooms.enumerated() { _ = try await c.execute(.scroll(tab: "home", offset: Double(round * 10 + i))) }
        }
        #expect(try node.roomIDs() == ids)
        // Another node reads each from its shard alone: its own state, no other room's.
        let other = try ClusterNode(urls: [server.url], name: "n2", trust: testTrust, log: { _ in })
        defer { other.close() }
        for (i, id) in ids.enumerated() {
            let seen = try other.openRoom(id, resumeWindow: 10_000)
            defer { seen.close() }
            #expect(seen.committedState().snapshot == (await rooms[i].1.snapshot()), "room \(id)")
        }
        for (room, _) in rooms { room.close() }
    }

    /// Deleted and created again: the new life starts from its own first message, and a
    /// directory record of the old life (stored again by a late node) is not loaded into it.
    @Test func aRecordOfADeletedLifeIsNeverLoadedIntoTheRoomCreatedAgain() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let first = try ClusterNode(urls: [server.url], name: "first", trust: testTrust, log: { _ in })
        defer { first.close() }
        _ = try first.createRoom("again", tabs: TabInfo.defaults)
        let old = try first.openRoom("again", resumeWindow: 10_000)
        let oldCoordinator = Coordinator(restoring: old.committedState(), durability: old)
        try await oldCoordinator.start(forgetting: [])
        for i in 0..<50 { _ = try await oldCoordinator.execute(.scroll(tab: "home", offset: Double(i))) }
        let subject = EngineNames.directorySubject("again")
        let stale = old.snapshotRecordForTests
        old.close()
        #expect(try first.deleteRoom("again"))
        #expect(try !first.roomExists("again"))
        #expect(try first.roomIDs().isEmpty)
        #expect(try !first.deleteRoom("again"), "deleting it again finds nothing")

        #expect(try first.createRoom("again", tabs: TabInfo.defaults))
        let new = try first.openRoom("again", resumeWindow: 10_000)
        let coordinator = Coordinator(restoring: new.committedState(), durability: new)
        try await coordinator.start(forgetting: [])
        #expect(coordinator.epoch != oldCoordinator.epoch)
        #expect(try !old.streamIsCurrent(), "the old life ended")
        #expect(try new.streamIsCurrent())
        _ = try await coordinator.execute(.scroll(tab: "home", offset: 7))
        let body = stale.bytes
        _ = first.client.publish(subject: subject, data: body, headers: [("Tabd-Seal", first.trust.sealSnapshot(subject: subject, body: body))])
        let expected = await coordinator.snapshot()

        let second = try ClusterNode(urls: [server.url], name: "second", trust: testTrust, log: { _ in })
        defer { second.close() }
        let seen = try second.openRoom("again", resumeWindow: 10_000)
        defer { seen.close() }
        #expect(seen.committedState().epoch == coordinator.epoch)
        #expect(seen.committedState().snapshot == expected)
        new.close()
    }

    /// A room loads while another node appends to it without pause: the load reads what the
    /// shard holds, then takes the shard follower's messages; nothing is missed or doubled
    /// (a doubled or missing batch does not fold: the load breaks the room).
    @Test func aLoadTakesOverFromTheShardFollowerWithNothingMissedOrDoubled() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let writer = try ClusterNode(urls: [server.url], name: "w", trust: testTrust, shards: 1, log: { _ in })
        defer { writer.close() }
        _ = try writer.createRoom("busy", tabs: TabInfo.defaults)
        _ = try writer.createRoom("beside", tabs: TabInfo.defaults)
        let room = try writer.openRoom("busy", resumeWindow: 10_000)
        let beside = try writer.openRoom("beside", resumeWindow: 10_000)
        let coordinator = Coordinator(restoring: room.committedState(), durability: room)
        let besideCoordinator = Coordinator(restoring: beside.committedState(), durability: beside)
        try await coordinator.start(forgetting: [])
        try await besideCoordinator.start(forgetting: [])
        let stop = Locked(false)
        let writing = Task {
            var i = 0
            while !stop.withLock({ $0 }) {
                i += 1
                _ = try await coordinator.execute(.scroll(tab: "home", offset: Double(i)))
                _ = try await besideCoordinator.execute(.scroll(tab: "home", offset: Double(i)))
            }
        }
        let reader = try ClusterNode(urls: [server.url], name: "r", trust: testTrust, log: { _ in })
        defer { reader.close() }
        for _ in 0..<10 {
            let seen = try reader.openRoom("busy", resumeWindow: 10_000)
            let at = seen.committedState().snapshot.seq
            // It goes on with the writer's batches, in order, from where it loaded.
            let target = await coordinator.currentSeq + 3
            try await eventually("the loaded room to follow the writer") { seen.committedState().snapshot.seq >= target }
            #expect(seen.broken == nil && seen.committedState().snapshot.seq > at)
            seen.close()
        }
        stop.withLock { $0 = true }
        try await writing.value
        let seen = try reader.openRoom("busy", resumeWindow: 10_000)
        defer { seen.close() }
        try await eventually("the last batch") { seen.committedState().snapshot.seq == (await coordinator.currentSeq) }
        #expect(seen.committedState().snapshot == (await coordinator.snapshot()))
        room.close()
        beside.close()
    }

    /// Rooms with a stream of their own (made by a node creating rooms so, as a tabd before
    /// shards did) and rooms in shards live side by side: each node lists both and never
    /// creates a room that lives in the other layout; a node of the old layout serves each
    /// where it is, a node creating rooms in shards moves the other kind there.
    @Test func roomsOfBothLayoutsAreServedListedAndNeverCreatedTwice() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let streams = try ClusterNode(urls: [server.url], name: "old", trust: testTrust, placement: .streams, log: { _ in })
        defer { streams.close() }
        let shards = try ClusterNode(urls: [server.url], name: "new", trust: testTrust, log: { _ in })
        defer { shards.close() }
        #expect(try streams.createRoom("legacy", tabs: TabInfo.defaults))
        #expect(try shards.createRoom("sharded", tabs: TabInfo.defaults))
        #expect(try !shards.createRoom("legacy", tabs: TabInfo.defaults))
        #expect(try !streams.createRoom("sharded", tabs: TabInfo.defaults))
        #expect(try shards.roomIDs() == ["legacy", "sharded"])
        #expect(try streams.roomIDs() == ["legacy", "sharded"])
        // The node of the old layout serves each where it is; the other moves the room with
        // a stream of its own into its shard as it opens it.
        for (node, inShard) in [(streams, false), (shards, true), (streams, true)] {
            for id in ["legacy", "sharded"] {
                let room = try node.openRoom(id, resumeWindow: 10_000)
                #expect((room.place.shard != nil) == (inShard || id == "sharded"), "\(node.name) opening \(id)")
                room.close()
            }
        }
        #expect(try shards.roomIDs() == ["legacy", "sharded"])
        #expect(try shards.deleteRoom("legacy"))
        #expect(try streams.deleteRoom("sharded"))
        #expect(try shards.roomIDs().isEmpty)
    }

    /// A room with a stream of its own, in use on a node of the old layout, is opened by a
    /// node that creates rooms in shards: it is moved into its shard with its life (epoch,
    /// seqs, state), the old node learns it moved (its clients resume there), nothing
    /// more lands in the old stream, and the stream is gone.
    @Test func aRoomWithAStreamOfItsOwnMovesIntoItsShardKeepingItsLife() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let old = try ClusterNode(urls: [server.url], name: "old", trust: testTrust, placement: .streams, log: { _ in })
        defer { old.close() }
        #expect(try old.createRoom("legacy", tabs: TabInfo.defaults))
        let before = try old.openRoom("legacy", resumeWindow: 10_000)
        let oldCoordinator = Coordinator(restoring: before.committedState(), durability: before)
        try await oldCoordinator.start(forgetting: [])
        for i in 0..<30 { _ = try await oldCoordinator.execute(.scroll(tab: "home", offset: Double(i))) }
        let expected = await oldCoordinator.snapshot()

        let new = try ClusterNode(urls: [server.url], name: "new", trust: testTrust, log: { _ in })
        defer { new.close() }
        let moved = try new.openRoom("legacy", resumeWindow: 10_000)
        defer { moved.close() }
        #expect(moved.place.shard == new.layout.shard(of: "legacy"))
        #expect(moved.committedState().epoch == oldCoordinator.epoch, "the same life")
        #expect(moved.committedState().snapshot == expected, "the same state and seqs")
        try await eventually("the old node to see the fence") { before.movedOut }
        #expect(try before.standing() == .moved)
        // What the old node still appends fails: nothing lands after the fence.
        await #expect(throws: (any Error).self) { _ = try await oldCoordinator.execute(.scroll(tab: "home", offset: 99)) }
        #expect(try new.client.streamInfo(EngineNames.stream("legacy")) == nil, "its own stream is gone")
        #expect(try new.roomIDs() == ["legacy"])
        // It goes on in the shard.
        let coordinator = Coordinator(restoring: moved.committedState(), durability: moved)
        try await coordinator.start(forgetting: [])
        _ = try await coordinator.execute(.scroll(tab: "home", offset: 100))
        #expect(await coordinator.currentSeq > expected.seq)
        before.close()
    }

    /// A node that stopped after the fence, before the shard's message: the next node to
    /// load the room finishes the move, whatever layout it creates rooms in.
    @Test func aMoveBegunIsFinishedByTheNextNodeToLoadTheRoom() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let old = try ClusterNode(urls: [server.url], name: "old", trust: testTrust, placement: .streams, log: { _ in })
        defer { old.close() }
        #expect(try old.createRoom("half", tabs: TabInfo.defaults))
        let room = try old.openRoom("half", resumeWindow: 10_000)
        let coordinator = Coordinator(restoring: room.committedState(), durability: room)
        try await coordinator.start(forgetting: [])
        for i in 0..<10 { _ = try await coordinator.execute(.scroll(tab: "home", offset: Double(i))) }
        let expected = await coordinator.snapshot()
        try room.appendFence()
        room.close()
        #expect(try old.client.streamInfo(EngineNames.stream("half")) != nil)
        let again = try old.openRoom("half", resumeWindow: 10_000)
        defer { again.close() }
        #expect(again.place.shard != nil, "moved, though this node creates rooms in streams")
        #expect(again.committedState().snapshot == expected)
        #expect(try old.client.streamInfo(EngineNames.stream("half")) == nil)
    }
}
