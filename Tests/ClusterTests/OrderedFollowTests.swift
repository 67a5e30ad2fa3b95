import Testing
@testable import JetStream

/// What tabd's own ordered consumer takes from its inbox, which anyone holding the engine's
/// credentials can publish into: only the consumer's next message, nothing answered.
@Suite struct OrderedFollowTests {
    static func reply(_ sseq: UInt64, _ cseq: UInt64, consumer: String = "c1", stream: String = "S", pending: UInt64 = 0) -> String {
        "$JS.ACK.\(stream).\(consumer).1.\(sseq).\(cseq).1796597702570224796.\(pending)"
    }

    @Test func messagesAreDeliveredAtTheConsumersNextSequenceOnly() {
        var f = OrderedFollow(stream: "S", consumer: "c1", startSeq: 5)
        #expect(f.judge(reply: Self.reply(5, 1, pending: 2), status: nil) == .deliver(streamSeq: 5, pending: 2))
        #expect(f.judge(reply: Self.reply(6, 2), status: nil) == .deliver(streamSeq: 6, pending: 0))
        // A second message for consumer sequence 2: one of the two was not the engine's.
        if case .duplicate = f.judge(reply: Self.reply(7, 2), status: nil) {} else { Issue.record("a second message at one place was taken") }
        // Further on: something was missed; followed again from after the last delivered.
        #expect(f.judge(reply: Self.reply(9, 4), status: nil) == .reset(from: 7, why: "consumer sequence 4 where 3 was due"))
        #expect(f.lastStreamSeq == 6 && f.nextConsumerSeq == 3)
        f.restart(consumer: "c2")
        if case .foreign = f.judge(reply: Self.reply(7, 1), status: nil) {} else { Issue.record("the old consumer's message was taken") }
        #expect(f.judge(reply: Self.reply(7, 1, consumer: "c2"), status: nil) == .deliver(streamSeq: 7, pending: 0))
    }

    @Test func whatIsNotThisConsumersMessageIsPassedOverAndNothingIsAnswered() {
        var f = OrderedFollow(stream: "S", consumer: "c1", startSeq: 1)
        for reply: String? in [nil, "attacker.fc", "_INBOX.x.1", "$JS.API.STREAM.PURGE.S", Self.reply(1, 1, stream: "T"),
                               Self.reply(1, 1, consumer: "c9"), Self.reply(0, 1), Self.reply(1, 0), "$JS.ACK.S.c1.1.x.1.0.0", "$JS.ACK.S.c1.1.1"] {
            if case .foreign = f.judge(reply: reply, status: nil) {} else { Issue.record("taken: \(reply ?? "no reply")") }
        }
        // A heartbeat or a flow-control request is only a sign of life, whatever it names.
        #expect(f.judge(reply: "attacker.fc", status: "100") == .heartbeat)
        #expect(f.judge(reply: nil, status: "100") == .heartbeat)
        if case .foreign = f.judge(reply: nil, status: "503") {} else { Issue.record("a 503 was taken") }
        #expect(f.nextConsumerSeq == 1 && f.lastStreamSeq == 0, "nothing moved")
        #expect(f.judge(reply: Self.reply(1, 1), status: nil) == .deliver(streamSeq: 1, pending: 0))
        // A stream sequence that does not go forward is not the engine's.
        if case .duplicate = f.judge(reply: Self.reply(1, 2), status: nil) {} else { Issue.record("a place going backwards was taken") }
    }

    @Test func replySubjectsWithADomainAndAccountAreRead() {
        let place = OrderedFollow.place("$JS.ACK.hub.ACCHASH.S.c1.3.42.7.1796597702570224796.5.tok")
        #expect(place?.stream == "S" && place?.consumer == "c1" && place?.streamSeq == 42 && place?.consumerSeq == 7 && place?.pending == 5)
        #expect(OrderedFollow.place("$JS.ACK.S.c1.3.42.7.0") == nil, "too few tokens")
    }
}
