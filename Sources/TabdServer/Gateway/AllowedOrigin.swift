/// An `--allow-origin` value: a web origin as a browser writes it in `Origin`, so that the
/// exact comparisons of ``Admission/originAllowed(_:host:allowOrigins:)`` and of the modules'
/// CORS answers can match it.
///
/// Taken: `http://` or `https://`, a host (a DNS name of letters, digits, `-` and `_`; an
/// IPv4 address; an IPv6 address in brackets) and an optional port from 1 to 65535, and
/// nothing else: no path (not even a trailing `/`), no user or password, no query or
/// fragment, no `*`. `null`, the origin browsers send for sandboxed frames, `data:` and
/// `file:` pages, is refused: any site can make such a page, so allowing it would allow
/// every site. What is taken is kept as browsers send it: lower case, without the scheme's
/// own port (`:80` for http, `:443` for https).
package enum AllowedOrigin {
    /// `text` in the form browsers send, or why it is not an origin (a sentence to follow
    /// "--allow-origin takes …, got '…': ").
    package static func canonical(_ text: String) -> Result<String, Problem> {
        let lower = text.lowercased()
        if lower == "null" {
            return .failure(Problem("'null' is the origin of sandboxed frames and data: or file: pages, which any site can make"))
        }
        guard let separator = lower.firstRange(of: "://") else { return .failure(Problem("it has no http:// or https://")) }
        let scheme = lower[..<separator.lowerBound]
        guard scheme == "http" || scheme == "https" else {
            return .failure(Problem("only http and https pages have an origin tabd takes"))
        }
        let rest = lower[separator.upperBound...]
        if rest.contains("@") { return .failure(Problem("an origin has no user or password")) }
        if rest.contains("?") || rest.contains("#") { return .failure(Problem("an origin has no query or fragment")) }
        if rest.contains("/") { return .failure(Problem("an origin has no path, not even a trailing /")) }
        var host = rest, portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(Problem("its IPv6 address has no closing ]")) }
            host = rest[...close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(Problem("only :PORT may follow the host")) }
                portText = after.dropFirst()
            }
            guard IPAddress.bytes(String(host))?.count == 16 else { return .failure(Problem("'\(host)' is not an IPv6 address")) }
        } else {
            if let colon = rest.firstIndex(of: ":") {
                host = rest[..<colon]
                portText = rest[rest.index(after: colon)...]
            }
            guard IPAddress.ipv4(host) != nil || HostPolicy.isHostName(String(host)) else {
                return .failure(Problem("'\(host.prefix(80))' is not a host name or an IP address"))
            }
        }
        var port: Int?
        if let portText {
            guard !portText.isEmpty, portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let p = Int(portText), (1...65535).contains(p) else {
                return .failure(Problem("its port must be a number from 1 to 65535"))
            }
            port = p
        }
        let implied = scheme == "https" ? 443 : 80
        let shownPort = port.map { $0 == implied ? "" : ":\($0)" } ?? ""
        return .success("\(scheme)://\(host)\(shownPort)")
    }

    /// Why a value is not an origin.
    package struct Problem: Error, Equatable, CustomStringConvertible {
        package let description: String
        init(_ description: String) { self.description = description }
    }
}
