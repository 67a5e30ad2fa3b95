/// Where a client connects and as whom: the `/ws` URL with its query, built again for
/// each (re)connection with the `resume` point.
struct Endpoint: Sendable {
    /// `ws://host:port/path` or `wss://…`, without a query.
    var base: String
    /// Query parameters the caller's URL already had, kept as they are.
    var extraQuery: String
    var room: String?
    var name: String?
    /// Sent as `Authorization: Bearer`, never in the URL (proxies log URLs).
    var token: String?

    /// The handshake's `Authorization` header, when there is a token.
    var authorization: String? { token.map { "Bearer \($0)" } }

    /// Accepts `ws://HOST:PORT[/PATH][?QUERY]` and `http://…` (the address tabd prints),
    /// and `wss://` and `https://` for TLS; an empty path or `/` becomes `/ws`.
    init(url: String, room: String?, name: String?, token: String?) throws(TabdClientError) {
        var rest: Substring
        let secure: Bool
        if url.hasPrefix("ws://") { (rest, secure) = (url.dropFirst(5), false) }
        else if url.hasPrefix("http://") { (rest, secure) = (url.dropFirst(7), false) }
        else if url.hasPrefix("wss://") { (rest, secure) = (url.dropFirst(6), true) }
        else if url.hasPrefix("https://") { (rest, secure) = (url.dropFirst(8), true) }
        else { throw .invalidURL("'\(url)' does not start with ws://, wss://, http:// or https://") }
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        guard !authority.isEmpty else { throw .invalidURL("'\(url)' names no host") }
        rest = rest.dropFirst(authority.count)
        var path = String(rest.prefix { $0 != "?" })
        let query = rest.dropFirst(path.count).dropFirst()
        if path.isEmpty || path == "/" { path = "/ws" }
        base = "\(secure ? "wss" : "ws")://\(authority)\(path)"
        extraQuery = String(query)
        self.room = room; self.name = name; self.token = token
        guard Self.isValid(self.url(resume: nil)) else { throw .invalidURL("'\(url)'") }
    }

    /// The URL for one connection; `resume` is the last seq seen and its epoch.
    func url(resume: (seq: Int, epoch: String)?) -> String {
        var items: [String] = extraQuery.isEmpty ? [] : [extraQuery]
        func add(_ key: String, _ value: String?) {
            if let value { items.append("\(key)=\(Self.encode(value))") }
        }
        add("room", room)
        add("name", name)
        if let resume {
            add("resume", String(resume.seq))
            add("epoch", resume.epoch)
        }
        return items.isEmpty ? base : base + "?" + items.joined(separator: "&")
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    static func encode(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF")
                out += "%\(hex[Int(byte >> 4)])\(hex[Int(byte & 15)])"
            }
        }
        return out
    }

    private static func isValid(_ url: String) -> Bool {
        // host:port must parse the way the transport will read it
        let authority = url.drop { $0 != "/" }.dropFirst(2).prefix { $0 != "/" }
        if let colon = authority.lastIndex(of: ":"), !authority.hasSuffix("]") {
            guard let port = Int(authority[authority.index(after: colon)...]), (1...65_535).contains(port) else { return false }
        }
        return !authority.isEmpty && !authority.contains(" ")
    }
}
