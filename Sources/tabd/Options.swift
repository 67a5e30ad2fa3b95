import Auth
import Coordinator
import Foundation
import WebSockets

/// tabd's command line (PROTOCOL.md "The daemon").
struct Options: Sendable {
    var host = "127.0.0.1"
    var port = 8080
    var webRoot: String?
    var tabsFile: String?
    var maxClients = 10_000
    var logLevel = Log.Level.info
    var logFormat = Log.Format.text
    var resumeWindow = 10_000
    var queueLimit = 10_000
    var rateLimit = 100
    /// Set by `--rate-limit-bytes`; see ``byteRateLimit``.
    var rateLimitBytes: Int?
    var allowOrigins: [String] = []
    /// `--token`: an admin credential for every room.
    var token: String?
    /// `--token-file`: the same, read from a file.
    var tokenFile: String?
    /// `--auth-secret-file`: turns on signed tokens.
    var authSecretFile: String?
    /// `TABD_TOKEN` and `TABD_AUTH_SECRET`, used when the options do not say.
    var environmentToken: String?
    var environmentSecret: String?
    var pingInterval = 30
    var state: String?
    var rooms = RoomRegistry.Creation.auto
    var maxRooms = 100_000
    var roomIdle = 300
    /// `--cluster`: the engine's URLs; this tabd is then a node of a cluster.
    var cluster: [String] = []
    /// `--node-name`: this node's name in the cluster (default: host name and port).
    var nodeName: String?

    /// The bytes per second a connection may send (0: no limit).
    var byteRateLimit: Int { rateLimitBytes ?? (rateLimit == 0 ? 0 : 1 << 20) }

    static let version = "0.1.0"

    static let help = """
    tabd \(version): a tab coordinator that streams tab selection and lifecycle events over WebSocket.

    USAGE: tabd [options]

    OPTIONS:
      --host HOST            address to listen on (default 127.0.0.1)
      --port PORT            port to listen on; 0 picks a free one (default 8080)
      --web-root PATH        the web client's files (default: the checkout's web/)
      --tabs FILE            the tabs of a new room, a JSON array of
                             {id,title,icon,color,badge?} (default: home, favorites, profile)
      --state PATH           where state is stored (SQLite); ':memory:' keeps nothing
                             (default: .tabd/state.sqlite in the checkout, else in
                             the current directory; only .tabd/ is created)
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
      --resume-window N      events kept per room for clients that resume (default 10000)
      --queue-limit N        frames queued for one connection before it is closed
                             as too slow, code 1008 (default 10000)
      --rate-limit N         commands per second per connection, bursts of 2N;
                             0 = no limit (default 100)
      --rate-limit-bytes N   bytes per second per connection, bursts of 2N;
                             0 = no limit (default 1048576, or no limit
                             when --rate-limit is 0)
      --max-clients N        connections beyond it are refused with 503 (default 10000)
      --allow-origin ORIGIN  also accept browsers from this origin (repeatable)
      --auth-secret-file FILE
                             accept signed tokens (HS256 JWTs with room and role)
                             signed with the key in FILE (at least 32 bytes);
                             see 'tabd token --help'
      --token TOKEN          an admin token for every room, required (as ?token= or
                             'Authorization: Bearer') unless a signed token is given;
                             visible in ps: prefer --token-file or TABD_TOKEN
      --token-file FILE      the same, read from FILE
      --ping-interval SECS   ping a silent peer after SECS, drop it after 2×SECS (default 30)
      --log-level LEVEL      error, warn, info or debug (default info)
      --log-format FORMAT    text, or json: one object per line with time, level and
                             message, for log collectors (default text)
      -h, --help             show this help
      --version              show the version

    ENVIRONMENT:
      TABD_TOKEN             the admin token, when neither --token nor --token-file is given
      TABD_AUTH_SECRET       the signing key, when --auth-secret-file is not given

    SUBCOMMANDS:
      tabd token ...         print a signed token (tabd token --help)

    With any token or key set, /ws, the HTTP API and /metrics need credentials.
    The first line on stdout once listening is: tabd listening on http://HOST:PORT/
    """

    enum ParseResult { case run(Options), exit(String, code: Int32) }

