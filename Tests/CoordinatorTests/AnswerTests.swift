import Locking
import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The daemon's road: `enqueue` answers through the publisher, an `ack` in the same
/// publication as the batch it acknowledges, each address's answers in its order.
@Suite struct AnswerTests {
    /// Every publication, in order.
    final class Publications: Sendable {
        let all = Locked<[(batches: [EventBatch], answers: [Answer])]>([])
        var answers: [Answer] { all.withLock { $0.flatMap(\.answers) } }
        var batches: [EventBatch] { all.withLock { $0.flatMap(\.batches) } }
    }

    func durable() async throws -> (Coordinator, ScriptedStore, Publications) {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let store = ScriptedStore(StoredState(epoch: "e1", snapshot: origin, nextPage: 4, nextClient: 1, history: []))
        let c = Coordinator(restoring: store.committedState(), durability: store)
        try await c.start()
        let log = Publications()
        await c.addPublisher { batches, answers in log.all.withLock { $0.append((batches, answers)) } }
        return (c, store, log)
    }

    @Test func anAckIsPublishedWithItsBatchOnceCommittedWithoutAnyoneWaiting() async throws {
        let (c, store, log) = try await durable()
        store.hold()
        await c.enqueue(.scroll(tab: nil, offset: 7), by: "c9", ref: "a", replyTo: 7)
        try await until { store.heldCount == 1 }
        #expect(log.all.withLock { $0.isEmpty }, "nothing before the commit is reported")
        store.release()
        try await until { !log.all.withLock { $0.isEmpty } }
        let batch = EventBatch(by: "c9", ref: "a", events: [SequencedEvent(seq: 3, event: .scrolled(tab: "home", offset: 7))])
        let publications = log.all.withLock { $0 }
        #expect(publications.count == 1)
        #expect(publications.first?.batches == [batch])
        #expect(publications.first?.answers == [Answer(to: 7, client: "c9", frame: .ack(ref: "a", seq: 3))])
    }

