import WebSockets
import Portable

/// The addresses `--trusted-proxy` names: single addresses or CIDR ranges, IPv4 or IPv6.
package struct TrustedProxies: Sendable, Equatable {
    package struct Range: Sendable, Equatable {
        /// 4 bytes (IPv4) or 16 (IPv6).
        let address: [UInt8]
        let prefix: Int

        func contains(_ other: [UInt8]) -> Bool {
            guard other.count == address.count else { return false }
            var left = prefix
            for (a, b) in zip(address, other) {
                guard left > 0 else { return true }
                let bits = min(left, 8)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if a & mask != b & mask { return false }
                left -= bits
            }
            return true
        }
    }

    package private(set) var ranges: [Range] = []

    package init() {}

    /// Parses `ADDR` or `ADDR/BITS`; nil when it is neither.
    package static func range(_ text: String) -> Range? {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress.bytes(String(parts[0])) else { return nil }
        let width = address.count * 8
        var prefix = width
        if parts.count == 2 {
            guard let n = Int(parts[1]), (0...width).contains(n), parts[1].allSatisfy(\.isASCII) else { return nil }
            prefix = n
        }
        return Range(address: address, prefix: prefix)
    }

    package mutating func add(_ range: Range) { ranges.append(range) }

    package var isEmpty: Bool { ranges.isEmpty }

    /// Whether `address` (as the peer's or a hop's address is written) is trusted. An IPv4
    /// address seen as IPv4-mapped IPv6 (`::ffff:a.b.c.d`) counts as the IPv4 one.
    package func contains(_ address: String) -> Bool {
        guard !ranges.isEmpty, let bytes = IPAddress.bytes(address) else { return false }
        let forms = IPAddress.mappedIPv4(bytes).map { [bytes, $0] } ?? [bytes]
        return ranges.contains { range in forms.contains { range.contains($0) } }
    }
}

/// IP addresses as bytes, for comparing them.
enum IPAddress {
    /// `a.b.c.d` → 4 bytes, an IPv6 address (optionally in brackets) → 16; nil otherwise.
    static func bytes(_ text: String) -> [UInt8]? {
        var text = Substring(text)
        if text.hasPrefix("["), text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if let v4 = ipv4(text) { return v4 }
        return ipv6(text)
    }

    static func ipv4(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var out: [UInt8] = []
        for p in parts {
            guard !p.isEmpty, p.count <= 3, p.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(p), n <= 255 else { return nil }
            out.append(UInt8(n))
        }
        return out
    }

    static func ipv6(_ text: Substring) -> [UInt8]? {
        guard text.contains(":"), text.count <= 45 else { return nil }
        var head: [UInt16] = [], tail: [UInt16] = []
        var sawGap = false
        let halves = text.split(separator: "::", omittingEmptySubsequences: false).map(String.init)
        guard halves.count <= 2 else { return nil }
        func groups(_ s: String, allowV4: Bool) -> [UInt16]? {
            guard !s.isEmpty else { return [] }
            var out: [UInt16] = []
            let parts = s.split(separator: ":", omittingEmptySubsequences: false)
            for (i, p) in parts.enumerated() {
                if allowV4, i == parts.count - 1, p.contains("."), let v4 = ipv4(p) {
                    out.append(UInt16(v4[0]) << 8 | UInt16(v4[1]))
                    out.append(UInt16(v4[2]) << 8 | UInt16(v4[3]))
                    continue
                }
                guard (1...4).contains(p.count), let n = UInt16(p, radix: 16) else { return nil }
                out.append(n)
            }
            return out
        }
        if halves.count == 2 {
            sawGap = true
            guard let h = groups(halves[0], allowV4: false), let t = groups(halves[1], allowV4: true) else { return nil }
            (head, tail) = (h, t)
        } else {
            guard let h = groups(halves[0], allowV4: true) else { return nil }
            head = h
        }
        let count = head.count + tail.count
        guard sawGap ? count < 8 : count == 8 else { return nil }
        let all = head + Array(repeating: 0, count: 8 - count) + tail
        return all.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
    }

    /// The IPv4 address inside an IPv4-mapped IPv6 one.
    static func mappedIPv4(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return nil }
        return Array(bytes[12...])
    }
}