    static func parse(_ args: [String], environment: [String: String] = [:]) -> ParseResult {
        var o = Options()
        o.environmentToken = environment["TABD_TOKEN"]
        o.environmentSecret = environment["TABD_AUTH_SECRET"]
        var i = 0
        func value(_ name: String) throws -> String {
            i += 1
            guard i < args.count else { throw UsageError("\(name) needs a value") }
            return args[i]
        }
        func int(_ name: String, min: Int, max: Int = Int.max) throws -> Int {
            let v = try value(name)
            guard let n = Int(v), n >= min, n <= max else {
                let range = max == Int.max ? "\(min) or more" : "from \(min) to \(max)"
                throw UsageError("\(name) must be a whole number \(range), got '\(v)'")
            }
            return n
        }
        do {
            while i < args.count {
                let arg = args[i]
                switch arg {
                case "-h", "--help": return .exit(help, code: 0)
                case "--version": return .exit("tabd \(version)", code: 0)
                case "--host": o.host = try value(arg)
                case "--port": o.port = try int(arg, min: 0, max: 65535)
                case "--web-root": o.webRoot = try value(arg)
                case "--tabs": o.tabsFile = try value(arg)
                case "--state":
                    let v = try value(arg)
                    guard !v.isEmpty else { throw UsageError("--state must not be empty") }
                    o.state = v
                case "--max-clients": o.maxClients = try int(arg, min: 1)
                case "--rooms":
                    let v = try value(arg)
                    guard let mode = RoomRegistry.Creation(rawValue: v) else { throw UsageError("--rooms must be auto or api, got '\(v)'") }
                    o.rooms = mode
                case "--max-rooms": o.maxRooms = try int(arg, min: 1)
                case "--cluster":
                    let v = try value(arg)
                    let urls = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                    guard !urls.isEmpty, urls.allSatisfy({ $0.hasPrefix("nats://") || $0.hasPrefix("tls://") }) else {
                        throw UsageError("--cluster takes nats://HOST:PORT URLs separated by commas, got '\(v.prefix(200))'")
                    }
                    o.cluster = urls
                case "--node-name":
                    let v = try value(arg)
                    guard Limits.isRoomID(v) else { throw UsageError("--node-name must be 1 to 64 of A-Z a-z 0-9 _ -, got '\(v.prefix(80))'") }
                    o.nodeName = v
                case "--room-idle": o.roomIdle = try int(arg, min: 0, max: 86_400 * 365)
                case "--resume-window": o.resumeWindow = try int(arg, min: 0)
                case "--queue-limit": o.queueLimit = try int(arg, min: 1)
                case "--rate-limit": o.rateLimit = try int(arg, min: 0)
                case "--rate-limit-bytes": o.rateLimitBytes = try int(arg, min: 0)
                case "--allow-origin": o.allowOrigins.append(try value(arg))
                case "--token":
                    let t = try value(arg)
                    guard !t.isEmpty else { throw UsageError("--token must not be empty") }
                    o.token = t
                case "--token-file": o.tokenFile = try value(arg)
                case "--auth-secret-file": o.authSecretFile = try value(arg)
                case "--ping-interval": o.pingInterval = try int(arg, min: 1, max: 3600)
                case "--log-level":
                    let v = try value(arg)
                    guard let level = Log.Level(rawValue: v) else { throw UsageError("--log-level must be error, warn, info or debug, got '\(v)'") }
                    o.logLevel = level
                case "--log-format":
                    let v = try value(arg)
                    guard let format = Log.Format(rawValue: v) else { throw UsageError("--log-format must be text or json, got '\(v)'") }
                    o.logFormat = format
                default: throw UsageError("unknown option '\(arg)'")
                }
                i += 1
            }
            if o.token != nil, o.tokenFile != nil { throw UsageError("give --token or --token-file, not both") }
            if !o.cluster.isEmpty, o.state != nil { throw UsageError("--state and --cluster exclude each other: a cluster keeps its rooms in the engine") }
        } catch let e as UsageError {
            return .exit("tabd: \(e.message)\nRun 'tabd --help' for the options.", code: 2)
        } catch {
            return .exit("tabd: \(error)", code: 2)
        }
        return .run(o)
    }

    /// The web root to serve: the option, else `web/` in the current directory or in the
    /// checkout that holds this executable (`.build/<config>/tabd`). Nil if none exists.
    func resolvedWebRoot() -> Result<String, UsageError> {
        let fm = FileManager.default
        func isDir(_ p: String) -> Bool {
            var d: ObjCBool = false
            return fm.fileExists(atPath: p, isDirectory: &d) && d.boolValue
        }
        if let webRoot {
            return isDir(webRoot) ? .success(webRoot) : .failure(UsageError("web root '\(webRoot)' is not a directory"))
        }
        var candidates = [fm.currentDirectoryPath + "/web"]
        if let exe = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
            for _ in 0..<4 {
                dir = dir.deletingLastPathComponent()
                candidates.append(dir.path + "/web")
            }
        }
        for c in candidates where isDir(c) && fm.fileExists(atPath: c + "/index.html") { return .success(c) }
        return .failure(UsageError("no web root: none of \(candidates.joined(separator: ", ")) exists; pass --web-root PATH"))
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

    private func warnIfShared(_ path: String, _ what: String, _ warn: (String) -> Void) {
        if let mode = try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int, mode & 0o077 != 0 {
            warn("the \(what) file '\(path)' can be read by other users (mode \(String(mode & 0o777, radix: 8))); chmod 600 it")
        }
    }

    /// The state file: the option, else `.tabd/state.sqlite` beside the web root's
    /// checkout (the folder that holds `web/`), else in the current directory. Nil
    /// means in memory.
    func resolvedStatePath(webRoot: String) -> String? {
        if let state { return state == ":memory:" ? nil : state }
        let root = URL(fileURLWithPath: webRoot).standardizedFileURL
        if self.webRoot == nil, root.lastPathComponent == "web" {
            return root.deletingLastPathComponent().path + "/.tabd/state.sqlite"
        }
        return FileManager.default.currentDirectoryPath + "/.tabd/state.sqlite"
    }
}

struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
