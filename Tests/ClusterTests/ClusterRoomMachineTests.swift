import Coordinator
import Testing
@testable import Cluster

/// The cluster room's rules, without an engine: publications, conflicts, retries, the
/// consumer's deliveries and watch, loading, breaking, closing and presence.
@Suite struct ClusterRoomMachineTests {
    typealias Machine = ClusterRoomMachine
    typealias Action = ClusterRoomMachine.Action

    /// A room at its genesis (stream message 1), the stream ending at `streamEnd`.
    static func machine(streamEnd: UInt64 = 1, depth: Int = 1) throws -> Machine {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let start = StoredState(epoch: "e1", snapshot: origin, nextPage: TabInfo.defaults.count + 1, nextClient: 1, history: [])
        return Machine(room: "r", start: start, owners: [:], from: 1, streamEnd: streamEnd, streamCreated: 7,
                       resumeWindow: 100, messageIDPrefix: "n1-r-x", pipelineDepth: depth)
    }

    /// A batch of one scroll at `seq` (any offset folds on any tab).
    static func batch(_ seq: Int, offset: Double = 1, by: ClientID = "c1") -> EventBatch {
        EventBatch(by: by, ref: nil, events: [SequencedEvent(seq: seq, event: .scrolled(tab: "home", offset: offset))])
    }

    /// A delivered message; `id` is its message id (a publication's, for this node's own).
    static func delivery(_ streamSeq: UInt64, _ batch: EventBatch, writer: String = "n1", incarnation: String? = nil,
                         id: String? = nil) -> Machine.Delivery {
        Machine.Delivery(streamSeq: streamSeq, kind: nil, writer: writer, incarnation: incarnation, messageID: id, data: batch.frameBytes)
    }

    static func publication(_ actions: [Action]) -> Machine.Publication? {
        for case let .publish(p) in actions { return p }
        return nil
    }

    static func publications(_ actions: [Action]) -> [Machine.Publication] {
        actions.compactMap { if case let .publish(p) = $0 { p } else { nil } }
    }

    /// Whether `actions` send `publication` again (the same message id, a later attempt).
    static func isSentAgain(_ actions: [Action], _ publication: Machine.Publication) -> Bool {
        actions.contains {
            if case let .publishLater(p, _) = $0 { p.messageID == publication.messageID && p.attempt > publication.attempt } else { false }
        }
    }

