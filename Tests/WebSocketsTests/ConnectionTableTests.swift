import Testing
@testable import WebSockets

private func f(_ s: String) -> OutgoingFrame { OutgoingFrame(s) }
private func text(_ frame: OutgoingFrame) -> String { String(decoding: frame.payload, as: UTF8.self) }

/// Drains everything due for `id`, as the service thread would (any batch size).
private func drain(_ t: inout ConnectionTable, _ id: ConnectionID, maxBytes: Int = 1 << 20) -> (frames: [String], end: ConnectionTable.Output) {
    var out: [String] = []
    while true {
        var batch: [OutgoingFrame] = []
        let r = t.takeOutput(id, maxBytes: maxBytes, into: &batch)
        out += batch.map(text)
        switch r {
        case .frames(more: true): continue
        default: return (out, r)
        }
    }
}

struct ConnectionTableTests {
    @Test func pendingReceivesNothingThenActivateDeliversFirstAndLaterBroadcastsOnce() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.broadcast(f("b1"), seq: 1)
        _ = t.broadcast(f("b2"), seq: 2)
        do { let ok = (drain(&t, a).frames == []); #expect(ok) }
        _ = t.activate(a, first: [f("welcome")], afterSeq: 1)
        _ = t.broadcast(f("b3"), seq: 3)
        do { let ok = (drain(&t, a).frames == ["welcome", "b2", "b3"]); #expect(ok) }
        _ = t.broadcast(f("b4"), seq: 4)
        do { let ok = (drain(&t, a).frames == ["b4"]); #expect(ok) }
        do { let ok = (drain(&t, a).frames == []); #expect(ok) }
    }

    @Test func activateCanReachBackBeforeTheConnectionOpened() {
        var t = ConnectionTable(queueLimit: 100)
        let other = t.open()!
        _ = t.activate(other, first: [], afterSeq: 0)
        _ = t.broadcast(f("b1"), seq: 1)
        let a = t.open()!
        _ = t.activate(a, first: [f("w")], afterSeq: 0)
        do { let ok = (drain(&t, a).frames == ["w", "b1"]); #expect(ok) }
    }

    @Test func sendIsOrderedAfterEarlierBroadcastsAndBeforeLaterOnes() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, first: [f("w")], afterSeq: 0)
        _ = t.broadcast(f("b1"), seq: 1)
        _ = t.send(f("ack1"), to: a)
        _ = t.broadcast(f("b2"), seq: 2)
        _ = t.send(f("ack2"), to: a)
        _ = t.send(f("ack2b"), to: a)
        do { let ok = (drain(&t, a, maxBytes: 1).frames == ["w", "b1", "ack1", "b2", "ack2", "ack2b"]); #expect(ok) }
    }

    @Test(arguments: [(0, ["w", "b1", "x", "b2"]), (1, ["w", "x", "b2"]), (5, ["w", "x"])])
    func sendWhilePendingFollowsFirst(afterSeq: Int, expected: [String]) {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.broadcast(f("b1"), seq: 1)
        _ = t.send(f("x"), to: a)
        _ = t.broadcast(f("b2"), seq: 2)
        _ = t.activate(a, first: [f("w")], afterSeq: afterSeq)
        do { let ok = (drain(&t, a).frames == expected); #expect(ok) }
    }

    @Test func broadcastsAtOrBelowAfterSeqAreSkippedEvenWhenMadeLater() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, first: [f("w")], afterSeq: 3)
        _ = t.broadcast(f("b2"), seq: 2)
        _ = t.broadcast(f("b3"), seq: 3)
        _ = t.broadcast(f("b4"), seq: 4)
        do { let ok = (drain(&t, a).frames == ["w", "b4"]); #expect(ok) }
    }

    @Test func activationAfterTheNeededBroadcastWasDroppedClosesTooSlow() {
        var t = ConnectionTable(queueLimit: 100)
        _ = t.broadcast(f("b1"), seq: 1)  // nobody connected: dropped at once
        let a = t.open()!
        _ = t.activate(a, first: [f("w")], afterSeq: 0)
        do { let ok = (drain(&t, a).end == .close(.policyViolation, "too slow")); #expect(ok) }
        let b = t.open()!
        _ = t.activate(b, first: [f("w")], afterSeq: 1)
        do { let ok = (drain(&t, b).frames == ["w"]); #expect(ok) }
    }

    @Test func aConnectionFallingBehindIsClosedAndTheOthersKeepGoingWithBoundedMemory() {
        var t = ConnectionTable(queueLimit: 50)
        let slow = t.open()!, fast = t.open()!
        _ = t.activate(slow, first: [], afterSeq: 0)
        _ = t.activate(fast, first: [], afterSeq: 0)
        var fastGot: [String] = []
        for seq in 1...1000 {
            _ = t.broadcast(f("b\(seq)"), seq: seq)
            fastGot += drain(&t, fast).frames
            #expect(t.retainedLogCount <= 50 + 50 / 8 + 1)
        }
        #expect(fastGot == (1...1000).map { "b\($0)" })
        do { let ok = (drain(&t, slow).end == .close(.policyViolation, "too slow")); #expect(ok) }
        let work = t.takeWakeWork()
        #expect(work.closing == [slow])
        do { let ok = (t.remove(slow)! == (.policyViolation, "too slow")); #expect(ok) }
        #expect(t.count == 1)
    }

    @Test func directSendsCountTowardTheLimitButWelcomeFramesDoNot() {
        var t = ConnectionTable(queueLimit: 3)
        let a = t.open()!
        _ = t.activate(a, first: (1...10).map { f("r\($0)") }, afterSeq: 0)
        _ = t.send(f("x1"), to: a)
        _ = t.send(f("x2"), to: a)
        _ = t.send(f("x3"), to: a)
        #expect(t.backlog(of: a) == 3)
        if case .closing = t.state(of: a)! { Issue.record("closed too early") }
        _ = t.send(f("x4"), to: a)
        do { let ok = (drain(&t, a).end == .close(.policyViolation, "too slow")); #expect(ok) }
    }

    @Test func closeSendsWhatWasQueuedFirstThenTheCloseAndNothingAfter() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, first: [f("w")], afterSeq: 0)
        _ = t.broadcast(f("b1"), seq: 1)
        _ = t.send(f("err"), to: a)
        _ = t.close(a, code: .policyViolation, reason: "bye")
        _ = t.broadcast(f("b2"), seq: 2)
        _ = t.send(f("late"), to: a)
        let r = drain(&t, a, maxBytes: 1)
        #expect(r.frames == ["w", "b1", "err"])
        #expect(r.end == .close(.policyViolation, "bye"))
    }

    @Test func shutdownClosesEveryoneAtOnceRefusesNewAndEndsWhenEmpty() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!, b = t.open()!
        _ = t.activate(a, first: [f("w")], afterSeq: 0)
        _ = t.takeWakeWork()
        do { let ok = (t.beginShutdown(code: .goingAway, reason: "server stopping")); #expect(ok) }
        do { let ok = (t.open() == nil); #expect(ok) }
        #expect(!t.shouldExit)
        do { let ok = (drain(&t, a).end == .close(.goingAway, "server stopping")); #expect(ok) }
        do { let ok = (drain(&t, b).end == .close(.goingAway, "server stopping")); #expect(ok) }
        do { let ok = (Set(t.takeWakeWork().closing) == [a, b]); #expect(ok) }
        _ = t.remove(a)
        _ = t.remove(b)
        #expect(t.shouldExit)
    }

    @Test func wakeUpsAreCoalescedUntilTheServiceThreadTakesTheWork() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        do { let ok = (t.activate(a, first: [f("w")], afterSeq: 0)); #expect(ok) }
        do { let ok = (!t.broadcast(f("b1"), seq: 1)); #expect(ok) }
        do { let ok = (!t.send(f("x"), to: a)); #expect(ok) }
        let work = t.takeWakeWork()
        #expect(work.writableAll && work.writable == [a])
        do { let ok = (t.broadcast(f("b2"), seq: 2)); #expect(ok) }
        t.markStopped()
        do { let ok = (!t.send(f("y"), to: a)); #expect(ok) }
    }

    @Test func batchesRespectTheByteBudgetButAlwaysTakeOneFrame() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, first: [], afterSeq: 0)
        let big = String(repeating: "x", count: 300)
        for seq in 1...5 { _ = t.broadcast(f(big), seq: seq) }
        var batch: [OutgoingFrame] = []
        do { let ok = (t.takeOutput(a, maxBytes: 700, into: &batch) == .frames(more: true)); #expect(ok) }
        #expect(batch.count == 2)
        batch = []
        do { let ok = (t.takeOutput(a, maxBytes: 10, into: &batch) == .frames(more: true)); #expect(ok) }
        #expect(batch.count == 1)
        batch = []
        do { let ok = (t.takeOutput(a, maxBytes: 10_000, into: &batch) == .frames(more: false)); #expect(ok) }
        #expect(batch.count == 2)
    }

    @Test func framesAreEncodedOnceWithTheRightHeader() {
        #expect(OutgoingFrame("hi").wire == [0x81, 2, 0x68, 0x69])
        let mid = OutgoingFrame(String(repeating: "a", count: 300))
        #expect(Array(mid.wire.prefix(4)) == [0x81, 126, 0x01, 0x2C] && mid.count == 300)
        let large = OutgoingFrame([UInt8](repeating: 0x61, count: 70_000))
        #expect(Array(large.wire.prefix(10)) == [0x81, 127, 0, 0, 0, 0, 0, 0x01, 0x11, 0x70])
    }

    @Test func ringGrowsWrapsAndSearches() {
        var r = Ring<Int>()
        for i in 0..<5 { r.append(i) }
        r.removeFirst(3)
        for i in 5..<20 { r.append(i) }
        #expect((0..<r.count).map { r[$0] } == Array(3..<20))
        #expect(r.partitionPoint { $0 < 10 } == 7)
    }
}
