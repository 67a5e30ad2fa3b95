import Coordinator
import Testing
@testable import Cluster

/// A room in a shard, without an engine: its messages are the shard's messages on its
/// subject, at stream sequences other rooms' messages fall between; each says which of the
/// room's messages it follows (its seal covers that), and the machine believes it only there.
@Suite struct ShardRoomMachineTests {
    typealias Machine = ClusterRoomMachine
    typealias Action = ClusterRoomMachine.Action

    /// A room of shard 3 whose life began at stream seq 10.
    static func machine(streamEnd: UInt64 = 10) throws -> Machine {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let start = StoredState(epoch: "e1", snapshot: origin, nextPage: TabInfo.defaults.count + 1, nextClient: 1, history: [])
        return Machine(room: "r", start: start, owners: [:], from: 10, streamEnd: streamEnd, streamCreated: 7, resumeWindow: 100,
                       messageIDPrefix: "n1-r-x", pipelineDepth: 4, sealed: true, lifeBound: true, shard: 3, lifeStart: 10)
    }

    static func batch(_ seq: Int, offset: Double = 1) -> EventBatch {
        EventBatch(by: "c1", ref: nil, events: [SequencedEvent(seq: seq, event: .scrolled(tab: "home", offset: offset))])
    }

    static func delivery(_ streamSeq: UInt64, follows: UInt64, _ batch: EventBatch, writer: String = "n2", id: String? = nil) -> Machine.Delivery {
        Machine.Delivery(streamSeq: streamSeq, kind: nil, writer: writer, messageID: id, data: batch.frameBytes, follows: follows)
    }

    static func publication(_ actions: [Action]) -> Machine.Publication? {
        for case let .publish(p) in actions { return p }
        return nil
    }

    @Test func oneMessageIsInFlightAndTheNextExpectsTheRoomsLastMessageWhereverItLanded() throws {
        var m = try Self.machine()
        #expect(m.pipelineDepth == 1, "the engine takes one expectation per subject at a time")
        let first = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        #expect(first.expectedLastSeq == 10)
        #expect(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 2)) == nil, "queued behind the one in flight")
        // Other rooms' messages took 11 to 40: this one landed at 41.
        _ = m.published(first, .stored(seq: 41), now: 0)
        let committed = m.delivered(Self.delivery(41, follows: 10, Self.batch(1), writer: "n1", id: first.messageID), now: 0)
        #expect(committed.contains(.report(1, nil)))
        let second = try #require(Self.publication(committed))
        #expect(second.expectedLastSeq == 41, "the next follows the room's message, not the stream's next place")
    }

    @Test func anAckNamingAPlaceBeforeTheExpectedOneIsNotBelieved() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let actions = m.published(p, .stored(seq: 10), now: 0)
        #expect(actions.contains { if case .rejected(kind: "ack", _) = $0 { true } else { false } })
        #expect(actions.contains { if case let .publishLater(again, _) = $0 { again.messageID == p.messageID } else { false } })
    }

    @Test func aMessageThatDoesNotFollowTheRoomsLastIsNotBelievedAndIsReadBack() throws {
        // A genuine message of the room copied to a later place (its seal names the message
        // it followed then): passed over once the stream shows it is there, never folded.
        var m = try Self.machine()
        _ = m.delivered(Self.delivery(20, follows: 10, Self.batch(1)), now: 0)
        #expect(m.stored.snapshot.seq == 1)
        let replay = Self.delivery(30, follows: 10, Self.batch(1, offset: 5))
        #expect(m.delivered(replay, now: 0) == [.readBack(seq: 30)])
        let actions = m.readBack(seq: 30, found: replay, now: 0)
        #expect(actions.contains { if case .rejected(kind: "batch", _) = $0 { true } else { false } })
        #expect(m.stored.snapshot.seq == 1 && m.delivered == 30, "not folded; the room's next message follows it (its subject's last)")
        let p = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 1)))
        #expect(p.expectedLastSeq == 30)
    }

    @Test func anotherNodesMessageAfterTheExpectedOneIsAConflict() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let actions = m.delivered(Self.delivery(15, follows: 10, Self.batch(1, offset: 9)), now: 0)
        #expect(actions.contains(.report(1, .conflict())))
        #expect(m.conflicts == 1)
        _ = p
    }

    @Test func theRoomsTombstoneAtItsPlaceDeletesItAndFailsEveryWait() throws {
        var m = try Self.machine()
        _ = m.append(Self.batch(1), generation: 0, waiter: 1)
        let tomb = Machine.Delivery(streamSeq: 12, kind: EngineNames.tombstoneKind, writer: "n2", data: Genesis.lifeBody("e1"), follows: 10)
        let actions = m.delivered(tomb, now: 0)
        #expect(m.deleted)
        #expect(actions.contains(.deleted))
        #expect(actions.contains { if case .report(1, .some) = $0 { true } else { false } }, "the batch in flight fails")
        #expect(m.append(Self.batch(1), generation: 0, waiter: 2).contains { if case .report(2, .some) = $0 { true } else { false } })
    }

    @Test func aTombstoneThatIsNotBelievedDeletesNothing() throws {
        // Forged (its seal does not open for this life), or at a place it does not name.
        for tomb in [Machine.Delivery(streamSeq: 12, kind: EngineNames.tombstoneKind, writer: "x", data: Genesis.lifeBody("e1"), verdict: .forged, follows: 10),
                     Machine.Delivery(streamSeq: 12, kind: EngineNames.tombstoneKind, writer: "n2", data: Genesis.lifeBody("e1"), follows: 9)] {
            var m = try Self.machine()
            #expect(m.delivered(tomb, now: 0) == [.readBack(seq: 12)])
            let actions = m.readBack(seq: 12, found: tomb, now: 0)
            #expect(!m.deleted && !actions.contains(.deleted))
            #expect(m.delivered == 12, "passed over, as the room's last message")
        }
    }

    @Test func aStalledShardIsFollowedAgainFromWhereItIsNotFromTheRoomsLastMessage() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let answered = m.published(p, .stored(seq: 50), now: 0)
        #expect(answered.contains(.watch(after: .milliseconds(500))))
        let stalled = m.checkDelivery(now: 2_000_000_000)
        #expect(stalled.contains(.refollow(from: 11, missed: false)), "a stall: the shell goes on from the follower's place")
    }

    @Test func snapshotsAreTakenByTheRoomsMessagesNotTheShardsDistance() throws {
        var m = try Self.machine()
        var seq: UInt64 = 10
        var streamSeq: UInt64 = 10
        var stored = false
        for i in 1...Int(Machine.snapshotDistance) {
            let p = try #require(Self.publication(m.append(Self.batch(i), generation: 0, waiter: UInt64(i))), "message \(i)")
            // Every room message is a thousand shard messages after the one before.
            streamSeq += 1000
            _ = m.published(p, .stored(seq: streamSeq), now: 0)
            let actions = m.delivered(Self.delivery(streamSeq, follows: seq, Self.batch(i), writer: "n1", id: p.messageID), now: 0)
            seq = streamSeq
            if actions.contains(where: { if case .storeSnapshot = $0 { true } else { false } }) {
                stored = true
                #expect(i == Int(Machine.snapshotDistance), "after \(i) messages of the room")
                if case let .storeSnapshot(record)? = actions.first(where: { if case .storeSnapshot = $0 { true } else { false } }) {
                    #expect(record.shard == 3 && record.lifeStart == 10 && record.streamSeq == streamSeq)
                }
            }
        }
        #expect(stored)
    }
}
