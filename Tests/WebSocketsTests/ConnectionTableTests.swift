import Testing
@testable import WebSockets
@_spi(Engine) import WebSocketEngine

func f(_ s: String) -> OutgoingFrame { OutgoingFrame(s) }
func text(_ frame: OutgoingFrame) -> String { String(decoding: frame.payload, as: UTF8.self) }

/// Everything `drain` took for a connection: the frames' text, and how the last `takeOutput`
/// answered (`.frames(more: false)` after the last frame, `.idle` when there was none, `.close`).
struct Drained: Equatable {
    var frames: [String]
    var end: ConnectionTable.Output
    init(_ frames: [String], _ end: ConnectionTable.Output) { (self.frames, self.end) = (frames, end) }
}

/// Drains everything due for `id`, as the service thread would (any batch size).
func drain(_ t: inout ConnectionTable, _ id: ConnectionID, maxBytes: Int = 1 << 20) -> Drained {
    var out: [String] = []
    while true {
        var batch: [OutgoingFrame] = []
        let r = t.takeOutput(id, maxBytes: maxBytes, into: &batch)
        out += batch.map(text)
        switch r {
        case .frames(more: true): continue
        default: return Drained(out, r)
        }
    }
}

/// The one channel of the tests that need no other.
let ch = ChannelID(rawValue: 1)

