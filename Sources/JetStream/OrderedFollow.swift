/// What tabd's own ordered consumer makes of each message that reaches its inbox, as a
/// value (``OrderedSubscription`` performs it).
///
/// A consumer's inbox is a plain subject: anyone holding the engine's credentials can
/// learn it (`$JS.API.CONSUMER.INFO` names it) and publish into it. So nothing that arrives
/// there is obeyed, and what is delivered is only what fits the consumer's own count:
/// - a message is delivered only when its reply subject names this stream and this
///   consumer (`$JS.ACK.…`), with a consumer sequence exactly one past the last delivered
///   and a stream sequence past the last delivered (never 0);
/// - a consumer sequence already passed is a second message for one place: one of the two
///   was not the engine's. It is dropped and reported (``Verdict/duplicate(_:)``);
/// - a consumer sequence further on means messages were missed: the consumer is made
///   again from the stream sequence after the last delivered (``Verdict/reset(from:why:)``);
/// - a heartbeat (status 100) only says the consumer is alive. Nothing here ever answers:
///   not a flow-control request (the consumer is made without flow control), not a
///   heartbeat naming a subject (`Nats-Consumer-Stalled`), not any reply subject.
package struct OrderedFollow: Sendable {
    package let stream: String
    /// The consumer being followed (its name, chosen by tabd before it is made).
    package private(set) var consumer: String
    /// The consumer sequence the next message must have.
    package private(set) var nextConsumerSeq: UInt64 = 1
    /// The stream sequence of the last message delivered (the start's predecessor at first).
    package private(set) var lastStreamSeq: UInt64

    package enum Verdict: Equatable, Sendable {
        /// A message of the stream at `streamSeq`, with `pending` more after it.
        case deliver(streamSeq: UInt64, pending: UInt64)
        /// The consumer is alive; nothing to deliver.
        case heartbeat
        /// Not one of this consumer's messages (no or another reply subject, another
        /// consumer, a sequence of 0 or going backwards): passed over.
        case foreign(String)
        /// A second message at a consumer sequence already delivered: passed over, and
        /// worth a report (one of the two was put into the inbox by someone else).
        case duplicate(String)
        /// Messages were missed: follow again from this stream sequence.
        case reset(from: UInt64, why: String)
    }

    /// Following `stream` with the consumer `consumer` from stream sequence `startSeq` on.
    package init(stream: String, consumer: String, startSeq: UInt64) {
        self.stream = stream
        self.consumer = consumer
        self.lastStreamSeq = startSeq > 0 ? startSeq - 1 : 0
    }

    /// A new consumer follows from the stream sequence after the last delivered.
    package mutating func restart(consumer: String) {
        self.consumer = consumer
        nextConsumerSeq = 1
    }

    /// A new consumer follows from `seq` (when that is before the stream sequence after the
    /// last delivered): what was delivered from there on is delivered again.
    package mutating func restart(consumer: String, from seq: UInt64) {
        restart(consumer: consumer)
        if seq > 0, seq - 1 < lastStreamSeq { lastStreamSeq = seq - 1 }
    }

    /// The message that reached the inbox: its reply subject and its status header (`100`
    /// for a heartbeat or flow control).
    package mutating func judge(reply: String?, status: String?) -> Verdict {
        if let status {
            // A heartbeat carries no reply subject; flow control does, and is never
            // answered (the consumer has none): either way only a sign of life.
            return status == "100" ? .heartbeat : .foreign("a status message (\(status.prefix(8)))")
        }
        guard let reply, let place = Self.place(reply), place.stream == stream else {
            return .foreign("no reply subject of this stream's consumer")
        }
        guard place.consumer == consumer else { return .foreign("another consumer's reply subject") }
        guard place.streamSeq > 0, place.consumerSeq > 0 else { return .foreign("a sequence of 0") }
        if place.consumerSeq < nextConsumerSeq {
            return .duplicate("consumer sequence \(place.consumerSeq) delivered already (stream sequence \(place.streamSeq))")
        }
        if place.consumerSeq > nextConsumerSeq {
            return .reset(from: lastStreamSeq + 1, why: "consumer sequence \(place.consumerSeq) where \(nextConsumerSeq) was due")
        }
        guard place.streamSeq > lastStreamSeq else {
            return .duplicate("stream sequence \(place.streamSeq) at consumer sequence \(place.consumerSeq), after \(lastStreamSeq)")
        }
        nextConsumerSeq += 1
        lastStreamSeq = place.streamSeq
        return .deliver(streamSeq: place.streamSeq, pending: place.pending)
    }

    /// Where a consumer's reply subject says a message is: `$JS.ACK.STREAM.CONSUMER.
    /// DELIVERED.SSEQ.CSEQ.TIME.PENDING` or, with a domain and account,
    /// `$JS.ACK.DOMAIN.ACCOUNT.STREAM.CONSUMER.DELIVERED.SSEQ.CSEQ.TIME.PENDING[.…]`.
    package static func place(_ reply: String) -> (stream: String, consumer: String, streamSeq: UInt64, consumerSeq: UInt64, pending: UInt64)? {
        let tokens = reply.split(separator: ".", omittingEmptySubsequences: false)
        guard tokens.count >= 9, tokens[0] == "$JS", tokens[1] == "ACK" else { return nil }
        let base: Int
        switch tokens.count {
        case 9: base = 2
        case 12...: base = 4
        default: return nil
        }
        guard let sseq = UInt64(tokens[base + 3]), let cseq = UInt64(tokens[base + 4]), let pending = UInt64(tokens[base + 6]) else { return nil }
        return (String(tokens[base]), String(tokens[base + 1]), sseq, cseq, pending)
    }
}