    @Test func aWrongLastSequenceAnswerIsNoConflictWhenTheConsumerDeliversTheMessageAtItsPlace() throws {
        // Around a partition a server that still takes itself for the stream's leader
        // answers "wrong last sequence" while the leader stores the message; a retry's
        // earlier attempt may be what stands there. Taken for a conflict, the batch's
        // commands were decided again and stored twice.
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.append(Self.batch(2), generation: 0, waiter: 2)
        let contested = m.published(p, .wrongLastSequence, now: 0)
        #expect(Self.isSentAgain(contested, p), "sent again, the same message: the engine stores it once")
        #expect(contested.contains(.watch(after: .milliseconds(500))), "the consumer is watched meanwhile")
        #expect(m.conflicts == 0)
        // The consumer says nothing for long: it is followed again.
        #expect(m.checkDelivery(now: 2_000_000_000).contains(.refollow(from: 2, missed: false)))
        // It delivers the message at its place, which the engine disputed: held, and the
        // stream itself is read at that place.
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p.messageID), now: 2_000_000_001) == [.readBack(seq: 2)])
        // The stream holds it there: committed, and the queued batch follows it.
        let back = m.readBack(seq: 2, found: Self.delivery(2, Self.batch(1), id: p.messageID), now: 2_000_000_002)
        #expect(back.contains(.report(1, nil)))
        let next = try #require(Self.publication(back))
        #expect(next.waiters == [2] && next.expectedLastSeq == 2)
        #expect(m.conflicts == 0 && m.contestedStored == 1)
        var retry = p
        retry.attempt = 1
        #expect(m.published(retry, .wrongLastSequence, now: 3).isEmpty, "a late answer to the retry changes nothing")
    }

    @Test func messagesArePipelinedAsAChainAndReportedOnlyWhenDelivered() throws {
        var m = try Self.machine(depth: 2)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        #expect(p1.expectedLastSeq == 1 && p1.expectedLastMessageID == nil, "the first lands right after the genesis")
        #expect(p1.messageID == "n1-r-x-1")
        let p2 = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 2)))
        #expect(p2.expectedLastSeq == 2, "expects the stream to end where the first will land")
        #expect(p2.expectedLastMessageID == "n1-r-x-1", "and to end with the first: nobody else in between")
        #expect(m.append(Self.batch(3), generation: 0, waiter: 3).isEmpty, "two in flight: the pipeline is full")
        #expect(m.append(Self.batch(4), generation: 0, waiter: 4).isEmpty)
        let stored = m.published(p1, .stored(seq: 2), now: 0)
        #expect(stored == [.watch(after: .milliseconds(500))], "a stored batch waits for the consumer, watched; the next message waits for it too")
        // Group commit: what queued meanwhile goes as one message once the first came back, chained to the second.
        let back = m.delivered(Self.delivery(2, Self.batch(1), id: p1.messageID), now: 1)
        #expect(back.first == .report(1, nil))
        let p3 = try #require(Self.publication(back))
        #expect(p3.batches == [Self.batch(3), Self.batch(4)] && p3.waiters == [3, 4])
        #expect(p3.expectedLastSeq == 3 && p3.expectedLastMessageID == p2.messageID)
        #expect(p3.data == Self.batch(3).frameBytes + [0x0A] + Self.batch(4).frameBytes, "one events frame per line")
        #expect(Machine.batches(in: p3.data) == [Self.batch(3), Self.batch(4)])
        #expect(m.published(p2, .stored(seq: 3), now: 2).isEmpty)
        #expect(m.published(p3, .stored(seq: 4), now: 2).isEmpty)
        #expect(m.delivered(Self.delivery(3, Self.batch(2), id: p2.messageID), now: 3) == [.report(2, nil)])
        let group = Machine.Delivery(streamSeq: 4, kind: nil, writer: "n1", messageID: p3.messageID, data: p3.data)
        #expect(m.delivered(group, now: 4) == [.report(3, nil), .report(4, nil)], "each batch of a message is committed with it")
        #expect(m.stored.snapshot.seq == 4 && m.delivered == 4)
        #expect(m.stored.history.map(\.lastSeq) == [1, 2, 3, 4], "the history keeps each batch as its own")
        #expect(m.messagesSent == 3 && m.batchesSent == 4)
        let p5 = try #require(Self.publication(m.append(Self.batch(5), generation: 0, waiter: 5)))
        #expect(p5.expectedLastSeq == 4 && p5.expectedLastMessageID == nil, "a new chain starts from what is stored")
    }

    @Test func aGroupStopsAtItsSizeLimit() throws {
        var m = try Self.machine(depth: 1)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let big = String(repeating: "x", count: Machine.maxGroupBytes / 3)
        for seq in 2...5 {
            let batch = EventBatch(by: "c1", ref: nil, events: [SequencedEvent(seq: seq, event: .valueSet(tab: "home", key: "k", value: .string(big)))])
            _ = m.append(batch, generation: 0, waiter: UInt64(seq))
        }
        #expect(Self.publications(m.published(p1, .stored(seq: 2), now: 0)).isEmpty, "the next message waits for the first to come back")
        let groups = Self.publications(m.delivered(Self.delivery(2, Self.batch(1), id: p1.messageID), now: 1))
        #expect(groups.map(\.waiters) == [[2, 3]], "two of a third each fit, not three")
        #expect(groups[0].data.count <= Machine.maxGroupBytes)
    }

    @Test func aBreakMidChainFailsEveryLaterLinkAsAConflict() throws {
        var m = try Self.machine(depth: 3)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let p2 = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 2)))
        let p3 = try #require(Self.publication(m.append(Self.batch(3), generation: 0, waiter: 3)))
        // The engine answers the chain's later links first: they wait for the head.
        #expect(m.published(p2, .wrongLastSequence, now: 0).isEmpty)
        #expect(m.published(p3, .wrongLastSequence, now: 0).isEmpty)
        #expect(m.conflicts == 0, "a later link's refusal alone is no conflict")
        // The engine says another message is at the head's place: the consumer decides.
        #expect(Self.isSentAgain(m.published(p1, .wrongLastSequence, now: 0), p1))
        #expect(m.conflicts == 0)
        // Another writer's message is delivered there: the whole chain fails.
        let winner = Self.batch(1, offset: 42, by: "c9")
        #expect(m.delivered(Self.delivery(2, winner, writer: "n2"), now: 1)
            == [.report(1, .conflict()), .report(2, .conflict()), .report(3, .conflict()), .foreignBatches])
        #expect(m.conflicts == 1)
        #expect(!m.isInFlight(p2) && !m.isInFlight(p3), "nothing of the broken chain is sent again")
        m.reset(generation: 1)
        let again = try #require(Self.publication(m.append(Self.batch(2), generation: 1, waiter: 4)))
        #expect(again.expectedLastSeq == 2 && again.expectedLastMessageID == nil, "decided again on the winner, a new chain")
    }

    @Test func aLinkRefusedWhileItsPredecessorIsUnsettledIsSentAgainOnceThatIsStored() throws {
        var m = try Self.machine(depth: 4)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let p2 = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 2)))
        // The head got no answer (stored or not?); the second was refused because the
        // stream did not end with the head yet.
        var retry = p1
        retry.attempt = 1
        #expect(m.published(p1, .unknown("timeout"), now: 0).last == .publishLater(retry, after: .milliseconds(50)))
        #expect(m.published(p2, .wrongLastSequence, now: 0).isEmpty)
        // The retry of the head is answered as a duplicate (the engine had it): the same
        // place. The second goes again, unchanged but for its attempt, now as the head.
        let settled = m.published(retry, .stored(seq: 2), now: 1)
        var p2again = p2
        p2again.attempt = 1
        #expect(Self.publications(settled) == [p2again])
        #expect(p2again.messageID == p2.messageID && p2again.expectedLastSeq == 2 && p2again.expectedLastMessageID == p1.messageID)
        #expect(m.published(p2, .stored(seq: 3), now: 1).isEmpty, "a late answer to an attempt sent again since changes nothing")
        #expect(m.isInFlight(p2again) && !m.isInFlight(p2))
        _ = m.published(p2again, .stored(seq: 3), now: 2)
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p1.messageID), now: 3) == [.report(1, nil)])
        #expect(m.delivered(Self.delivery(3, Self.batch(2), id: p2.messageID), now: 3) == [.report(2, nil)])
        #expect(m.conflicts == 0)
    }

    @Test func anotherWritersMessageInTheMiddleOfTheChainIsAConflictOnceTheLinkIsTheHead() throws {
        var m = try Self.machine(depth: 2)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let p2 = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 2)))
        // The head is stored at 2; another node's message landed at 3 before the second.
        #expect(m.published(p2, .wrongLastSequence, now: 0).isEmpty)
        let settled = m.published(p1, .stored(seq: 2), now: 0)
        var p2again = p2
        p2again.attempt = 1
        #expect(Self.publications(settled) == [p2again], "refused while the head was unsettled: asked once more")
        #expect(Self.isSentAgain(m.published(p2again, .wrongLastSequence, now: 1), p2), "refused as the head: the consumer decides")
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p1.messageID), now: 2) == [.report(1, nil)])
        #expect(m.conflicts == 0)
        #expect(m.delivered(Self.delivery(3, Self.batch(2, offset: 7, by: "c9"), writer: "n2"), now: 2)
            == [.report(2, .conflict()), .foreignBatches], "a conflict once the message in between is delivered")
        #expect(m.conflicts == 1)
    }

    @Test func aRefusedHeadFailsTheLinksBehindItUnavailable() throws {
        var m = try Self.machine(depth: 2)
        var p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let p2 = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 2)))
        _ = m.append(Self.batch(3), generation: 0, waiter: 3)
        #expect(m.published(p2, .failed("no leader"), now: 0).isEmpty)
        for _ in 1..<Machine.refusedAttempts {
            guard case let .publishLater(next, _)? = m.published(p1, .failed("no leader"), now: 0).last else {
                Issue.record("the head is not tried again"); return
            }
            p1 = next
        }
        let error = CommandError.unavailable("the engine refused the batch: no leader")
        #expect(Set(m.published(p1, .failed("no leader"), now: 0).compactMap { if case let .report(w, e) = $0, e == error { w } else { nil } })
            == Set<UInt64>([1, 2, 3]))
    }

    @Test func aBatchDeliveredBeforeItsAnswerIsHeldUntilTheEngineSaysItIsThereAndIsNoNewsToTheCoordinator() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        // The consumer can be quicker than the publish's answer, and its inbox is open to
        // whoever holds the engine's credentials: held, not folded, until the answer.
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p.messageID), now: 0).isEmpty)
        #expect(m.stored.snapshot.seq == 0 && m.delivered == 1, "nothing folded yet")
        // The engine says it stored it there: committed, and the coordinator holds its
        // batch already.
        #expect(m.published(p, .stored(seq: 2), now: 0) == [.report(1, nil)])
        #expect(m.stored.snapshot.seq == 1 && m.delivered == 2)
        // Another node's message is news.
        #expect(m.delivered(Self.delivery(3, Self.batch(2), writer: "n2", id: "n2-r-y-1"), now: 0) == [.foreignBatches])
    }

    @Test func anOwnMessageOfAGenerationRolledBackIsNewsToTheCoordinator() throws {
        var m = try Self.machine(depth: 2)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.published(p1, .stored(seq: 2), now: 0)
        // The coordinator rolled back (a failure it heard of): the batch stored meanwhile
        // is one it no longer holds, and must take in from the stream.
        m.reset(generation: 1)
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p1.messageID), now: 0) == [.report(1, nil), .foreignBatches])
    }

    @Test func aConflictFailsTheChainOnceTheWinnerIsDelivered() throws {
        var m = try Self.machine()
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.append(Self.batch(2), generation: 0, waiter: 2)
        // Another node's batch took seq 1's place: both fail, but not before it is delivered.
        #expect(Self.isSentAgain(m.published(p1, .wrongLastSequence, now: 0), p1))
        #expect(m.append(Self.batch(3), generation: 0, waiter: 3).isEmpty, "later batches of the generation wait behind it")
        let winner = Self.batch(1, offset: 99, by: "c9")
        let actions = m.delivered(Self.delivery(2, winner, writer: "n2"), now: 1)
        #expect(actions == [.report(1, .conflict()), .report(2, .conflict()), .report(3, .conflict()), .foreignBatches])
        #expect(m.conflicts == 1)
        #expect(m.stored.snapshot.tabs[0].scroll == 99, "the state rolled back to holds the winner")
        // Now the generation's failure is reported at once; a new generation publishes again.
        #expect(m.append(Self.batch(2), generation: 0, waiter: 4) == [.report(4, .conflict())])
        m.reset(generation: 1)
        #expect(m.append(Self.batch(2), generation: 0, waiter: 5) == [.report(5, .unavailable("rolled back"))])
        let again = try #require(Self.publication(m.append(Self.batch(2), generation: 1, waiter: 6)))
        #expect(again.expectedLastSeq == 2, "decided again on the winner")
    }

    @Test func aConflictWaitsForEveryStoredBatchOfThisNode() throws {
        var m = try Self.machine(depth: 2)
        let p1 = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let p2 = try #require(Self.publication(m.published(p1, .stored(seq: 2), now: 0) + m.append(Self.batch(2), generation: 0, waiter: 2)))
        #expect(Self.isSentAgain(m.published(p2, .wrongLastSequence, now: 0), p2))
        // Stream: 2 is ours (stored), 3 another's. The conflict is reported past both.
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p1.messageID), now: 1) == [.report(1, nil)])
        #expect(m.delivered(Self.delivery(3, Self.batch(2, offset: 5), writer: "n2"), now: 2) == [.report(2, .conflict()), .foreignBatches])
    }

    @Test func noAnswerIsAskedAgainWithTheSameMessageID() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        var retry = p
        retry.attempt = 1
        #expect(m.published(p, .unknown("timeout"), now: 0) == [
            .log("room 'r': no answer from the engine for a batch (timeout); asking again"), .publishLater(retry, after: .milliseconds(50)),
        ])
        var third = retry
        third.attempt = 2
        #expect(m.published(retry, .unknown("timeout"), now: 0) == [.publishLater(third, after: .milliseconds(100))])
        #expect(third.messageID == p.messageID, "a retry is the same message: the engine stores it once")
        #expect(m.isInFlight(third))
        _ = m.published(third, .stored(seq: 2), now: 0)
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p.messageID), now: 0) == [.report(1, nil)])
    }

    @Test func aBatchTheEngineKeepsRefusingFailsUnavailable() throws {
        var m = try Self.machine()
        var p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.append(Self.batch(2), generation: 0, waiter: 2)
        for attempt in 1..<Machine.refusedAttempts {
            let actions = m.published(p, .failed("no leader"), now: 0)
            guard case let .publishLater(next, delay)? = actions.last else { Issue.record("attempt \(attempt): \(actions)"); return }
            #expect(delay == .milliseconds(min(50 * attempt, 500)))
            p = next
        }
        let failed = m.published(p, .failed("no leader"), now: 0)
        let error = CommandError.unavailable("the engine refused the batch: no leader")
        #expect(failed == [.report(1, error), .report(2, error)])
    }

    @Test func aStalledConsumerIsReplacedFromTheNextUndeliveredMessage() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let ms: UInt64 = 1_000_000
        _ = m.published(p, .stored(seq: 2), now: 1000 * ms)
        #expect(m.checkDelivery(now: 1400 * ms) == [.watch(after: .milliseconds(250))], "not stalled yet")
        let stalled = m.checkDelivery(now: 1600 * ms)
        #expect(stalled.contains(.refollow(from: 2, missed: false)) && stalled.last == .watch(after: .milliseconds(250)))
        m.refollowed(now: 1600 * ms)
        #expect(m.checkDelivery(now: 1700 * ms) == [.watch(after: .milliseconds(250))], "a new consumer gets its time")
        _ = m.delivered(Self.delivery(2, Self.batch(1)), now: 1800 * ms)
        #expect(m.checkDelivery(now: 9000 * ms).isEmpty, "nothing waits: the watch ends")
        // A message both consumers deliver is taken once.
        #expect(m.delivered(Self.delivery(2, Self.batch(1)), now: 9001 * ms).isEmpty)
        #expect(m.stored.snapshot.seq == 1)
    }

    @Test func loadingEndsAtTheStreamsEndAndForeignBatchesAreToldOnlyAfter() throws {
        var m = try Self.machine(streamEnd: 3)
        #expect(m.loading)
        #expect(m.delivered(Self.delivery(2, Self.batch(1), writer: "n2"), now: 0).isEmpty)
        #expect(m.delivered(Self.delivery(3, Self.batch(2), writer: "n2"), now: 0) == [.caughtUp])
        #expect(m.delivered(Self.delivery(4, Self.batch(3), writer: "n2"), now: 0) == [.foreignBatches])
    }

    @Test func aMessageThatDoesNotFoldBreaksTheRoomAndFailsEveryWait() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.published(p, .stored(seq: 2), now: 0)
        _ = m.append(Self.batch(2), generation: 0, waiter: 2)
        // Seq 5 does not follow seq 0.
        let actions = m.delivered(Self.delivery(2, Self.batch(5)), now: 0)
        let why = try #require(m.broken)
        #expect(why.contains("does not fold"))
        #expect(actions.first == .log(why))
        #expect(Set(actions.compactMap { if case let .report(w, e) = $0, e == .unavailable(why) { w } else { nil } }) == Set<UInt64>([1, 2]))
        #expect(m.append(Self.batch(1), generation: 0, waiter: 3) == [.report(3, .unavailable("room 'r' closed"))])
        var garbage = try Self.machine(streamEnd: 2)
        let broken = garbage.delivered(Machine.Delivery(streamSeq: 2, kind: nil, writer: nil, data: Array("{}".utf8)), now: 0)
        #expect(broken.last == .caughtUp, "a room that breaks while loading stops waiting for the stream")
    }

    @Test func closingFailsEveryWaitAndIgnoresLateAnswers() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.append(Self.batch(2), generation: 0, waiter: 2)
        let closed = CommandError.unavailable("room 'r' closed")
        #expect(Set(m.close().map { if case let .report(w, e) = $0, e == closed { w } else { 0 } }) == Set<UInt64>([1, 2]))
        #expect(!m.isInFlight(p), "a retry after the close is not sent")
        #expect(m.published(p, .stored(seq: 2), now: 0).isEmpty, "its wait was failed already")
        #expect(m.append(Self.batch(2), generation: 0, waiter: 3) == [.report(3, closed)])
    }

    @Test func clientsBelongToTheNodeThatJoinedThem() throws {
        var m = try Self.machine()
        let join = EventBatch(by: "tabd", ref: nil, events: [
            SequencedEvent(seq: 1, event: .clientJoined(ClientInfo(id: "c1", name: "a"))),
            SequencedEvent(seq: 2, event: .clientJoined(ClientInfo(id: "c2", name: "b"))),
        ])
        _ = m.delivered(Self.delivery(2, join, writer: "n2"), now: 0)
        let leave = EventBatch(by: "tabd", ref: nil, events: [
            SequencedEvent(seq: 3, event: .clientJoined(ClientInfo(id: "c3", name: "c"))),
            SequencedEvent(seq: 4, event: .clientLeft("c1")),
        ])
        _ = m.delivered(Self.delivery(3, leave, writer: "n1"), now: 0)
        #expect(m.owners == ["c2": "n2", "c3": "n1"])
        #expect(m.orphans(node: "n1", includingOwn: false) { name, _ in name != "n2" } == ["c2"], "n2 is dead")
        #expect(m.orphans(node: "n1", includingOwn: true) { _, _ in true } == ["c3"], "this node's clients of an earlier life")
        // A leave the roster refuses breaks the room and changes no owner.
        let bogus = EventBatch(by: "tabd", ref: nil, events: [SequencedEvent(seq: 5, event: .clientLeft("c42"))])
        _ = m.delivered(Self.delivery(4, bogus, writer: "n2"), now: 0)
        #expect(m.broken != nil && m.owners == ["c2": "n2", "c3": "n1"])
    }

    /// A node started again under the same name is heard, but in another life: the clients
    /// and the counted share of its earlier life are gone.
    @Test func aNodeHeardInAnotherLifeHasLostTheClientsAndTheShareOfThisOne() throws {
        var m = try Self.machine()
        let join = EventBatch(by: "tabd", ref: nil, events: [SequencedEvent(seq: 1, event: .clientJoined(ClientInfo(id: "c1", name: "a")))])
        _ = m.delivered(Self.delivery(2, join, writer: "n2", incarnation: "life-1"), now: 0)
        #expect(m.incarnations == ["n2": "life-1"])
        #expect(m.orphans(node: "n1", includingOwn: false) { _, life in life == "life-1" }.isEmpty, "heard in the same life")
        #expect(m.orphans(node: "n1", includingOwn: false) { _, life in life == "life-2" } == ["c1"], "heard in another life")
        let counted = EventBatch(by: "tabd", ref: nil, events: [
            SequencedEvent(seq: 2, event: .clientIdsReserved(node: "n2", from: 2, count: 1000)),
            SequencedEvent(seq: 3, event: .presenceCounted(count: 7, nodes: ["n1": 0, "n2": 7])),
        ])
        _ = m.delivered(Self.delivery(3, counted, writer: "n2", incarnation: "life-1"), now: 0)
        #expect(m.owners.isEmpty, "a counted room lists no owners")
        #expect(m.deadShares(node: "n1", includingOwn: false) { _, life in life == "life-1" }.isEmpty)
        #expect(m.deadShares(node: "n1", includingOwn: false) { _, life in life == "life-2" } == ["n2"])
        #expect(m.deadShares(node: "n2", includingOwn: true) { _, _ in true } == ["n2"], "a node's own share of an earlier life")
    }

    @Test func ownBatchesFarFromTheLastSnapshotStoreOne() throws {
        var m = try Self.machine()
        var seq = 0
        for stream in 2...UInt64(Machine.snapshotDistance) {
            seq += 1
            _ = m.delivered(Self.delivery(stream, Self.batch(seq), writer: "n2"), now: 0)
        }
        let p = try #require(Self.publication(m.append(Self.batch(seq + 1), generation: 0, waiter: 1)))
        #expect(p.expectedLastSeq == Machine.snapshotDistance)
        _ = m.published(p, .stored(seq: Machine.snapshotDistance + 1), now: 0)
        let actions = m.delivered(Self.delivery(Machine.snapshotDistance + 1, Self.batch(seq + 1), id: p.messageID), now: 0)
        guard case let .storeSnapshot(record)? = actions.last else { Issue.record("no snapshot: \(actions)"); return }
        #expect(record.streamSeq == Machine.snapshotDistance + 1 && record.state == m.stored && record.streamCreated == 7)
    }

    // MARK: What is believed

    static func rejections(_ actions: [Action]) -> [String] {
        actions.compactMap { if case let .rejected(kind, _) = $0 { kind } else { nil } }
    }

    @Test func aMessageWhoseSealDoesNotOpenIsPassedOverAndTheNextBatchFollowsIt() throws {
        var m = try Self.machine()
        let forged = Machine.Delivery(streamSeq: 2, kind: nil, writer: "n2", data: Self.batch(1, offset: 66).frameBytes, verdict: .forged)
        // Passed over, it moves the room's next place: only once the stream, read back,
        // holds it there (the consumer's inbox is not the stream).
        #expect(m.delivered(forged, now: 0) == [.readBack(seq: 2)])
        #expect(m.delivered == 1)
        let actions = m.readBack(seq: 2, found: forged, now: 0)
        #expect(Self.rejections(actions) == ["batch"])
        #expect(!actions.contains(.foreignBatches), "nothing for the coordinator to take in")
        #expect(m.stored.snapshot.seq == 0 && m.stored.history.isEmpty && m.delivered == 2 && m.rejected == 1, "not folded, its place passed")
        #expect(m.writer == nil, "a forged writer header names no writer")
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        #expect(p.expectedLastSeq == 2, "the room's next message follows the one passed over")
    }

    @Test func aMessageNotBelievedThatTheStreamDoesNotHoldMovesNothing() throws {
        // Put into the consumer's inbox at a place far ahead: passed over there, it would
        // make the node skip every real message up to it.
        var m = try Self.machine()
        let injected = Machine.Delivery(streamSeq: 1_000, kind: nil, writer: "x", data: Self.batch(1).frameBytes, verdict: .forged)
        #expect(m.delivered(injected, now: 0) == [.readBack(seq: 1_000)])
        let actions = m.readBack(seq: 1_000, found: nil, now: 0)
        #expect(Self.rejections(actions) == ["delivery"] && actions.contains(.refollow(from: 2, missed: true)))
        #expect(m.delivered == 1 && m.refutedDeliveries == 1)
        #expect(m.delivered(Self.delivery(2, Self.batch(1), writer: "n2"), now: 1) == [.foreignBatches], "the real next message folds")
        let p = try #require(Self.publication(m.append(Self.batch(2), generation: 0, waiter: 1)))
        #expect(p.expectedLastSeq == 2)
    }

    @Test func messagesSealedWithoutTheRoomsLifeAreHistoryUntilItsLifeMarkAndPassedOverAfterIt() throws {
        var m = try Self.machine()
        let unbound = Machine.Delivery(streamSeq: 2, kind: nil, writer: "n2", data: Self.batch(1).frameBytes, verdict: .sealedUnbound)
        #expect(m.delivered(unbound, now: 0) == [.foreignBatches], "sealed by a build before lives were bound, before the mark: folded")
        // A life mark not bound to the room's life marks it sealed (as that build's mark
        // did) but not bound to its life.
        let oldMark = Machine.Delivery(streamSeq: 3, kind: EngineNames.sealMarkKind, writer: "x", data: [], verdict: .sealedUnbound, lifeMark: true)
        #expect(m.delivered(oldMark, now: 0).isEmpty)
        #expect(m.sealed && !m.lifeBound)
        let mark = Machine.Delivery(streamSeq: 4, kind: EngineNames.sealMarkKind, writer: "n1", data: [], verdict: .sealed, lifeMark: true)
        #expect(m.delivered(mark, now: 0).isEmpty)
        #expect(m.lifeBound && m.delivered == 4 && m.snapshotRecord.lifeBound)
        let late = Machine.Delivery(streamSeq: 5, kind: nil, writer: "n2", data: Self.batch(2).frameBytes, verdict: .sealedUnbound)
        #expect(m.delivered(late, now: 0) == [.readBack(seq: 5)])
        #expect(Self.rejections(m.readBack(seq: 5, found: late, now: 0)) == ["batch"], "after the life mark: passed over")
        #expect(m.stored.snapshot.seq == 1 && m.delivered == 5)
        #expect(m.delivered(Self.delivery(6, Self.batch(2), writer: "n2"), now: 0) == [.foreignBatches])
    }

    @Test func unsealedMessagesAreHistoryUntilTheRoomsSealMarkAndPassedOverAfterIt() throws {
        var m = try Self.machine()
        #expect(m.delivered(Machine.Delivery(streamSeq: 2, kind: nil, writer: "old", data: Self.batch(1).frameBytes, verdict: .unsigned), now: 0) == [.foreignBatches])
        #expect(m.stored.snapshot.seq == 1, "unsealed, before the mark: folded as stored")
        let mark = Machine.Delivery(streamSeq: 3, kind: EngineNames.sealMarkKind, writer: "n1", data: [], verdict: .sealed, sealMark: true)
        #expect(m.delivered(mark, now: 0).isEmpty)
        #expect(m.sealed && m.stored.snapshot.seq == 1 && m.delivered == 3)
        let unsealed = Machine.Delivery(streamSeq: 4, kind: nil, writer: "old", data: Self.batch(2).frameBytes, verdict: .unsigned)
        #expect(m.delivered(unsealed, now: 0) == [.readBack(seq: 4)])
        let late = m.readBack(seq: 4, found: unsealed, now: 0)
        #expect(Self.rejections(late) == ["batch"] && m.stored.snapshot.seq == 1, "unsealed after the mark: passed over")
        #expect(m.delivered(Self.delivery(5, Self.batch(2), writer: "n2"), now: 0) == [.foreignBatches], "sealed: folded")
        #expect(m.stored.snapshot.seq == 2)
        // A mark that does not open marks nothing.
        var n = try Self.machine()
        let forgedMark = Machine.Delivery(streamSeq: 2, kind: EngineNames.sealMarkKind, writer: "x", data: [], verdict: .forged, sealMark: true)
        _ = n.delivered(forgedMark, now: 0)
        _ = n.readBack(seq: 2, found: forgedMark, now: 0)
        #expect(!n.sealed && n.delivered == 2)
    }

    @Test func aPublishAnswerIsNotACommitUntilTheConsumerDeliversThisNodesMessageThere() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.append(Self.batch(2), generation: 0, waiter: 2)
        // A forged answer: "stored at 2". Another node's message is what the consumer finds there.
        #expect(m.published(p, .stored(seq: 2), now: 0) == [.watch(after: .milliseconds(500))], "nothing reported on the answer alone")
        let actions = m.delivered(Self.delivery(2, Self.batch(1, offset: 9), writer: "n2", id: "n2-r-y-1"), now: 1)
        #expect(Self.rejections(actions) == ["ack"])
        #expect(actions.contains(.report(1, .conflict())) && actions.contains(.report(2, .conflict())), "a conflict: decided again on what is there")
        #expect(m.conflicts == 1 && m.stored.snapshot.tabs[0].scroll == 9)
    }

    @Test func anAnswerNamingAnotherPlaceIsNotBelievedAndTheMessageIsSentAgain() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        let actions = m.published(p, .stored(seq: 7), now: 0)
        #expect(Self.rejections(actions) == ["ack"])
        var again = p
        again.attempt = 1
        #expect(actions.last == .publishLater(again, after: .milliseconds(50)))
        // Delivered at its place after an answer that was not believed: the stream says.
        #expect(m.delivered(Self.delivery(2, Self.batch(1), id: p.messageID), now: 1) == [.readBack(seq: 2)])
        #expect(m.readBack(seq: 2, found: Self.delivery(2, Self.batch(1), id: p.messageID), now: 2) == [.report(1, nil)])
    }

    @Test func aCopyOfAMessageThatLostItsPlacePutIntoTheInboxCommitsNothingAndIsNotFolded() throws {
        // Whoever holds the engine's credentials sees every publish on the room's subject,
        // a refused one too, and can put a copy of it into the consumer's inbox with a
        // reply subject naming its expected place.
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1, offset: 5), generation: 0, waiter: 1)))
        _ = m.published(p, .wrongLastSequence, now: 0)
        #expect(m.delivered(Self.delivery(2, Self.batch(1, offset: 5), id: p.messageID), now: 1) == [.readBack(seq: 2)])
        // Deliveries behind it wait, in order.
        #expect(m.delivered(Self.delivery(3, Self.batch(2, offset: 6), writer: "n2", id: "n2-r-y-2"), now: 1).isEmpty)
        // The stream holds another node's message there: the copy is passed over, the wait
        // is not reported, and the stream is followed again from that place.
        let refuted = m.readBack(seq: 2, found: Self.delivery(2, Self.batch(1, offset: 9), writer: "n2", id: "n2-r-y-1"), now: 2)
        #expect(Self.rejections(refuted) == ["delivery"])
        #expect(refuted.contains(.refollow(from: 2, missed: true)))
        #expect(!refuted.contains { if case .report = $0 { true } else { false } })
        #expect(m.stored.snapshot.seq == 0 && m.delivered == 1 && m.refutedDeliveries == 1)
        // What the stream holds comes again: the other node's message takes the place (a
        // conflict for this node's batch) and the next follows it.
        let real = m.delivered(Self.delivery(2, Self.batch(1, offset: 9), writer: "n2", id: "n2-r-y-1"), now: 3)
        #expect(real.contains(.report(1, .conflict())))
        _ = m.delivered(Self.delivery(3, Self.batch(2, offset: 6), writer: "n2", id: "n2-r-y-2"), now: 3)
        #expect(m.stored.snapshot.seq == 2 && m.stored.snapshot.tabs[0].scroll == 6 && m.conflicts == 1)
    }

    @Test func aHeldDeliveryAndThoseBehindItAreFoldedInOrderOnceTheAnswerComes() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1, offset: 5), generation: 0, waiter: 1)))
        #expect(m.delivered(Self.delivery(2, Self.batch(1, offset: 5), id: p.messageID), now: 0).isEmpty)
        #expect(m.delivered(Self.delivery(3, Self.batch(2, offset: 7), writer: "n2", id: "n2-r-y-1"), now: 0).isEmpty)
        #expect(m.delivered(Self.delivery(3, Self.batch(2, offset: 7), writer: "n2", id: "n2-r-y-1"), now: 0).isEmpty, "a second copy is not held twice")
        // An answer that the engine lost the publish: the stream is read back.
        #expect(m.published(p, .unknown("timeout"), now: 1).first == .readBack(seq: 2))
        // The retry's answer says it is there before the read comes back: both folded.
        var retry = p
        retry.attempt = 1
        #expect(m.published(retry, .stored(seq: 2), now: 2) == [.report(1, nil), .foreignBatches])
        #expect(m.stored.snapshot.seq == 2 && m.stored.snapshot.tabs[0].scroll == 7 && m.delivered == 3)
        // The read's late answer changes nothing.
        #expect(m.readBack(seq: 2, found: Self.delivery(2, Self.batch(1, offset: 5), id: p.messageID), now: 3).isEmpty)
    }

    @Test func anAlteredCopyOfThisNodesMessageDoesNotCommitIt() throws {
        var m = try Self.machine()
        let p = try #require(Self.publication(m.append(Self.batch(1), generation: 0, waiter: 1)))
        _ = m.published(p, .stored(seq: 2), now: 0)
        let altered = Machine.Delivery(streamSeq: 2, kind: nil, writer: "n1", messageID: p.messageID, data: Self.batch(1, offset: 5).frameBytes, verdict: .forged)
        #expect(m.delivered(altered, now: 1) == [.readBack(seq: 2)])
        let actions = m.readBack(seq: 2, found: altered, now: 1)
        #expect(Self.rejections(actions).sorted() == ["ack", "batch"])
        #expect(actions.contains(.report(1, .conflict())) && m.stored.snapshot.seq == 0)
    }

    @Test func theHistoryKeepsEveryBatchTheCoordinatorHasNotPublished() throws {
        // Another node wrote more than the kept window while this one published nothing
        // (paused): every batch is still there to take in, none trimmed away.
        var m = try Self.machine()
        let n = 14_000
        for seq in 1...n { _ = m.delivered(Self.delivery(UInt64(seq + 1), Self.batch(seq), writer: "n2"), now: 0) }
        #expect(m.stored.history.first?.firstSeq == 1 && m.stored.history.count == n)
        // Published: the history may drop what is past the window again.
        m.published(through: n)
        _ = m.delivered(Self.delivery(UInt64(n + 2), Self.batch(n + 1), writer: "n2"), now: 0)
        #expect((m.stored.history.first?.firstSeq ?? 0) > 1 && m.stored.history.last?.lastSeq == n + 1)
        #expect(m.stored.history.count >= 10_000, "the window itself is kept")
    }
}
