import ArgumentParsing
import Auth
import BuildInfo
import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Outbox
import Portable
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
    /// `--webhook` (repeatable): the URLs every outbox event is posted to.
    public var webhooks: [String] = []
    /// `--webhook-events`: what the outbox keeps.
    public var webhookEvents: OutboxKinds = .default
    /// `--webhook-events` was given: the outbox is kept even without a `--webhook` (for
    /// `GET /api/events`).
    public var webhookEventsGiven = false
    /// Whether tabd keeps an outbox: with a webhook, or events named for `GET /api/events`.
    public var keepsOutbox: Bool { !webhooks.isEmpty || webhookEventsGiven }
    /// `--webhook-secret-file`: the secret (or two) webhook requests are signed with.
    public var webhookSecretFile: String?
    /// `--webhook-ca-file`: more CAs an https webhook's certificate may chain to.
    public var webhookCAFile: String?
    /// `--webhook-outbox-bytes`: what the outbox may weigh.
    public var webhookOutboxBytes = 16 << 20
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
    /// `--auth-keys`: a key set of signed tokens (``KeySet/load(path:)``).
    public var authKeys: String?
    /// `--auth-issuer` and `--auth-audience`: claims every signed token must carry.
    public var authIssuer: String?
    public var authAudience: String?
    /// `--auth-leeway`: seconds of clock difference allowed around `exp` and `nbf`.
    public var authLeeway = 0
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
    /// `--cluster-rooms shards|streams`: where this node creates rooms.
    public var clusterRooms = "shards"
    /// `--cluster-shards N`: the shards of a new cluster (its first node's choice stands).
    public var clusterShards = 32
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
    public var byteRateLimit: Int { rateLimitBytes ?? (rateLimit == 0 ? 0 : Self.defaultByteRate) }

    /// `--rate-limit-bytes` when it is not given (and `--rate-limit` is not 0).
    static let defaultByteRate = 1 << 20
    /// The largest `--rate-limit-bytes`: 1 GiB a second (0 turns the limit off).
    static let maxByteRate = 1 << 30

    /// The VERSION file this tabd was built from (``BuildInfo``).
    public static var version: String { BuildInfo.version }

    /// What `--help` prints: every option of ``table`` with its help and default.
    public static var help: String {
        let defaults = Options()
        let options = table.filter { !$0.hidden }.flatMap { $0.helpLines(defaults: defaults) }.joined(separator: "\n")
        return helpHead + options + "\n" + helpTail
    }

    private static let helpHead = """
    tabd \(version): a tab coordinator that streams tab selection and lifecycle events over WebSocket.

    USAGE: tabd [options]

    OPTIONS:

    """

    private static let helpTail = """
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
                case "--version": return .exit(BuildInfo.versionLine("tabd"), code: 0)
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
                let values = Self.spec(option)?.repeatable == true
                    ? text.split(separator: ",").map { $0.trimmingWhitespace }.filter { !$0.isEmpty }
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
            if o.webhooks.isEmpty, let a = given["--webhook-events"] ?? given["--webhook-outbox-bytes"], let b = given["--cluster"] {
                throw UsageError("\(a) without --webhook is not available with \(b): a cluster's nodes keep no outbox of their own for GET /api/events (their webhooks deliver from the engine's history)")
            }
            if o.webhooks.isEmpty, let a = given["--webhook-secret-file"] ?? given["--webhook-ca-file"] {
                throw UsageError("\(a) is for webhooks: it needs --webhook")
            }
            if !o.keepsOutbox, let a = given["--webhook-outbox-bytes"] {
                throw UsageError("\(a) bounds the outbox, which tabd keeps only with --webhook or --webhook-events")
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
                                        "--cluster-creds", "--cluster-user", "--cluster-password-file", "--cluster-forwarding",
                                        "--cluster-rooms", "--cluster-shards"]

    /// The options that exclude `option`, or that it excludes (``OptionSpec/excludes``).
    private static func excluded(by option: String) -> [String] {
        (spec(option)?.excludes ?? []) + table.filter { $0.excludes.contains(option) }.map(\.name)
    }

    /// `--web-root` for `TABD_WEB_ROOT` (``OptionSpec/variable``); nil for a name that is
    /// no option's, and for `TABD_TOKEN` and `TABD_AUTH_SECRET`, which hold credentials.
    static func option(ofVariable name: String) -> String? {
        guard name != "TABD_TOKEN", name != "TABD_AUTH_SECRET" else { return nil }
        return variables[name]
    }

    private static let variables: [String: String] = Dictionary(uniqueKeysWithValues: table.map { ($0.variable, $0.name) })

    /// Sets `option` (`--port`) from `value()` if it is an option that takes a value
    /// (``table``), and says whether it was; `name` is how it was given (`--port`,
    /// `TABD_PORT`), for errors. `value()` is called only for an option that takes a value.
    private mutating func set(_ option: String, as name: String, value: () throws(UsageError) -> String) throws(UsageError) -> Bool {
        guard let spec = Self.spec(option) else { return false }
        try spec.set(&self, try value(), name)
        return true
    }

    /// The web root to serve: the option, else the files installed with this executable
    /// (``installedWebRoot``), else `web/` in the current directory or in the checkout that
    /// holds this executable (`.build/<config>/tabd`). An error names every path tried.
    func resolvedWebRoot() -> Result<String, UsageError> {
        let fm = FileManager.default
        func isDir(_ p: String) -> Bool {
            var info = stat()
            return stat(p, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
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
        if let authSecretFile { warnIfShared(authSecretFile, "secret", warn) }
        let keys = try tokenKeys()
        if keys == nil, authIssuer != nil || authAudience != nil || authLeeway != 0 {
            throw UsageError("--auth-issuer, --auth-audience and --auth-leeway need signed tokens: --auth-secret-file or --auth-keys")
        }
        return Authenticator(operatorToken: operatorToken, keys: keys)
    }

    /// The keys of signed tokens: `--auth-secret-file`'s (or `TABD_AUTH_SECRET`'s), which
    /// names no `kid`, and those of `--auth-keys`; nil when neither is given. Read at start
    /// and again on `SIGHUP` (an error names the file).
    func tokenKeys() throws(UsageError) -> KeySet? {
        var keys: [VerificationKey] = []
        do {
            if let authSecretFile {
                keys.append(VerificationKey(try SigningKey.load(path: authSecretFile)))
            } else if let environmentSecret, !environmentSecret.isEmpty {
                keys.append(VerificationKey(try SigningKey(bytes: Array(environmentSecret.utf8), source: "TABD_AUTH_SECRET")))
            }
            if let authKeys { keys += try KeySet.load(path: authKeys) }
        } catch { throw UsageError(error.description) }
        guard !keys.isEmpty else { return nil }
        return KeySet(keys: keys, leeway: Double(authLeeway), issuer: authIssuer, audience: authAudience)
    }

    /// Warns when a secret's file (a token, a key) is open to any user but its owner.
    func warnIfShared(_ path: String, _ what: String, _ warn: (String) -> Void) {
        if let mode = Self.mode(of: path), mode & 0o077 != 0 {
            warn("the \(what) file '\(path)' can be read by other users (mode \(String(mode & 0o777, radix: 8))); chmod 600 it")
        }
    }

    /// Warns when the file at `path` exists and every user of the machine may read or write
    /// it. Its group's access is left to the operator (a TLS key shared with a group of its
    /// own is one of DEPLOYING.md's ways). `what` names the file, `also` what else to chmod.
    /// (tabd warns so of `--tls-key`, and of a state file that exists when it starts: one it
    /// creates is its user's alone.)
    func warnIfOpenToEveryone(_ path: String, _ what: String, also: String = "", _ warn: (String) -> Void) {
        guard let mode = Self.mode(of: path), mode & 0o006 != 0 else { return }
        let how = mode & 0o004 != 0 ? "read" : "written"
        warn("the \(what) file '\(path)' can be \(how) by every user of this machine (mode \(String(mode & 0o777, radix: 8))); chmod 600 it\(also)")
    }

    /// The permission bits of the file at `path`, links followed (a link's own are always
    /// 777); nil when there is none or it cannot be looked at.
    static func mode(of path: String) -> Int? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int(info.st_mode & 0o7777)
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
