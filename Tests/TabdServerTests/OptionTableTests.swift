import Foundation
import Testing
@testable import TabdServer

/// tabd's options are declared once (``Options/table``): `--help`, parsing, the `TABD_`
/// variables and the documentation follow from that declaration, and cannot drift from it.
@Suite struct OptionTableTests {
    /// The repository's `docs/`, found from this file.
    static let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("docs")

    static func doc(_ name: String) throws -> String {
        try String(contentsOf: docs.appendingPathComponent(name), encoding: .utf8)
    }

    @Test func helpShowsEveryOptionWithTheDefaultItParsesTo() {
        let help = Options.help
        let defaults = Options()
        for spec in Options.table where !spec.hidden {
            #expect(help.contains("  \(spec.name)\(spec.value.isEmpty ? "" : " " + spec.value)"), "\(spec.name) is not in --help")
            let flat = help.replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: #" +"#, with: " ", options: .regularExpression)
            let range = spec.range.map { "\($0.lowerBound) to \($0.upperBound))" }
            if let text = spec.defaultText?(defaults) {
                #expect(flat.contains("(default \(text)" + (range.map { "; " + $0 } ?? ")")), "\(spec.name)'s default \(text) is not in --help")
            } else if let range {
                #expect(flat.contains("(" + range), "\(spec.name)'s range is not in --help")
            }
        }
        for line in help.split(separator: "\n") { #expect(line.count <= 100, "a help line of \(line.count) columns: \(line)") }
        #expect(!help.contains("--cluster-password "), "a refused option is not offered")
    }

    @Test func everyOptionHasItsVariableAndNoTwoShareOne() {
        var seen: Set<String> = []
        for spec in Options.table {
            #expect(seen.insert(spec.variable).inserted, "\(spec.variable) twice")
            let expected: String? = spec.variable == "TABD_TOKEN" ? nil : spec.name
            #expect(Options.option(ofVariable: spec.variable) == expected, "\(spec.variable) does not name \(spec.name)")
        }
        #expect(Options.option(ofVariable: "TABD_AUTH_SECRET") == nil, "a credential, not --auth-secret")
        #expect(Options.option(ofVariable: "TABD_NOT_AN_OPTION") == nil)
    }

    @Test func exclusionsNameOptionsAndKeepTheirVariablesUnread() {
        for spec in Options.table {
            for other in spec.excludes { #expect(Options.spec(other) != nil, "\(spec.name) excludes an unknown \(other)") }
        }
        // Declared on one side, it holds both ways: the command line's option keeps the
        // other's variable unread.
        let environment = ["TABD_STATE": "/tmp/x.sqlite", "TABD_CLUSTER_TLS_CA": "/tmp/ca.pem", "TABD_TOKEN_FILE": "/tmp/t"]
        guard case let .run(o) = Options.parse(["--cluster", "nats://127.0.0.1:4222", "--token", "t"], environment: environment) else {
            Issue.record("refused"); return
        }
        #expect(o.state == nil && o.tokenFile == nil, "a variable of an option that the command line's excludes is read")
        #expect(o.clusterTLSCA == "/tmp/ca.pem", "a variable nothing excludes is read")
    }

    @Test func aValueIsCheckedAsDeclaredWhereverItComesFrom() {
        for args in [["--port", "70000"], ["--presence-limit", "0"], ["--rooms", "maybe"], ["--state-sync", "yes"]] {
            guard case let .exit(text, code) = Options.parse(args) else { Issue.record("\(args) accepted"); continue }
            #expect(code == 2 && text.hasPrefix("tabd: \(args[0]) "), "\(text)")
            let variable = Options.spec(args[0])!.variable
            guard case let .exit(fromEnv, _) = Options.parse([], environment: [variable: args[1]]) else { Issue.record("\(variable) accepted"); continue }
            #expect(fromEnv.hasPrefix("tabd: \(variable) "), "\(fromEnv)")
        }
        guard case let .run(o) = Options.parse(["--rate-limit", "7"], environment: ["TABD_RATE_LIMIT": "9", "TABD_ROOM_IDLE": "12"]) else {
            Issue.record("refused"); return
        }
        #expect(o.rateLimit == 7 && o.roomIdle == 12, "the command line wins over its variable; other variables are read")
    }

    /// Every numeric option is bounded far below `Int.max`, so that what tabd computes from
    /// a value it took (twice `--max-room-bytes`, `--queue-limit` and an eighth more,
    /// `--max-clients` and the file descriptors kept in reserve) cannot overflow and trap.
    @Test func everyNumericOptionHasABoundNoArithmeticOnItCanOverflow() {
        let numeric = Options.table.filter { $0.range != nil }
        #expect(numeric.map(\.name).sorted() == [
            "--auth-leeway", "--cluster-shards", "--max-clients", "--max-room-bytes", "--max-rooms", "--ping-interval", "--port", "--presence-interval",
            "--presence-limit", "--queue-bytes", "--queue-bytes-total", "--queue-limit", "--rate-limit", "--rate-limit-bytes",
            "--request-timeout", "--resume-window", "--room-idle", "--webhook-outbox-bytes",
        ], "a numeric option without a range, or a range on an option that takes no number")
        for spec in numeric { #expect(spec.range!.upperBound <= 1 << 40, "\(spec.name) may reach \(spec.range!.upperBound)") }
    }

    /// Past its bound a value is refused naming the option (or its variable), the value and
    /// the range, the numbers that used to trap included.
    @Test(arguments: Options.table.filter { $0.range != nil }.map(\.name))
    func aNumberPastItsBoundIsRefusedWithTheRange(_ name: String) throws {
        let spec = try #require(Options.spec(name)), range = try #require(spec.range)
        // (An unbounded option fails everyNumericOptionHasABound…: it must not trap here.)
        let past = range.upperBound < Int.max ? [String(range.upperBound + 1), String(Int.max)] : []
        for value in past + [String(Int.max / 2 + 1), "99999999999999999999", String(range.lowerBound - 1)] where Int(value) != range.upperBound {
            for (args, environment, given) in [([name, value], [String: String](), name), ([], [spec.variable: value], spec.variable)] {
                guard case let .exit(text, code) = Options.parse(args, environment: environment) else {
                    Issue.record("\(given) \(value) accepted"); continue
                }
                #expect(code == 2)
                #expect(text.hasPrefix("tabd: \(given) must be a whole number from \(range.lowerBound) to \(range.upperBound), got '\(value)'"), "\(text)")
            }
        }
        // The bound itself is taken (with the byte bounds it must not exceed raised to match).
        let room = name == "--max-room-bytes" ? ["--queue-bytes", String(2 * range.upperBound)] : []
        let total = name == "--queue-bytes" || name == "--max-room-bytes" ? ["--queue-bytes-total", String(1 << 40)] : []
        // A cluster's option is taken only with --cluster.
        let cluster = name.hasPrefix("--cluster-") ? ["--cluster", "nats://127.0.0.1:4222"] : []
        // The outbox's bound only where there is an outbox.
        let outbox = name.hasPrefix("--webhook-") ? ["--webhook-events", "batch"] : []
        let args = [name, String(range.upperBound)] + room + total + cluster + outbox
        guard case .run = Options.parse(args) else { Issue.record("\(args) refused: \(Options.parse(args))"); return }
    }

    /// Every bound at once still makes a consistent set of options (the largest room fits the
    /// largest queue), parsed without a trap.
    @Test func everyNumericOptionAtItsBoundTogetherIsTaken() throws {
        var args: [String] = []
        // (Not the outbox's bound: a node of a cluster keeps no outbox. aNumberPastItsBound… takes it.)
        for spec in Options.table where !spec.name.hasPrefix("--webhook-") { if let range = spec.range { args += [spec.name, String(range.upperBound)] } }
        args += ["--cluster", "nats://127.0.0.1:4222"] // for the cluster's numbers
        guard case let .run(o) = Options.parse(args) else { Issue.record("refused: \(Options.parse(args))"); return }
        #expect(o.maxRoomBytes == 256 << 20 && o.queueBytes == 1 << 40 && o.queueLimit == 1_000_000 && o.maxClients == 1_000_000)
        #expect(o.resumeWindow == 1_000_000 && o.rateLimitBytes == 1 << 30 && o.maxRooms == 10_000_000)
    }

    /// PROTOCOL.md's table of numbers gives each numeric option's range as the table has it.
    @Test func theDocsGiveEveryNumericOptionsRange() throws {
        let text = try Self.doc("PROTOCOL.md")
        let row = try Regex(#"(?m)^\| `(--[a-z-]+)` \| [^|]* \| ([0-9]+) to ([0-9]+)\b"#)
        var stated: [String: ClosedRange<Int>] = [:]
        for match in text.matches(of: row) {
            let low = Int(match.output[2].substring!)!, high = Int(match.output[3].substring!)!
            stated[String(match.output[1].substring!)] = low...high
        }
        for spec in Options.table {
            guard let range = spec.range else { continue }
            #expect(stated[spec.name] == range, "PROTOCOL.md gives \(spec.name) \(stated[spec.name].map { "\($0)" } ?? "no range"); the table: \(range)")
        }
    }

    /// The docs give every option, and the synopsis in PROTOCOL.md shows the defaults the
    /// table has: an option added to the table alone, or a default changed in one place,
    /// fails here.
    @Test func theDocsNameEveryOptionWithItsDefault() throws {
        let protocolDoc = try Self.doc("PROTOCOL.md")
        let all = try ["PROTOCOL.md", "CLUSTER.md", "DEPLOYING.md", "SEMANTICS.md"].map(Self.doc).joined()
        let defaults = Options()
        for spec in Options.table where !spec.hidden {
            #expect(all.contains("`\(spec.name)") || all.contains("[\(spec.name)") || all.contains("\(spec.name) "),
                    "\(spec.name) is in none of the docs")
        }
        let synopsis = try #require(protocolDoc.components(separatedBy: "```").dropFirst().first)
        let shown = try Regex(#"\[(--[a-z-]+) ([^\]\s|]+)\]"#)
        var checked = 0
        for match in synopsis.matches(of: shown) {
            let name = String(match.output[1].substring!), value = String(match.output[2].substring!)
            guard let spec = Options.spec(name), let text = spec.defaultText?(defaults) else { continue }
            let expected = String(text.split(separator: ",").first ?? "")
            guard Int(value) != nil || value == value.lowercased() && !value.contains("/") else { continue } // a placeholder
            #expect(value == expected, "PROTOCOL.md shows \(name) \(value), the default is \(expected)")
            checked += 1
        }
        #expect(checked >= 15, "the synopsis shows \(checked) defaults")
    }

    /// Where the docs state an option's default in prose ("`--queue-bytes` … (default 8 MiB")
    /// or in a table ("| `--queue-limit` | 10,000 |"), it is the table's: a default changed
    /// in the table alone fails here.
    @Test func everyDefaultTheDocsStateIsTheTables() throws {
        let defaults = Options()
        let prose = try Regex(#"`(--[a-z-]+)`[^.|`]{0,40}\(default ([0-9][0-9,.]*(?: [KMG]iB)?)"#)
        let row = try Regex(#"(?m)^\| `(--[a-z-]+)` \| ([0-9][0-9,.]*(?: [KMG]iB)?) \|"#)
        var checked = 0
        for name in ["PROTOCOL.md", "CLUSTER.md", "DEPLOYING.md", "SEMANTICS.md", "PRESENCE.md", "RELIABILITY.md"] {
            guard let text = try? Self.doc(name) else { continue }
            for match in text.matches(of: prose) + text.matches(of: row) {
                let option = String(match.output[1].substring!), stated = String(match.output[2].substring!)
                guard let spec = Options.spec(option), let shown = spec.defaultText?(defaults) else { continue }
                #expect(Self.number(stated) == Self.number(shown), "\(name) says \(option) defaults to \(stated); the table: \(shown)")
                checked += 1
            }
        }
        #expect(checked >= 8, "only \(checked) stated defaults found")
    }

    /// "8 MiB" → 8388608, "10,000" → 10000, "1.5" → 1.5.
    static func number(_ text: String) -> Double? {
        let parts = text.replacingOccurrences(of: ",", with: "").split(separator: " ")
        guard let value = parts.first.flatMap({ Double($0) }) else { return nil }
        let unit: Double = switch parts.dropFirst().first {
        case "KiB": 1024
        case "MiB": 1024 * 1024
        case "GiB": 1024 * 1024 * 1024
        default: 1
        }
        return value * unit
    }
}
