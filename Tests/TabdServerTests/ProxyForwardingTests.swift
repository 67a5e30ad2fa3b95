import Testing
import WebSockets
@testable import TabdServer

/// Behind reverse proxies: which peers are trusted, what their forwarding headers say, and
/// the origin check against the public host.
@Suite struct ProxyForwardingTests {
    static func trusted(_ list: String...) -> TrustedProxies {
        var t = TrustedProxies()
        for r in list { t.add(TrustedProxies.range(r)!) }
        return t
    }

    func resolve(_ peer: String, host: String? = "tabd:8080", _ headers: ForwardingHeaders,
                 trusted: TrustedProxies = trusted("127.0.0.1", "10.0.0.0/8")) -> ProxyForwarding {
        ProxyForwarding.resolve(peer: peer, host: host, scheme: "http", headers: headers, trusted: trusted)
    }

    @Test func addressesAndRanges() {
        let t = Self.trusted("127.0.0.1", "10.0.0.0/8", "2001:db8::/32", "::1")
        #expect(t.contains("127.0.0.1") && !t.contains("127.0.0.2"))
        #expect(t.contains("10.255.1.2") && !t.contains("11.0.0.1"))
        #expect(t.contains("2001:db8:cafe::17") && !t.contains("2001:db9::1"))
        #expect(t.contains("::1") && t.contains("[::1]"))
        #expect(t.contains("::ffff:10.1.2.3"), "an IPv4-mapped peer is its IPv4 address")
        #expect(!t.contains("unknown") && !t.contains("") && !t.contains("10.0.0"))
        for bad in ["", "10.0.0.256", "10.0.0.0/33", "::/129", "1::2::3", "host", "10.0.0.0/", "10.0.0.0/-1", "1:2:3:4:5:6:7:8:9"] {
            #expect(TrustedProxies.range(bad) == nil, "\(bad)")
        }
        #expect(TrustedProxies.range("0.0.0.0/0")?.contains([8, 8, 8, 8]) == true)
        #expect(!TrustedProxies().contains("127.0.0.1"), "nobody is trusted by default")
    }

    @Test func anUntrustedPeersHeadersAreIgnored() {
        let forged = ForwardingHeaders(forwarded: "for=203.0.113.9;host=evil;proto=https", xForwardedFor: "203.0.113.9")
        let f = resolve("127.0.0.2", forged)
        #expect(f == ProxyForwarding(client: "127.0.0.2", host: "tabd:8080", scheme: "http", problem: nil))
    }

    @Test func xForwardedHeadersFromATrustedProxy() {
        let f = resolve("127.0.0.1", ForwardingHeaders(xForwardedFor: "198.51.100.4, 10.1.1.1", xForwardedHost: "tabd.example",
                                                       xForwardedProto: "https"))
        #expect(f.client == "198.51.100.4", "the trusted 10.1.1.1 hop is skipped")
        #expect(f.host == "tabd.example" && f.scheme == "https")
        // A client that forges an X-Forwarded-For of its own stays itself: the first untrusted from the nearest.
        let forged = resolve("127.0.0.1", ForwardingHeaders(xForwardedFor: "1.2.3.4, 198.51.100.4"))
        #expect(forged.client == "198.51.100.4")
        // All trusted: the farthest.
        #expect(resolve("127.0.0.1", ForwardingHeaders(xForwardedFor: "10.0.0.5, 10.0.0.6")).client == "10.0.0.5")
        #expect(resolve("127.0.0.1", ForwardingHeaders(xForwardedFor: "unknown")).client == "127.0.0.1")
        #expect(resolve("127.0.0.1", ForwardingHeaders(xForwardedFor: "2001:db8::7")).client == "2001:db8::7")
    }

