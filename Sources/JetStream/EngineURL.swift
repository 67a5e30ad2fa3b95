/// The engine's URLs as text for people: in logs and errors a URL never shows a user,
/// password or token it may hold (`nats://user:pass@host`, `nats://token@host`). tabd
/// refuses such URLs on its command line (credentials go in files: `--cluster-creds`, or
/// `--cluster-user` with `--cluster-password-file`); this is the second fence, for every
/// URL that reaches a log line (libnats' own, a server's discovered ones, a library user's).
public enum EngineURL {
    /// `url` with everything between its `scheme://` and its last `@` shown as `***`
    /// (without a scheme, everything before the last `@`); a URL without `@` unchanged.
    public static func redacted(_ url: String) -> String {
        guard let at = url.lastIndex(of: "@") else { return url }
        var start = url.startIndex
        if let separator = url.firstRange(of: "://"), separator.upperBound <= at,
           url[..<separator.lowerBound].unicodeScalars.allSatisfy({ $0.isASCII && $0.properties.isAlphabetic }) {
            start = separator.upperBound
        }
        return url[..<start] + "***" + url[at...]
    }

    /// `urls` redacted and joined with commas, as a log line shows them.
    public static func redacted(_ urls: [String]) -> String {
        urls.map { redacted($0) }.joined(separator: ",")
    }

    /// Whether `url` carries credentials of its own: any `@`.
    public static func hasCredentials(_ url: String) -> Bool { url.contains("@") }
}
