import FoundationEssentials
import Glibc
import Dispatch

/// Where a webhook posts (`--webhook URL`): `http` or `https`, a host, a port, a path with
/// its query.
struct WebhookTarget: Sendable, Equatable {
    let url: String
    let https: Bool
    let host: String
    let port: Int
    /// The path and query, as the request line carries them.
    let target: String

    struct Invalid: Error, CustomStringConvertible {
        let description: String
    }

    init(_ url: String) throws(Invalid) {
        guard let parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw Invalid(description: "--webhook \(url): not an http:// or https:// URL")
        }
        guard let host = parts.host, !host.isEmpty else { throw Invalid(description: "--webhook \(url): no host") }
        guard parts.user == nil, parts.password == nil else {
            throw Invalid(description: "--webhook \(url): credentials in the URL are not sent; sign the requests with --webhook-secret-file")
        }
        guard parts.fragment == nil else { throw Invalid(description: "--webhook \(url): a URL with a #fragment") }
        self.url = url
        https = scheme == "https"
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        port = parts.port ?? (https ? 443 : 80)
        guard (1...65535).contains(port) else { throw Invalid(description: "--webhook \(url): port \(port) out of range") }
        let path = parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath
        target = path + (parts.percentEncodedQuery.map { "?\($0)" } ?? "")
    }

    /// The URL without its query (which may carry a secret), for logs.
    var shown: String {
        let base = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
        return base + (url.contains("?") ? "?…" : "")
    }
}
