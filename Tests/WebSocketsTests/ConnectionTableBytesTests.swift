import Testing
@testable import WebSockets
@_spi(Engine) import WebSocketEngine

/// A frame of `n` payload bytes (on the wire: n + 2 below 126, n + 4 below 65,536).
private func sized(_ n: Int, _ tag: Character = "x") -> OutgoingFrame { OutgoingFrame(String(repeating: tag, count: n)) }

private let tooSlow = ConnectionTable.Output.close(.policyViolation, ConnectionTable.tooSlowReason)

/// The bounds in bytes: one connection's, and every connection's together.
struct ConnectionTableBytesTests {
    @Test func directFramesPastTheByteLimitCloseTheConnectionTooSlow() {
        var t = ConnectionTable(queueLimit: 1_000, byteLimit: 1_000)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [], afterSeq: 0)
        // Four snapshots of 300 bytes: 1,216 bytes on the wire, few frames.
        for _ in 0..<3 { _ = t.send(sized(300), to: a) }
        #expect(!t.isClosing(a))
        _ = t.send(sized(300), to: a)
        #expect(t.isClosing(a))
        var frames: [OutgoingFrame] = []
        #expect(t.takeOutput(a, maxBytes: 1 << 20, into: &frames) == tooSlow)
        #expect(frames.isEmpty)
        #expect(t.heldBytes == 0, "a closed connection's frames are dropped at once")
    }

    @Test func oneFrameLargerThanTheByteLimitStillGoesOut() {
        var t = ConnectionTable(queueLimit: 1_000, byteLimit: 1_000)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [], afterSeq: 0)
        _ = t.send(sized(5_000), to: a)
        #expect(!t.isClosing(a))
        #expect(drain(&t, a).frames.map(\.count) == [5_000])
        #expect(t.heldBytes == 0)
    }

    @Test func aMemberThatDoesNotReadBroadcastsIsClosedByBytesWhileAReaderGetsEverything() {
        var t = ConnectionTable(queueLimit: 1_000_000, byteLimit: 4_000)
        let reader = t.open()!, sleeper = t.open()!
        _ = t.activate(reader, on: ch, first: [], afterSeq: 0)
        _ = t.activate(sleeper, on: ch, first: [], afterSeq: 0)
        var got = 0
        for seq in 1...100 {
            _ = t.broadcast(sized(200), seq: seq, on: ch)
            got += drain(&t, reader).frames.count
        }
        #expect(got == 100)
        #expect(!t.isClosing(reader))
        #expect(t.isClosing(sleeper), "20 KB behind with a limit of 4 KB")
        _ = t.remove(sleeper)
        // Nobody needs the log any more: it is trimmed at the next sweep.
        for seq in 101...140 {
            _ = t.broadcast(sized(200), seq: seq, on: ch)
            _ = drain(&t, reader)
        }
        #expect(t.heldBytes <= 4_000 + 4_000 / 8 + 204)
        #expect(t.heldBytes == t.countHeldBytes())
    }

    @Test func theWelcomeAndReplayDoNotCountTowardOneConnectionsByteLimit() {
        var t = ConnectionTable(queueLimit: 1_000, byteLimit: 1_000)
        let a = t.open()!
        _ = t.activate(a, on: ch, first: [sized(900), sized(900), sized(900)], afterSeq: 0)
        _ = t.send(sized(100), to: a)
        #expect(!t.isClosing(a))
        #expect(t.pendingBytes(of: a) == 3 * 904 + 102)
        #expect(drain(&t, a).frames.count == 4)
    }

    @Test func pastTheTotalTheBlockedConnectionWithTheMostBytesIsClosedFirstAndAReaderNever() {
        var t = ConnectionTable(queueLimit: 1_000, byteLimit: 20_000, totalByteLimit: 12_000)
        let reader = t.open()!, small = t.open()!, big = t.open()!
        for id in [reader, small, big] { _ = t.activate(id, on: ch, first: [], afterSeq: 0) }
        _ = t.send(sized(5_000), to: reader)   // its socket takes everything: never blocked
        _ = t.send(sized(2_000), to: small)
        _ = t.send(sized(3_000), to: big)
        _ = t.setBlocked(small, true, inFlight: 500)
        _ = t.setBlocked(big, true, inFlight: 500)
        #expect(t.heldBytes == 5_004 + 2_004 + 3_004 + 1_000)
        #expect(![reader, small, big].contains { t.isClosing($0) }, "under the total")
        // More for the reader: over the total, and the biggest blocked one goes.
        _ = t.send(sized(2_000), to: reader)
        #expect(t.isClosing(big))
        #expect(!t.isClosing(small) && !t.isClosing(reader))
        #expect(t.heldBytes == 5_004 + 2_004 + 2_004 + 500)
        // Still over with only the reader left unblocked: the other blocked one goes too.
        _ = t.send(sized(3_000), to: reader)
        #expect(t.isClosing(small))
        #expect(!t.isClosing(reader), "a connection that reads is never closed for the total")
        #expect(t.heldBytes == t.countHeldBytes())
    }

    @Test func theTotalClosesNobodyWhenNobodyIsBlockedAndLooksAgainOnceSomeoneIs() {
        var t = ConnectionTable(queueLimit: 1_000, byteLimit: 10_000, totalByteLimit: 3_000)
        let a = t.open()!, b = t.open()!
        for id in [a, b] { _ = t.activate(id, on: ch, first: [], afterSeq: 0) }
        _ = t.send(sized(2_000), to: a)
        _ = t.send(sized(2_000), to: b)
        #expect(!t.isClosing(a) && !t.isClosing(b))
        _ = t.setBlocked(b, true, inFlight: 0)
        #expect(t.isClosing(b))
        #expect(!t.isClosing(a))
    }

    @Test func everyByteIsGivenBackWhenTheConnectionsAndTheChannelGo() {
        var t = ConnectionTable(queueLimit: 100, byteLimit: 1 << 20)
        let ids = (0..<5).map { _ in t.open()! }
        for id in ids { _ = t.activate(id, on: ch, first: [sized(300)], afterSeq: 0) }
        for seq in 1...20 { _ = t.broadcast(sized(50), seq: seq, on: ch) }
        for id in ids { _ = t.send(sized(70), to: id) }
        _ = t.setBlocked(ids[0], true, inFlight: 123)
        #expect(t.heldBytes == t.countHeldBytes())
        #expect(t.heldBytes > 0)
        _ = drain(&t, ids[1])
        _ = t.removeChannel(ch, code: .goingAway, reason: "bye")
        #expect(t.heldBytes == t.countHeldBytes())
        for id in ids { _ = t.remove(id) }
        #expect(t.heldBytes == 0)
    }
}
