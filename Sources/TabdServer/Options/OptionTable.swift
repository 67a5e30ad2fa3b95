import ArgumentParsing
import Coordinator
import JetStream
import Outbox
import WebSockets
import Portable

/// One of tabd's options, declared once: its name, the value it takes, what it sets (with
/// the value's type and range), its default as `--help` shows it (read from ``Options``'
/// own default), which options it excludes, and its help. Parsing, `--help` and the
/// `TABD_` variables all follow from ``Options/table``.
struct OptionSpec: Sendable {
    /// A field of ``Options`` an option sets (a key path literal: it captures nothing, so
    /// sharing it across threads is safe, which its type does not say).
    typealias Field<T> = WritableKeyPath<Options, T>

    /// `--rate-limit`.
    let name: String
    /// What the value is called in `--help` (`N`, `FILE`).
    let value: String
    /// What it does, without its default (added from `defaultText`).
    let help: String
    /// Its default as `--help` shows it (read from `Options()`), or nil to show none.
    let defaultText: (@Sendable (Options) -> String)?
    /// It may be given more than once; its variable holds a comma-separated list.
    var repeatable = false
    /// Options it excludes, either way round.
    var excludes: [String] = []
    /// Not shown in `--help` (an option that is refused with a reason).
    var hidden = false
    /// The whole numbers a numeric option takes, shown in `--help` after its default. Every
    /// one has an upper bound far below `Int.max`, so that no arithmetic on a value taken
    /// (twice a bound, a bound plus a reserve) can overflow.
    var range: ClosedRange<Int>?
    /// Sets the option from one value; `given` is how it was given (`--port`, `TABD_PORT`).
    let set: @Sendable (inout Options, _ value: String, _ given: String) throws(UsageError) -> Void

    /// The option's environment variable: `TABD_` and its name in upper case, dashes as
    /// underscores (`--web-root`: `TABD_WEB_ROOT`).
    var variable: String { "TABD_" + name.dropFirst(2).uppercased().replacing("-", with: "_") }

    /// A whole number in `range`.
    static func int(_ name: String, _ path: Field<Int>, value: String = "N", _ range: ClosedRange<Int>,
                    excludes: [String] = [], help: String) -> OptionSpec {
        nonisolated(unsafe) let path = path
        let shown: @Sendable (Options) -> String = { (o: Options) -> String in String(o[keyPath: path]) }
        return OptionSpec(name: name, value: value, help: help, defaultText: shown, excludes: excludes, range: range) {
            (o, text, given) throws(UsageError) in
            o[keyPath: path] = try Arguments.int(text, as: given, min: range.lowerBound, max: range.upperBound)
        }
    }

    /// `on` or `off`.
    static func onOff(_ name: String, _ path: Field<Bool>, excludes: [String] = [], help: String) -> OptionSpec {
        nonisolated(unsafe) let path = path
        return OptionSpec(name: name, value: "on|off", help: help, defaultText: { $0[keyPath: path] ? "on" : "off" }, excludes: excludes) {
            (o, text, given) throws(UsageError) in
            guard text == "on" || text == "off" else { throw UsageError("\(given) takes on or off, got '\(text.prefix(40))'") }
            o[keyPath: path] = text == "on"
        }
    }

    /// One of a type's cases, by name.
    static func choice<T: RawRepresentable & CaseIterable & Sendable>(_ name: String, _ value: String, _ path: Field<T>,
                                                                      help: String) -> OptionSpec where T.RawValue == String {
        nonisolated(unsafe) let path = path
        return OptionSpec(name: name, value: value, help: help, defaultText: { $0[keyPath: path].rawValue }) { (o, text, given) throws(UsageError) in
            guard let choice = T(rawValue: text) else {
                throw UsageError("\(given) must be \(Self.either(T.allCases.map(\.rawValue))), got '\(text.prefix(40))'")
            }
            o[keyPath: path] = choice
        }
    }

    /// A text that has a default.
    static func string(_ name: String, _ value: String, _ path: Field<String>, help: String) -> OptionSpec {
        nonisolated(unsafe) let path = path
        return OptionSpec(name: name, value: value, help: help, defaultText: { $0[keyPath: path] }) { (o, text, _) throws(UsageError) in
            o[keyPath: path] = text
        }
    }

