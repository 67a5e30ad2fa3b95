import Coordinator

/// Signed tokens: compact JWTs (RFC 7519) with HMAC-SHA256 (`HS256`) and the claims
/// `exp` (required), `nbf`, `room` (an id or `"*"`), `role` (required) and `name`.
public struct Token: Sendable {
    /// Longer tokens are refused unread.
    public static let maxLength = 4096

    let key: SigningKey

    public init(key: SigningKey) { self.key = key }

    /// A token granting `grant` (which must expire), issued at `issuedAt`.
    public func sign(_ grant: Grant, issuedAt: Int) -> String {
        precondition(grant.expires != nil, "a signed token needs an expiry")
        var claims: [(String, JSONValue)] = []
        if let scope = grant.scope { claims.append(("room", .string(scope.description))) }
        claims.append(("role", .string(grant.role.rawValue)))
        if let name = grant.name { claims.append(("name", .string(name))) }
        claims.append(("iat", .int(issuedAt)))
        claims.append(("exp", .double(grant.expires!)))
        let header = JSONValue.object([("alg", .string("HS256")), ("typ", .string("JWT"))])
        let signingInput = Base64URL.encode(header.compactBytes) + "." + Base64URL.encode(JSONValue.object(claims).compactBytes)
        return signingInput + "." + Base64URL.encode(Crypto.hmacSHA256(key: key.bytes, message: Array(signingInput.utf8)))
    }

    /// The grant of `token` at time `now` (seconds since 1970), or why it is refused.
    /// The header is read first (only `HS256`), then the signature is checked in constant
    /// time, and only then are the claims read.
    public func verify(_ token: String, now: Double) throws(AuthError) -> Grant {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxLength else { throw .malformed("longer than \(Self.maxLength) bytes") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("a JWT has three parts separated by '.'") }

        let header = try Self.object(parts[0], "header")
        guard case let .string(alg)? = header["alg"] else { throw .malformed("the header has no alg") }
        guard alg == "HS256" else { throw .algorithm(alg) }
        if header["crit"] != nil { throw .malformed("critical header extensions are not supported") }

        let expected = Array(Base64URL.encode(Crypto.hmacSHA256(key: key.bytes, message: Array(bytes[..<parts[1].endIndex]))).utf8)
        guard Crypto.constantTimeEqual(expected, Array(parts[2])) else { throw .badSignature }

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
        guard now < exp else { throw .expired }
        if let notBefore, now < notBefore { throw .notYetValid }
        return Grant(role: role, scope: scope, name: name, expires: exp)
    }

    private static func object(_ part: ArraySlice<UInt8>, _ what: String) throws(AuthError) -> JSONValue {
        guard let json = Base64URL.decode(part) else { throw .malformed("the \(what) is not base64url") }
        guard let value = try? JSONParser.parse(json), value.objectValue != nil else { throw .malformed("the \(what) is not a JSON object") }
        return value
    }
}
