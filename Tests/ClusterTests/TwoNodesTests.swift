@testable import Cluster
import Conformance
import Coordinator
import Foundation
import JetStream
import Locking
import Testing

/// What one node's coordinator published: its batches and its answers, by address.
final class NodeLog: Sendable {
    let batches = Locked<[EventBatch]>([])
    let answers = Locked<[UInt64: [ServerFrame]]>([:])

    func count(_ address: UInt64) -> Int { answers.withLock { $0[address]?.count ?? 0 } }
}

/// Two nodes of a cluster over a real NATS JetStream server, each with its own
/// coordinator of one room, applying commands at once: the engine's compare-and-set
/// decides one order, the loser of each race decides its commands again.
@Suite(.timeLimit(.minutes(2)))
struct TwoNodesTests {
    /// Waits (bounded) until `condition` holds.
    func eventually(_ what: String, within seconds: Double = 30, _ condition: () async -> Bool) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !(await condition()) {
            guard Date() < deadline else { throw EngineServer.Failure("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Room `id` opened on `node` with a coordinator of its own, which takes in the other
    /// nodes' batches; what it publishes and answers goes to the log.
    static func open(_ id: RoomID, on node: ClusterNode) async throws -> (ClusterRoom, Coordinator, NodeLog) {
        let room = try node.openRoom(id, resumeWindow: 10_000)
        let coordinator = Coordinator(restoring: room.committedState(), durability: room)
        let log = NodeLog()
        await coordinator.addPublisher { batches, answers in
            log.batches.withLock { $0 += batches }
            log.answers.withLock { for a in answers { $0[a.to, default: []].append(a.frame) } }
        }
        room.onForeignBatches { Task { await coordinator.absorb() } }
        return (room, coordinator, log)
    }

    @Test(arguments: [1, 2] as [UInt64])
    func nodesApplyingCommandsToOneRoomAtOnceEndWithOneOrder(seed: UInt64) async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let nodes = try (1...2).map { try ClusterNode(urls: [server.url], name: "n\($0)", trust: testTrust, log: { _ in }) }
        defer { for node in nodes { node.close() } }
        #expect(try nodes[0].createRoom("r", tabs: TabInfo.defaults))
        #expect(try !nodes[1].createRoom("r", tabs: TabInfo.defaults), "the room exists: only one creation wins")

        var coordinators: [Coordinator] = []
        var rooms: [ClusterRoom] = []
        var logs: [NodeLog] = []
        for node in nodes {
            let (room, coordinator, log) = try await Self.open("r", on: node)
            coordinators.append(coordinator)
            rooms.append(room)
            logs.append(log)
        }
        // Both start at seq 0: one first appear wins, the other node decides again (nothing).
        let (c0, c1) = (coordinators[0], coordinators[1])
        async let s0: Void = c0.start(forgetting: [])
        async let s1: Void = c1.start(forgetting: [])
        _ = try await (s0, s1)
        // One client joins each node at once: the roster is part of the state compared below.
        async let j0 = c0.connect(.init(name: "on n0"))
        async let j1 = c1.connect(.init(name: "on n1"))
        let joined = try await [j0.client, j1.client]
        #expect(Set(joined.map(\.id)).count == 2, "two clients, two ids")

        // 2 nodes × 4 clients × 40 random commands, all at once.
        let perClient = 40
        let all = coordinators
        await withTaskGroup(of: Void.self) { group in
            for (n, coordinator) in all.enumerated() {
                for k in 0..<4 {
                    let address = UInt64(n * 10 + k)
                    group.addTask {
                        var rng = SeededRandom(seed: seed &* 1000 &+ address)
                        for i in 0..<perClient {
                            await coordinator.enqueue(randomCommand(&rng), by: "n\(n)c\(k)", ref: "\(address)-\(i)", replyTo: address)
                        }
                    }
                }
            }
        }
        let addresses = (0..<2).flatMap { n in (0..<4).map { (n, UInt64(n * 10 + $0)) } }
        try await eventually("every command answered") { addresses.allSatisfy { logs[$0.0].count($0.1) == perClient } }
        try await eventually("both nodes at the stream's end") {
            let a = await coordinators[0].currentSeq, b = await coordinators[1].currentSeq
            return a == b && a == rooms[0].committedState().snapshot.seq && a == rooms[1].committedState().snapshot.seq
                && logs.allSatisfy { $0.batches.withLock { $0.last?.lastSeq } == a }
        }

        // One order: both nodes published the same batches, gap-free, that fold to each one's
        // whole state (seq, selection, tabs with their stacks, scroll and values, the
        // scroll-to-top counter, clients), which is the engine's for both.
        let streams = logs.map { $0.batches.withLock { $0 } }
        #expect(streams[0] == streams[1])
        #expect(coordinators[0].origin == coordinators[1].origin && coordinators[0].epoch == coordinators[1].epoch)
        var checker = StreamChecker(origin: coordinators[0].origin)
        for batch in streams[0] { try checker.check(batch) }
        let snapshots = [await coordinators[0].snapshot(), await coordinators[1].snapshot()]
        #expect(snapshots[0] == snapshots[1])
        #expect(Set(snapshots[0].clients) == Set(joined))
        for (n, snapshot) in snapshots.enumerated() {
            #expect(checker.state == snapshot, "node \(n)'s state is not the fold of the stream")
            #expect(rooms[n].committedState().snapshot == snapshot, "node \(n)'s state is not the engine's")
            #expect(coordinators[n].counter.value == snapshot.scrollToTop, "node \(n)'s published scroll-to-top counter")
        }
        // Every command answered once, in order, never `unavailable` (a conflict is decided
        // again, not answered); every ack names the end of a batch of its own ref.
        let byRef = Dictionary(streams[0].compactMap { b in b.ref.map { ($0, b) } }, uniquingKeysWith: { a, _ in a })
        var acks = 0
        for (n, address) in addresses {
            let frames = logs[n].answers.withLock { $0[address] ?? [] }
            for (i, frame) in frames.enumerated() {
                switch frame {
                case let .ack(ref, seq):
                    #expect(ref == "\(address)-\(i)")
                    if let batch = byRef[ref!] { #expect(batch.lastSeq == seq) }
                    acks += 1
                case let .error(ref, error):
                    #expect(ref == "\(address)-\(i)")
                    #expect(error.code != .unavailable, "\(error)")
                case .snapshot, .pong, .clients: break
                default: Issue.record("unexpected answer \(frame)")
                }
            }
        }
        #expect(acks > 0)
        #expect(rooms[0].conflicts + rooms[1].conflicts > 0, "the nodes never raced: the conflict path was not exercised")
    }

    /// The fence: a forwarded command that one node decided and that changed nothing (or
    /// was refused) is never applied by another node that decides it afterwards on a state
    /// where it would change something. It answers what the first decision answered.
    /// Without the fence (``ClusterRoom/fencesOff``) the second node selects `home` here.
    @Test func aForwardedCommandThatChangedNothingIsNotAppliedByAnotherNodeAfterwards() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let nodes = try (1...2).map { try ClusterNode(urls: [server.url], name: "n\($0)", trust: testTrust, log: { _ in }) }
        defer { for node in nodes { node.close() } }
        #expect(try nodes[0].createRoom("r", tabs: TabInfo.defaults))
        var coordinators: [Coordinator] = []
        var logs: [NodeLog] = []
        for node in nodes {
            let (_, coordinator, log) = try await Self.open("r", on: node)
            coordinators.append(coordinator)
            logs.append(log)
        }
        let (first, second) = (coordinators[0], coordinators[1])
        try await first.start(forgetting: [])
        let selected = await first.snapshot().selected
        let other = try #require(TabInfo.defaults.map(\.id).first { $0 != selected })
        // n1 decides forward f1 (select the selected tab: nothing) and f2 (a tab that is not there).
        await first.enqueue(.select(tab: selected), by: "c1", ref: "a", replyTo: 1, commandKey: "n2:i:r:f1")
        await first.enqueue(.select(tab: "later"), by: "c1", ref: "b", replyTo: 1, commandKey: "n2:i:r:f2")
        try await eventually("n1's answers") { logs[0].count(1) == 2 }
        let answers = logs[0].answers.withLock { $0[1]! }
        guard case let .ack("a", at) = answers[0], case .error("b", let refused) = answers[1] else {
            Issue.record("unexpected answers \(answers)"); return
        }
        #expect(refused.code == .unknownTab)
        // Then the state moves on: f1 would now change the selection, and `later` exists.
        _ = try await first.execute(.select(tab: other))
        _ = try await first.execute(.addTab(TabInfo(id: "later", title: "Later", icon: "star", color: "#123456"), index: nil))
        let end = await first.currentSeq
        try await eventually("n2 has the room") { await second.currentSeq == end }
        // n2 decides the same forwards (its forwarder gave up on n1): the stream's record answers.
        await second.enqueue(.select(tab: selected), by: "c1", ref: "a", replyTo: 2, commandKey: "n2:i:r:f1")
        await second.enqueue(.select(tab: "later"), by: "c1", ref: "b", replyTo: 2, commandKey: "n2:i:r:f2")
        try await eventually("n2's answers") { logs[1].count(2) == 2 }
        let again = logs[1].answers.withLock { $0[2]! }
        #expect(again == [.ack(ref: "a", seq: at), .error(ref: "b", refused)], "the first decisions' answers")
        let (now, seqNow) = (await second.snapshot().selected, await second.currentSeq)
        #expect(now == other && seqNow == end, "neither applied")
    }

    @Test func aNodeThatHasNeverSeenTheRoomServesItFromTheEngine() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let first = try ClusterNode(urls: [server.url], name: "first", trust: testTrust, log: { _ in })
        defer { first.close() }
        _ = try first.createRoom("late", tabs: TabInfo.defaults)
        let room = try first.openRoom("late", resumeWindow: 10_000)
        let coordinator = Coordinator(restoring: room.committedState(), durability: room)
        try await coordinator.start(forgetting: [])
        // Over 1,000 events: a snapshot is stored in the engine, and batches follow it.
        for i in 0..<700 { _ = try await coordinator.execute(.push(tab: "home", route: "p\(i)")); _ = try await coordinator.execute(.pop(tab: "home")) }
        let expected = await coordinator.snapshot()

        let second = try ClusterNode(urls: [server.url], name: "second", trust: testTrust, log: { _ in })
        defer { second.close() }
        let seen = try second.openRoom("late", resumeWindow: 10_000)
        let state = seen.committedState()
        #expect(state.epoch == coordinator.epoch)
        #expect(state.snapshot == expected)
    }

    /// A room deleted and created again under the same id: a snapshot of the old room that
    /// outlived the deletion (stored by a node that had not heard of it yet) is not loaded
    /// into the new one, even where its seq would fit the new stream.
    @Test func aSnapshotOfADeletedRoomIsNeverLoadedIntoTheRoomCreatedAgain() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        // Rooms with a stream of their own (shards keep their records elsewhere).
        let first = try ClusterNode(urls: [server.url], name: "first", trust: testTrust, placement: .streams, log: { _ in })
        defer { first.close() }
        let subject = EngineNames.snapshotSubject("again")
        _ = try first.createRoom("again", tabs: TabInfo.defaults)
        let old = try first.openRoom("again", resumeWindow: 10_000)
        let oldCoordinator = Coordinator(restoring: old.committedState(), durability: old)
        try await oldCoordinator.start(forgetting: [])
        for i in 0..<600 { _ = try await oldCoordinator.execute(.push(tab: "home", route: "old\(i)")); _ = try await oldCoordinator.execute(.pop(tab: "home")) }
        var stale: [UInt8] = []
        try await eventually("a snapshot of the old room") {
            stale = (try? first.client.lastMessage(stream: EngineNames.snapshots, subject: subject))?.data ?? []
            return !stale.isEmpty
        }
        let staleSeq = try SnapshotRecord(bytes: stale).streamSeq
        old.close()
        #expect(try first.deleteRoom("again"))

        // The new room: more messages than the stale snapshot's seq, then the stale
        // snapshot stored again, last, as the late node would.
        _ = try first.createRoom("again", tabs: TabInfo.defaults)
        let new = try first.openRoom("again", resumeWindow: 10_000)
        let coordinator = Coordinator(restoring: new.committedState(), durability: new)
        try await coordinator.start(forgetting: [])
        // What a node that missed the deletion notice checks when it reconnects.
        #expect(try !old.streamIsCurrent(), "the old room's stream is gone, though one of its name exists")
        #expect(try new.streamIsCurrent())
        for i in 0...Int(staleSeq) { _ = try await coordinator.execute(.scroll(tab: "home", offset: Double(i))) }
        _ = first.client.publish(subject: subject, data: stale, headers: [("Tabd-Seal", first.trust.sealSnapshot(subject: subject, body: stale))])
        let expected = await coordinator.snapshot()

        let second = try ClusterNode(urls: [server.url], name: "second", trust: testTrust, placement: .streams, log: { _ in })
        defer { second.close() }
        let seen = try second.openRoom("again", resumeWindow: 10_000)
        defer { seen.close() }
        #expect(seen.committedState().epoch == coordinator.epoch)
        #expect(seen.committedState().snapshot == expected)
        new.close()
    }
}

@Suite struct SealMarkTests {
    @Test func aNodeThatRequiresSealsMarksARoomOfPhaseOneSealed() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let phaseOne = EngineTrust(secret: testTrust.secret, acceptUnsigned: true)
        // A node of phase one of a cluster of rooms with streams of their own.
        let first = try ClusterNode(urls: [server.url], name: "first", trust: phaseOne, placement: .streams, log: { _ in })
        defer { first.close() }
        #expect(try first.createRoom("moving", tabs: TabInfo.defaults))
        let old = try first.openRoom("moving", resumeWindow: 10_000)
        #expect(!old.sealed, "a room created in phase one has no seal mark")
        let lines = Locked([String]())
        let second = try ClusterNode(urls: [server.url], name: "second", trust: testTrust, placement: .streams, log: { line in lines.withLock { $0.append(line) } })
        defer { second.close() }
        let room = try second.openRoom("moving", resumeWindow: 10_000)
        defer { room.close() }
        #expect(room.sealed, "\(lines.withLock { $0 })")
        old.close()
    }
}