    /// A text (a path, a name); `nonEmpty` refuses an empty one.
    static func text(_ name: String, _ value: String, _ path: Field<String?>, nonEmpty: Bool = true,
                     excludes: [String] = [], help: String) -> OptionSpec {
        nonisolated(unsafe) let path = path
        return OptionSpec(name: name, value: value, help: help, defaultText: nil, excludes: excludes) { (o, text, given) throws(UsageError) in
            if nonEmpty, text.isEmpty { throw UsageError("\(given) must not be empty") }
            o[keyPath: path] = text
        }
    }

    /// A value to quote in a usage error: at most 80 characters, with any user, password or
    /// token in it (before its last `@`) shown as `***` (``EngineURL``).
    static func quoted(_ text: String) -> String { String(EngineURL.redacted(text).prefix(80)) }

    /// `a`, `a or b`, `a, b or c`.
    static func either(_ words: [String]) -> String {
        words.count < 2 ? words.joined() : words.dropLast().joined(separator: ", ") + " or " + words.last!
    }

    /// Its lines in `--help`: the name and value, then the help (with the default) wrapped
    /// at 80 columns, beside it when the name is short enough, else below it.
    func helpLines(defaults: Options) -> [String] {
        let head = "  " + name + (value.isEmpty ? "" : " " + value)
        var text = help
        switch (defaultText, range) {
        case let (shown?, range?): text += " (default \(shown(defaults)); \(range.lowerBound) to \(range.upperBound))"
        case let (shown?, nil): text += " (default \(shown(defaults)))"
        case let (nil, range?): text += " (\(range.lowerBound) to \(range.upperBound))"
        case (nil, nil): break
        }
        let indent = 25
        var lines: [String] = []
        var line = head.count < indent - 1 ? head + String(repeating: " ", count: indent - head.count) : ""
        if line.isEmpty { lines.append(head); line = String(repeating: " ", count: indent) }
        var fresh = true
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if !fresh, line.count + 1 + word.count > 80 {
                lines.append(line)
                line = String(repeating: " ", count: indent)
                fresh = true
            }
            line += (fresh ? "" : " ") + word
            fresh = false
        }
        lines.append(line)
        return lines
    }
}

