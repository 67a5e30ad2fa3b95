import Auth
import Foundation
import Testing

/// Webhook signatures as the Standard Webhooks convention computes them: its published
/// example, two secrets while one is rotated, and what a receiver refuses.
@Suite struct WebhookSignatureTests {
    /// The convention's own example (its libraries' tests use it).
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    static let id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    static let timestamp = 1_614_265_330
    static let body = Array(#"{"test": 2432232314}"#.utf8)

    @Test func theConventionsExampleSignsAsItSays() throws {
        let signer = WebhookSigner(secrets: [try .init(text: Self.secret, source: "test")])
        let headers = signer.headers(id: Self.id, timestamp: Self.timestamp, body: Self.body)
        #expect(headers.map(\.0) == ["webhook-id", "webhook-timestamp", "webhook-signature"])
        #expect(headers[1].1 == "1614265330")
        #expect(headers[2].1 == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test func whileASecretIsRotatedEachSignsAndAReceiverOfEitherAccepts() throws {
        let old = try WebhookSigner.Secret(text: Self.secret, source: "old")
        let new = try WebhookSigner.Secret(text: "whsec_" + Data((0..<32).map { UInt8($0) }).base64EncodedString(), source: "new")
        let signature = WebhookSigner(secrets: [new, old]).headers(id: Self.id, timestamp: Self.timestamp, body: Self.body)[2].1
        #expect(signature.split(separator: " ").count == 2)
        let now = Double(Self.timestamp)
        for secrets in [[old], [new], [old, new]] {
            #expect(WebhookSigner.refusal(id: Self.id, timestamp: "1614265330", signature: signature, body: Self.body, secrets: secrets, now: now) == nil)
        }
    }

    @Test func aReceiverRefusesAForgedBodyAnotherSecretAStaleTimeAndMissingHeaders() throws {
        let secret = try WebhookSigner.Secret(text: Self.secret, source: "test")
        let good = WebhookSigner(secrets: [secret]).headers(id: Self.id, timestamp: Self.timestamp, body: Self.body)[2].1
        let now = Double(Self.timestamp) + 10
        func refusal(id: String? = Self.id, timestamp: String? = "1614265330", signature: String? = nil, body: [UInt8] = Self.body,
                     now: Double = now) -> String? {
            WebhookSigner.refusal(id: id, timestamp: timestamp, signature: signature ?? good, body: body, secrets: [secret], now: now)
        }
        #expect(refusal() == nil)
        #expect(refusal(body: Array(#"{"test": 2432232315}"#.utf8)) == "no signature matches")
        #expect(refusal(id: "msg_other") == "no signature matches")
        #expect(refusal(timestamp: "1614265331") == "no signature matches")
        #expect(refusal(now: Double(Self.timestamp) + 301) == "webhook-timestamp is more than 300 s from now")
        #expect(refusal(signature: "v2," + good.dropFirst(3)) == "no signature matches", "only v1 is read")
        #expect(refusal(id: nil) == "a header is missing")
        #expect(refusal(timestamp: "soon") == "webhook-timestamp is not a number")
        let other = try WebhookSigner.Secret(text: String(repeating: "k", count: 32), source: "other")
        #expect(WebhookSigner.refusal(id: Self.id, timestamp: "1614265330", signature: good, body: Self.body, secrets: [other], now: now)
                == "no signature matches")
    }

    @Test func aSecretFileHoldsOneOrTwoSecretsOfTheRightLength() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-whsec-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func load(_ text: String) -> Result<Int, SigningKey.Error> {
            let path = dir.appendingPathComponent("s").path
            _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
            return Result { () throws(SigningKey.Error) in try WebhookSigner.load(path: path).secrets.count }
        }
        #expect(try load("\(Self.secret)\n").get() == 1)
        #expect(try load("# rotating\n\(Self.secret)\n\(String(repeating: "x", count: 40))\n").get() == 2)
        #expect(throws: SigningKey.Error.self) { try load("").get() }
        #expect(throws: SigningKey.Error.self) { try load("short\n").get() }
        #expect(throws: SigningKey.Error.self) { try load("whsec_!!!\n").get() }
        #expect(throws: SigningKey.Error.self) { try load("\(Self.secret)\n\(Self.secret)\n\(Self.secret)\n").get() }
    }
}
