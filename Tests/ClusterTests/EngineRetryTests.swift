import Foundation
import JetStream
import Testing

/// A retry of a publish whose first attempt was stored, sent with the same message id and
/// its now stale expected last sequence (what a node sends when the first answer was lost):
/// NATS 2.9 answers "duplicate" with the original place, NATS 2.15.1 on a stream of one
/// replica answers "wrong last sequence". Either way the node must learn that its
/// message landed, which it does by reading the message at the expected place
/// (``EngineClient/holds(msgID:at:in:)``), as ClusterRoom and room creation do.
@Suite(.timeLimit(.minutes(1)))
struct EngineRetryTests {
    @Test func aRetriedMessageThatWasStoredIsFoundAtItsPlaceWhateverTheServerAnswers() throws {
        let server = try EngineServer()
        defer { server.stop() }
        let client = try EngineClient(urls: [server.url], name: "retry")
        defer { client.close() }
        _ = try client.ensureStream(name: "RETRY", subjects: ["retry.room"], replicas: 1)
        #expect(client.publish(subject: "retry.room", data: [1], expectedLastSeq: 0, msgID: "n1-1") == .stored(seq: 1, duplicate: false))
        let retry = client.publish(subject: "retry.room", data: [1], expectedLastSeq: 0, msgID: "n1-1")
        if server.version.lexicographicallyPrecedes([2, 10]) {
            #expect(retry == .stored(seq: 1, duplicate: true))
        } else if !server.version.lexicographicallyPrecedes([2, 15]) {
            #expect(retry == .wrongLastSequence)
        }
        #expect(try client.holds(msgID: "n1-1", at: 1, in: "RETRY"))
        // Another writer's message at the place, or no message there: a conflict, not ours.
        #expect(try !client.holds(msgID: "n2-1", at: 1, in: "RETRY"))
        #expect(try !client.holds(msgID: "n1-1", at: 2, in: "RETRY"))
        #expect(try client.streamInfo("RETRY")?.messages == 1, "nothing was stored twice")
    }
}
