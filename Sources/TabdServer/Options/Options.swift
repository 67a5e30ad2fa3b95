import ArgumentParsing
import Auth
import Coordinator
import Foundation
import WebSockets

/// tabd's command line (PROTOCOL.md "The daemon").
public struct Options: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var webRoot: String?
    public var tabsFile: String?
    public var maxClients = 10_000
    public var logLevel = Log.Level.info
    public var logFormat = Log.Format.text
    public var resumeWindow = 10_000
    /// `--presence-limit`: a room past this many clients counts them (1–100).
    public var presenceLimit = Limits.maxClientsInSnapshot
    /// `--presence-interval`: milliseconds between a counted room's count reports.
    public var presenceInterval = 1_000
    public var queueLimit = 10_000
    /// `--queue-bytes`: bytes that may wait for one connection before it is closed as too slow.
    public var queueBytes = 8 << 20
    /// `--queue-bytes-total`: bytes that may wait for every connection together.
    public var queueBytesTotal = 256 << 20
    /// `--max-room-bytes`: what a room's tabs, stacks and values may weigh together.
    public var maxRoomBytes = Coordinator.Configuration.defaultMaxStateBytes
    public var rateLimit = 100
    /// Set by `--rate-limit-bytes`; see ``byteRateLimit``.
    public var rateLimitBytes: Int?
    public var allowOrigins: [String] = []
    /// `--allow-host`: names tabd answers to while no credentials are configured, beyond
    /// those it knows (``HostPolicy``).
    public var allowHosts: [String] = []
    /// `--trusted-proxy`: peers whose forwarding headers are believed.
    var trustedProxies = TrustedProxies()
    /// `--token`: an admin credential for every room.
    public var token: String?
    /// `--token-file`: the same, read from a file.
    public var tokenFile: String?
    /// `--auth-secret-file`: turns on signed tokens.
    public var authSecretFile: String?
    /// `TABD_TOKEN` and `TABD_AUTH_SECRET`, used when the options do not say.
    public var environmentToken: String?
    public var environmentSecret: String?
    public var pingInterval = 30
    public var requestTimeout = 5
    public var eventLoop = WebSocketEventLoop.libuv
    public var state: String?
    /// `--state-sync on|off`: sync each commit of the state file before its acks (on, the
    /// default), or only write it (off: an ack then survives tabd's crash, not a power cut).
    public var stateSync = true
    public var rooms = RoomCreation.auto
    public var maxRooms = 100_000
    public var roomIdle = 300
    /// `--cluster`: the engine's URLs; this tabd is then a node of a cluster.
    public var cluster: [String] = []
    /// `--cluster-tls-ca`, `--cluster-tls-cert`, `--cluster-tls-key`: TLS to the engine
    /// (PEM files); see ``engineSecurity(warn:)``.
    public var clusterTLSCA: String?
    public var clusterTLSCert: String?
    public var clusterTLSKey: String?
    /// `--cluster-creds`: a NATS credentials file to log in to the engine with.
    public var clusterCreds: String?
    /// `--cluster-user` and `--cluster-password-file`: the engine's user, and the file
    /// that holds its password (never the password itself).
    public var clusterUser: String?
    public var clusterPasswordFile: String?
    /// `--node-name`: this node's name in the cluster (default: host name and port).
    public var nodeName: String?
    /// `--cluster-forwarding on|off`: send clients' commands to the node that writes the
    /// room (on, the default), or have every node append its clients' commands itself.
    public var clusterForwarding = true
    /// `--cluster-secret-file`: the keys the cluster's nodes seal their engine messages with.
    public var clusterSecretFile: String?
    /// `--cluster-unsigned accept|refuse`: whether unsealed engine messages are taken too
    /// (phase one of moving a cluster to sealed messages).
    public var clusterAcceptUnsigned = false
    /// `--tls-cert` and `--tls-key`: serve HTTPS and WSS only (both or neither).
    public var tlsCertificate: String?
    public var tlsKey: String?

    /// The TLS files, when both are given.
    public var tls: TLSFiles? {
        guard let tlsCertificate, let tlsKey else { return nil }
        return TLSFiles(certificateFile: tlsCertificate, keyFile: tlsKey)
    }

    /// The bytes per second a connection may send (0: no limit).
    public var byteRateLimit: Int { rateLimitBytes ?? (rateLimit == 0 ? 0 : 1 << 20) }

    public static let version = "0.1.0"

    public static let help = """
    tabd \(version): a tab coordinator that streams tab selection and lifecycle events over WebSocket.

    USAGE: tabd [options]

    OPTIONS:
      --host HOST            address to listen on (default 127.0.0.1)
      --port PORT            port to listen on; 0 picks a free one (default 8080)
      --web-root PATH        the web client's files (default: PREFIX/share/tabd/web of
                             an installed tabd, else the checkout's web/)
      --tabs FILE            the tabs of a new room, a JSON array of
                             {id,title,icon,color,badge?} (default: home, favorites, profile)
      --state PATH           where state is stored (SQLite); ':memory:' keeps nothing
                             (default: .tabd/state.sqlite in the checkout, else in
                             the current directory, as for an installed tabd; only
                             .tabd/ is created)
      --state-sync on|off    on: every commit is synced to disk before its commands
                             are acknowledged, so an ack survives a power cut or a
                             kernel crash (default on); off: commits are written but
                             not synced, faster, and a power cut or kernel crash may
                             lose the last acknowledged commands (tabd's own crash
                             loses none); logged as a warning at start
      --rooms auto|api       auto: joining (or an API command to) an unknown room
                             creates it; api: only PUT /api/rooms/ID does (default auto)
      --max-rooms N          rooms that may exist, stored or loaded; creating more is
                             refused (503) (default 100000)
      --room-idle SECS       unload a room from memory after SECS without clients; it
                             stays in the state file; 0 = never (default 300)
      --cluster URLS         be a node of a cluster whose rooms live in NATS JetStream
                             at these comma-separated nats:// URLs (excludes --state);
                             see docs/CLUSTER.md
      --node-name NAME       this node's name in the cluster (default: host name and port)
      --cluster-forwarding on|off
                             forward clients' commands to the node that wrote the
                             room last, which appends them with its own (default on);
                             off: every node appends its clients' commands itself
      --cluster-secret-file FILE
                             the keys this node shares with the cluster's other
                             nodes (one per line, at least 32 bytes each; the first
                             seals, every one opens): every message a node writes
                             to the engine is sealed with them, and nothing else is
                             believed. Required with --cluster; never the
                             --auth-secret-file key (docs/CLUSTER.md)
      --cluster-unsigned accept|refuse
                             accept: also take unsealed messages, from nodes of a
                             tabd that does not seal (phase one of a move to sealed
                             messages, docs/CLUSTER.md) (default refuse)
      --cluster-tls-ca FILE  speak to the engine over TLS (as tls:// URLs do), its
                             servers' certificates checked against the CAs in FILE
                             (PEM; default: the system's CAs)
      --cluster-tls-cert FILE
      --cluster-tls-key FILE this node's certificate and key (PEM) for an engine
                             that verifies its clients (mutual TLS); both or neither
      --cluster-creds FILE   log in to the engine with a NATS credentials file
                             (excludes --cluster-user)
      --cluster-user NAME    log in to the engine as NAME, with the password in
      --cluster-password-file FILE
                             FILE, read at start (a trailing newline is dropped);
                             never on the command line or in a variable
      --resume-window N      events kept per room for clients that resume (default 10000)
      --presence-limit N     a room of more than N clients counts them instead of
                             listing each join and leave (1-100, default 100)
      --presence-interval MS a counted room reports its changed count at most every
                             MS milliseconds (default 1000)
      --queue-limit N        frames queued for one connection before it is closed
                             as too slow, code 1008 (default 10000)
      --queue-bytes N        bytes queued for one connection (events, answers,
                             snapshots) before it is closed as too slow, code 1008;
                             at least 2 x --max-room-bytes (default 8388608)
      --queue-bytes-total N  bytes queued for all connections together; past it the
                             connections that are not reading and hold the most
                             are closed as too slow (default 268435456)
      --max-room-bytes N     what a room's tabs, page stacks and values may weigh
                             together, as its snapshot does; a command that would
                             pass it is refused invalid (default 2097152)
      --rate-limit N         commands per second per connection, bursts of 2N;
                             0 = no limit (default 100)
      --rate-limit-bytes N   bytes per second per connection, bursts of 2N;
                             0 = no limit (default 1048576, or no limit
                             when --rate-limit is 0)
      --max-clients N        connections beyond it are refused with 503 (default 10000)
      --tls-cert FILE        serve HTTPS and WSS only, with the certificate in FILE
                             (PEM, the chain after it, as Let's Encrypt's fullchain.pem);
                             with --tls-key; SIGHUP reads both again
      --tls-key FILE         the certificate's private key (PEM, not encrypted)
      --allow-origin ORIGIN  also accept browsers from this origin (repeatable): its
                             pages may open /ws and import tabd.js and tabd-tab-bar.js;
                             the HTTP API refuses (403) a browser of any other origin
                             than tabd's own, and answers no CORS preflight
      --allow-host NAME      while no token or key is set, also answer requests for
                             the host NAME (repeatable; .NAME: it and every name under
                             it); tabd answers IP addresses, localhost, *.localhost,
                             --host, its certificate's names and the hosts of
                             --allow-origin, and refuses other Host headers with 421
                             (a defence against DNS rebinding)
      --trusted-proxy ADDR   a reverse proxy (an address or CIDR, repeatable) whose
                             Forwarded or X-Forwarded-For/-Host/-Proto headers give
                             the client's address, host and scheme; from any other
                             peer they are ignored
      --auth-secret-file FILE
                             accept signed tokens (HS256 JWTs with room and role)
                             signed with the key in FILE (at least 32 bytes);
                             see 'tabd token --help'
      --token TOKEN          an admin token for every room, required (as ?token= or
                             'Authorization: Bearer') unless a signed token is given;
                             visible in ps: prefer --token-file or TABD_TOKEN
      --token-file FILE      the same, read from FILE
      --ping-interval SECS   ping a silent peer after SECS, drop it after 2×SECS (default 30)
      --request-timeout SECS an HTTP request's head must arrive within SECS of the
                             connection's start (or of the previous answer), its body
                             within SECS more, else 408; an idle connection is closed
                             after SECS (default 5)
      --event-loop LOOP      libuv, or poll (libwebsockets' own loop, whose every pass
                             costs every open socket: for comparison) (default libuv)
      --log-level LEVEL      error, warn, info or debug (default info)
      --log-format FORMAT    text, or json: one object per line with time, level and
                             message, for log collectors (default text)
      -h, --help             show this help
      --version              show the version

    ENVIRONMENT:
      Every option that takes a value can be set as TABD_ and its name in upper case,
      dashes as underscores: TABD_HOST, TABD_PORT=9000, TABD_STATE, TABD_WEB_ROOT,
      TABD_LOG_FORMAT=json, TABD_TOKEN_FILE, TABD_AUTH_SECRET_FILE, TABD_CLUSTER,
      TABD_CLUSTER_SECRET_FILE, ...
      A repeatable option takes a comma-separated list: TABD_ALLOW_ORIGIN=URL,URL,
      TABD_ALLOW_HOST=NAME,NAME.
      The command line wins: a variable is ignored when its option is given.
      Two variables hold the credential itself instead:
      TABD_TOKEN             the admin token, when neither --token nor --token-file is given
      TABD_AUTH_SECRET       the signing key, when --auth-secret-file is not given

    SUBCOMMANDS:
      tabd token ...         print a signed token (tabd token --help)

    With any token or key set, /ws, the HTTP API and /metrics need credentials.
    The first line on stdout once listening is: tabd listening on http://HOST:PORT/
    (https:// with --tls-cert).
    """

    /// Every option at its default.
    public init() {}

    public enum ParseResult: Sendable { case run(Options), exit(String, code: Int32) }

    /// The command line, then the environment: every option that takes a value may also be
    /// given as `TABD_` and its name in upper case with `_` for `-` (`--web-root`:
    /// `TABD_WEB_ROOT`); a repeatable option's variable holds a comma-separated list. The
    /// command line wins: a variable is not read when its option, or one that excludes it,
    /// is given. `TABD_TOKEN` and `TABD_AUTH_SECRET` are not `--token` and a key file but
    /// the credentials themselves (``authenticator(warn:)``); other `TABD_` names are not
    /// tabd's and are left alone.
    public static func parse(_ args: [String], environment: [String: String] = [:]) -> ParseResult {
        var o = Options()
        o.environmentToken = environment["TABD_TOKEN"]
        o.environmentSecret = environment["TABD_AUTH_SECRET"]
        // Each option set so far, with how it was given (`--state`, `TABD_STATE`), for errors.
        var given: [String: String] = [:]
        do throws(UsageError) {
            var line = Arguments(args)
            while let arg = line.next() {
                switch arg {
                case "-h", "--help": return .exit(help, code: 0)
                case "--version": return .exit("tabd \(version)", code: 0)
                default:
                    let known = try o.set(arg, as: arg) { () throws(UsageError) -> String in try line.value(of: arg) }
                    guard known else { throw UsageError("unknown option '\(arg.prefix(80))'") }
                    given[arg] = arg
                }
            }
            let onCommandLine = given
            for (variable, text) in environment.sorted(by: { $0.key < $1.key }) {
                guard let option = Self.option(ofVariable: variable),
                      !([option] + Self.excluded(by: option)).contains(where: { onCommandLine[$0] != nil }) else { continue }
                let values = Self.repeatable.contains(option)
                    ? text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                    : [text]
                for value in values {
                    guard try o.set(option, as: variable, value: { value }) else { break }
                    given[option] = variable
                }
            }
            if let a = given["--token"], let b = given["--token-file"] { throw UsageError("give \(a) or \(b), not both") }
            if o.queueBytes < 2 * o.maxRoomBytes {
                throw UsageError("--queue-bytes (\(o.queueBytes)) must be at least twice --max-room-bytes (\(o.maxRoomBytes)): a connection must be able to hold a room's largest snapshot and the events after it")
            }
            if o.queueBytesTotal < o.queueBytes {
                throw UsageError("--queue-bytes-total (\(o.queueBytesTotal)) must be at least --queue-bytes (\(o.queueBytes))")
            }
            if let a = given["--state"] ?? given["--state-sync"], let b = given["--cluster"] {
                throw UsageError("\(a) and \(b) exclude each other: a cluster keeps its rooms in the engine")
            }
            if given["--cluster"] == nil, let a = Self.engineOptions.lazy.compactMap({ given[$0] }).first {
                throw UsageError("\(a) is for a node of a cluster: it needs --cluster")
            }
            if let a = given["--cluster-creds"], let b = given["--cluster-user"] ?? given["--cluster-password-file"] {
                throw UsageError("\(a) and \(b) exclude each other: give a credentials file, or a user and a password file")
            }
            for (x, y) in [("--tls-cert", "--tls-key"), ("--cluster-user", "--cluster-password-file"), ("--cluster-tls-cert", "--cluster-tls-key")] {
                if let a = given[x] ?? given[y], given[x] == nil || given[y] == nil { throw UsageError("\(a) needs \(given[x] == nil ? x : y) too") }
            }
        } catch {
            return .exit("tabd: \(error.message)\nRun 'tabd --help' for the options.", code: 2)
        }
        return .run(o)
    }

    /// How a node reaches the cluster's engine: only with `--cluster`.
    private static let engineOptions = ["--cluster-tls-ca", "--cluster-tls-cert", "--cluster-tls-key",
                                        "--cluster-creds", "--cluster-user", "--cluster-password-file", "--cluster-forwarding"]

    /// Options that may be given more than once; their variables hold comma-separated lists.
    private static let repeatable: Set<String> = ["--allow-origin", "--allow-host", "--trusted-proxy"]

    /// The options one of which excludes the other, both ways.
    private static func excluded(by option: String) -> [String] {
        switch option {
        case "--token": ["--token-file"]
        case "--token-file": ["--token"]
        case "--state": ["--cluster"]
        case "--cluster": ["--state", "--state-sync"]
        case "--state-sync": ["--cluster"]
        case "--cluster-creds": ["--cluster-user", "--cluster-password-file", "--state"]
        case "--cluster-user", "--cluster-password-file": ["--cluster-creds", "--state"]
        case "--cluster-tls-ca", "--cluster-tls-cert", "--cluster-tls-key", "--cluster-forwarding": ["--state"]
        default: []
        }
    }

    /// `--web-root` for `TABD_WEB_ROOT`; nil for a name outside the rule (not `TABD_`, not
    /// upper case, or `TABD_TOKEN` and `TABD_AUTH_SECRET`, which hold credentials).
    static func option(ofVariable name: String) -> String? {
        guard name.hasPrefix("TABD_"), name.count > 5, name != "TABD_TOKEN", name != "TABD_AUTH_SECRET",
              name.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber || $0 == "_") }) else { return nil }
        return "--" + name.dropFirst(5).lowercased().replacingOccurrences(of: "_", with: "-")
    }

    /// Sets `option` (`--port`) from `value()` if it is an option that takes a value, and
    /// says whether it was; `name` is how it was given (`--port`, `TABD_PORT`), for errors.
    /// `value()` is called only for an option that takes a value.
    private mutating func set(_ option: String, as name: String, value: () throws(UsageError) -> String) throws(UsageError) -> Bool {
        func int(min: Int, max: Int = .max) throws(UsageError) -> Int {
            try Arguments.int(try value(), as: name, min: min, max: max)
        }
        func onOff() throws(UsageError) -> Bool {
            let v = try value()
            guard v == "on" || v == "off" else { throw UsageError("\(name) takes on or off, got '\(v.prefix(40))'") }
            return v == "on"
        }
        func nonEmpty() throws(UsageError) -> String {
            let v = try value()
            guard !v.isEmpty else { throw UsageError("\(name) must not be empty") }
            return v
        }
        switch option {
        case "--host": host = try value()
        case "--port": port = try int(min: 0, max: 65535)
        case "--web-root": webRoot = try value()
        case "--tabs": tabsFile = try value()
        case "--state":
            let v = try value()
            guard !v.isEmpty else { throw UsageError("\(name) must not be empty") }
            state = v
        case "--max-clients": maxClients = try int(min: 1)
        case "--rooms":
            let v = try value()
            guard let mode = RoomCreation(rawValue: v) else { throw UsageError("\(name) must be auto or api, got '\(v)'") }
            rooms = mode
        case "--max-rooms": maxRooms = try int(min: 1)
        case "--cluster":
            let v = try value()
            let urls = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard !urls.isEmpty, urls.allSatisfy({ $0.hasPrefix("nats://") || $0.hasPrefix("tls://") }) else {
                throw UsageError("\(name) takes nats://HOST:PORT URLs separated by commas, got '\(v.prefix(200))'")
            }
            cluster = urls
        case "--node-name":
            let v = try value()
            guard Limits.isRoomID(v) else { throw UsageError("\(name) must be 1 to 64 of A-Z a-z 0-9 _ -, got '\(v.prefix(80))'") }
            nodeName = v
        case "--state-sync": stateSync = try onOff()
        case "--cluster-forwarding": clusterForwarding = try onOff()
        case "--cluster-secret-file": clusterSecretFile = try nonEmpty()
        case "--cluster-unsigned":
            let v = try value()
            guard v == "accept" || v == "refuse" else { throw UsageError("\(name) takes accept or refuse, got '\(v.prefix(40))'") }
            clusterAcceptUnsigned = v == "accept"
        case "--cluster-tls-ca": clusterTLSCA = try nonEmpty()
        case "--cluster-tls-cert": clusterTLSCert = try nonEmpty()
        case "--cluster-tls-key": clusterTLSKey = try nonEmpty()
        case "--cluster-creds": clusterCreds = try nonEmpty()
        case "--cluster-user": clusterUser = try nonEmpty()
        case "--cluster-password-file": clusterPasswordFile = try nonEmpty()
        case "--cluster-password":
            throw UsageError("\(name) is not taken: the engine's password is read from a file (--cluster-password-file)")
        case "--room-idle": roomIdle = try int(min: 0, max: 86_400 * 365)
        case "--resume-window": resumeWindow = try int(min: 0)
        case "--presence-limit": presenceLimit = try int(min: 1, max: Limits.maxClientsInSnapshot)
        case "--presence-interval": presenceInterval = try int(min: 1, max: 3_600_000)
        case "--queue-limit": queueLimit = try int(min: 1)
        case "--queue-bytes": queueBytes = try int(min: 65_536)
        case "--queue-bytes-total": queueBytesTotal = try int(min: 65_536)
        case "--max-room-bytes": maxRoomBytes = try int(min: 16_384)
        case "--rate-limit": rateLimit = try int(min: 0)
        case "--rate-limit-bytes": rateLimitBytes = try int(min: 0)
        case "--allow-origin": allowOrigins.append(try value())
        case "--allow-host":
            let v = try value()
            if let problem = HostPolicy.problem(allowHost: v) { throw UsageError("\(name) \(problem)") }
            allowHosts.append(v)
        case "--trusted-proxy":
            let v = try value()
            guard let range = TrustedProxies.range(v) else {
                throw UsageError("\(name) takes an IPv4 or IPv6 address or CIDR range (10.0.0.0/8, ::1), got '\(v.prefix(80))'")
            }
            trustedProxies.add(range)
        case "--token":
            let t = try value()
            guard !t.isEmpty else { throw UsageError("\(name) must not be empty") }
            token = t
        case "--token-file": tokenFile = try value()
        case "--tls-cert":
            let v = try value()
            guard !v.isEmpty else { throw UsageError("\(name) must not be empty") }
            tlsCertificate = v
        case "--tls-key":
            let v = try value()
            guard !v.isEmpty else { throw UsageError("\(name) must not be empty") }
            tlsKey = v
        case "--auth-secret-file": authSecretFile = try value()
        case "--ping-interval": pingInterval = try int(min: 1, max: 3600)
        case "--request-timeout": requestTimeout = try int(min: 1, max: 3600)
        case "--event-loop":
            let v = try value()
            guard let loop = WebSocketEventLoop(rawValue: v) else { throw UsageError("\(name) must be libuv or poll, got '\(v)'") }
            eventLoop = loop
        case "--log-level":
            let v = try value()
            guard let level = Log.Level(rawValue: v) else { throw UsageError("\(name) must be error, warn, info or debug, got '\(v)'") }
            logLevel = level
        case "--log-format":
            let v = try value()
            guard let format = Log.Format(rawValue: v) else { throw UsageError("\(name) must be text or json, got '\(v)'") }
            logFormat = format
        default: return false
        }
        return true
    }

    /// The web root to serve: the option, else the files installed with this executable
    /// (``installedWebRoot``), else `web/` in the current directory or in the checkout that
    /// holds this executable (`.build/<config>/tabd`). An error names every path tried.
    func resolvedWebRoot() -> Result<String, UsageError> {
        let fm = FileManager.default
        func isDir(_ p: String) -> Bool {
            var d: ObjCBool = false
            return fm.fileExists(atPath: p, isDirectory: &d) && d.boolValue
        }
        if let webRoot {
            return isDir(webRoot) ? .success(webRoot) : .failure(UsageError("web root '\(webRoot)' is not a directory"))
        }
        var candidates = Self.installedWebRoot.map { [$0] } ?? []
        candidates.append(fm.currentDirectoryPath + "/web")
        if let exe = Self.executable {
            var dir = exe.deletingLastPathComponent()
            for _ in 0..<4 {
                dir = dir.deletingLastPathComponent()
                candidates.append(dir.path + "/web")
            }
        }
        for c in candidates where isDir(c) && fm.fileExists(atPath: c + "/index.html") { return .success(c) }
        return .failure(UsageError("no web root: none of \(candidates.joined(separator: ", ")) exists; pass --web-root PATH"))
    }

    /// This executable, links resolved.
    private static var executable: URL? {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")).map { URL(fileURLWithPath: $0) }
    }

    /// Where `make install` puts the web files of this executable: PREFIX/share/tabd/web
    /// for PREFIX/bin/tabd.
    static var installedWebRoot: String? {
        executable.map { $0.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("share/tabd/web").path }
    }
}