struct ConnectionTableTests {
    @Test func pendingReceivesNothingThenActivateDeliversFirstAndLaterBroadcastsOnce() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.broadcast(f("b1"), seq: 1, on: ch)
        _ = t.broadcast(f("b2"), seq: 2, on: ch)
        #expect(drain(&t, a) == Drained([], .idle))
        _ = t.activate(a, on: ch, first: [f("welcome")], afterSeq: 1)
        _ = t.broadcast(f("b3"), seq: 3, on: ch)
        #expect(drain(&t, a) == Drained(["welcome", "b2", "b3"], .frames(more: false)))
        _ = t.broadcast(f("b4"), seq: 4, on: ch)
        #expect(drain(&t, a) == Drained(["b4"], .frames(more: false)))
        #expect(drain(&t, a) == Drained([], .idle))
    }

    @Test func activateCanReachBackBeforeTheConnectionOpened() {
        var t = ConnectionTable(queueLimit: 100)
        let other = t.open()!
        _ = t.activate(other, on: ch, first: [], afterSeq: 0)
        _ = t.broadcast(f("b1"), seq: 1, on: ch)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: 0)
        #expect(drain(&t, a) == Drained(["w", "b1"], .frames(more: false)))
    }

    @Test func sendIsOrderedAfterEarlierBroadcastsAndBeforeLaterOnes() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: 0)
        _ = t.broadcast(f("b1"), seq: 1, on: ch)
        _ = t.send(f("ack1"), to: a)
        _ = t.broadcast(f("b2"), seq: 2, on: ch)
        _ = t.send(f("ack2"), to: a)
        _ = t.send(f("ack2b"), to: a)
        #expect(drain(&t, a, maxBytes: 1) == Drained(["w", "b1", "ack1", "b2", "ack2", "ack2b"], .frames(more: false)))
    }

    @Test(arguments: [(0, ["w", "b1", "x", "b2"]), (1, ["w", "x", "b2"]), (5, ["w", "x"])])
    func sendWhilePendingFollowsFirst(afterSeq: Int, expected: [String]) {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.broadcast(f("b1"), seq: 1, on: ch)
        _ = t.send(f("x"), to: a)
        _ = t.broadcast(f("b2"), seq: 2, on: ch)
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: afterSeq)
        #expect(drain(&t, a) == Drained(expected, .frames(more: false)))
    }

    @Test func broadcastsAtOrBelowAfterSeqAreSkippedEvenWhenMadeLater() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: 3)
        _ = t.broadcast(f("b2"), seq: 2, on: ch)
        _ = t.broadcast(f("b3"), seq: 3, on: ch)
        _ = t.broadcast(f("b4"), seq: 4, on: ch)
        #expect(drain(&t, a) == Drained(["w", "b4"], .frames(more: false)))
    }

    @Test func activationAfterTheNeededBroadcastWasDroppedClosesTooSlow() {
        var t = ConnectionTable(queueLimit: 100)
        _ = t.broadcast(f("b1"), seq: 1, on: ch)  // nobody connected: dropped at once
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: 0)
        #expect(drain(&t, a) == Drained([], .close(.policyViolation, "too slow")))
        let b = t.open()!
        _ = t.activate(b, on: ch, first: [f("w")], afterSeq: 1)
        #expect(drain(&t, b) == Drained(["w"], .frames(more: false)))
    }

    @Test func aConnectionFallingBehindIsClosedAndTheOthersKeepGoingWithBoundedMemory() {
        var t = ConnectionTable(queueLimit: 50)
        let slow = t.open()!, fast = t.open()!
        _ = t.activate(slow, on: ch, first: [], afterSeq: 0)
        _ = t.activate(fast, on: ch, first: [], afterSeq: 0)
        var fastGot: [String] = []
        for seq in 1...1000 {
            _ = t.broadcast(f("b\(seq)"), seq: seq, on: ch)
            fastGot += drain(&t, fast).frames
            #expect(t.retainedLogCount(on: ch) <= 50 + 50 / 8 + 1)
        }
        #expect(fastGot == (1...1000).map { "b\($0)" })
        #expect(drain(&t, slow) == Drained([], .close(.policyViolation, "too slow")))
        let work = t.takeWakeWork()
        #expect(work.closing == [slow])
        #expect(t.remove(slow).map { [$0.code: $0.reason] } == [.policyViolation: "too slow"])
        #expect(t.count == 1)
    }

    @Test func directSendsCountTowardTheLimitButWelcomeFramesDoNot() {
        var t = ConnectionTable(queueLimit: 3)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: (1...10).map { f("r\($0)") }, afterSeq: 0)
        _ = t.send(f("x1"), to: a)
        _ = t.send(f("x2"), to: a)
        _ = t.send(f("x3"), to: a)
        #expect(t.backlog(of: a) == 3)
        if case .closing = t.state(of: a)! { Issue.record("closed too early") }
        _ = t.send(f("x4"), to: a)
        #expect(drain(&t, a) == Drained([], .close(.policyViolation, "too slow")))
    }

    @Test func closeSendsWhatWasQueuedFirstThenTheCloseAndNothingAfter() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: 0)
        _ = t.broadcast(f("b1"), seq: 1, on: ch)
        _ = t.send(f("err"), to: a)
        _ = t.close(a, code: .policyViolation, reason: "bye")
        _ = t.broadcast(f("b2"), seq: 2, on: ch)
        _ = t.send(f("late"), to: a)
        #expect(drain(&t, a, maxBytes: 1) == Drained(["w", "b1", "err"], .close(.policyViolation, "bye")))
    }

    @Test func shutdownClosesEveryoneAtOnceRefusesNewAndEndsWhenEmpty() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!, b = t.open()!
        _ = t.activate(a, on: ch, first: [f("w")], afterSeq: 0)
        _ = t.takeWakeWork()
        #expect(t.beginShutdown(code: .goingAway, reason: "server stopping") == true)
        #expect(t.open() == nil)
        #expect(!t.shouldExit)
        #expect(drain(&t, a) == Drained([], .close(.goingAway, "server stopping")))
        #expect(drain(&t, b) == Drained([], .close(.goingAway, "server stopping")))
        #expect(Set(t.takeWakeWork().closing) == [a, b])
        _ = t.remove(a)
        _ = t.remove(b)
        #expect(t.shouldExit)
    }

    @Test func wakeUpsAreCoalescedUntilTheServiceThreadTakesTheWork() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        #expect(t.activate(a, on: ch, first: [f("w")], afterSeq: 0) == true)
        #expect(t.broadcast(f("b1"), seq: 1, on: ch) == false)
        #expect(t.send(f("x"), to: a) == false)
        let work = t.takeWakeWork()
        #expect((work.writableAll, work.writable, work.closing) == (true, [a], []))
        #expect(t.broadcast(f("b2"), seq: 2, on: ch) == true)
        t.markStopped()
        #expect(t.send(f("y"), to: a) == false)
    }

    @Test func batchesRespectTheByteBudgetButAlwaysTakeOneFrame() {
        var t = ConnectionTable(queueLimit: 100)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [], afterSeq: 0)
        let big = String(repeating: "x", count: 300)
        for seq in 1...5 { _ = t.broadcast(f(big), seq: seq, on: ch) }
        var batch: [OutgoingFrame] = []
        #expect(t.takeOutput(a, maxBytes: 700, into: &batch) == .frames(more: true))
        #expect(batch.count == 2)
        batch = []
        #expect(t.takeOutput(a, maxBytes: 10, into: &batch) == .frames(more: true))
        #expect(batch.count == 1)
        batch = []
        #expect(t.takeOutput(a, maxBytes: 10_000, into: &batch) == .frames(more: false))
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
