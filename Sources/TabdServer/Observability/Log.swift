import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Portable

/// What a log line is about, as fields a log collector filters on: the same names in every
/// line that has them, in JSON as members, in text as `name=value` after the message.
public struct LogFields: Sendable, Equatable {
    /// The room.
    public var room: String?
    /// The client's id in its room.
    public var client: String?
    /// The connection's number (`#N` in messages).
    public var connection: Int?
    /// The peer's address (the client's, behind a trusted proxy).
    public var peer: String?
    /// A close code, an HTTP status or an error code.
    public var code: String?
    /// The cluster node that writes the line.
    public var node: String?
    /// What kind of failure an error or warning is (`state`, `engine`, `tls`, `webhook`,
    /// `auth`, `fence`, `proxy`, `start`).
    public var kind: String?

    public init(room: String? = nil, client: String? = nil, connection: Int? = nil, peer: String? = nil, code: String? = nil,
                node: String? = nil, kind: String? = nil) {
        self.room = room; self.client = client; self.connection = connection; self.peer = peer; self.code = code
        self.node = node; self.kind = kind
    }

    /// The fields set, in a fixed order.
    public var pairs: [(name: String, value: String)] {
        var out: [(String, String)] = []
        if let room { out.append(("room", room)) }
        if let client { out.append(("client", client)) }
        if let connection { out.append(("connection", String(connection))) }
        if let peer { out.append(("peer", peer)) }
        if let code { out.append(("code", code)) }
        if let node { out.append(("node", node)) }
        if let kind { out.append(("kind", kind)) }
        return out
    }

    /// These fields, with those of `defaults` that these do not set.
    func over(_ defaults: LogFields) -> LogFields {
        LogFields(room: room ?? defaults.room, client: client ?? defaults.client, connection: connection ?? defaults.connection,
                  peer: peer ?? defaults.peer, code: code ?? defaults.code, node: node ?? defaults.node, kind: kind ?? defaults.kind)
    }
}

/// One line of tabd's log, as a handler gets it.
public struct LogRecord: Sendable {
    public let time: Date
    public let level: Log.Level
    public let message: String
    public let fields: LogFields
}

/// Where an app that embeds TabdServer sends tabd's log lines (its own logger) instead of
/// stderr: `Log(level:handler:)`.
public protocol LogHandler: Sendable {
    func handle(_ record: LogRecord)
}

/// One line per event, with a level, a UTC timestamp and its fields: to stderr as text or
/// JSON, or to an app's ``LogHandler``.
public final class Log: Sendable {
    public enum Level: String, Comparable, Sendable, CaseIterable {
        case error, warn, info, debug
        private var rank: Int { [Level.error, .warn, .info, .debug].firstIndex(of: self)! }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    /// `text`: `TIME LEVEL message name=value…`; `json`: `{"time":…,"level":…,"message":…,
    /// "room":…, …}` per line.
    public enum Format: String, Sendable, CaseIterable { case text, json }

    public let level: Level
    public let format: Format
    private let handler: (any LogHandler)?
    private let lock = Locked(())
    /// Fields every line carries (a cluster node's name), set once at start.
    private let defaults = Locked(LogFields())

    public init(level: Level, format: Format = .text) { self.level = level; self.format = format; handler = nil }

    /// Lines go to `handler` (an app's logger), not to stderr.
    public init(level: Level, handler: any LogHandler) { self.level = level; format = .text; self.handler = handler }

    /// Every line from now on carries `node` (a node of a cluster).
    public func setNode(_ node: String) { defaults.withLock { $0.node = node } }

    public func enabled(_ l: Level) -> Bool { l <= level }