    @Test func forwardedWinsAndIsParsedWithQuotesAndHops() {
        let headers = ForwardingHeaders(
            forwarded: #"for="[2001:db8:cafe::17]:4711";proto=https;host="tabd.example:8443", for=10.0.0.9;by=10.0.0.1"#,
            xForwardedFor: "9.9.9.9", xForwardedHost: "other", xForwardedProto: "http")
        let f = resolve("127.0.0.1", headers)
        #expect(f.client == "2001:db8:cafe::17", "the trusted nearest hop is passed, the next one is the client")
        #expect(f.host == "tabd.example:8443" && f.scheme == "https", "from the hop nearest tabd that carries them")
        #expect(resolve("127.0.0.1", ForwardingHeaders(forwarded: "for=192.0.2.43:80, for=_hidden")).client == "127.0.0.1",
                "an obfuscated hop leaves the peer's address")
        #expect(resolve("127.0.0.1", ForwardingHeaders(forwarded: "For=\"192.0.2.43\" ; Proto=HTTPS")).scheme == "https",
                "names are case-insensitive, spaces around ; allowed")
        #expect(resolve("127.0.0.1", ForwardingHeaders(forwarded: #"for=192.0.2.1;host="a\"b""#)).host == #"a"b"#)
        #expect(resolve("127.0.0.1", ForwardingHeaders(forwarded: ", for=198.51.100.3,, ")).client == "198.51.100.3",
                "empty elements are skipped")
    }

    @Test func aForwardedHeaderThatCannotBeParsedIsIgnoredWithAReason() {
        for bad in ["for", "for=", #"for="unterminated"#, "for=1.2.3.4 junk", "proto=gopher", "=x", "for=1.2.3.4;;"] {
            let f = resolve("127.0.0.1", ForwardingHeaders(forwarded: bad, xForwardedFor: "198.51.100.4"))
            #expect(f.problem != nil, "\(bad)")
            #expect(f.client == "198.51.100.4", "\(bad): the X-Forwarded headers still count")
        }
        #expect(resolve("127.0.0.1", ForwardingHeaders(forwarded: "for=\"1.2.3.4\u{1}\"")).problem != nil)
    }

    @Test func theOriginIsComparedWithThePublicHostAndPort() {
        #expect(ProxyForwarding.originMatches("https://tabd.example", host: "tabd.example"))
        #expect(ProxyForwarding.originMatches("http://tabd.example", host: "tabd.example"))
        #expect(ProxyForwarding.originMatches("https://tabd.example", host: "tabd.example:443"), "443 implied by https")
        #expect(ProxyForwarding.originMatches("http://TABD.example:80", host: "tabd.example:80"))
        #expect(!ProxyForwarding.originMatches("http://tabd.example", host: "tabd.example:443"))
        #expect(!ProxyForwarding.originMatches("https://tabd.example:8443", host: "tabd.example"))
        #expect(ProxyForwarding.originMatches("http://127.0.0.1:8080", host: "127.0.0.1:8080"))
        #expect(ProxyForwarding.originMatches("http://[::1]:8080", host: "[::1]:8080"))
        #expect(!ProxyForwarding.originMatches("http://evil.example", host: "tabd.example"))
        #expect(!ProxyForwarding.originMatches("http://tabd.example.evil", host: "tabd.example"))
        #expect(!ProxyForwarding.originMatches("null", host: "tabd.example"))
        #expect(!ProxyForwarding.originMatches("ftp://tabd.example", host: "tabd.example"))
        #expect(!ProxyForwarding.originMatches("http://user@tabd.example", host: "tabd.example"))
        // Through admission: the forwarded host is the one compared.
        let behindProxy = ProxyForwarding.resolve(peer: "127.0.0.1", host: "127.0.0.1:8080", scheme: "http",
                                             headers: ForwardingHeaders(xForwardedHost: "tabd.example", xForwardedProto: "https"),
                                             trusted: ProxyForwardingTests.trusted("127.0.0.1"))
        #expect(Admission.decide(grant: .success(nil), origin: "https://tabd.example", host: behindProxy.host, room: "main",
                                 context: .init(), roomRefusal: { nil }) == nil)
        #expect(Admission.decide(grant: .success(nil), origin: "https://tabd.example", host: "127.0.0.1:8080", room: "main",
                                 context: .init(), roomRefusal: { nil })?.status == 403)
    }
}
