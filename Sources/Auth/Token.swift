import TabdProtocol

/// Signed tokens: compact JWTs (RFC 7519) signed with HS256, ES256 or RS256, and the claims
/// `exp` (required), `nbf`, `room` (an id or `"*"`), `role` (required), `name`, and, when
/// the key set asks for them, `iss` and `aud`.
public struct Token: Sendable {
    /// Longer tokens are refused unread.
    public static let maxLength = 4096

    /// What signs a token: a shared secret (HS256) or a private key (ES256, RS256).
    public enum Signer: Sendable {
        case secret(SigningKey)
        case privateKey(AsymmetricKey)

        var algorithm: TokenAlgorithm {
            switch self {
            case .secret: .hs256
            case let .privateKey(key): key.algorithm
            }
        }
    }

    let keys: KeySet

    /// Tokens of one HS256 key that names no `kid` (`--auth-secret-file`).
    public init(key: SigningKey) { keys = KeySet(keys: [VerificationKey(key)]) }

    public init(keys: KeySet) { self.keys = keys }

    /// A token granting `grant` (which must expire), issued at `issuedAt`, signed with the
    /// HS256 key of ``init(key:)``.
    public func sign(_ grant: Grant, issuedAt: Int) -> String {
        guard case let .secret(bytes)? = keys.keys.first?.material else { preconditionFailure("sign(_:issuedAt:) needs an HS256 key") }
        // A key of at least 32 bytes, as it was made.
        return try! Self.sign(grant, issuedAt: issuedAt, with: .secret(SigningKey(bytes: bytes, source: "the key")))
    }

    /// A token granting `grant` (which must expire), issued at `issuedAt`, signed by
    /// `signer`, its header naming `keyID` as `kid` when given, with `iss` and `aud` claims
    /// when given.
    public static func sign(_ grant: Grant, issuedAt: Int, with signer: Signer, keyID: String? = nil,
                            issuer: String? = nil, audience: String? = nil) throws(AsymmetricKey.Error) -> String {
        precondition(grant.expires != nil, "a signed token needs an expiry")
        var claims: [(String, JSONValue)] = []
        if let scope = grant.scope { claims.append(("room", .string(scope.description))) }
        claims.append(("role", .string(grant.role.rawValue)))
        if let name = grant.name { claims.append(("name", .string(name))) }
        if let issuer { claims.append(("iss", .string(issuer))) }
        if let audience { claims.append(("aud", .string(audience))) }
        claims.append(("iat", .int(issuedAt)))
        claims.append(("exp", .double(grant.expires!)))
        var header: [(String, JSONValue)] = [("alg", .string(signer.algorithm.rawValue)), ("typ", .string("JWT"))]
        if let keyID { header.append(("kid", .string(keyID))) }
        let signingInput = Base64URL.encode(JSONValue.object(header).compactBytes) + "." + Base64URL.encode(JSONValue.object(claims).compactBytes)
        let signature: [UInt8] = switch signer {
        case let .secret(key): Crypto.hmacSHA256(key: key.bytes, message: Array(signingInput.utf8))
        case let .privateKey(key): try key.sign(Array(signingInput.utf8))
        }
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// The grant of `token` at time `now` (seconds since 1970), or why it is refused.
    /// The header is read first (an accepted `alg`, the `kid` of a known key of that
    /// algorithm, no `crit`), then the signature is checked (HMACs in constant time), and
    /// only then are the claims read.
    public func verify(_ token: String, now: Double) throws(AuthError) -> Grant {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxLength else { throw .malformed("longer than \(Self.maxLength) bytes") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("a JWT has three parts separated by '.'") }

        let header = try Self.object(parts[0], "header")
        guard case let .string(alg)? = header["alg"] else { throw .malformed("the header has no alg") }
        guard TokenAlgorithm(rawValue: alg) != nil else { throw .algorithm(alg) }
        if header["crit"] != nil { throw .malformed("critical header extensions are not supported") }
        var kid: String?
        if let k = header["kid"], !k.isNull {
            guard let s = k.stringValue else { throw .malformed("kid is not a string") }
            kid = s
        }
        let candidates = try keys.candidates(alg: alg, kid: kid)

        let signingInput = Array(bytes[..<parts[1].endIndex])
        let signer = candidates.first { key in
            switch key.material {
            case let .secret(secret):
                let expected = Array(Base64URL.encode(Crypto.hmacSHA256(key: secret, message: signingInput)).utf8)
                return Crypto.constantTimeEqual(expected, Array(parts[2]))
            case let .asymmetric(publicKey):
                guard let signature = Base64URL.decode(parts[2]) else { return false }
                return publicKey.verify(signature, of: signingInput)
            }
        }
        guard let signer else { throw .badSignature }

        let claims = try Self.object(parts[1], "payload")
        guard let expValue = claims["exp"] else { throw .malformed("no exp claim") }
        guard let exp = expValue.doubleValue, exp.isFinite else { throw .malformed("exp is not a number") }
        var notBefore: Double?
        if let nbf = claims["nbf"] {
            guard let n = nbf.doubleValue, n.isFinite else { throw .malformed("nbf is not a number") }
            notBefore = n
        }
        guard let roleValue = claims["role"] else { throw .malformed("no role claim") }
        guard let roleName = roleValue.stringValue, let role = Role(rawValue: roleName) else {
            throw .malformed("role must be view, control or admin")
        }
        var scope: RoomScope?
        if let room = claims["room"] {
            guard let id = room.stringValue, let s = RoomScope(claim: id) else { throw .malformed("room must be a room id or \"*\"") }
            scope = s
        }
        var name: String?
        if let n = claims["name"], !n.isNull {
            guard let s = n.stringValue else { throw .malformed("name is not a string") }
            name = s
        }
        if let issuer = signer.issuer ?? keys.issuer, claims["iss"]?.stringValue != issuer { throw .claim("iss is not the issuer this key is for") }
        if let audience = signer.audience ?? keys.audience {
            let named: Bool = switch claims["aud"] {
            case let .string(s)?: s == audience
            case let .array(items)?: items.contains { $0.stringValue == audience }
            default: false
            }
            guard named else { throw .claim("aud does not name this tabd's audience") }
        }
        guard now < exp + keys.leeway else { throw .expired }
        if let notBefore, now < notBefore - keys.leeway { throw .notYetValid }
        return Grant(role: role, scope: scope, name: name, expires: exp + keys.leeway)
    }

    private static func object(_ part: ArraySlice<UInt8>, _ what: String) throws(AuthError) -> JSONValue {
        guard let json = Base64URL.decode(part) else { throw .malformed("the \(what) is not base64url") }
        guard let value = try? JSONParser.parse(json), value.objectValue != nil else { throw .malformed("the \(what) is not a JSON object") }
        return value
    }
}
