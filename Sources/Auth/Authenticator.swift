import Locking

/// Decides who a request is: the one check for `/ws`, `/metrics` and the HTTP API.
///
/// Credentials are the `--token` (admin of every room, compared in constant time) and,
/// with signing keys, signed tokens. A request carries one as `Authorization: Bearer`
/// (which wins) or as the `token` query parameter. The keys can be replaced while tabd
/// runs (``replaceKeys(_:)``, on `SIGHUP`): copies of an authenticator share them.
public struct Authenticator: Sendable {
    /// The `--token` as an HMAC under ``comparisonKey``: candidates are compared by their
    /// digests, so neither the bytes nor the length of the token show in the timing.
    let operatorDigest: [UInt8]?
    let comparisonKey: [UInt8]
    /// The keys of signed tokens; nil when signed tokens are off (for good: a reload
    /// cannot turn them on, which would close a tabd that was open).
    private let tokens: Keys?

    private final class Keys: Sendable {
        /// (Locked: ThreadSanitizer sees it, not a Synchronization.Mutex.)
        let current: Locked<Token>
        init(_ token: Token) { current = Locked(token) }
    }

    public init(operatorToken: String?, signingKey: SigningKey?) {
        self.init(operatorToken: operatorToken, keys: signingKey.map { KeySet(keys: [VerificationKey($0)]) })
    }

    public init(operatorToken: String?, keys: KeySet?) {
        var random = SystemRandomNumberGenerator()
        let key = (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }
        comparisonKey = key
        operatorDigest = operatorToken.map { Crypto.hmacSHA256(key: key, message: Array($0.utf8)) }
        tokens = keys.map { Keys(Token(keys: $0)) }
    }

    /// Checks tokens with `keys` from now on. Nothing happens when signed tokens are off.
    /// Returns whether they are on.
    @discardableResult
    public func replaceKeys(_ keys: KeySet) -> Bool {
        guard let tokens else { return false }
        tokens.current.withLock { $0 = Token(keys: keys) }
        return true
    }

    /// Whether signed tokens are accepted.
    public var acceptsSignedTokens: Bool { tokens != nil }

    /// Whether any credential is required. Without one, everyone may do everything.
    public var isOn: Bool { operatorDigest != nil || tokens != nil }

    /// The credential a request carries: the `Authorization: Bearer` header when there is
    /// one (the scheme is case-insensitive), else the `token` parameter.
    public static func credential(authorization: String?, query: [String: String]) -> String? {
        if let header = authorization?.drop(while: { $0 == " " }),
           header.count > 7, header.prefix(7).lowercased() == "bearer " {
            return String(header.dropFirst(7).drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
        }
        return query["token"]
    }

    /// The grant of `credential` at `now` (seconds since 1970), or why it is refused.
    /// Call only when ``isOn``.
    public func authenticate(_ credential: String?, now: Double) -> Result<Grant, AuthError> {
        guard let credential, !credential.isEmpty else { return .failure(.missing) }
        if let operatorDigest,
           Crypto.constantTimeEqual(Crypto.hmacSHA256(key: comparisonKey, message: Array(credential.utf8)), operatorDigest) {
            return .success(.operatorToken)
        }
        guard let tokens else { return .failure(.wrongToken) }
        let token = tokens.current.withLock { $0 }
        do { return .success(try token.verify(credential, now: now)) } catch { return .failure(error) }
    }
}

extension Authenticator {
    /// Which credentials are accepted, for the log: "admin token", "signed tokens" or both.
    public var describe: String {
        [operatorDigest != nil ? "admin token" : nil, tokens != nil ? "signed tokens" : nil].compactMap { $0 }.joined(separator: ", ")
    }
}
