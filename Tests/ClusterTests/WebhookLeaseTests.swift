import Auth
import Testing
@testable import Cluster
@testable import JetStream

/// What a cluster's webhook delivery reads and writes in the engine: its lease record
/// (sealed for its webhook and shard only), the time the engine stored a message (the same
/// on every node, so an event posted again after a failover has the same body), and the
/// subjects a shard's direct get may answer.
@Suite struct WebhookLeaseTests {
    static let trust = EngineTrust(secret: try! ClusterSecret(keys: [Array(String(repeating: "w", count: 40).utf8)], source: "test"))

    @Test func aLeaseReadsBackAsItWasWritten() throws {
        let lease = WebhookLease(node: "n1", incarnation: "i1", streamCreated: 1_796_662_190_911_824_367, cursor: 18_446_744_073_709_551_615)
        #expect(try WebhookLease(bytes: lease.bytes) == lease)
        #expect(throws: (any Error).self) { try WebhookLease(bytes: Array(#"{"node":"n1","incarnation":"i1","cursor":1}"#.utf8)) }
    }

    @Test func aLeaseIsSealedForItsWebhookAndShardOnly() {
        let body = WebhookLease(node: "n1", incarnation: "i1", streamCreated: 7, cursor: 42).bytes
        let subject = WebhookLease.subject(webhook: "00112233aabbccdd", shard: 3)
        let seal = Self.trust.sealHook(subject: subject, body: body)
        #expect(Self.trust.judgeHook(seal: seal, subject: subject, body: body) == .sealed)
        #expect(Self.trust.judgeHook(seal: seal, subject: WebhookLease.subject(webhook: "00112233aabbccdd", shard: 4), body: body) == .forged)
        #expect(Self.trust.judgeHook(seal: seal, subject: subject, body: WebhookLease(node: "n1", incarnation: "i1", streamCreated: 7, cursor: 43).bytes) == .forged)
        #expect(Self.trust.judgeHook(seal: nil, subject: subject, body: body) == .unsigned)
        // Another purpose's seal over the same fields does not open as a lease's.
        #expect(Self.trust.judgeHook(seal: Self.trust.sealSnapshot(subject: subject, body: body), subject: subject, body: body) == .forged)
    }

    @Test func theEnginesTimeReadsToTheMillisecondAndNothingElseReads() throws {
        let t = try #require(ShardEventReader.seconds(rfc3339: "2026-12-07T17:40:01.123456789Z"))
        #expect(abs(t - 1_796_665_201.123456789) < 1e-6)
        #expect(ShardEventReader.seconds(rfc3339: "2026-12-07T17:40:01Z") == 1_796_665_201)
        #expect(ShardEventReader.seconds(rfc3339: "2026-12-07T17:40:01.5+01:00") == nil)
        #expect(ShardEventReader.seconds(rfc3339: "yesterday") == nil)
    }

    @Test func aShardsFilterMatchesItsRoomsSubjectsOnly() {
        #expect(EngineClient.subject("tabd.r.3.lobby", matches: "tabd.r.3.*"))
        #expect(EngineClient.subject("tabd.r.3.lobby", matches: "tabd.r.3.lobby"))
        #expect(EngineClient.subject("tabd.hook.a.1", matches: "tabd.hook.>"))
        #expect(!EngineClient.subject("tabd.r.31.lobby", matches: "tabd.r.3.*"))
        #expect(!EngineClient.subject("tabd.r.3.lobby.x", matches: "tabd.r.3.*"))
        #expect(!EngineClient.subject("tabd.r.3", matches: "tabd.r.3.*"))
        #expect(!EngineClient.subject("tabd.hook", matches: "tabd.hook.>"))
    }
}
