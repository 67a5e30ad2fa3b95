import TabdProtocol
import FoundationEssentials
import Glibc
import Dispatch

/// The algorithms of signed tokens tabd accepts (RFC 7518 names).
public enum TokenAlgorithm: String, Sendable, CaseIterable {
    /// HMAC-SHA256 under a shared secret.
    case hs256 = "HS256"
    /// ECDSA on P-256 with SHA-256; the signature is `r‖s` (64 bytes).
    case es256 = "ES256"
    /// RSASSA-PKCS1-v1_5 with SHA-256, RSA keys of at least 2,048 bits.
    case rs256 = "RS256"
}

/// One key that may sign tokens, bound to one algorithm, with its id (`kid`) and the
/// issuer and audience its tokens must name.
public struct VerificationKey: Sendable {
    public enum Material: Sendable {
        case secret([UInt8])
        case asymmetric(AsymmetricKey)
    }

    /// The `kid` a token names it by; nil for the `--auth-secret-file` key.
    public var id: String?
    public var material: Material
    /// When set, a token checked with this key needs `"iss"` equal to it.
    public var issuer: String?
    /// When set, a token checked with this key needs `"aud"` equal to it (or, an array,
    /// holding it).
    public var audience: String?

    public init(id: String?, material: Material, issuer: String? = nil, audience: String? = nil) {
        self.id = id; self.material = material; self.issuer = issuer; self.audience = audience
    }

    public init(_ key: SigningKey, id: String? = nil) { self.init(id: id, material: .secret(key.bytes)) }

    public var algorithm: TokenAlgorithm {
        switch material {
        case .secret: .hs256
        case let .asymmetric(key): key.algorithm
        }
    }
}

/// Every key signed tokens are checked with, and how: the clock leeway and the issuer and
/// audience required of every token (a key may name its own instead).
public struct KeySet: Sendable {
    /// More keys than this in one set is a mistake, not a rotation.
    public static let maxKeys = 64
    /// The largest clock leeway tabd accepts, in seconds.
    public static let maxLeeway = 10.0

    public var keys: [VerificationKey]
    /// Seconds a token is still taken after its `exp`, and already before its `nbf`.
    public var leeway: Double
    public var issuer: String?
    public var audience: String?

    public init(keys: [VerificationKey], leeway: Double = 0, issuer: String? = nil, audience: String? = nil) {
        self.keys = keys; self.leeway = leeway; self.issuer = issuer; self.audience = audience
    }

    /// The keys a token with this header is checked with: the key its `kid` names, else
    /// every HS256 key for an HS256 token (so tokens that name no key keep working beside a
    /// set; an HMAC costs about a microsecond), else the one key of its algorithm. A
    /// public-key token without `kid` facing several keys of its algorithm is refused
    /// unchecked: each check costs tens of microseconds, and a peer must not make tabd try
    /// them all for every token it sends.
    func candidates(alg: String, kid: String?) throws(AuthError) -> [VerificationKey] {
        guard let algorithm = TokenAlgorithm(rawValue: alg) else { throw .algorithm(alg) }
        if let kid {
            guard let key = keys.first(where: { $0.id == kid }) else { throw .unknownKey(kid) }
            guard key.algorithm == algorithm else { throw .algorithm(alg) }
            return [key]
        }
        let matching = keys.filter { $0.algorithm == algorithm }
        guard !matching.isEmpty else { throw .algorithm(alg) }
        guard algorithm == .hs256 || matching.count == 1 else {
            throw .malformed("the token names no kid, and \(matching.count) \(alg) keys could check it")
        }
        return matching
    }