extension Options {
    /// The credential checks these options ask for: reads `--token-file` and
    /// `--auth-secret-file` (an error names the file). Warnings go to `warn`.
    func authenticator(warn: (String) -> Void) throws(UsageError) -> Authenticator {
        // Set but empty would silently mean "no credentials": refuse it instead.
        if environmentToken == "", token == nil, tokenFile == nil { throw UsageError("TABD_TOKEN is set but empty") }
        if environmentSecret == "", authSecretFile == nil { throw UsageError("TABD_AUTH_SECRET is set but empty") }
        var operatorToken = token ?? environmentToken
        if token != nil { warn("--token is visible to every user of this machine (ps); prefer --token-file or TABD_TOKEN") }
        if let tokenFile {
            guard let data = FileManager.default.contents(atPath: tokenFile) else { throw UsageError("cannot read the token file '\(tokenFile)'") }
            var bytes = data[...]
            if bytes.last == 0x0A { bytes.removeLast(); if bytes.last == 0x0D { bytes.removeLast() } }
            let text = String(decoding: bytes, as: UTF8.self)
            guard !text.isEmpty else { throw UsageError("the token file '\(tokenFile)' is empty") }
            operatorToken = text
            warnIfShared(tokenFile, "token", warn)
        }
        var key: SigningKey?
        do {
            if let authSecretFile {
                key = try SigningKey.load(path: authSecretFile)
                warnIfShared(authSecretFile, "secret", warn)
            } else if let environmentSecret {
                key = try SigningKey(bytes: Array(environmentSecret.utf8), source: "TABD_AUTH_SECRET")
            }
        } catch { throw UsageError(error.description) }
        return Authenticator(operatorToken: operatorToken, signingKey: key)
    }

    func warnIfShared(_ path: String, _ what: String, _ warn: (String) -> Void) {
        if let mode = try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int, mode & 0o077 != 0 {
            warn("the \(what) file '\(path)' can be read by other users (mode \(String(mode & 0o777, radix: 8))); chmod 600 it")
        }
    }

    /// The state file: the option, else `.tabd/state.sqlite` beside the web root's
    /// checkout (the folder that holds `web/`), else in the current directory (an
    /// installed tabd, or a web root given). Nil means in memory.
    func resolvedStatePath(webRoot: String) -> String? {
        if let state { return state == ":memory:" ? nil : state }
        let root = URL(fileURLWithPath: webRoot).standardizedFileURL
        let installed = Self.installedWebRoot.map { URL(fileURLWithPath: $0).standardizedFileURL }
        if self.webRoot == nil, root.lastPathComponent == "web", root != installed {
            return root.deletingLastPathComponent().path + "/.tabd/state.sqlite"
        }
        return FileManager.default.currentDirectoryPath + "/.tabd/state.sqlite"
    }
}