/// Who a request is really from and where it was sent, behind reverse proxies: from a
/// trusted peer, the forwarding headers (`Forwarded`, RFC 7239, over `X-Forwarded-For`,
/// `-Host` and `-Proto`); from anyone else, the connection itself.
package struct ProxyForwarding: Sendable, Equatable {
    /// The client's address: for the logs, where the peer's would be.
    package var client: String
    /// The host the client asked for (`Host`, or the forwarded one), with its port if any.
    package var host: String?
    /// `http` or `https`, as the client reached the first hop.
    package var scheme: String
    /// Why a forwarding header was ignored (for a log line), if one was.
    package var problem: String?

    package init(client: String, host: String?, scheme: String, problem: String?) {
        self.client = client; self.host = host; self.scheme = scheme; self.problem = problem
    }

    /// What the headers of a request from `peer` say, believed only when `peer` is trusted.
    package static func resolve(peer: String, host: String?, scheme: String, headers: ForwardingHeaders,
                                trusted: TrustedProxies) -> ProxyForwarding {
        var result = ProxyForwarding(client: peer, host: host, scheme: scheme, problem: nil)
        guard trusted.contains(peer), headers.any else { return result }
        var hops: [Hop]?
        if let forwarded = headers.forwarded {
            switch parseForwarded(forwarded) {
            case let .success(h): hops = h
            case let .failure(why): result.problem = "a Forwarded header that cannot be parsed (\(why)) is ignored"
            }
        }
        if hops == nil {
            hops = xForwarded(headers)
        }
        guard let hops else { return result }
        result.client = clientAddress(hops.compactMap(\.for), peer: peer, trusted: trusted)
        if let host = hops.last(where: { $0.host != nil })?.host { result.host = host }
        if let proto = hops.last(where: { $0.proto != nil })?.proto { result.scheme = proto }
        return result
    }

    /// One proxy's element: what it saw.
    struct Hop: Equatable {
        var `for`: Node?
        var host: String?
        var proto: String?
    }

    /// A `for` value: an address, or one that hides it.
    enum Node: Equatable {
        case address(String)
        /// `unknown`, or an obfuscated identifier (`_hidden`).
        case hidden
    }

    /// Walking the hops from the one nearest tabd outwards: the first address that is not
    /// trusted itself; all trusted: the farthest. A hidden one leaves the peer's address.
    static func clientAddress(_ nodes: [Node], peer: String, trusted: TrustedProxies) -> String {
        var farthest = peer
        for node in nodes.reversed() {
            guard case let .address(address) = node else { return peer }
            if !trusted.contains(address) { return address }
            farthest = address
        }
        return farthest
    }

    /// `X-Forwarded-For` (addresses, nearest last), `-Host` and `-Proto` (the nearest hop's:
    /// the last value) as hops; nil when none is there.
    static func xForwarded(_ headers: ForwardingHeaders) -> [Hop]? {
        var hops: [Hop] = (headers.xForwardedFor ?? "").split(separator: ",").map { element in
            let value = element.trimmingWhitespace
            return Hop(for: node(value))
        }
        func last(_ value: String?) -> String? {
            value?.split(separator: ",").last.map { $0.trimmingWhitespace }.flatMap { $0.isEmpty ? nil : $0 }
        }
        let host = last(headers.xForwardedHost), proto = last(headers.xForwardedProto)?.lowercased()
        guard !hops.isEmpty || host != nil || proto != nil else { return nil }
        if host != nil || proto != nil {
            hops.append(Hop(for: nil, host: host, proto: proto.flatMap { $0 == "http" || $0 == "https" ? $0 : nil }))
        }
        return hops
    }

    /// A node as `for=` or `X-Forwarded-For` writes it: `192.0.2.1`, `192.0.2.1:4711`,
    /// `[2001:db8::1]:4711`, `2001:db8::1` (X-Forwarded-For), `unknown`, `_obfuscated`.
    static func node(_ value: String) -> Node {
        if value.lowercased() == "unknown" || value.hasPrefix("_") { return .hidden }
        if value.hasPrefix("[") {
            guard let close = value.firstIndex(of: "]") else { return .hidden }
            let inner = String(value[value.index(after: value.startIndex)..<close])
            return IPAddress.ipv6(Substring(inner)) != nil ? .address(inner) : .hidden
        }
        if IPAddress.bytes(value) != nil { return .address(value) }
        // IPv4 with a port.
        if let colon = value.lastIndex(of: ":"), IPAddress.ipv4(value[..<colon]) != nil { return .address(String(value[..<colon])) }
        return .hidden
    }

    /// RFC 7239: elements separated by `,`, pairs by `;`, each `name=value` with a token or
    /// a quoted string. Nearest hop last.
    static func parseForwarded(_ text: String) -> Result<[Hop], ForwardedError> {
        var hops: [Hop] = []
        var hop = Hop()
        var i = text.unicodeScalars.startIndex
        let s = text.unicodeScalars
        func skipSpace() { while i < s.endIndex, s[i] == " " || s[i] == "\t" { i = s.index(after: i) } }
        func isToken(_ c: Unicode.Scalar) -> Bool {
            c.isASCII && c.value > 0x20 && c.value < 0x7F && !"()<>@,;:\\\"/[]?={}".unicodeScalars.contains(c)
        }
        while true {
            skipSpace()
            guard i < s.endIndex else { break }
            // An empty element (`, ,` or a leading `,`, as a proxy that appends to an absent
            // header writes): skipped, as RFC 9110's list rule asks.
            if s[i] == ",", hop == Hop() {
                i = s.index(after: i)
                continue
            }
            var name = ""
            while i < s.endIndex, isToken(s[i]) { name.unicodeScalars.append(s[i]); i = s.index(after: i) }
            guard !name.isEmpty, i < s.endIndex, s[i] == "=" else { return .failure(ForwardedError("a pair without name=value")) }
            i = s.index(after: i)
            var value = ""
            if i < s.endIndex, s[i] == "\"" {
                i = s.index(after: i)
                var closed = false
                while i < s.endIndex {
                    let c = s[i]
                    i = s.index(after: i)
                    if c == "\"" { closed = true; break }
                    if c == "\\" {
                        guard i < s.endIndex else { break }
                        value.unicodeScalars.append(s[i])
                        i = s.index(after: i)
                        continue
                    }
                    guard c.value >= 0x20 || c == "\t", c.value != 0x7F else { return .failure(ForwardedError("a control character")) }
                    value.unicodeScalars.append(c)
                }
                guard closed else { return .failure(ForwardedError("an unterminated quoted string")) }
            } else {
                while i < s.endIndex, isToken(s[i]) { value.unicodeScalars.append(s[i]); i = s.index(after: i) }
                guard !value.isEmpty else { return .failure(ForwardedError("an empty value")) }
            }
            switch name.lowercased() {
            case "for": hop.for = node(value)
            case "host": hop.host = value
            case "proto":
                let proto = value.lowercased()
                guard proto == "http" || proto == "https" else { return .failure(ForwardedError("proto '\(proto.prefix(20))'")) }
                hop.proto = proto
            default: break // by=, and extensions
            }
            skipSpace()
            guard i < s.endIndex else { break }
            if s[i] == ";" {
                i = s.index(after: i)
            } else if s[i] == "," {
                hops.append(hop)
                hop = Hop()
                i = s.index(after: i)
            } else {
                return .failure(ForwardedError("an unexpected character"))
            }
        }
        hops.append(hop)
        return .success(hops)
    }

    struct ForwardedError: Error, Equatable, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// Whether a browser's `Origin` is the public host: the same host (case aside) and
    /// port, 80 and 443 implied by http and https. A host without a port matches either
    /// scheme's default port (what the client typed carried none).
    package static func originMatches(_ origin: String, host: String) -> Bool {
        guard let o = Authority(url: origin), let h = Authority(host: host) else { return false }
        guard o.host == h.host else { return false }
        if let port = h.port { return o.port == port }
        return o.port == 80 || o.port == 443
    }

    struct Authority: Equatable {
        var host: String
        var port: Int?

        /// `scheme://host[:port]`, http or https; the port implied when absent.
        init?(url: String) {
            let lower = url.lowercased()
            let scheme: String, rest: Substring
            if lower.hasPrefix("http://") { (scheme, rest) = ("http", lower.dropFirst(7)) }
            else if lower.hasPrefix("https://") { (scheme, rest) = ("https", lower.dropFirst(8)) }
            else { return nil }
            guard var authority = Authority(host: String(rest)) else { return nil }
            if authority.port == nil { authority.port = scheme == "https" ? 443 : 80 }
            self = authority
        }

        /// `host`, `host:port`, `[v6]`, `[v6]:port`; lowercased.
        init?(host text: String) {
            let text = text.lowercased()
            guard !text.isEmpty, !text.contains("/"), !text.contains("@") else { return nil }
            if text.hasPrefix("[") {
                guard let close = text.firstIndex(of: "]") else { return nil }
                host = String(text[...close])
                let after = text[text.index(after: close)...]
                if after.isEmpty { port = nil; return }
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (0...65535).contains(p) else { return nil }
                port = p
                return
            }
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2, !parts[0].isEmpty else { return nil }
            host = String(parts[0])
            if parts.count == 2 {
                guard let p = Int(parts[1]), (0...65535).contains(p) else { return nil }
                port = p
            } else {
                port = nil
            }
        }
    }
}
