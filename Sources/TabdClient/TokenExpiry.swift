/// When a signed token runs out, read from its claims without checking its signature (the
/// client only needs to know when to ask for the next one; tabd checks the signature).
enum TokenExpiry {
    /// The `exp` of a compact JWT, in seconds since 1970; nil for any other token.
    static func of(_ token: String) -> Double? {
        let parts = Array(token.utf8).split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let claims = Base64URL.decode(parts[1]), let json = try? JSONParser.parse(claims) else { return nil }
        return json["exp"]?.doubleValue
    }
}
