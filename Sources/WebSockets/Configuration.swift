/// Everything a `WebSocketServer` is set up with; fixed once the server exists.
public struct Configuration: Sendable {
    /// How much libwebsockets logs to stderr.
    public typealias LogLevel = WebSocketLogLevel

    /// The address to listen on: an IPv4/IPv6 literal, or `0.0.0.0` / `*` / `""` for all.
    public var host: String = "127.0.0.1"
    /// The port; 0 picks a free one (read it back from `WebSocketServer.port`).
    public var port: Int = 8080
    /// A directory served at `/` (index `index.html`); nil serves no files.
    /// Missing files answer 404.
    public var webRoot: String? = nil
    /// Exact paths answered by `WebSocketServerHandler.httpRequest`, e.g. `["/healthz", "/metrics"]`.
    public var dynamicPaths: [String] = []
    /// Path prefixes answered by `WebSocketServerHandler.httpRequest`, any method: every path
    /// that starts with one, e.g. `["/api/"]`. Each starts and ends with `/`.
    public var dynamicPrefixes: [String] = []
    /// The longest request body read for the handler; a longer one reaches it unread, with
    /// `HTTPRequest.bodyTooLarge` set.
    public var maxRequestBodyBytes: Int = 65_536
    /// The only path a WebSocket upgrade is accepted on; others answer 404.
    public var webSocketPath: String = "/ws"
    /// The subprotocol accepted when offered; not required (a plain `new WebSocket(url)` works).
    /// A client offering only other subprotocols is refused with 400.
    public var subprotocol: String = "tabd.v1"
    /// The largest message accepted, counted across fragments; a larger one closes with 1009.
    public var maxMessageBytes: Int = 65_536
    /// Frames that may wait for one connection (broadcasts not yet written plus direct sends);
    /// a connection further behind is closed with 1008 `too slow`.
    public var queueLimit: Int = 10_000
    /// Bytes that may wait for one connection (broadcasts not yet written, direct sends, and
    /// the unsent tail of its last write); past it, in more than one frame, it is closed with
    /// 1008 `too slow`. What `WebSocketServer.activate` hands over (a welcome, a replay) does
    /// not count toward it.
    public var queueBytes: Int = 8 << 20
    /// Bytes that may wait for every connection together (each broadcast counted once);
    /// past it, connections whose sockets take no more are closed with 1008 `too slow`, the
    /// one with the most bytes waiting first. Connections that read are never closed for it.
    public var totalQueueBytes: Int = 256 << 20
    /// Seconds a request has for its head, from the connection's start or the previous
    /// answer, and as long again for its body (slowloris, stalled bodies: 408). An idle
    /// keep-alive connection is closed after as long.
    public var requestTimeoutSeconds: Int = 5
    /// Seconds without traffic from a peer before the server pings it.
    public var pingIntervalSeconds: Int = 30
    /// Seconds without traffic from a peer (including pongs) before the server hangs up.
    public var hangupSeconds: Int = 60
    /// How much libwebsockets logs.
    public var logLevel: LogLevel = .warn
    /// Where libwebsockets' own log lines, and the server's few own (accept() failing), go,
    /// each with its level; stderr when nil.
    public var logSink: (@Sendable (LogLevel, String) -> Void)? = nil
    /// Adds strict security headers to files (a CSP that forbids inline script and style,
    /// no framing, no referrer), the set libwebsockets calls best practice.
    public var strictSecurityHeaders: Bool = false
    /// Origins (`scheme://host[:port]`, as browsers send `Origin`) whose pages may import the
    /// web root's JavaScript modules (`.js`, `.mjs`): a GET or HEAD of one with such an
    /// `Origin` is answered with `access-control-allow-origin` naming it, and an `OPTIONS`
    /// preflight with 204. Every other origin gets no such header. Module answers always
    /// carry `vary: origin`.
    public var moduleOrigins: [String] = []
    /// Directives every file is answered with in a `content-security-policy` header (tabd:
    /// `frame-ancestors 'self'`), joined to the strict policy's when `strictSecurityHeaders`
    /// is on (a directive that policy already has is left as it says); nil: none.
    public var fileSecurityPolicy: String? = nil
    /// When set, creating the server fails unless this many connections fit under the
    /// open-file limit (the soft limit is raised toward the hard one if needed).
    public var maxConnections: Int? = nil
    /// The event loop the server runs on.
    public var eventLoop: WebSocketEventLoop = .libuv
    /// With `maxConnections`: also lower the soft open-file limit to `maxConnections` + 1,088
    /// when it is higher (libwebsockets' fd table takes that size, and Debian's build scans it
    /// at every close). For a process that is the server alone (tabd); the limit is the
    /// process's.
    public var fitsOpenFileLimit = false
    /// Serve HTTPS and WSS only, with this certificate and key (read at creation, and
    /// again by `WebSocketServer.reloadTLS()`); nil: plain HTTP and WebSocket.
    public var tls: TLSFiles? = nil

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        webRoot: String? = nil,
        dynamicPaths: [String] = [],
        dynamicPrefixes: [String] = [],
        maxRequestBodyBytes: Int = 65_536,
        webSocketPath: String = "/ws",
        subprotocol: String = "tabd.v1",
        maxMessageBytes: Int = 65_536,
        queueLimit: Int = 10_000,
        pingIntervalSeconds: Int = 30,
        hangupSeconds: Int = 60,
        logLevel: LogLevel = .warn,
        logSink: (@Sendable (LogLevel, String) -> Void)? = nil,
        strictSecurityHeaders: Bool = false,
        maxConnections: Int? = nil,
        eventLoop: WebSocketEventLoop = .libuv
    ) {
        self.host = host
        self.port = port
        self.webRoot = webRoot
        self.dynamicPaths = dynamicPaths
        self.dynamicPrefixes = dynamicPrefixes
        self.maxRequestBodyBytes = maxRequestBodyBytes
        self.webSocketPath = webSocketPath
        self.subprotocol = subprotocol
        self.maxMessageBytes = maxMessageBytes
        self.queueLimit = queueLimit
        self.pingIntervalSeconds = pingIntervalSeconds
        self.hangupSeconds = hangupSeconds
        self.logLevel = logLevel
        self.logSink = logSink
        self.strictSecurityHeaders = strictSecurityHeaders
        self.maxConnections = maxConnections
        self.eventLoop = eventLoop
    }

    /// Throws `WebSocketServerError.invalidConfiguration` for values out of range.
    func validate() throws(WebSocketServerError) {
        func check(_ ok: Bool, _ message: @autoclosure () -> String) throws(WebSocketServerError) {
            if !ok { throw .invalidConfiguration(message()) }
        }
        try check((0...65_535).contains(port), "port \(port) is not in 0...65535")
        try check(webSocketPath.hasPrefix("/"), "webSocketPath must start with /")
        for path in dynamicPaths {
            try check(path.hasPrefix("/") && path.count > 1, "dynamic path \(path) must start with / and not be /")
            try check(path.utf8.count < 256, "dynamic path \(path.prefix(40))... is longer than 255 bytes")
            try check(path != webSocketPath, "dynamic path \(path) is also the WebSocket path")
        }
        for prefix in dynamicPrefixes {
            try check(
                prefix.hasPrefix("/") && prefix.hasSuffix("/") && prefix.count > 1,
                "dynamic prefix \(prefix) must start and end with / and not be /")
            try check(prefix.utf8.count < 256, "dynamic prefix \(prefix.prefix(40))... is longer than 255 bytes")
            try check(!webSocketPath.hasPrefix(prefix), "the WebSocket path is under the dynamic prefix \(prefix)")
        }
        try check(maxRequestBodyBytes >= 0, "maxRequestBodyBytes must not be negative")
        try check(
            !subprotocol.isEmpty && subprotocol.utf8.count < 64
                && subprotocol.unicodeScalars.allSatisfy { $0.isASCII && $0 != "," && $0 != " " },
            "subprotocol must be a short ASCII token")
        try check(maxMessageBytes > 0, "maxMessageBytes must be positive")
        try check((1...3600).contains(requestTimeoutSeconds), "requestTimeoutSeconds must be in 1...3600")
        try check(queueLimit > 0, "queueLimit must be positive")
        try check(queueBytes > 0 && totalQueueBytes >= queueBytes, "queueBytes must be positive and at most totalQueueBytes")
        try check((1...65_535).contains(pingIntervalSeconds), "pingIntervalSeconds must be in 1...65535")
        try check(
            (1...65_535).contains(hangupSeconds) && hangupSeconds > pingIntervalSeconds,
            "hangupSeconds must be in 1...65535 and larger than pingIntervalSeconds")
        if let maxConnections {
            try check(maxConnections > 0, "maxConnections must be positive")
        }
    }
}
