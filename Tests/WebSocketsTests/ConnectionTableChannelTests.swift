import Testing
@testable import WebSockets

private let roomA = ChannelID(rawValue: 10)
private let roomB = ChannelID(rawValue: 20)

/// Opens a connection and activates it on `channel` with a welcome frame `w`.
private func member(_ t: inout ConnectionTable, on channel: ChannelID, afterSeq: Int = 0) -> ConnectionID {
    let id = t.open()!
    _ = t.activate(id, on: channel, first: [f("w")], afterSeq: afterSeq)
    return id
}

struct ConnectionTableChannelTests {
    @Test func twoChannelsWithTheSameSeqsEachDeliverExactlyTheirOwnFramesInOrder() {
        var t = ConnectionTable(queueLimit: 100)
        let a1 = member(&t, on: roomA), a2 = member(&t, on: roomA), b1 = member(&t, on: roomB)
        for seq in 1...3 {
            _ = t.broadcast(f("A\(seq)"), seq: seq, on: roomA)
            _ = t.broadcast(f("B\(seq)"), seq: seq, on: roomB)
        }
        #expect(drain(&t, a1) == Drained(["w", "A1", "A2", "A3"], .frames(more: false)))
        #expect(drain(&t, a2) == Drained(["w", "A1", "A2", "A3"], .frames(more: false)))
        #expect(drain(&t, b1) == Drained(["w", "B1", "B2", "B3"], .frames(more: false)))
        #expect(t.lastSeq(on: roomA) == 3 && t.lastSeq(on: roomB) == 3)
    }

    @Test func aSendIsOrderedAfterItsOwnChannelsEarlierBroadcastsOnly() {
        var t = ConnectionTable(queueLimit: 100)
        let a = member(&t, on: roomA), b = member(&t, on: roomB)
        _ = t.broadcast(f("A1"), seq: 1, on: roomA)
        for seq in 1...3 { _ = t.broadcast(f("B\(seq)"), seq: seq, on: roomB) }
        // Six broadcasts in all, one on a's channel: "x" goes right after A1, before A2.
        _ = t.send(f("x"), to: a)
        _ = t.send(f("y"), to: b)
        _ = t.broadcast(f("A2"), seq: 2, on: roomA)
        _ = t.broadcast(f("B4"), seq: 4, on: roomB)
        #expect(drain(&t, a, maxBytes: 1) == Drained(["w", "A1", "x", "A2"], .frames(more: false)))
        #expect(drain(&t, b, maxBytes: 1) == Drained(["w", "B1", "B2", "B3", "y", "B4"], .frames(more: false)))
    }

    @Test func sendsWhilePendingKeepTheirPlaceAmongTheChannelsBroadcasts() {
        var t = ConnectionTable(queueLimit: 100)
        _ = member(&t, on: roomA)  // keeps A's log
        _ = member(&t, on: roomB)
        let p = t.open()!
        _ = t.broadcast(f("A1"), seq: 1, on: roomA)
        _ = t.send(f("x"), to: p)
        _ = t.broadcast(f("B1"), seq: 1, on: roomB)
        _ = t.broadcast(f("A2"), seq: 2, on: roomA)
        _ = t.send(f("y"), to: p)
        _ = t.activate(p, on: roomA, first: [f("welcome")], afterSeq: 0)
        _ = t.broadcast(f("A3"), seq: 3, on: roomA)
        #expect(drain(&t, p) == Drained(["welcome", "A1", "x", "A2", "y", "A3"], .frames(more: false)))
    }

    @Test func activationDeliversOnlyItsChannelsBroadcastsAboveAfterSeq() {
        var t = ConnectionTable(queueLimit: 100)
        _ = member(&t, on: roomA)
        _ = member(&t, on: roomB)
        for seq in 1...4 {
            _ = t.broadcast(f("A\(seq)"), seq: seq, on: roomA)
            _ = t.broadcast(f("B\(seq)"), seq: seq, on: roomB)
        }
        let late = t.open()!
        _ = t.activate(late, on: roomA, first: [f("welcome")], afterSeq: 2)
        _ = t.broadcast(f("B5"), seq: 5, on: roomB)
        _ = t.broadcast(f("A5"), seq: 5, on: roomA)
        #expect(drain(&t, late) == Drained(["welcome", "A3", "A4", "A5"], .frames(more: false)))
        #expect(t.channel(of: late) == roomA)
    }

