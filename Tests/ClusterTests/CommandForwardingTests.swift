import Coordinator
import Testing
@testable import Cluster

/// Forwarding's rules without an engine: where a command goes, what an answer, a refusal,
/// a missing answer or the writer's death does to the forwards in flight, the writer's order per session, the
/// wire format, and the stream's record of which forwarded commands it holds.
@Suite struct CommandForwardingTests {
    typealias Plan = ForwardingPlan<String>
    static let alive: @Sendable (String) -> Bool = { _ in true }
    static let second: UInt64 = 1_000_000_000

    static func envelope(_ tab: TabID = "home", ref: String? = nil) -> CommandEnvelope { CommandEnvelope(ref: ref, command: .tap(tab: tab)) }

    /// Forwards `n` commands (addresses 1…n, waits 1…n) to `to` at `now`.
    static func forward(_ plan: inout Plan, _ n: Int, to: String = "n2", now: UInt64 = 0) -> [ForwardRequest] {
        (1...n).map { i in
            guard case let .forward(target, fresh) = plan.route(writer: to, isAlive: alive, now: now) else {
                Issue.record("not forwarded")
                return ForwardRequest(id: "", room: "", client: "", envelope: envelope(), session: "", order: 0, reply: "")
            }
            return plan.forward(envelope(), client: "c1", to: target, fresh: fresh, address: UInt64(i), order: i, reply: "r", now: now)
        }
    }

