import ArgumentParsing
import Conformance
import Coordinator
import Foundation
import TabdLoad
import WebSockets
import WebSocketsClient

/// What the Coordinator and the encoder cost without any socket: commands per second with
/// 1 and 8 concurrent callers, and the time to encode one events frame.
enum InProcessRun {
    static func run(_ args: [String]) async throws -> Int32 {
        var commands = 20_000
        var json: String?
        var line = Arguments(args)
        while let arg = line.next() {
            switch arg {
            case "-h", "--help": throw UsageError(BenchOptions.inprocessHelp, exitCode: 0)
            case "--commands": commands = try line.int(of: arg, min: 8)
            case "--json": json = try line.value(of: arg)
            default: throw UsageError("unknown option '\(arg)'")
            }
        }

        var summary = Summary()
        var results: [String: Any] = [:]
        for (name, callers, mix) in [("set, 1 caller", 1, false), ("set, 8 callers", 8, false),
                                     ("random mix, 1 caller", 1, true), ("random mix, 8 callers", 8, true)] {
            let rate = try await commandsPerSecond(commands: commands, callers: callers, randomMix: mix)
            summary.add("Coordinator, \(name)", "\(grouped(Int(rate))) commands/s (\(format(1e6 / rate)) µs each)")
            results["commands_per_second_\(mix ? "mix" : "set")_\(callers)"] = rate
        }
        for (name, batch) in [("1 event (set)", oneEventBatch()), ("4 events (select)", fourEventBatch())] {
            let (ns, bytes) = encodeCost(batch)
            summary.add("encode events frame, \(name)", "\(format(ns / 1000)) µs for \(bytes) bytes, framed once for every client")
            results["encode_us_\(batch.events.count)_events"] = ns / 1000
        }
        for (name, frame) in ParseShapes.all {
            let mbps = parseThroughput(frame)
            summary.add("parse \(name) (\(frame.count / 1024) KiB)", "\(format(mbps)) MB/s")
            results["parse_mb_per_s_\(name)"] = mbps
        }
        summary.print(title: "tabbench inprocess: \(commands) commands per measurement")
        summary.json = results
        try summary.write(to: json)
        return 0
    }

    /// Commands per second through `execute`, with an observer that encodes each batch as tabd does.
    static func commandsPerSecond(commands: Int, callers: Int, randomMix: Bool) async throws -> Double {
        let coordinator = try Coordinator(configuration: .init(resumeWindow: 10_000))
        await coordinator.addObserver { batch in
            _ = OutgoingFrame(ServerFrame.events(batch).bytes)
        }
        let value = String(repeating: "x", count: 60)
        let perCaller = commands / callers
        let start = ContinuousClock.now
        await withTaskGroup(of: Void.self) { group in
            for c in 0..<callers {
                group.addTask {
                    var rng = SeededRandom(seed: UInt64(c + 1))
                    for n in 0..<perCaller {
                        let command: Command = randomMix ? randomCommand(&rng) : .set(tab: "home", key: "k\(c)", value: .string(value))
                        _ = try? await coordinator.execute(command, by: "c\(c)", ref: "r\(n)")
                    }
                }
            }
        }
        let elapsed = start.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(perCaller * callers) / seconds
    }

    /// MB/s of `CommandEnvelope.parse` (parse, checks, and freeing the value) on one frame,
    /// over at least 0.3 s.
    static func parseThroughput(_ frame: [UInt8]) -> Double {
        var n = 0
        let start = monotonicNanos()
        var elapsed: Int64 = 0
        repeat {
            for _ in 0..<4 { _ = try? CommandEnvelope.parse(frame) }
            n += 4
            elapsed = monotonicNanos() - start
        } while elapsed < 300_000_000
        return Double(frame.count * n) / (Double(elapsed) / 1e9) / 1e6
    }

    static func oneEventBatch() -> EventBatch {
        EventBatch(by: "c12", ref: "r1234", events: [
            SequencedEvent(seq: 123_456, event: .valueSet(tab: "home", key: "k", value: .string(String(repeating: "x", count: 40)))),
        ])
    }

    static func fourEventBatch() -> EventBatch {
        EventBatch(by: "c12", ref: "r1234", events: [
            SequencedEvent(seq: 43, event: .selected(from: "home", to: "profile")),
            SequencedEvent(seq: 44, event: .disappear(tab: "home", page: "p9")),
            SequencedEvent(seq: 45, event: .firstAppear(tab: "profile", page: "p3")),
            SequencedEvent(seq: 46, event: .appear(tab: "profile", page: "p3")),
        ])
    }

    /// Nanoseconds per encode (JSON bytes plus the framed OutgoingFrame), and the payload size.
    static func encodeCost(_ batch: EventBatch) -> (Double, Int) {
        var bytes = 0
        for _ in 0..<2_000 { bytes = OutgoingFrame(ServerFrame.events(batch).bytes).count }
        let n = 100_000
        let start = monotonicNanos()
        for _ in 0..<n { bytes &+= OutgoingFrame(ServerFrame.events(batch).bytes).count & 1 }
        let ns = Double(monotonicNanos() - start) / Double(n)
        return (ns, OutgoingFrame(ServerFrame.events(batch).bytes).count)
    }
}

/// Frames of about 60 KiB that are legal but costly to parse, and a plain command for
/// comparison: the shapes the fairness test sends (Tests/e2e/test_fairness.py).
enum ParseShapes {
    static let size = 60 * 1024

    static var all: [(String, [UInt8])] {
        [("a small command", Array(#"{"type":"set","tab":"home","key":"k","value":"hello","ref":"r1"}"#.utf8)),
         ("thousands of keys", manyKeys()), ("\\u escapes", escapes()), ("nesting at the depth limit", deepNesting())]
    }

    static func manyKeys() -> [UInt8] {
        var members: [String] = []
        var length = 0
        while length < size - 64 {
            members.append("\"k\(members.count)\":\(members.count)")
            length += members.last!.utf8.count + 1
        }
        return Array(("{\"type\":\"set\",\"key\":\"big\",\"value\":{" + members.joined(separator: ",") + "}}").utf8)
    }

    static func escapes() -> [UInt8] {
        Array(("{\"type\":\"set\",\"key\":\"big\",\"value\":\"" + String(repeating: "\\u00e9", count: (size - 64) / 6) + "\"}").utf8)
    }

    static func deepNesting() -> [UInt8] {
        let deep = String(repeating: "[", count: 120) + String(repeating: "]", count: 120)
        let items = Array(repeating: deep, count: (size - 64) / 241)
        return Array(("{\"type\":\"set\",\"key\":\"big\",\"value\":[" + items.joined(separator: ",") + "]}").utf8)
    }
}