    @Test func activationNeedingAFrameAChannelNoLongerHasIsClosedTooSlow() {
        var t = ConnectionTable(queueLimit: 4)
        // B has no members: its broadcasts are dropped at once, its last seq kept.
        _ = member(&t, on: roomA)
        _ = t.broadcast(f("B1"), seq: 1, on: roomB)
        _ = t.broadcast(f("B2"), seq: 2, on: roomB)
        #expect(t.retainedLogCount(on: roomB) == 0 && t.lastSeq(on: roomB) == 2)
        let missed = t.open()!, current = t.open()!
        _ = t.activate(missed, on: roomB, first: [f("welcome")], afterSeq: 1)
        _ = t.activate(current, on: roomB, first: [f("welcome")], afterSeq: 2)
        #expect(drain(&t, missed) == Drained([], .close(.policyViolation, "too slow")))
        #expect(drain(&t, current) == Drained(["welcome"], .frames(more: false)))
        // A has a member that keeps up: the sweep trims what it has read.
        let reader = member(&t, on: roomA)
        for seq in 1...20 {
            _ = t.broadcast(f("A\(seq)"), seq: seq, on: roomA)
            _ = drain(&t, reader)
        }
        let tooLate = t.open()!
        _ = t.activate(tooLate, on: roomA, first: [f("welcome")], afterSeq: 5)
        #expect(drain(&t, tooLate) == Drained([], .close(.policyViolation, "too slow")))
    }

    @Test func aPendingConnectionKeepsTheRecentBroadcastsItMayNeedThroughSweepsOfABusyChannel() {
        var t = ConnectionTable(queueLimit: 16)
        let reader = member(&t, on: roomA)
        let p = t.open()!, q = t.open()!
        for seq in 1...20 {
            _ = t.broadcast(f("A\(seq)"), seq: seq, on: roomA)
            _ = drain(&t, reader)
        }
        // The reader had read everything, yet the sweep at A19 kept the last 16: A4 to A19.
        #expect(t.retainedLogCount(on: roomA) == 17)
        _ = t.activate(p, on: roomA, first: [f("welcome")], afterSeq: 3)
        #expect(drain(&t, p) == Drained(["welcome"] + (4...20).map { "A\($0)" }, .frames(more: false)))
        // Older than the last queueLimit broadcasts: not kept.
        _ = t.activate(q, on: roomA, first: [f("welcome")], afterSeq: 1)
        #expect(drain(&t, q) == Drained([], .close(.policyViolation, "too slow")))
    }

    @Test func framesHeldForPendingConnectionsStayWithinTheQueueLimitAndGoOnceNobodyIsPending() {
        var t = ConnectionTable(queueLimit: 4)
        let p = t.open()!
        for seq in 1...10 {
            #expect(t.broadcast(f("B\(seq)"), seq: seq, on: roomB) == false)  // no member to wake
            #expect(t.retainedLogCount(on: roomB) == min(seq, 4))
        }
        _ = t.activate(p, on: roomA, first: [f("welcome")], afterSeq: 0)
        #expect(t.retainedLogCount(on: roomB) == 0 && t.lastSeq(on: roomB) == 10 && t.channelCount == 2)
        _ = t.broadcast(f("B11"), seq: 11, on: roomB)
        #expect(t.retainedLogCount(on: roomB) == 0)
    }

    @Test func aSlowMemberIsClosedByItsOwnChannelsTrafficWhileTheOtherChannelIsNeitherTouchedNorWoken() {
        var t = ConnectionTable(queueLimit: 8)
        let slow = member(&t, on: roomA), fast = member(&t, on: roomA)
        let quiet = member(&t, on: roomB), quiet2 = member(&t, on: roomB)
        _ = t.broadcast(f("B1"), seq: 1, on: roomB)
        for id in [slow, fast, quiet, quiet2] { _ = drain(&t, id) }
        _ = t.takeWakeWork()
        var woken: Set<ConnectionID> = []
        var closing: [ConnectionID] = []
        for seq in 1...100 {
            _ = t.broadcast(f("A\(seq)"), seq: seq, on: roomA)
            _ = drain(&t, fast)
            let work = t.takeWakeWork()
            #expect(!work.writableAll)
            woken.formUnion(work.writable)
            closing += work.closing
        }
        #expect(woken == [slow, fast])
        #expect(closing == [slow])
        #expect(drain(&t, slow) == Drained([], .close(.policyViolation, "too slow")))
        for id in [quiet, quiet2] {
            #expect(t.backlog(of: id) == 0)
            guard case .active = t.state(of: id) else {
                Issue.record("\(id) of the quiet channel was closed")
                continue
            }
            #expect(drain(&t, id) == Drained([], .idle))
        }
        #expect(t.retainedLogCount(on: roomB) <= 1)
        #expect(t.retainedLogCount(on: roomA) <= 8 + 1 + 1)
        // And the other way round: B's broadcast wakes B's members only.
        _ = t.broadcast(f("B2"), seq: 2, on: roomB)
        let work = t.takeWakeWork()
        #expect((work.writableAll, Set(work.writable), work.closing) == (false, [quiet, quiet2], []))
    }

