import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Portable

/// One line per event to stderr, with a level and a UTC timestamp.
public final class Log: Sendable {
    public enum Level: String, Comparable, Sendable, CaseIterable {
        case error, warn, info, debug
        private var rank: Int { [Level.error, .warn, .info, .debug].firstIndex(of: self)! }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    /// `text`: `TIME LEVEL message`; `json`: `{"time":…,"level":…,"message":…}` per line.
    public enum Format: String, Sendable, CaseIterable { case text, json }

    public let level: Level
    public let format: Format
    private let lock = Locked(())

    public init(level: Level, format: Format = .text) { self.level = level; self.format = format }

    public func enabled(_ l: Level) -> Bool { l <= level }

    public func log(_ l: Level, _ message: @autoclosure () -> String) {
        guard enabled(l) else { return }
        let time = Date().formatted(.iso8601)
        let line = switch format {
        case .text: "\(time) \(l.rawValue.uppercased()) \(Self.oneLine(message()))\n"
        // JSON escapes C0 itself; DEL, C1 and U+2028/2029 may stand raw in a JSON string, and
        // only there (everything else on the line is ASCII), so they are written out as \uXXXX.
        case .json: Self.escapingRaw(JSONValue.object([("time", .string(time)), ("level", .string(l.rawValue)),
                                                       ("message", .string(message()))]).compactString, json: true) + "\n"
        }
        lock.withLock { _ in StandardStream.error(line) }
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

    public func error(_ m: @autoclosure () -> String) { log(.error, m()) }
    public func warn(_ m: @autoclosure () -> String) { log(.warn, m()) }
    public func info(_ m: @autoclosure () -> String) { log(.info, m()) }
    public func debug(_ m: @autoclosure () -> String) { log(.debug, m()) }
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