    /// The key set in the JSON file at `path`:
    ///
    /// ```json
    /// {"keys": [
    ///   {"kid": "2026-12", "alg": "HS256", "secret_file": "hs-2026-12.key"},
    ///   {"kid": "idp-1", "alg": "ES256", "public_key_file": "idp-1.pem", "iss": "https://id.example.com", "aud": "tabd"}
    /// ]}
    /// ```
    ///
    /// Each key has a `kid` (unique), an `alg` and its key: `secret_file` for HS256 (the same
    /// rules as `--auth-secret-file`), `public_key_file` or `public_key` (PEM text) for ES256
    /// and RS256; `iss` and `aud` are optional. Relative paths are from the file's folder.
    /// Anything else, an unknown member included, is an error that names the file.
    public static func load(path: String) throws(SigningKey.Error) -> [VerificationKey] {
        func fail(_ why: String) -> SigningKey.Error { SigningKey.Error(description: "the key set '\(path)': \(why)") }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw SigningKey.Error(description: "cannot read the key set '\(path)': \(SigningKey.reason(error))")
        }
        guard let json = try? JSONParser.parse(Array(data)), let top = json.objectValue else { throw fail("not a JSON object") }
        guard top.count == 1, case let .array(entries)? = json["keys"] else { throw fail("needs one member, \"keys\", an array") }
        guard !entries.isEmpty else { throw fail("\"keys\" is empty") }
        guard entries.count <= maxKeys else { throw fail("more than \(maxKeys) keys") }
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent()
        func resolve(_ file: String) -> String { file.hasPrefix("/") ? file : folder.appendingPathComponent(file).path }
        var keys: [VerificationKey] = []
        for (n, entry) in entries.enumerated() {
            guard let members = entry.objectValue else { throw fail("key \(n + 1) is not an object") }
            let known: Set<String> = ["kid", "alg", "secret_file", "public_key_file", "public_key", "iss", "aud"]
            if let unknown = members.first(where: { !known.contains($0.0) }) { throw fail("key \(n + 1) has an unknown member \"\(unknown.0.prefix(40))\"") }
            func text(_ name: String) throws(SigningKey.Error) -> String? {
                guard let value = entry[name], !value.isNull else { return nil }
                guard let s = value.stringValue, !s.isEmpty else { throw fail("key \(n + 1): \"\(name)\" must be a non-empty string") }
                return s
            }
            guard let kid = try text("kid") else { throw fail("key \(n + 1) has no \"kid\"") }
            guard kid.utf8.count <= 128 else { throw fail("key \(n + 1): \"kid\" is longer than 128 bytes") }
            guard !keys.contains(where: { $0.id == kid }) else { throw fail("two keys have the kid '\(kid)'") }
            guard let algName = try text("alg") else { throw fail("key '\(kid)' has no \"alg\"") }
            guard let alg = TokenAlgorithm(rawValue: algName) else { throw fail("key '\(kid)': alg must be HS256, ES256 or RS256") }
            let source = "key '\(kid)' of the key set '\(path)'"
            let material: VerificationKey.Material
            switch alg {
            case .hs256:
                guard let file = try text("secret_file"), try text("public_key_file") == nil, try text("public_key") == nil else {
                    throw fail("key '\(kid)' (HS256) needs \"secret_file\", and no public key")
                }
                material = .secret(try SigningKey.load(path: resolve(file)).bytes)
            case .es256, .rs256:
                guard try text("secret_file") == nil else { throw fail("key '\(kid)' (\(algName)) takes a public key, not a secret") }
                let pem: [UInt8]
                switch (try text("public_key_file"), try text("public_key")) {
                case let (file?, nil):
                    guard let bytes = FileManager.default.contents(atPath: resolve(file)) else {
                        throw fail("key '\(kid)': cannot read '\(resolve(file))'")
                    }
                    pem = Array(bytes)
                case let (nil, text?): pem = Array(text.utf8)
                default: throw fail("key '\(kid)' (\(algName)) needs one of \"public_key_file\" and \"public_key\"")
                }
                let key: AsymmetricKey
                do { key = try AsymmetricKey.publicKey(pem: pem, source: source) } catch { throw SigningKey.Error(description: error.description) }
                guard key.algorithm == alg else { throw fail("key '\(kid)' is declared \(algName) but is a key for \(key.algorithm.rawValue)") }
                material = .asymmetric(key)
            }
            keys.append(VerificationKey(id: kid, material: material, issuer: try text("iss"), audience: try text("aud")))
        }
        return keys
    }
}