    @Test func oneCallWakesEveryoneWhenTheWokenChannelsHoldNearlyEveryConnection() {
        var t = ConnectionTable(queueLimit: 100)
        let members = (0..<16).map { _ in member(&t, on: roomA) }
        _ = t.open()  // pending: not on any channel
        _ = t.takeWakeWork()
        _ = t.broadcast(f("A1"), seq: 1, on: roomA)
        let all = t.takeWakeWork()
        #expect((all.writableAll, all.writable, all.closing) == (true, [], []))
        // Half the connections on another channel: its members are listed one by one.
        let others = (0..<17).map { _ in member(&t, on: roomB) }
        _ = t.takeWakeWork()
        _ = t.broadcast(f("A2"), seq: 2, on: roomA)
        let some = t.takeWakeWork()
        #expect(!some.writableAll && Set(some.writable) == Set(members) && some.writable.count == members.count)
        // Both channels in one wake-up: every connection but the pending one.
        _ = t.broadcast(f("A3"), seq: 3, on: roomA)
        _ = t.broadcast(f("B1"), seq: 1, on: roomB)
        #expect(t.takeWakeWork().writableAll)
        _ = others
    }

    @Test func removeChannelClosesItsMembersAfterTheirQueueAndANewHistoryMayStartAtSeqOne() {
        var t = ConnectionTable(queueLimit: 100)
        let a = member(&t, on: roomA), leaving = member(&t, on: roomA), b = member(&t, on: roomB)
        _ = t.broadcast(f("A1"), seq: 1, on: roomA)
        _ = t.send(f("x"), to: a)
        _ = t.close(leaving, code: .normal, reason: "bye")  // closed by the daemon first
        _ = t.broadcast(f("A2"), seq: 2, on: roomA)
        _ = t.broadcast(f("B1"), seq: 1, on: roomB)
        _ = t.takeWakeWork()
        #expect(t.removeChannel(roomA, code: .roomGone, reason: "room deleted") == true)
        #expect(t.channel(of: a) == nil && t.lastSeq(on: roomA) == nil && t.retainedLogCount(on: roomA) == 0)
        // A new history on the same id, which the old members never see.
        let c = member(&t, on: roomA)
        _ = t.broadcast(f("new A1"), seq: 1, on: roomA)
        #expect(drain(&t, a, maxBytes: 1) == Drained(["w", "A1", "x", "A2"], .close(.roomGone, "room deleted")))
        #expect(drain(&t, leaving, maxBytes: 1) == Drained(["w", "A1"], .close(.normal, "bye")))
        #expect(drain(&t, c) == Drained(["w", "new A1"], .frames(more: false)))
        #expect(drain(&t, b) == Drained(["w", "B1"], .frames(more: false)))
        #expect(t.remove(a).map { [$0.code: $0.reason] } == [.roomGone: "room deleted"])
        #expect(t.remove(leaving).map { [$0.code: $0.reason] } == [.normal: "bye"])
    }

    @Test func anIdleChannelKeepsOnlyItsLastSeqUntilRemoved() {
        var t = ConnectionTable(queueLimit: 100)
        let a = member(&t, on: roomA)
        for seq in 1...5 { _ = t.broadcast(f("A\(seq)"), seq: seq, on: roomA) }
        #expect(t.retainedLogCount(on: roomA) == 5)
        _ = t.remove(a)
        #expect(t.retainedLogCount(on: roomA) == 0 && t.lastSeq(on: roomA) == 5 && t.channelCount == 1)
        #expect(t.broadcast(f("A6"), seq: 6, on: roomA) == false)  // nobody to wake
        #expect(t.removeChannel(roomA, code: .roomGone, reason: "room deleted") == false)
        #expect(t.channelCount == 0 && t.lastSeq(on: roomA) == nil)
        _ = t.broadcast(f("A1"), seq: 1, on: roomA)  // a new history: seq 1 is accepted again
        #expect(t.lastSeq(on: roomA) == 1)
    }

    @Test func removeChannelLeavesPendingConnectionsAndOtherChannelsAlone() {
        var t = ConnectionTable(queueLimit: 100)
        let a = member(&t, on: roomA), b = member(&t, on: roomB), p = t.open()!
        _ = t.send(f("x"), to: p)
        _ = t.removeChannel(roomA, code: .roomGone, reason: "room deleted")
        #expect(drain(&t, a) == Drained(["w"], .close(.roomGone, "room deleted")))
        guard case .pending = t.state(of: p), case .active = t.state(of: b) else {
            Issue.record("removeChannel touched a connection of no or another channel")
            return
        }
        _ = t.activate(p, on: roomA, first: [f("welcome")], afterSeq: 0)
        #expect(drain(&t, p) == Drained(["welcome", "x"], .frames(more: false)))
    }
}
