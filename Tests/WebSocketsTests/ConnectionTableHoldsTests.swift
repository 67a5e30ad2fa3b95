import Testing
@testable import WebSockets
@_spi(Engine) import WebSocketEngine

/// A frame of `n` payload bytes (on the wire: n + 2 below 126, n + 4 below 65,536).
private func sized(_ n: Int) -> OutgoingFrame { OutgoingFrame(String(repeating: "x", count: n)) }

private let tooSlow = ConnectionTable.Output.close(.policyViolation, ConnectionTable.tooSlowReason)

/// What the table counts besides WebSocket output: HTTP answers held for peers that do not
/// take them, and the frames a handler keeps for a connection until its welcome.
struct ConnectionTableHoldsTests {
    @Test func aHeldAnswerCountsInTheTotalUntilItIsReleased() {
        var t = ConnectionTable(queueLimit: 100, byteLimit: 10_000, totalByteLimit: 50_000)
        let wake = t.holdAnswer(socket: 7, bytes: 3_000)
        #expect(!wake, "under the total: nothing to do")
        #expect(t.heldBytes == 3_000 && t.answerBytes == 3_000)
        // Reported again (the same answer): counted once.
        _ = t.holdAnswer(socket: 7, bytes: 3_000)
        #expect(t.heldBytes == 3_000)
        t.releaseAnswer(socket: 7)
        t.releaseAnswer(socket: 7)
        #expect(t.heldBytes == 0 && t.answerBytes == 0)
        #expect(t.takeWakeWork().dropAnswers.isEmpty)
    }

    @Test func pastTheTotalTheLargestHoldersGoFirstAnswersAndWebSocketsAlikeAndAReaderNever() {
        var t = ConnectionTable(queueLimit: 1_000, byteLimit: 20_000, totalByteLimit: 10_000)
        let reader = t.open()!, sleeper = t.open()!
        for id in [reader, sleeper] { _ = t.activate(id, on: ch, first: [], afterSeq: 0) }
        _ = t.send(sized(4_000), to: reader)    // its socket takes what it is sent: never blocked
        _ = t.send(sized(2_000), to: sleeper)
        _ = t.setBlocked(sleeper, true, inFlight: 0)
        _ = t.holdAnswer(socket: 1, bytes: 1_000)
        _ = t.holdAnswer(socket: 2, bytes: 2_500)
        #expect(t.heldBytes == 4_004 + 2_004 + 3_500)
        #expect(t.takeWakeWork().dropAnswers.isEmpty, "under the total")
        // Over it: socket 2 holds the most (2,500 > 2,004), then the sleeper, then socket 1.
        let wakeToDrop = t.holdAnswer(socket: 3, bytes: 900)
        #expect(wakeToDrop, "a drop: the service thread must wake")
        // The service thread, which reported the hold, takes the drop at once.
        #expect(t.takeDroppedAnswers() == [2])
        var work = t.takeWakeWork()
        #expect(work.dropAnswers.isEmpty, "taken already")
        #expect(!t.isClosing(sleeper))
        #expect(t.heldBytes == 4_004 + 2_004 + 1_900)
        _ = t.send(sized(2_100), to: reader)
        work = t.takeWakeWork()
        #expect(t.isClosing(sleeper))
        #expect(work.dropAnswers.isEmpty)
        #expect(t.heldBytes == 6_108 + 1_900)
        _ = t.send(sized(3_500), to: reader)
        work = t.takeWakeWork()
        #expect(work.dropAnswers == [1, 3], "both answers go, the larger first; the reader stays")
        #expect(!t.isClosing(reader), "a connection that reads is never closed for the total")
        #expect(t.answerBytes == 0)
        #expect(t.heldBytes == t.countHeldBytes())
        // A dropped answer released again by the service thread (its socket closing): nothing changes.
        t.releaseAnswer(socket: 1)
        #expect(t.heldBytes == t.countHeldBytes())
    }

