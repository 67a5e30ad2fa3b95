import Foundation
import JetStream
import Locking
import Testing

/// tabd's own ordered consumer against a real NATS server.
@Suite(.timeLimit(.minutes(1)))
struct OrderedSubscriptionTests {
    @Test func aConsumerOfAStreamThatDoesNotExistFailsToStartWithoutATrap() throws {
        let server = try EngineServer()
        defer { server.stop() }
        let client = try EngineClient(urls: [server.url], name: "follow")
        defer { client.close() }
        #expect(throws: EngineError.self) {
            _ = try client.subscribeOrdered(stream: "NONE", subject: "none.room", startSeq: 1, headerKeys: []) { _ in }
        }
    }

    @Test func everyMessageFromTheStartIsDeliveredOnceInStreamOrder() async throws {
        let server = try EngineServer()
        defer { server.stop() }
        let client = try EngineClient(urls: [server.url], name: "follow")
        defer { client.close() }
        _ = try client.ensureStream(name: "FOLLOW", subjects: ["follow.room"], replicas: 1)
        for i in 1...5 {
            #expect(client.publish(subject: "follow.room", data: [UInt8(i)], headers: [("Tabd-Node", "n\(i)")]) == .stored(seq: UInt64(i), duplicate: false))
        }
        let seen = Locked<[(UInt64, [UInt8], String?)]>([])
        let sub = try client.subscribeOrdered(stream: "FOLLOW", subject: "follow.room", startSeq: 3, headerKeys: ["Tabd-Node"]) { m in
            seen.withLock { $0.append((m.streamSeq, m.data, m.headers["Tabd-Node"])) }
        }
        defer { sub.cancel() }
        for i in 6...8 { _ = client.publish(subject: "follow.room", data: [UInt8(i)]) }
        let deadline = Date().addingTimeInterval(10)
        while seen.withLock({ $0.count }) < 6, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let got = seen.withLock { $0 }
        #expect(got.map(\.0) == [3, 4, 5, 6, 7, 8])
        #expect(got.map(\.1) == [[3], [4], [5], [6], [7], [8]])
        #expect(got.prefix(3).map(\.2) == ["n3", "n4", "n5"])
    }
}