extension Options {
    /// Every option that takes a value, in the order `--help` lists them.
    static let table: [OptionSpec] = [
        .string("--host", "HOST", \.host, help: "address to listen on"),
        .int("--port", \.port, value: "PORT", 0...65535, help: "port to listen on; 0 picks a free one"),
        .text("--web-root", "PATH", \.webRoot, nonEmpty: false,
              help: "the web client's files (default: PREFIX/share/tabd/web of an installed tabd, else the checkout's web/)"),
        .text("--tabs", "FILE", \.tabsFile, nonEmpty: false,
              help: "the tabs of a new room, a JSON array of {id,title,icon,color,badge?} (default: home, favorites, profile)"),
        .text("--state", "PATH", \.state, excludes: ["--cluster"],
              help: "where state is stored (SQLite); ':memory:' keeps nothing (default: .tabd/state.sqlite in the checkout, else in the current directory, as for an installed tabd; only .tabd/ is created)"),
        .onOff("--state-sync", \.stateSync, excludes: ["--cluster"],
               help: "on: every commit is synced to disk before its commands are acknowledged, so an ack survives a power cut or a kernel crash; off: commits are written but not synced, faster, and a power cut or kernel crash may lose the last acknowledged commands (tabd's own crash loses none); logged as a warning at start"),
        .choice("--rooms", "auto|api", \.rooms,
                help: "auto: joining (or an API command to) an unknown room creates it; api: only PUT /api/rooms/ID does"),
        .int("--max-rooms", \.maxRooms, 1...10_000_000, help: "rooms that may exist, stored or loaded; creating more is refused (503)"),
        .int("--room-idle", \.roomIdle, value: "SECS", 0...86_400 * 365,
             help: "unload a room from memory after SECS without clients; it stays in the state file; 0 = never"),
        OptionSpec(name: "--cluster", value: "URLS", help: "be a node of a cluster whose rooms live in NATS JetStream at these comma-separated nats:// or tls:// URLs, without credentials (excludes --state); see docs/CLUSTER.md",
                   defaultText: nil, excludes: ["--state", "--state-sync"]) { (o, text, given) throws(UsageError) in
            let urls = text.split(separator: ",").map { $0.trimmingWhitespace }
            // A URL's user, password or token would be visible in ps, the environment and logs.
            if let url = urls.first(where: EngineURL.hasCredentials) {
                throw UsageError("\(given) takes URLs without credentials, got '\(EngineURL.redacted(url).prefix(200))': give the engine's user with --cluster-user NAME and its password in a file with --cluster-password-file FILE, or a NATS credentials file with --cluster-creds FILE (TABD_CLUSTER_USER, TABD_CLUSTER_PASSWORD_FILE, TABD_CLUSTER_CREDS)")
            }
            guard !urls.isEmpty, urls.allSatisfy({ $0.hasPrefix("nats://") || $0.hasPrefix("tls://") }) else {
                throw UsageError("\(given) takes nats://HOST:PORT URLs separated by commas, got '\(text.prefix(200))'")
            }
            o.cluster = urls
        },
        OptionSpec(name: "--node-name", value: "NAME", help: "this node's name in the cluster (default: host name and port)",
                   defaultText: nil) { (o, text, given) throws(UsageError) in
            guard Limits.isRoomID(text) else { throw UsageError("\(given) must be 1 to 64 of A-Z a-z 0-9 _ -, got '\(text.prefix(80))'") }
            o.nodeName = text
        },
        .onOff("--cluster-forwarding", \.clusterForwarding, excludes: ["--state"],
               help: "on: forward clients' commands to the node that wrote the room last, which appends them with its own; off: every node appends its clients' commands itself"),
        .text("--cluster-secret-file", "FILE", \.clusterSecretFile,
              help: "the keys this node shares with the cluster's other nodes (one per line, at least 32 bytes each; the first seals, every one opens): every message a node writes to the engine is sealed with them, and nothing else is believed. Required with --cluster; never the --auth-secret-file key (docs/CLUSTER.md)"),
        OptionSpec(name: "--cluster-unsigned", value: "accept|refuse",
                   help: "accept: also take unsealed messages, from nodes of a tabd that does not seal (phase one of a move to sealed messages, docs/CLUSTER.md); refuse: believe only sealed ones",
                   defaultText: { $0.clusterAcceptUnsigned ? "accept" : "refuse" }) { (o, text, given) throws(UsageError) in
            guard text == "accept" || text == "refuse" else { throw UsageError("\(given) takes accept or refuse, got '\(text.prefix(40))'") }
            o.clusterAcceptUnsigned = text == "accept"
        },
        OptionSpec(name: "--cluster-rooms", value: "shards|streams",
                   help: "where this node creates rooms: shards (subjects of the cluster's few shard streams) or streams (a stream per room, as a tabd before shards did: phase one of moving such a cluster to shards, docs/CLUSTER.md). Nodes read both",
                   defaultText: { $0.clusterRooms }) { (o, text, given) throws(UsageError) in
            guard text == "shards" || text == "streams" else { throw UsageError("\(given) takes shards or streams, got '\(text.prefix(40))'") }
            o.clusterRooms = text
        },
        .int("--cluster-shards", \.clusterShards, 1...1024,
             help: "how many shard streams a new cluster lays its rooms out in; read by the cluster's first node only (the engine keeps it for the cluster's life)"),
        .text("--cluster-tls-ca", "FILE", \.clusterTLSCA, excludes: ["--state"],
              help: "speak to the engine over TLS (as tls:// URLs do), its servers' certificates checked against the CAs in FILE (PEM; default: the system's CAs)"),
        .text("--cluster-tls-cert", "FILE", \.clusterTLSCert, excludes: ["--state"],
              help: "this node's certificate (PEM) for an engine that verifies its clients (mutual TLS); with --cluster-tls-key"),
        .text("--cluster-tls-key", "FILE", \.clusterTLSKey, excludes: ["--state"],
              help: "the key of --cluster-tls-cert (PEM)"),
        .text("--cluster-creds", "FILE", \.clusterCreds, excludes: ["--cluster-user", "--cluster-password-file", "--state"],
              help: "log in to the engine with a NATS credentials file (excludes --cluster-user)"),
        .text("--cluster-user", "NAME", \.clusterUser, excludes: ["--cluster-creds", "--state"],
              help: "log in to the engine as NAME, with the password in --cluster-password-file"),
        .text("--cluster-password-file", "FILE", \.clusterPasswordFile, excludes: ["--cluster-creds", "--state"],
              help: "the engine's password, read at start (a trailing newline is dropped); never on the command line or in a variable"),
        OptionSpec(name: "--cluster-password", value: "", help: "", defaultText: nil, hidden: true) { (_, _, given) throws(UsageError) in
            throw UsageError("\(given) is not taken: the engine's password is read from a file (--cluster-password-file)")
        },
        .int("--resume-window", \.resumeWindow, 0...1_000_000, help: "events kept per room for clients that resume"),
        .int("--presence-limit", \.presenceLimit, 1...Limits.maxClientsInSnapshot,
             help: "a room of more than N clients counts them instead of listing each join and leave"),
        .int("--presence-interval", \.presenceInterval, value: "MS", 1...3_600_000,
             help: "a counted room reports its changed count at most every MS milliseconds"),
        .int("--queue-limit", \.queueLimit, 1...1_000_000, help: "frames queued for one connection before it is closed as too slow, code 1008"),
        .int("--queue-bytes", \.queueBytes, 65_536...(1 << 40),
             help: "bytes queued for one connection (events, answers, snapshots) before it is closed as too slow, code 1008; at least 2 x --max-room-bytes"),
        .int("--queue-bytes-total", \.queueBytesTotal, 65_536...(1 << 40),
             help: "bytes queued for all connections together; past it the connections that are not reading and hold the most are closed as too slow"),
        .int("--max-room-bytes", \.maxRoomBytes, 16_384...(256 << 20),
             help: "what a room's tabs, page stacks and values may weigh together, as its snapshot does; a command that would pass it is refused invalid"),
        .int("--rate-limit", \.rateLimit, 0...1_000_000, help: "commands per second per connection, bursts of 2N; 0 = no limit"),
        OptionSpec(name: "--rate-limit-bytes", value: "N", help: "bytes per second per connection, bursts of 2N; 0 = no limit",
                   defaultText: { _ in "\(Options.defaultByteRate), or no limit when --rate-limit is 0" }, range: 0...Options.maxByteRate) {
            (o, text, given) throws(UsageError) in
            o.rateLimitBytes = try Arguments.int(text, as: given, min: 0, max: Options.maxByteRate)
        },
        .int("--max-clients", \.maxClients, 1...1_000_000, help: "connections beyond it are refused with 503"),
        .text("--tls-cert", "FILE", \.tlsCertificate,
              help: "serve HTTPS and WSS only, with the certificate in FILE (PEM, the chain after it, as Let's Encrypt's fullchain.pem); with --tls-key; SIGHUP reads both again"),
        .text("--tls-key", "FILE", \.tlsKey, help: "the certificate's private key (PEM, not encrypted)"),
        OptionSpec(name: "--allow-origin", value: "ORIGIN",
                   help: "also accept browsers from this origin, http(s)://HOST[:PORT] and nothing more (repeatable; not null): its pages may open /ws and import tabd.js and tabd-tab-bar.js; the HTTP API refuses (403) a browser of any other origin than tabd's own, and answers no CORS preflight",
                   defaultText: nil, repeatable: true) { (o, text, given) throws(UsageError) in
            switch AllowedOrigin.canonical(text) {
            case let .success(origin): o.allowOrigins.append(origin)
            case let .failure(problem):
                throw UsageError("\(given) takes an origin, http(s)://HOST[:PORT] as browsers send it (https://app.example, http://localhost:3000), got '\(OptionSpec.quoted(text))': \(problem)")
            }
        },
        OptionSpec(name: "--allow-host", value: "NAME",
                   help: "while no token or key is set, also answer requests for the host NAME (repeatable; .NAME: it and every name under it); tabd answers IP addresses, localhost, *.localhost, --host, its certificate's names and the hosts of --allow-origin, and refuses other Host headers with 421 (a defence against DNS rebinding)",
                   defaultText: nil, repeatable: true) { (o, text, given) throws(UsageError) in
            if let problem = HostPolicy.problem(allowHost: text) { throw UsageError("\(given) \(problem)") }
            o.allowHosts.append(text)
        },
        OptionSpec(name: "--trusted-proxy", value: "ADDR",
                   help: "a reverse proxy (an address or CIDR, repeatable) whose Forwarded or X-Forwarded-For/-Host/-Proto headers give the client's address, host and scheme; from any other peer they are ignored",
                   defaultText: nil, repeatable: true) { (o, text, given) throws(UsageError) in
            guard let range = TrustedProxies.range(text) else {
                throw UsageError("\(given) takes an IPv4 or IPv6 address or CIDR range (10.0.0.0/8, ::1), got '\(text.prefix(80))'")
            }
            o.trustedProxies.add(range)
        },
        .text("--auth-secret-file", "FILE", \.authSecretFile, nonEmpty: false,
              help: "accept signed tokens (HS256 JWTs with room and role) signed with the key in FILE (at least 32 bytes); SIGHUP reads it again; see 'tabd token --help'"),
        .text("--auth-keys", "FILE", \.authKeys, nonEmpty: false,
              help: "accept signed tokens of every key in the key set FILE (JSON: each key's kid, alg HS256, ES256 or RS256, its secret file or PEM public key, optional iss and aud); beside --auth-secret-file or alone; SIGHUP reads it again"),
        .text("--auth-issuer", "ISS", \.authIssuer, help: "signed tokens must carry this iss claim (a key of --auth-keys may name its own)"),
        .text("--auth-audience", "AUD", \.authAudience, help: "signed tokens must carry this aud claim, or an aud array holding it (a key of --auth-keys may name its own)"),
        .int("--auth-leeway", \.authLeeway, value: "SECS", 0...10, help: "take signed tokens SECS after their exp and before their nbf, for clocks a little apart"),
        .text("--token", "TOKEN", \.token, excludes: ["--token-file"],
              help: "an admin token for every room, required (as ?token= or 'Authorization: Bearer') unless a signed token is given; visible in ps: prefer --token-file or TABD_TOKEN"),
        .text("--token-file", "FILE", \.tokenFile, nonEmpty: false, excludes: ["--token"], help: "the same, read from FILE"),
        OptionSpec(name: "--webhook", value: "URL",
                   help: "post every event of the outbox (--webhook-events) to URL, http:// or https:// (repeatable): at least once, in order per room, retried with backoff while the receiver is down, slow or failing",
                   defaultText: nil, repeatable: true) { (o, text, given) throws(UsageError) in
            do throws(WebhookTarget.Invalid) { o.webhooks.append(try WebhookTarget(text).url) } catch { throw UsageError(error.description.replacing("--webhook", with: given)) }
        },
        OptionSpec(name: "--webhook-events", value: "LIST",
                   help: "the events the outbox keeps, for webhooks and GET /api/events: a comma-separated list of roomCreated, roomDeleted, clientJoined, clientLeft and batch (every batch of every room); given without --webhook, tabd keeps the outbox for GET /api/events alone",
                   defaultText: { _ in "roomCreated,roomDeleted,clientJoined,clientLeft" }) { (o, text, given) throws(UsageError) in
            switch OutboxKinds.parse(text) {
            case let .success(kinds):
                o.webhookEvents = kinds
                o.webhookEventsGiven = true
            case let .failure(error):
                throw UsageError("\(given) takes a list of roomCreated, roomDeleted, clientJoined, clientLeft and batch; '\(OptionSpec.quoted(error.name))' is none of them")
            }
        },
        .text("--webhook-secret-file", "FILE", \.webhookSecretFile, nonEmpty: false,
              help: "sign every webhook request as Standard Webhooks do (webhook-id, webhook-timestamp, webhook-signature: HMAC-SHA256) with the secret in FILE (whsec_ and base64, or 24 to 64 bytes; two lines during a rotation: both sign); SIGHUP reads it again"),
        .text("--webhook-ca-file", "FILE", \.webhookCAFile, nonEmpty: false,
              help: "also trust these CA certificates (PEM) for https:// webhooks, beside the system's"),
        .int("--webhook-outbox-bytes", \.webhookOutboxBytes, 65_536...(1 << 40),
             help: "what the outbox's events may weigh; past it the oldest go, and a webhook or reader that had not got them gets a gap event"),
        .int("--ping-interval", \.pingInterval, value: "SECS", 1...3600, help: "ping a silent peer after SECS, drop it after 2×SECS"),
        .int("--request-timeout", \.requestTimeout, value: "SECS", 1...3600,
             help: "an HTTP request's head must arrive within SECS of the connection's start (or of the previous answer), its body within SECS more, else 408; an idle connection is closed after SECS"),
        .choice("--event-loop", "LOOP", \.eventLoop,
                help: "libuv, or poll (libwebsockets' own loop, whose every pass costs every open socket: for comparison)"),
        .choice("--log-level", "LEVEL", \.logLevel, help: "error, warn, info or debug"),
        .choice("--log-format", "FORMAT", \.logFormat,
                help: "text, or json: one object per line with time, level and message, for log collectors"),
    ]

    /// The option named `name`, if it takes a value.
    static func spec(_ name: String) -> OptionSpec? { specs[name] }

    private static let specs: [String: OptionSpec] = Dictionary(uniqueKeysWithValues: table.map { ($0.name, $0) })
}