    @Test func earlyInputCountsTowardOneConnectionsByteLimitUntilItsWelcome() {
        var t = ConnectionTable(queueLimit: 100, byteLimit: 1_000)
        let a = t.open()!, b = t.open()!
        _ = t.holdEarly(a, bytes: 600)
        _ = t.holdEarly(b, bytes: 600)
        #expect(t.heldBytes == 1_200 && t.pendingBytes(of: a) == 600)
        // The welcome: what was kept is read now, and no longer counted.
        _ = t.activate(b, on: ch, first: [sized(100)], afterSeq: 0)
        #expect(t.pendingBytes(of: b) == 102)
        _ = t.holdEarly(b, bytes: 5_000)
        #expect(!t.isClosing(b), "ignored once welcomed")
        // Past the limit before its welcome: closed 1008 `too slow`, and nothing is counted.
        _ = t.holdEarly(a, bytes: 600)
        #expect(t.isClosing(a))
        #expect(drain(&t, a) == Drained([], tooSlow))
        #expect(t.heldBytes == 102 && t.heldBytes == t.countHeldBytes())
        _ = t.remove(a)
        _ = t.remove(b)
        #expect(t.heldBytes == 0)
    }

    @Test func earlyInputCountsInTheTotal() {
        var t = ConnectionTable(queueLimit: 100, byteLimit: 10_000, totalByteLimit: 5_000)
        let sleeper = t.open()!, early = t.open()!
        _ = t.activate(sleeper, on: ch, first: [], afterSeq: 0)
        _ = t.send(sized(3_000), to: sleeper)
        _ = t.setBlocked(sleeper, true, inFlight: 0)
        #expect(!t.isClosing(sleeper))
        _ = t.holdEarly(early, bytes: 2_500)
        #expect(t.isClosing(sleeper), "the total counts the early input: the blocked one goes")
        #expect(!t.isClosing(early))
        _ = t.remove(early)
        #expect(t.heldBytes == t.countHeldBytes())
    }
}

/// An answer written a piece at a time from its own storage.
struct AnswerOutputTests {
    @Test func aSmallAnswerIsOnePieceAndALargeOneTheHeadThenTheBodyInPieces() {
        var small = AnswerOutput(head: Array("HEAD".utf8), body: Array("body".utf8), joinBelow: 16)
        var writes: [String] = []
        while !small.isDone { _ = small.writeNext(max: 100) { writes.append(String(decoding: $0, as: UTF8.self)); return $0.count } }
        #expect(writes == ["HEADbody"])
        #expect(small.count == 8)

        var large = AnswerOutput(head: Array("HEAD".utf8), body: Array("0123456789".utf8), joinBelow: 8)
        writes = []
        while !large.isDone { _ = large.writeNext(max: 4) { writes.append(String(decoding: $0, as: UTF8.self)); return $0.count } }
        #expect(writes == ["HEAD", "0123", "4567", "89"])
    }

    @Test func aShortWriteResumesWhereItStoppedAndAFailedOneAdvancesNothing() {
        var answer = AnswerOutput(head: Array("H".utf8), body: Array("abcdef".utf8), joinBelow: 0)
        var writes: [String] = []
        _ = answer.writeNext(max: 10) { writes.append(String(decoding: $0, as: UTF8.self)); return $0.count }
        let failed = answer.writeNext(max: 10) { _ in -1 }
        #expect(failed == -1)
        _ = answer.writeNext(max: 10) { writes.append(String(decoding: $0, as: UTF8.self)); return 2 }
        _ = answer.writeNext(max: 10) { writes.append(String(decoding: $0, as: UTF8.self)); return $0.count }
        #expect(writes == ["H", "abcdef", "cdef"])
        #expect(answer.isDone)
        #expect(AnswerOutput(head: Array("H".utf8), body: [], joinBelow: 0).count == 1)
    }
}
