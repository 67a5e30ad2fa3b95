/// Why a credential was refused. Every case is a 401 (not authenticated); a valid
/// credential for another room is a 403, decided by the caller from the ``Grant``.
public enum AuthError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No `Authorization: Bearer` header and no `token` parameter.
    case missing
    /// Not the `--token`, and signed tokens are off.
    case wrongToken
    /// Not a compact JWT of the expected shape, or a claim missing or of the wrong type.
    case malformed(String)
    /// An `alg` tabd does not accept (`none` included), or not the algorithm of the key
    /// the token names.
    case algorithm(String)
    /// A `kid` that names no key tabd has.
    case unknownKey(String)
    /// `iss` or `aud` is not what the key requires.
    case claim(String)
    case badSignature
    case expired
    case notYetValid

    /// For logs and error bodies; never contains the token.
    public var description: String {
        switch self {
        case .missing: "no token"
        case .wrongToken: "wrong token"
        case let .malformed(why): "malformed token: \(why)"
        case let .algorithm(alg):
            // The token's own text: printable ASCII only, so it cannot forge a log line.
            "token algorithm '\(Self.printable(alg, 20))' is not accepted here"
        case let .unknownKey(kid): "token key id '\(Self.printable(kid, 40))' names no key"
        case let .claim(why): "token refused: \(why)"
        case .badSignature: "bad token signature"
        case .expired: "token expired"
        case .notYetValid: "token not yet valid"
        }
    }

    /// The token's own text as printable ASCII only, so that it cannot forge a log line.
    private static func printable(_ text: String, _ length: Int) -> String {
        String(text.unicodeScalars.prefix(length).map { $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
    }
}
