import FoundationEssentials
import Glibc
import Dispatch
import Portable

/// The secret a cluster's nodes share (`--cluster-secret-file`), and the seals it makes:
/// an HMAC-SHA256 over everything a message's receiver acts on, so that holding the
/// engine's credentials is not enough to act as a node.
///
/// - **Several keys, for rotation.** The file holds one key per line (at least 32 bytes
///   each; blank lines and lines starting with `#` are skipped). The first key seals;
///   every key opens. Rotating: add the new key second on every node, then move it first
///   on every node, then drop the old one.
/// - **One key per purpose.** Each secret key yields a key for each ``Purpose`` by HKDF
///   (RFC 5869, SHA-256, the purpose's label as its info), so that a seal made for one
///   kind of message never opens another kind.
/// - **Bound to its place.** A seal covers its purpose, the given fields (the subject, the
///   room, the position the message expects to follow: whatever makes it this message and
///   not a copy moved elsewhere), each length-prefixed so that no two lists of fields
///   read alike, and the body.
///
/// A seal reads `VERSION.KEYID.MAC`: KEYID names the key (16 hex digits, derived from it,
/// so the secret is not revealed) and MAC is the 64 hex digits of the HMAC. The version
/// names what the fields are (the caller's) and is in the MAC's label, so a seal of one
/// version never opens as another: `v1` for everything until room lives were bound, `v2`
/// for a room's stream messages from then on (``lifeBoundVersion``).
public struct ClusterSecret: Sendable {
    /// What a sealed message is: each has its own key.
    public enum Purpose: String, Sendable, CaseIterable {
        /// A room's batches in its stream.
        case batch
        /// A command forwarded to a room's writer.
        case forward
        /// A writer's answer to a forwarded command.
        case answer
        /// A node's heartbeat.
        case heartbeat
        /// A room's deletion notice.
        case deletion
        /// A room's snapshot, kept in the engine for nodes that load the room.
        case snapshot
        /// The cluster's shard layout: how many shards, and the key that maps rooms to them.
        case layout
        /// Which node delivers a shard's events to a webhook, and how far it has delivered.
        case webhook
    }

    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// One secret key: its id and its key per purpose.
    struct Key: Sendable {
        let id: String
        let purposes: [Purpose: [UInt8]]
    }

    /// How every seal begins unless another version is asked for.
    public static let version = "v1"
    /// The version of a room's stream messages whose fields bind the room's life (its
    /// epoch) and tell an absent field from an empty one.
    public static let lifeBoundVersion = "v2"
    /// The versions this build seals and opens.
    public static let versions: Set<String> = [version, lifeBoundVersion]
    static let label = "tabd cluster seal v1"

    /// The MAC's label of a version (v1's is also the key derivation's salt).
    static func label(_ version: String) -> String { "tabd cluster seal \(version)" }

    /// The first seals; all open.
    let keys: [Key]

    /// The secret of the given keys, the first sealing; each at least
    /// ``SigningKey/minimumLength`` bytes.
    public init(keys secrets: [[UInt8]], source: String) throws(Error) {
        guard !secrets.isEmpty else { throw Error(description: "\(source) holds no key") }
        var keys: [Key] = []
        for (n, secret) in secrets.enumerated() {
            guard secret.count >= SigningKey.minimumLength else {
                throw Error(description: "key \(n + 1) of \(source) holds \(secret.count) bytes; a key needs at least \(SigningKey.minimumLength)")
            }
            // HKDF-Extract with the label as salt, then one block of HKDF-Expand per use.
            let pseudorandom = Crypto.hmacSHA256(key: Array(Self.label.utf8), message: secret)
            func expand(_ info: String) -> [UInt8] { Crypto.hmacSHA256(key: pseudorandom, message: Array(info.utf8) + [1]) }
            let id = expand("key id").prefix(8)
            var purposes: [Purpose: [UInt8]] = [:]
            for purpose in Purpose.allCases { purposes[purpose] = expand(purpose.rawValue) }
            keys.append(Key(id: Self.hex(Array(id)), purposes: purposes))
        }
        guard Set(keys.map(\.id)).count == keys.count else { throw Error(description: "\(source) holds the same key twice") }
        self.keys = keys
    }

