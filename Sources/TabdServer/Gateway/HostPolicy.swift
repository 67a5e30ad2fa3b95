/// Which `Host` a request may name (the fence against DNS rebinding): decided without I/O
/// from what the daemon was started with.
///
/// A page of another site can have a browser send requests to tabd under the site's own
/// name (its DNS answer changed to tabd's address): the browser then treats tabd as that
/// site, and sends its `Host`. While no credentials are configured, nothing else would stop
/// such a page, so tabd answers only the names it knows it is reached by: an IP address,
/// `localhost` and names under `.localhost`, the `--host` it listens on, the DNS names of its
/// TLS certificate, the hosts of `--allow-origin`, and each `--allow-host`. With credentials,
/// every host is answered (the credentials are the fence).
package struct HostPolicy: Sendable, Equatable {
    /// False when credentials are configured: every host is allowed.
    package let enforced: Bool
    /// Names allowed exactly, lowercased, without a trailing dot.
    package private(set) var names: Set<String> = []
    /// Suffixes (`.example.com`) under which exactly one more label is allowed: a
    /// certificate's `*.example.com`.
    package private(set) var oneLabelUnder: Set<String> = []
    /// Suffixes (`.example.com`) under which any name, and the name itself, is allowed: an
    /// `--allow-host .example.com`.
    package private(set) var anyUnder: Set<String> = []

    /// - Parameters:
    ///   - credentials: whether an admin token or a signing key is configured.
    ///   - listenHost: `--host`.
    ///   - certificateNames: the DNS names of the TLS certificate (`*.` wildcards allowed).
    ///   - allowOrigins: `--allow-origin` (`scheme://host[:port]`; their hosts are allowed).
    ///   - allowHosts: `--allow-host` (a name, or `.name` for it and every name under it).
    package init(credentials: Bool, listenHost: String = "", certificateNames: [String] = [], allowOrigins: [String] = [],
                 allowHosts: [String] = []) {
        enforced = !credentials
        add(name: listenHost)
        for name in certificateNames {
            let name = Self.normalized(name)
            if name.hasPrefix("*.") { oneLabelUnder.insert(String(name.dropFirst())) } else { add(name: name) }
        }
        for origin in allowOrigins {
            if let host = ProxyForwarding.Authority(url: origin)?.host { add(name: host) }
        }
        for name in allowHosts {
            let name = Self.normalized(name)
            if name.hasPrefix("."), name.count > 1 { anyUnder.insert(name) } else { add(name: name) }
        }
    }

    private mutating func add(name: String) {
        let name = Self.normalized(name)
        if !name.isEmpty { names.insert(name) }
    }

    /// Lowercased, one trailing dot dropped (`Example.COM.` is `example.com`).
    static func normalized(_ name: String) -> String {
        let lower = name.lowercased()
        return lower.hasSuffix(".") ? String(lower.dropLast()) : lower
    }

    /// Whether a request for `host` (a `Host` header's value, or the public host a trusted
    /// proxy forwarded: `name`, `name:port`, `a.b.c.d[:port]`, `[v6][:port]`) is answered.
    /// None, or one that is not a host, is not (when enforced).
    package func allows(_ host: String?) -> Bool {
        guard enforced else { return true }
        guard let host, let authority = ProxyForwarding.Authority(host: host) else { return false }
        let name = Self.normalized(authority.host)
        if name.hasPrefix("[") { return IPAddress.bytes(name) != nil }
        if IPAddress.ipv4(Substring(name)) != nil { return true }
        guard Self.isHostName(name) else { return false }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if names.contains(name) { return true }
        if let dot = name.firstIndex(of: "."), oneLabelUnder.contains(String(name[dot...])) { return true }
        return anyUnder.contains { name.hasSuffix($0) || name == $0.dropFirst() }
    }

    /// Labels of letters, digits, `-` and `_`, separated by single dots.
    static func isHostName(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 253 else { return false }
        return name.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            !label.isEmpty && label.utf8.allSatisfy { c in
                (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == 0x2D || c == 0x5F
            }
        }
    }

    /// Why an `--allow-host` value cannot be one: nil when it can.
    package static func problem(allowHost value: String) -> String? {
        let name = normalized(value)
        let bare = name.hasPrefix(".") ? String(name.dropFirst()) : name
        guard isHostName(bare) else {
            return "takes a host name without a port (tabd.example.com, or .example.com for every name under it), got '\(value.prefix(80))'"
        }
        return nil
    }
}