    @Test func commandsGoToTheRoomsWriterUnlessThisNodeWritesIt() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        #expect(plan.route(writer: nil, isAlive: Self.alive, now: 0) == .local, "nobody has written: decided here")
        #expect(plan.route(writer: "n1", isAlive: Self.alive, now: 0) == .local, "this node wrote last")
        #expect(plan.route(writer: "n2", isAlive: { $0 != "n2" }, now: 0) == .local, "a dead writer is not asked")
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 0) == .forward(to: "n2", fresh: true))
        // A node other nodes forward to writes its own clients' commands too.
        plan.wasForwarded(now: 10)
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 10 + Plan.writerNanoseconds / 2) == .local)
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 10 + Plan.writerNanoseconds) == .forward(to: "n2", fresh: true))
    }

    @Test func aNodeThatBecomesTheWriterLetsItsOwnForwardsFinishThenDecidesHere() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        let sent = Self.forward(&plan, 2)
        plan.wasForwarded(now: 5)
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 6) == .hold, "no more forwards, none decided before them")
        _ = plan.answered(ForwardAnswer(id: sent[0].id, room: "r", frame: .ack(ref: nil, seq: 3)), now: 7)
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 7) == .hold)
        _ = plan.answered(ForwardAnswer(id: sent[1].id, room: "r", frame: .ack(ref: nil, seq: 4)), now: 8)
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 8) == .local)
    }

    @Test func forwardsInFlightKeepTheirTargetAndSessionInOrder() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        let sent = Self.forward(&plan, 3)
        #expect(sent.map(\.order) == [0, 1, 2] && Set(sent.map(\.session)).count == 1)
        #expect(Set(sent.map(\.id)).count == 3 && sent.allSatisfy { $0.room == "r" && $0.reply == "r" })
        // The stream's last writer changed meanwhile: the forwards in flight decide where
        // the next goes (the writer decides a session only in order).
        #expect(plan.route(writer: "n3", isAlive: Self.alive, now: 0) == .forward(to: "n2", fresh: false))
        // Answers are taken in any order; once none is in flight, a new session begins.
        for request in sent.reversed() {
            let steps = plan.answered(ForwardAnswer(id: request.id, room: "r", frame: .ack(ref: nil, seq: 9)), now: 1)
            #expect(steps.count == 1)
        }
        #expect(plan.isIdle)
        let next = Self.forward(&plan, 1, to: "n3")
        #expect(next[0].order == 0 && next[0].session != sent[0].session)
    }

    @Test func anUnansweredForwardIsSentAgainWhileItsWriterLivesAndDecidedHereOnceItDied() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        let sent = Self.forward(&plan, 4)
        #expect(plan.check(now: Plan.resendNanoseconds - 1, isAlive: Self.alive) == ([], []))
        #expect(plan.answered(ForwardAnswer(id: sent[1].id, room: "r", frame: .ack(ref: nil, seq: 5)), now: 1)
            == [.settle(address: 2, order: 2, frame: .ack(ref: nil, seq: 5))])
        // No answer is no refusal: the writer may still decide them. Sent again, unchanged.
        let again = plan.check(now: Plan.resendNanoseconds, isAlive: Self.alive)
        #expect(again.steps.isEmpty && again.resend == [sent[0], sent[2], sent[3]])
        #expect(plan.check(now: Plan.resendNanoseconds + 1, isAlive: Self.alive) == ([], []), "once a second")
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: Plan.resendNanoseconds + 1) == .forward(to: "n2", fresh: false))
        // The writer died: it decides nothing more, they are decided here, in order.
        let dead = plan.check(now: Plan.resendNanoseconds + 2, isAlive: { $0 != "n2" })
        #expect(dead.steps == [.decideHere(address: 1, order: 1), .decideHere(address: 3, order: 3), .decideHere(address: 4, order: 4)])
        #expect(dead.resend.isEmpty && plan.isIdle && !plan.draining)
        #expect(plan.route(writer: "n2", isAlive: { $0 != "n2" }, now: Plan.resendNanoseconds + 3) == .local)
    }

    @Test func aNodeThatNeverAnswersAForwardIsGivenUpOn() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        _ = Self.forward(&plan, 2)
        // A tabd from before forwarding: alive, and silent.
        #expect(plan.check(now: Plan.silentNanoseconds - 1, isAlive: Self.alive).steps.isEmpty)
        #expect(plan.check(now: Plan.silentNanoseconds, isAlive: Self.alive).steps
            == [.decideHere(address: 1, order: 1), .decideHere(address: 2, order: 2)])
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: Plan.silentNanoseconds + Plan.penaltyNanoseconds) == .local)
        // One that has answered before is waited for as long as it lives.
        var other = Plan(node: "n1", incarnation: "i1", room: "r")
        let sent = Self.forward(&other, 2)
        _ = other.answered(ForwardAnswer(id: sent[0].id, room: "r", frame: .ack(ref: nil, seq: 3)), now: 1)
        #expect(other.check(now: 10 * Plan.silentNanoseconds, isAlive: Self.alive).steps.isEmpty)
    }

    @Test func aRefusalDecidesItHereOnlyAfterEveryEarlierForwardIsSettled() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        let sent = Self.forward(&plan, 3)
        // The second is refused (the first never reached the writer): the second and third
        // wait for the first, and new commands wait until all three are settled.
        #expect(plan.answered(ForwardAnswer(id: sent[1].id, room: "r", refused: "gap"), now: 1).isEmpty)
        #expect(plan.draining && plan.route(writer: "n2", isAlive: Self.alive, now: 1) == .hold)
        // A late answer to the third still counts: the writer decided it.
        #expect(plan.answered(ForwardAnswer(id: sent[2].id, room: "r", frame: .error(ref: nil, .unknownTab("x"))), now: 2)
            == [.settle(address: 3, order: 3, frame: .error(ref: nil, .unknownTab("x")))])
        #expect(plan.answered(ForwardAnswer(id: sent[0].id, room: "r", frame: .ack(ref: nil, seq: 4)), now: 3)
            == [.settle(address: 1, order: 1, frame: .ack(ref: nil, seq: 4)), .decideHere(address: 2, order: 2)])
        #expect(plan.isIdle && !plan.draining)
        #expect(plan.answered(ForwardAnswer(id: sent[1].id, room: "r", frame: .ack(ref: nil, seq: 5)), now: 4).isEmpty,
                "an answer after it was decided here changes nothing (the stream's record of its id does)")
    }

    /// While forwards are decided here, inputs wait in their order; once they are settled the
    /// waiting ones go out in that order, and one held again holds the rest behind it.
    @Test func inputsWaitInOrderWhileForwardsAreDecidedHereAndGoOutInOrder() {
        var plan = Plan(node: "n1", incarnation: "i1", room: "r")
        let first = plan.holdBehindWaiting("query")
        #expect(!first, "nothing waits: an input goes its way")
        let sent = Self.forward(&plan, 2)
        // The second is refused while the first is in flight: the plan drains.
        _ = plan.answered(ForwardAnswer(id: sent[1].id, room: "r", refused: "gap"), now: 1)
        #expect(plan.route(writer: "n2", isAlive: Self.alive, now: 1) == .hold)
        plan.hold("a")
        let b = plan.holdBehindWaiting("b"), c = plan.holdBehindWaiting("c")
        #expect(b && c, "a query or refusal after a held command waits too")
        let early = plan.release()
        #expect(early.isEmpty, "nothing goes while forwards are still being decided here")
        _ = plan.answered(ForwardAnswer(id: sent[0].id, room: "r", frame: .ack(ref: nil, seq: 3)), now: 2)
        #expect(!plan.draining)
        // Released in order; routing them again, the first is held again (say the plan drains
        // anew): the rest are held behind it, in order.
        let released = plan.release(), again = plan.release()
        #expect(released == ["a", "b", "c"])
        #expect(again.isEmpty, "released once")
        plan.hold(released[0])
        let behind = plan.holdBehindWaiting(released[1]) && plan.holdBehindWaiting(released[2])
        let last = plan.release()
        #expect(behind && last == ["a", "b", "c"])
    }

    @Test func theWriterDecidesEachSessionInOrderOnlyFromItsStart() {
        var sessions = ForwardSessions()
        func request(_ session: String, _ order: Int) -> ForwardRequest {
            ForwardRequest(id: "\(session)-\(order)", room: "r", client: "c1", envelope: CommandForwardingTests.envelope(), session: session,
                           order: order, reply: "r")
        }
        #expect(sessions.admit(request("a", 1), now: 0) == .gap, "a session is taken only from its first command")
        #expect(sessions.admit(request("a", 0), now: 0) == .decide)
        #expect(sessions.admit(request("a", 1), now: 0) == .decide)
        #expect(sessions.admit(request("a", 1), now: 0) == .seen)
        #expect(sessions.admit(request("a", 3), now: 0) == .gap, "the third never came: the fourth is refused")
        #expect(sessions.admit(request("a", 2), now: 0) == .decide)
        #expect(sessions.admit(request("b", 0), now: 0) == .decide, "sessions are apart")
    }

    @Test func requestsAndAnswersSurviveTheWire() throws {
        let request = ForwardRequest(id: "n1:i:r:f3", room: "r", client: "c7",
                                     envelope: CommandEnvelope(ref: "x\"y", command: .set(tab: nil, key: "k", value: .array([.int(1), .null]))),
                                     session: "n1:i:r:2", order: 5, reply: "tabd.fwdr.n1.i")
        #expect(try ForwardRequest(bytes: request.bytes) == request)
        for answer in [ForwardAnswer(id: "a", room: "r", frame: .ack(ref: "1", seq: 12)),
                       ForwardAnswer(id: "a", room: "r", frame: .error(ref: nil, .invalid("no"))),
                       ForwardAnswer(id: "a", room: "r", refused: "not open")] {
            #expect(try ForwardAnswer(bytes: answer.bytes) == answer)
        }
        #expect(throws: (any Error).self) { try ForwardRequest(bytes: Array("{\"id\":1}".utf8)) }
        #expect(throws: (any Error).self) { try ForwardAnswer(bytes: Array("{\"id\":\"a\",\"room\":\"r\",\"frame\":{\"type\":\"pong\",\"ref\":null}}".utf8)) }
        #expect(throws: (any Error).self) { try ForwardAnswer(bytes: Array("not json".utf8)) }
    }

    @Test func forwardsGoInMessagesThatFitTheEngine() {
        let line = [UInt8](repeating: 0x61, count: ClusterNode.maxForwardMessageBytes / 3 - 1) // three and their line feeds fit
        let messages = ClusterNode.messages(Array(repeating: line, count: 7))
        #expect(messages.count == 3 && messages.allSatisfy { $0.count <= ClusterNode.maxForwardMessageBytes })
        #expect(messages.flatMap { $0.split(separator: 0x0A) }.count == 7, "every line, once")
        #expect(ClusterNode.messages([]).isEmpty)
    }

    // MARK: The stream's record

    @Test func aMessageNamesItsForwardedBatchesAndEveryNodeLearnsThemFromTheStream() throws {
        var m = try ClusterRoomMachineTests.machine(depth: 1)
        let first = ClusterRoomMachineTests.batch(1)
        let p1 = try #require(ClusterRoomMachineTests.publication(m.append(first, generation: 0, waiter: 1, commandKey: "n2:i:r:f1")))
        // Queued behind it: one forwarded, one not, in one group.
        _ = m.append(ClusterRoomMachineTests.batch(2), generation: 0, waiter: 2)
        _ = m.append(ClusterRoomMachineTests.batch(3), generation: 0, waiter: 3, commandKey: "n3:i:r:f9")
        #expect(p1.forwardsHeader == "1=n2:i:r:f1")
        _ = m.published(p1, .stored(seq: 2), now: 0)
        #expect(m.storedOutcome("n2:i:r:f1") == nil, "known once delivered, not when stored")
        let back = m.delivered(Machine.Delivery(streamSeq: 2, kind: nil, writer: "n1", messageID: p1.messageID, forwards: p1.forwardsHeader,
                                                data: p1.data), now: 1)
        #expect(m.storedOutcome("n2:i:r:f1") == .applied(seq: 1) && m.lastWriter == "n1")
        let p2 = try #require(ClusterRoomMachineTests.publication(back))
        #expect(p2.batches.count == 2 && p2.forwardsHeader == "3=n3:i:r:f9")
        // Another node's message: its header is learned too (a seq outside it is not).
        let other = ClusterRoomMachineTests.batch(2, offset: 5)
        _ = m.delivered(Machine.Delivery(streamSeq: 3, kind: nil, writer: "n3", forwards: "2=n1:i:r:f4,9=n1:i:r:f5,junk",
                                         data: other.frameBytes), now: 2)
        #expect(m.storedOutcome("n1:i:r:f4") == .applied(seq: 2) && m.storedOutcome("n1:i:r:f5") == nil)
        #expect(m.lastWriter == "n3")
    }

    // MARK: Fences

    /// A forwarded command decided here that changed nothing is fenced: its record rides in
    /// the message of the batches around it, at its place, and every node learns it.
    @Test func aFenceGoesInTheMessageOfTheBatchesAroundItAndIsLearnedFromTheStream() throws {
        var m = try ClusterRoomMachineTests.machine(depth: 1)
        let p1 = try #require(ClusterRoomMachineTests.publication(m.append(ClusterRoomMachineTests.batch(1), generation: 0, waiter: 1)))
        // Queued while p1 is in flight: a fence after seq 1, then a batch, then a refused fence.
        #expect(m.fence(.init(after: 1, id: "n2:i:r:f1", record: .unchanged(seq: 1)), generation: 0, waiter: 2).isEmpty)
        _ = m.append(ClusterRoomMachineTests.batch(2), generation: 0, waiter: 3)
        let refused = CommandError(.unknownTab, "no tab 'a,b=c/d'")
        _ = m.fence(.init(after: 2, id: "n2:i:r:f2", record: .refused(refused)), generation: 0, waiter: 4)
        _ = m.published(p1, .stored(seq: 2), now: 0)
        let back = m.delivered(ClusterRoomMachineTests.delivery(2, ClusterRoomMachineTests.batch(1), id: p1.messageID), now: 1)
        #expect(back.contains(.report(1, nil)))
        let p2 = try #require(ClusterRoomMachineTests.publication(back))
        #expect(p2.batches.map(\.lastSeq) == [2] && p2.lastSeq == 2 && p2.waiters == [2, 3, 4] && p2.expectedLastSeq == 2)
        #expect(p2.forwardsHeader?.hasPrefix("1/u=n2:i:r:f1,2/unknown_tab/") == true)
        #expect(m.storedOutcome("n2:i:r:f1") == nil, "known once delivered")
        _ = m.published(p2, .stored(seq: 3), now: 1)
        let done = m.delivered(Machine.Delivery(streamSeq: 3, kind: nil, writer: "n1", messageID: p2.messageID, forwards: p2.forwardsHeader,
                                                data: p2.data), now: 2)
        #expect([2, 3, 4].allSatisfy { done.contains(.report($0, nil)) }, "fences are committed with the message")
        #expect(m.storedOutcome("n2:i:r:f1") == .unchanged(seq: 1))
        #expect(m.storedOutcome("n2:i:r:f2") == .refused(refused), "the error, as decided, comes back from the header")

        // Another node reads the same message alike.
        var other = try ClusterRoomMachineTests.machine()
        _ = other.delivered(ClusterRoomMachineTests.delivery(2, ClusterRoomMachineTests.batch(1), writer: "n1"), now: 0)
        _ = other.delivered(Machine.Delivery(streamSeq: 3, kind: nil, writer: "n1", forwards: p2.forwardsHeader, data: p2.data), now: 1)
        #expect(other.storedOutcome("n2:i:r:f1") == .unchanged(seq: 1) && other.storedOutcome("n2:i:r:f2") == .refused(refused))
    }

    /// A fence with no batch around it is a message of its own, without a body: it lands
    /// where the stream ends (the next message follows it), and is committed once delivered there.
    @Test func aFenceAloneIsAMessageWithoutBodyAtTheStreamsEnd() throws {
        var m = try ClusterRoomMachineTests.machine(depth: 1)
        _ = m.delivered(ClusterRoomMachineTests.delivery(2, ClusterRoomMachineTests.batch(1), writer: "n3"), now: 0)
        let p = try #require(ClusterRoomMachineTests.publication(m.fence(.init(after: 1, id: "n2:i:r:f7", record: .unchanged(seq: 1)),
                                                                         generation: 0, waiter: 5)))
        #expect(p.data.isEmpty && p.batches.isEmpty && p.lastSeq == 1 && p.expectedLastSeq == 2 && p.forwardsHeader == "1/u=n2:i:r:f7")
        _ = m.published(p, .stored(seq: 3), now: 0)
        let done = m.delivered(Machine.Delivery(streamSeq: 3, kind: nil, writer: "n1", messageID: p.messageID, forwards: p.forwardsHeader,
                                                data: []), now: 1)
        #expect(done.contains(.report(5, nil)) && m.broken == nil && m.delivered == 3)
        #expect(m.storedOutcome("n2:i:r:f7") == .unchanged(seq: 1))
        let next = try #require(ClusterRoomMachineTests.publication(m.append(ClusterRoomMachineTests.batch(2), generation: 0, waiter: 6)))
        #expect(next.expectedLastSeq == 3, "the next batch follows the fence")
        // An empty message that is no fence does not fold.
        _ = m.published(next, .stored(seq: 4), now: 1)
        _ = m.delivered(Machine.Delivery(streamSeq: 4, kind: nil, writer: "n3", data: []), now: 2)
        #expect(m.broken != nil)
    }

    /// A fence is placed like a batch: another node's message at its place makes it a
    /// conflict once that message is delivered, so its command is decided again.
    @Test func aFenceThatFindsAnotherMessageAtItsPlaceIsAConflict() throws {
        var m = try ClusterRoomMachineTests.machine(depth: 1)
        let p = try #require(ClusterRoomMachineTests.publication(m.fence(.init(after: 0, id: "f1", record: .unchanged(seq: 0)),
                                                                         generation: 0, waiter: 1)))
        #expect(p.expectedLastSeq == 1)
        #expect(ClusterRoomMachineTests.isSentAgain(m.published(p, .wrongLastSequence, now: 0), p), "the message at its place decides")
        let after = m.delivered(Machine.Delivery(streamSeq: 2, kind: nil, writer: "n2", forwards: "1=f1",
                                                 data: ClusterRoomMachineTests.batch(1).frameBytes), now: 1)
        #expect(after.contains(.report(1, .conflict())))
        #expect(m.storedOutcome("f1") == .applied(seq: 1), "the other node's decision is the record")
    }

    /// The first record of a forwarded command stands: a later batch or fence naming the
    /// same id (a node that decided it on state that had it already cannot store one, but
    /// a stream is read as it is) does not replace it.
    @Test func theFirstRecordOfAForwardedCommandStands() throws {
        var m = try ClusterRoomMachineTests.machine()
        _ = m.delivered(Machine.Delivery(streamSeq: 2, kind: nil, writer: "n2", forwards: "0/u=f1", data: []), now: 0)
        _ = m.delivered(Machine.Delivery(streamSeq: 3, kind: nil, writer: "n1", forwards: "1=f1", data: ClusterRoomMachineTests.batch(1).frameBytes), now: 1)
        #expect(m.storedOutcome("f1") == .unchanged(seq: 0))
        // Fences outside the message's place, and malformed ones, are not records.
        _ = m.delivered(Machine.Delivery(streamSeq: 4, kind: nil, writer: "n2", forwards: "7/u=f2,1/bogus/eA=f3,1/invalid/!!=f4,1/x=f5",
                                         data: ClusterRoomMachineTests.batch(2).frameBytes), now: 2)
        #expect(["f2", "f3", "f4", "f5"].allSatisfy { m.storedOutcome($0) == nil } && m.broken == nil)
    }

    @Test func theWriterIsTheNodeThatWroteMostOfTheLatestMessages() throws {
        var m = try ClusterRoomMachineTests.machine()
        #expect(m.writer == nil)
        var seq = 0
        func deliver(_ writer: String) {
            seq += 1
            _ = m.delivered(ClusterRoomMachineTests.delivery(UInt64(seq + 1), ClusterRoomMachineTests.batch(seq), writer: writer), now: 0)
        }
        for _ in 0..<10 { deliver("n1") }
        deliver("n2")
        #expect(m.lastWriter == "n2" && m.writer == "n1", "one message of another node does not move the writer")
        for _ in 0..<9 { deliver("n2") }
        #expect(m.writer == "n2", "ten and ten: the one that wrote last")
        for _ in 0..<Machine.writerWindow { deliver("n3") }
        #expect(m.writer == "n3", "only the latest messages count")
    }

    typealias Machine = ClusterRoomMachine
}
