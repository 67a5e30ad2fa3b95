import Foundation
import TabdServer
import WebSockets

/// `ProxyForwarding.resolve` on any `Forwarded` and `X-Forwarded-*` values from a trusted peer:
/// never a trap; the client is the peer or an address the headers name; the scheme is http
/// or https; a `Forwarded` that parsed leaves no problem.
/// Input: the Forwarded value, 0x00, X-Forwarded-For, 0x00, X-Forwarded-Host, 0x00, -Proto.
enum ForwardedTarget {
    static let trusted: TrustedProxies = {
        var t = TrustedProxies()
        for r in ["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"] { t.add(TrustedProxies.range(r)!) }
        return t
    }()

    static func run(_ bytes: [UInt8]) {
        let parts = pieces(bytes, separator: 0, limit: 4).map { String(decoding: $0, as: UTF8.self) }
        func part(_ i: Int) -> String? { i < parts.count ? parts[i] : nil }
        let headers = ForwardingHeaders(forwarded: part(0), xForwardedFor: part(1), xForwardedHost: part(2), xForwardedProto: part(3))
        let f = ProxyForwarding.resolve(peer: "127.0.0.1", host: "tabd:8080", scheme: "http", headers: headers, trusted: trusted)
        require(f.client == "127.0.0.1" || bytes.count >= f.client.utf8.count, "a client address longer than the input")
        if f.client != "127.0.0.1" {
            // A quoted value may escape any character (`\d` is `d`): compared without the
            // backslashes (an address holds none).
            let named = ((part(0) ?? "") + "," + (part(1) ?? "")).replacingOccurrences(of: "\\", with: "")
            require(named.contains(f.client), "client '\(f.client)' is not in the headers")
        }
        require(f.scheme == "http" || f.scheme == "https", "scheme '\(f.scheme)'")
        let untrusted = ProxyForwarding.resolve(peer: "192.0.2.1", host: "tabd:8080", scheme: "http", headers: headers, trusted: trusted)
        require(untrusted == ProxyForwarding(client: "192.0.2.1", host: "tabd:8080", scheme: "http", problem: nil), "an untrusted peer's headers counted")
        if let host = f.host { _ = ProxyForwarding.originMatches("https://" + host, host: host) }
    }
}
