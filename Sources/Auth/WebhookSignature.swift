import FoundationEssentials
import Glibc
import Dispatch
import Portable

/// Webhook requests signed as the Standard Webhooks convention has it
/// (https://www.standardwebhooks.com): the headers `webhook-id`, `webhook-timestamp`
/// (seconds since 1970) and `webhook-signature`, a space-separated list of `v1,BASE64`, each
/// the HMAC-SHA256 of `ID.TIMESTAMP.BODY` under one secret. A receiver recomputes it with
/// the secret it was given, accepts the request when one signature matches (compared in
/// constant time), and refuses a timestamp too far from its clock (a replay).
public struct WebhookSigner: Sendable {
    /// A secret: at least 24 bytes (192 bits) and at most 64, as the convention asks.
    public struct Secret: Sendable, Equatable {
        public static let minimumLength = 24
        public static let maximumLength = 64

        public let bytes: [UInt8]

        /// `whsec_` and the base64 of the key (the convention's form), or the key's bytes as
        /// they are.
        public init(text: String, source: String) throws(SigningKey.Error) {
            var bytes = Array(text.utf8)
            if text.hasPrefix("whsec_") {
                guard let decoded = Data(base64Encoded: String(text.dropFirst(6))) else {
                    throw SigningKey.Error(description: "\(source): what follows whsec_ is not base64")
                }
                bytes = Array(decoded)
            }
            guard (Self.minimumLength...Self.maximumLength).contains(bytes.count) else {
                throw SigningKey.Error(description: "\(source) holds a secret of \(bytes.count) bytes; a webhook secret has \(Self.minimumLength) to \(Self.maximumLength)")
            }
            self.bytes = bytes
        }
    }

    /// Every secret signs: the first is the current one, a second one is the one being
    /// rotated in or out (receivers that know either accept the request).
    public let secrets: [Secret]

    public init(secrets: [Secret]) {
        precondition(!secrets.isEmpty, "a signer needs a secret")
        self.secrets = secrets
    }

    /// The secrets of `path`: one per line (blank lines and lines starting with `#` are
    /// passed over), one or two of them.
    public static func load(path: String) throws(SigningKey.Error) -> WebhookSigner {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw SigningKey.Error(description: "cannot read the webhook secret file '\(path)': \(SigningKey.reason(error))")
        }
        let lines = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingWhitespace }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        guard (1...2).contains(lines.count) else {
            throw SigningKey.Error(description: "the webhook secret file '\(path)' holds \(lines.count) secrets; it holds one, or two while one is rotated")
        }
        var secrets: [Secret] = []
        for (n, line) in lines.enumerated() { secrets.append(try Secret(text: line, source: "line \(n + 1) of the webhook secret file '\(path)'")) }
        return WebhookSigner(secrets: secrets)
    }

    /// The signing headers of one request: its id (the same on every retry of it), its
    /// time, and a signature per secret.
    public func headers(id: String, timestamp: Int, body: [UInt8]) -> [(String, String)] {
        [("webhook-id", id), ("webhook-timestamp", String(timestamp)), ("webhook-signature", Self.signatures(id: id, timestamp: timestamp, body: body, secrets: secrets))]
    }

    static func signatures(id: String, timestamp: Int, body: [UInt8], secrets: [Secret]) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        return secrets.map { "v1," + Data(Crypto.hmacSHA256(key: $0.bytes, message: content)).base64EncodedString() }.joined(separator: " ")
    }

    /// Why a receiver refuses a request, or nil when one of its signatures is one of
    /// `secrets`' and its timestamp is within `tolerance` seconds of `now`.
    public static func refusal(id: String?, timestamp: String?, signature: String?, body: [UInt8], secrets: [Secret],
                               now: Double, tolerance: Double = 300) -> String? {
        guard let id, !id.isEmpty, let timestamp, let signature else { return "a header is missing" }
        guard let seconds = Int(timestamp) else { return "webhook-timestamp is not a number" }
        guard abs(Double(seconds) - now) <= tolerance else { return "webhook-timestamp is more than \(Int(tolerance)) s from now" }
        let expected = Set(signatures(id: id, timestamp: seconds, body: body, secrets: secrets).split(separator: " ").map(String.init))
        let given = signature.split(separator: " ").map(String.init).filter { $0.hasPrefix("v1,") }
        let matches = given.contains { candidate in expected.contains { Crypto.constantTimeEqual(Array($0.utf8), Array(candidate.utf8)) } }
        return matches ? nil : "no signature matches"
    }
}