    @Test func eachAddressGetsItsAnswersInTheOrderOfItsCommands() async throws {
        let (c, store, log) = try await durable()
        store.hold()
        await c.enqueue(.push(tab: nil, route: "x"), by: "c1", ref: "1", replyTo: 1)
        await c.enqueue(.select(tab: "nope"), by: "c1", ref: "2", replyTo: 1)    // refused at once…
        await c.answer(.error(ref: nil, .badCommand("bad")), client: "c1", to: 1) // …refused before parsing…
        await c.enqueue(.ping, by: "c2", ref: "3", replyTo: 2)                  // another address waits for nobody
        #expect(log.answers == [Answer(to: 2, client: "c2", frame: .pong(ref: "3"))])
        store.release()
        try await until { log.answers.count == 4 }
        #expect(log.answers == [
            Answer(to: 2, client: "c2", frame: .pong(ref: "3")),
            Answer(to: 1, client: "c1", frame: .ack(ref: "1", seq: 6)),
            Answer(to: 1, client: "c1", frame: .error(ref: "2", .unknownTab("nope"))),
            Answer(to: 1, client: "c1", frame: .error(ref: nil, .badCommand("bad"))),
        ])
    }

    @Test func aCommandThatChangesNothingIsAckedAtTheSeqBeforeIt() async throws {
        let (c, store, log) = try await durable()
        store.hold()
        await c.enqueue(.scroll(tab: nil, offset: 1), by: "c1", ref: "1", replyTo: 1)
        await c.enqueue(.select(tab: "home"), by: "c2", ref: "2", replyTo: 2) // already selected
        #expect(log.answers.isEmpty, "the no-op waits for the batch applied before it")
        store.release()
        try await until { log.answers.count == 2 }
        // Answers to different addresses have no order between them.
        #expect(log.answers.sorted { $0.to < $1.to } == [Answer(to: 1, client: "c1", frame: .ack(ref: "1", seq: 3)),
                                                         Answer(to: 2, client: "c2", frame: .ack(ref: "2", seq: 3))])
    }

    @Test func aFailedCommitAnswersUnavailableAndRollsBack() async throws {
        let (c, store, log) = try await durable()
        store.setFailing(true)
        await c.enqueue(.select(tab: "favorites"), by: "c1", ref: "1", replyTo: 1)
        // Changes nothing on top of the lost selection: no ack for a selection that is gone.
        await c.enqueue(.select(tab: "favorites"), by: "c1", ref: "2", replyTo: 1)
        try await until { log.answers.count == 2 }
        #expect(log.answers == [Answer(to: 1, client: "c1", frame: .error(ref: "1", .unavailable("disk full"))),
                                Answer(to: 1, client: "c1", frame: .error(ref: "2", .unavailable("disk full")))])
        #expect(await c.snapshot().selected == "home")
        #expect(log.batches.isEmpty)
        store.setFailing(false)
        await c.enqueue(.push(tab: nil, route: "kept"), by: "c1", ref: "3", replyTo: 1)
        try await until { log.answers.count == 3 }
        #expect(log.batches.map(\.firstSeq) == [3], "the seq goes on from the last commit")
        #expect(await c.snapshot().tabs[0].stack.map(\.route) == ["root", "kept"])
        #expect(log.answers.last == Answer(to: 1, client: "c1", frame: .ack(ref: "3", seq: 6)))
    }

    @Test func inMemoryTheAckGoesWithTheBatchAtOnce() async throws {
        let c = try Coordinator()
        let log = Publications()
        await c.addPublisher { batches, answers in log.all.withLock { $0.append((batches, answers)) } }
        await c.enqueue(.tap(tab: "favorites"), by: "c1", ref: "t", replyTo: 3)
        let publications = log.all.withLock { $0 }
        #expect(publications.count == 1)
        #expect(publications.first?.batches.map(\.lastSeq) == [6])
        #expect(publications.first?.answers == [Answer(to: 3, client: "c1", frame: .ack(ref: "t", seq: 6))])
    }

    // MARK: Commands forwarded in a cluster

    @Test func aForwardedCommandTheStoreHoldsAlreadyIsAckedWithItsBatchAndNotAppliedAgain() async throws {
        let (c, _, log) = try await durable()
        await c.enqueue(.push(tab: nil, route: "x"), by: "c1", ref: "1", replyTo: 1, commandKey: "n2:i:r:f1")
        try await until { log.answers.count == 1 }
        // The same forward again (a writer that got it late, or the sender deciding it in
        // the writer's stead): the stored batch's ack, nothing applied.
        await c.enqueue(.push(tab: nil, route: "x"), by: "c1", ref: "1", replyTo: 2, commandKey: "n2:i:r:f1")
        try await until { log.answers.count == 2 }
        #expect(log.answers.map(\.frame) == [.ack(ref: "1", seq: 6), .ack(ref: "1", seq: 6)])
        let seq = await c.currentSeq
        #expect(log.batches.count == 1 && seq == 6)
        // Another id is another command.
        await c.enqueue(.push(tab: nil, route: "x"), by: "c1", ref: "1", replyTo: 2, commandKey: "n2:i:r:f2")
        try await until { log.answers.count == 3 }
        #expect(log.answers.last?.frame == .ack(ref: "1", seq: 10))
    }

    @Test func answersOfForwardedCommandsKeepTheirTurnAmongTheConnectionsAnswers() async throws {
        let (c, _, log) = try await durable()
        let order = await c.expectElsewhere(.tap(tab: "profile"), by: "c1", ref: "t", replyTo: 1, commandKey: "f1")
        await c.enqueue(.ping, by: "c1", ref: "p", replyTo: 1)
        await c.enqueue(.ping, by: "c2", ref: "q", replyTo: 2)
        #expect(log.answers == [Answer(to: 2, client: "c2", frame: .pong(ref: "q"))], "the ping behind the forward waits for its answer")
        // The writer acks at a seq this coordinator has not published: held until it has.
        await c.settleElsewhere(1, order: order, frame: .ack(ref: "t", seq: 3))
        #expect(log.answers.count == 1)
        await c.enqueue(.scroll(tab: nil, offset: 4), by: "c3", ref: "s", replyTo: 3)
        try await until { log.answers.count == 4 }
        #expect(log.answers.filter { $0.to == 1 }.map(\.frame) == [.ack(ref: "t", seq: 3), .pong(ref: "p")])
    }

    @Test func aSyncBehindAForwardIsTakenOnceTheForwardIsAcked() async throws {
        let (c, _, log) = try await durable()
        let order = await c.expectElsewhere(.scroll(tab: nil, offset: 9), by: "c1", ref: "s", replyTo: 1, commandKey: "f1")
        await c.enqueue(.sync, by: "c1", ref: "y", replyTo: 1)
        #expect(log.answers.isEmpty)
        // The forwarded command is decided here after all (its writer did not answer).
        await c.decideInstead(1, order: order)
        try await until { log.answers.count == 2 }
        #expect(log.answers[0].frame == .ack(ref: "s", seq: 3))
        guard case let .snapshot("y", snapshot) = log.answers[1].frame else { Issue.record("\(log.answers[1])"); return }
        #expect(snapshot.seq == 3 && snapshot.tabs.first?.scroll == 9, "the snapshot holds the command acked before it")
    }

    @Test func aForwardDecidedHereThatTheStoreHoldsIsOnlyAcked() async throws {
        let (c, _, log) = try await durable()
        // The writer stored it (its answer was lost): the stream's record answers.
        await c.enqueue(.tap(tab: "profile"), by: "c1", ref: "a", replyTo: 5, commandKey: "f7")
        try await until { log.answers.count == 1 }
        let order = await c.expectElsewhere(.tap(tab: "profile"), by: "c1", ref: "a", replyTo: 1, commandKey: "f7")
        await c.decideInstead(1, order: order)
        try await until { log.answers.count == 2 }
        #expect(log.answers[1] == Answer(to: 1, client: "c1", frame: log.answers[0].frame))
        #expect(log.batches.count == 1)
    }

    @Test func aForwardAckedByItsWriterSurvivesARollbackHere() async throws {
        let (c, store, log) = try await durable()
        let order = await c.expectElsewhere(.tap(tab: "profile"), by: "c1", ref: "t", replyTo: 1, commandKey: "f1")
        await c.settleElsewhere(1, order: order, frame: .ack(ref: "t", seq: 3))
        // A batch of this node's own fails: what it rolls back is its own, not what
        // another node stored.
        store.setFailing(true)
        await c.enqueue(.scroll(tab: nil, offset: 1), by: "c2", ref: "s", replyTo: 2)
        try await until { log.answers.count == 1 }
        #expect(log.answers[0].frame == .error(ref: "s", .unavailable("disk full")))
        store.setFailing(false)
        await c.enqueue(.scroll(tab: nil, offset: 2), by: "c2", ref: "u", replyTo: 2)
        try await until { log.answers.count == 3 }
        #expect(log.answers.filter { $0.to == 1 }.map(\.frame) == [.ack(ref: "t", seq: 3)])
    }
}