    public func log(_ l: Level, _ message: @autoclosure () -> String, _ fields: LogFields = LogFields()) {
        guard enabled(l) else { return }
        let fields = fields.over(defaults.withLock { $0 })
        let now = Date()
        if let handler {
            handler.handle(LogRecord(time: now, level: l, message: message(), fields: fields))
            return
        }
        let time = now.formatted(.iso8601)
        let line = switch format {
        case .text:
            "\(time) \(l.rawValue.uppercased()) \(Self.oneLine(message()))"
                + fields.pairs.map { " \($0.name)=\(Self.textValue($0.value))" }.joined() + "\n"
        // JSON escapes C0 itself; DEL, C1 and U+2028/2029 may stand raw in a JSON string, and
        // only there (everything else on the line is ASCII), so they are written out as \uXXXX.
        case .json:
            Self.escapingRaw(JSONValue.object([("time", .string(time)), ("level", .string(l.rawValue)), ("message", .string(message()))]
                + fields.pairs.map { ($0.name, JSONValue.string($0.value)) }).compactString, json: true) + "\n"
        }
        lock.withLock { _ in StandardStream.error(line) }
    }

    /// A field's value in a text line: on one line, quoted when it holds a space, `=` or `"`.
    static func textValue(_ value: String) -> String {
        let safe = oneLine(value)
        guard safe.isEmpty || safe.contains(where: { $0 == " " || $0 == "=" || $0 == "\"" }) else { return safe }
        return "\"" + safe.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"") + "\""
    }

    /// `text` on one line: every control character (C0, DEL, C1: a line break a peer put in
    /// a tab id or a client's name, a terminal escape, CSI as U+009B) written as `\xNN`, and
    /// the Unicode line and paragraph separators as `\u2028` and `\u2029`, so no message
    /// ends its line or forges another, in a terminal, a pager or a log collector.
    static func oneLine(_ text: String) -> String { escapingRaw(text, json: false) }

    /// Whether a log line must not hold `scalar` as it is.
    static func mustEscape(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        return v < 0x20 || (0x7F...0x9F).contains(v) || v == 0x2028 || v == 0x2029
    }

    /// `text` with each scalar `mustEscape` names written out: `\xNN` (text) or `\uXXXX`
    /// (JSON, inside whose strings alone such scalars can stand).
    static func escapingRaw(_ text: String, json: Bool) -> String {
        guard text.unicodeScalars.contains(where: mustEscape) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard mustEscape(scalar) else { out.append(scalar); continue }
            let hex = String(scalar.value, radix: 16, uppercase: true)
            let width = json || scalar.value > 0xFF ? 4 : 2
            let escaped = (json || scalar.value > 0xFF ? "\\u" : "\\x") + String(repeating: "0", count: width - hex.count) + hex
            out.append(contentsOf: escaped.unicodeScalars)
        }
        return String(out)
    }

    /// A peer's text made safe for one log line: at most `limit` characters, anything
    /// outside printable ASCII as `?` (no forged lines, no terminal escapes).
    static func printable(_ text: String, limit: Int = 100) -> String {
        String(text.unicodeScalars.prefix(limit).map { $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
            + (text.unicodeScalars.count > limit ? "…" : "")
    }

    public func error(_ m: @autoclosure () -> String, _ fields: LogFields = LogFields()) { log(.error, m(), fields) }
    public func warn(_ m: @autoclosure () -> String, _ fields: LogFields = LogFields()) { log(.warn, m(), fields) }
    public func info(_ m: @autoclosure () -> String, _ fields: LogFields = LogFields()) { log(.info, m(), fields) }
    public func debug(_ m: @autoclosure () -> String, _ fields: LogFields = LogFields()) { log(.debug, m(), fields) }
}

/// At most `perSecond` lines a second; says how many were left out when lines are let
/// through again.
final class LineLimit: Sendable {
    enum Verdict { case log(suppressedBefore: Int), drop }
    private let perSecond: Int
    private let state = Locked((second: 0 as UInt64, count: 0, suppressed: 0))

    init(perSecond: Int) { self.perSecond = perSecond }

    func admit() -> Verdict {
        let second = DispatchTime.now().uptimeNanoseconds / 1_000_000_000
        return state.withLock { s in
            if s.second != second { s.second = second; s.count = 0 }
            guard s.count < perSecond else { s.suppressed += 1; return .drop }
            s.count += 1
            defer { s.suppressed = 0 }
            return .log(suppressedBefore: s.suppressed)
        }
    }
}
