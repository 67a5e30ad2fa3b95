import Foundation

/// When a signed token runs out, read from its claims without checking its signature (the
/// client only needs to know when to ask for the next one; tabd checks the signature).
enum TokenExpiry {
    /// The `exp` of a compact JWT, in seconds since 1970; nil for any other token.
    static func of(_ token: String) -> Double? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var text = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text), let claims = try? JSONParser.parse(Array(data)) else { return nil }
        return claims["exp"]?.doubleValue
    }
}