    /// The keys in `path`, one per line (see the type's documentation).
    public static func load(path: String) throws(Error) -> ClusterSecret {
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw Error(description: "cannot read the cluster secret file '\(path)': \(SigningKey.reason(error))")
        }
        let lines = text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
            .map { $0.trimmingWhitespace }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        return try ClusterSecret(keys: lines.map { Array($0.utf8) }, source: "the cluster secret file '\(path)'")
    }

    /// Whether `key` is one of this secret's keys (to refuse a cluster secret that shares a
    /// key with the tokens' signing key).
    public func contains(key: [UInt8]) -> Bool {
        guard let other = try? ClusterSecret(keys: [key], source: "") else { return false }
        return keys.contains { $0.id == other.keys[0].id }
    }

    /// Whether `key` (a signing key of tokens) is one of this secret's keys.
    public func contains(_ key: SigningKey) -> Bool { contains(key: key.bytes) }

    /// The id of the key that seals.
    public var sealingKeyID: String { keys[0].id }

    /// The seal of a message for `purpose`, over `fields` and `body`, with the first key.
    public func seal(_ purpose: Purpose, fields: [String], body: [UInt8], version: String = ClusterSecret.version) -> String {
        let key = keys[0]
        return "\(version).\(key.id).\(Self.hex(Self.mac(key, purpose, fields, body, version: version)))"
    }

    /// The version a seal names, if it is one this build opens.
    public func version(of seal: String) -> String? {
        guard let dot = seal.firstIndex(of: ".") else { return nil }
        let version = String(seal[..<dot])
        return Self.versions.contains(version) ? version : nil
    }

    /// Whether `seal` is one of this secret's keys' seal of the same purpose, fields and
    /// body. Compared in constant time; a malformed seal or an unknown key opens nothing.
    /// The seal must be of `version`.
    public func opens(_ seal: String, _ purpose: Purpose, fields: [String], body: [UInt8], version: String = ClusterSecret.version) -> Bool {
        let parts = seal.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == version, Self.versions.contains(version), let given = Self.bytes(hex: parts[2]), given.count == 32,
              let key = keys.first(where: { $0.id == parts[1] }) else { return false }
        return Crypto.constantTimeEqual(Self.mac(key, purpose, fields, body, version: version), given)
    }

    /// Which key sealed `seal` (its id), if it is one of this secret's: for logs and for
    /// knowing when every node seals with a new key.
    public func keyID(of seal: String) -> String? {
        let parts = seal.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, Self.versions.contains(String(parts[0])) else { return nil }
        return keys.first { $0.id == parts[1] }?.id
    }

    /// HMAC-SHA256 under the key's `purpose` key of: the label, the purpose, the number of
    /// fields, each field's length and bytes, the body's length and bytes (lengths as 8
    /// big-endian bytes).
    static func mac(_ key: Key, _ purpose: Purpose, _ fields: [String], _ body: [UInt8], version: String = ClusterSecret.version) -> [UInt8] {
        var message = Array(Self.label(version).utf8)
        func append(_ bytes: [UInt8]) {
            withUnsafeBytes(of: UInt64(bytes.count).bigEndian) { message.append(contentsOf: $0) }
            message.append(contentsOf: bytes)
        }
        append(Array(purpose.rawValue.utf8))
        withUnsafeBytes(of: UInt64(fields.count).bigEndian) { message.append(contentsOf: $0) }
        for field in fields { append(Array(field.utf8)) }
        append(body)
        return Crypto.hmacSHA256(key: key.purposes[purpose]!, message: message)
    }

    static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

    static func bytes<S: StringProtocol>(hex: S) -> [UInt8]? {
        let utf8 = Array(hex.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var i = 0
        while i < utf8.count {
            guard let hi = value(utf8[i]), let lo = value(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}
