import Conformance
import Coordinator
import Foundation
import TabdLoad
import WebSocketsClient

/// One result line of the summary, and the JSON object written with `--json`.
struct Summary {
    var lines: [(String, String)] = []
    var json: [String: Any] = [:]

    mutating func add(_ name: String, _ text: String) { lines.append((name, text)) }

    func print(title: String) {
        Swift.print(title)
        let width = lines.map(\.0.count).max() ?? 0
        for (name, text) in lines {
            Swift.print("  " + name.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + text)
        }
    }

    func write(to path: String?) throws {
        guard let path else { return }
        let data = try JSONSerialization.data(withJSONObject: json, options: [.prettyPrinted, .sortedKeys])
        try data.write(to: URL(fileURLWithPath: path))
    }
}

struct RunFailure: Error, CustomStringConvertible {
    let description: String
}

func log(_ options: BenchOptions, _ message: String) {
    if !options.quiet { FileHandle.standardError.write(Data("tabbench: \(message)\n".utf8)) }
}

/// Polls `condition` every 5 ms until it holds or `seconds` pass; false on timeout.
func wait(seconds: Double, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

func sleep(seconds: Double) async {
    try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
}

func format(_ d: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", d) }
func grouped(_ n: Int) -> String {
    let s = String(n)
    var out = ""
    for (i, c) in s.reversed().enumerated() {
        if i > 0 && i % 3 == 0 { out.append(",") }
        out.append(c)
    }
    return String(out.reversed())
}

enum LoadRun {
    static func makeClient(_ options: BenchOptions, connections: Int) throws -> (BenchClient, WebSocketClient) {
        let bench = BenchClient(options: options)
        var configuration = ClientConfiguration(maxConnections: connections + 16, logLevel: .error, connectTimeoutSeconds: 60,
                                                threadName: "tabbench", eventLoop: options.eventLoop, keepAliveSeconds: nil)
        configuration.tls = options.tls
        let client = try WebSocketClient(configuration: configuration, handler: bench)
        bench.client.withLock { $0 = client }
        return (bench, client)
    }

    /// How long connecting took.
    struct ConnectTimes {
        /// From the first connect to the last client's welcome (other servers: its open).
        var welcomed: Double
        /// From the first connect to the moment every room's presence batches had reached all
        /// of its clients (tabd; the same as `welcomed` for other servers).
        var settled: Double
    }

    /// Connects `count` clients and waits until each is ready (tabd: welcomed) or failed, then
    /// until tabd's presence batches have reached everyone in each room.
    @discardableResult
    static func connect(_ bench: BenchClient, _ count: Int, options: BenchOptions) async throws -> ConnectTimes {
        let started = monotonicNanos()
        bench.connect(upTo: count)
        let ok = await wait(seconds: options.connectTimeout ?? 60 + Double(count) / 100) {
            bench.state.withLock { s in s.conns.count >= count && s.readyCount + s.failed >= count }
        }
        let (ready, failed, failures, lastReady) = bench.state.withLock { s in (s.readyCount, s.failed, s.failures, s.lastReadyAt) }
        guard ok else {
            throw RunFailure(description: "only \(ready) of \(count) clients connected in \(format(Double(monotonicNanos() - started) / 1e9, 0)) s")
        }
        guard failed == 0 else {
            throw RunFailure(description: "\(failed) of \(count) connections failed, e.g. \(failures.joined(separator: "; "))")
        }
        let welcomed = Double(lastReady - started) / 1e9
        if options.server == .tabd {
            // Presence: everyone has seen every join of its room when the room's last seqs agree.
            _ = await wait(seconds: 30 + Double(count) / 100) {
                bench.state.withLock { s in
                    var low = [Int](repeating: Int.max, count: bench.layout.rooms), high = [Int](repeating: -1, count: bench.layout.rooms)
                    for c in s.conns where c.close == nil {
                        low[c.room] = min(low[c.room], c.lastSeq)
                        high[c.room] = max(high[c.room], c.lastSeq)
                    }
                    return zip(low, high).allSatisfy { $0.1 < 0 || $0.0 == $0.1 }
                }
            }
        }
        let settled = Double(monotonicNanos() - started) / 1e9
        log(options, "\(count) clients connected: all welcomed after \(format(welcomed, 3)) s, presence settled after \(format(settled, 3)) s")
        return ConnectTimes(welcomed: welcomed, settled: options.server == .tabd ? settled : welcomed)
    }

    static func run(_ options: BenchOptions) async throws -> Int32 {
        let server = options.pid.map(ProcessStats.init(pid:))
        let rssStart = server?.rssKiB()
        let (bench, client) = try makeClient(options, connections: options.clients)
        let connectTimes = try await connect(bench, options.clients, options: options)
        let rssConnected = server?.rssKiB()

        log(options, "load: \(options.loopDescription), \(Int(options.warmup)) s warm-up, \(options.duration) s measured")
        bench.startLoad()
        await sleep(seconds: options.warmup)
        let t0 = monotonicNanos()
        let cpu0 = server?.cpuSeconds()
        let selfCPU0 = ProcessStats.selfCPUSeconds()
        bench.state.withLock { s in
            s.measuring = true
            s.deliveries = 0
            s.deliveredBytes = 0
            s.sentMeasured = 0
            s.latencies = []
            s.latencies.reserveCapacity(1 << 16)
        }
        await sleep(seconds: options.duration)
        let measured = bench.state.withLock { s in
            s.measuring = false
            return (deliveries: s.deliveries, bytes: s.deliveredBytes, sent: s.sentMeasured, latencies: s.latencies)
        }
        let t1 = monotonicNanos()
        let cpu1 = server?.cpuSeconds()
        let selfCPU1 = ProcessStats.selfCPUSeconds()
        bench.stopLoad()
        let drained = await wait(seconds: 30) { bench.state.withLock { $0.outstanding == 0 } }

        // Stream checks.
        var checkProblems: [String] = []
        var checkedFrames = 0
        if options.check {
            if options.server == .tabd {
                bench.requestSync()
                let rooms = bench.layout.rooms
                if await wait(seconds: 30, { bench.state.withLock { $0.syncs == rooms } }) {
                    let targets = bench.state.withLock { s in s.sync.map { $0!.seq } }
                    _ = await wait(seconds: 30) {
                        bench.state.withLock { s in s.conns.allSatisfy { $0.close != nil || $0.lastSeq >= targets[$0.room] } }
                    }
                } else {
                    let got = bench.state.withLock { $0.syncs }
                    checkProblems.append(rooms == 1 ? "no answer to the final sync" : "answers to the final sync from \(got) of \(rooms) rooms")
                }
            }
            checkProblems += bench.state.withLock { s in check(s, options: options, frames: &checkedFrames) }
        }
        let rssAfter = server?.rssKiB()
        let final = bench.state.withLock { s in
            (errors: s.errors, samples: s.errorSamples, lost: s.lostAfterReady, duplicates: s.duplicates, overflow: s.overflow,
             acks: s.acks, completed: s.completed, unknown: s.unknownFrames)
        }
        await client.shutdown()

        // Summary.
        let seconds = Double(t1 - t0) / 1e9
        let rate = Double(measured.deliveries) / seconds
        let latency = LatencySummary(nanoseconds: measured.latencies)
        let layout = options.layout
        var summary = Summary()
        if options.rooms != nil {
            summary.add("rooms", "\(layout.rooms) (\(layout.activeRooms) with senders), \(layout.size(of: 0)) clients per room"
                        + (layout.clients % layout.rooms == 0 ? "" : " or fewer") + ", \(layout.senders / layout.activeRooms) sender(s) per active room")
        }
        summary.add("messages sent", "\(grouped(measured.sent)) (\(format(Double(measured.sent) / seconds, 0))/s)")
        summary.add("deliveries", "\(grouped(measured.deliveries)) in \(format(seconds)) s = \(grouped(Int(rate)))/s")
        summary.add("messages done", "\(grouped(latency.count)) (\(format(Double(latency.count) / seconds, 0))/s)")
        summary.add("frame size", measured.deliveries > 0 ? "\(measured.bytes / measured.deliveries) bytes" : "-")
        summary.add("latency to last client", "p50 \(format(latency.p50, 3)) ms, p90 \(format(latency.p90, 3)) ms, "
                    + "p99 \(format(latency.p99, 3)) ms, p99.9 \(format(latency.p999, 3)) ms, max \(format(latency.max, 3)) ms (\(latency.count) messages)")
        var errors = final.errors + final.lost + final.duplicates + final.overflow + final.unknown + (drained ? 0 : 1)
        var errorText = "\(final.errors) error replies, \(final.lost) connections lost, \(final.duplicates) duplicate deliveries, "
            + "\(final.overflow) sends skipped, \(final.unknown) unexpected frames"
        if !drained { errorText += ", messages still in flight after 30 s" }
        if let sample = final.samples.first { errorText += "; e.g. \(sample)" }
        summary.add("errors", errors == 0 ? "none" : errorText)
        if options.check {
            let scope = layout.rooms == 1 ? "\(options.clients) clients, \(grouped(checkedFrames)) frames each identical"
                : "\(layout.rooms) rooms of \(options.clients) clients, \(grouped(checkedFrames)) frames in all, identical for every client of a room"
            summary.add("stream checks", checkProblems.isEmpty
                        ? "passed (\(scope)\(options.server == .tabd ? ", seqs gap-free, invariants hold, replay = sync" : ""))"
                        : "FAILED: " + checkProblems.prefix(5).joined(separator: "; "))
            errors += checkProblems.count
        }
        func mib(_ k: Int?) -> String { k.map { format(Double($0) / 1024, 1) + " MiB" } ?? "-" }
        if server != nil {
            summary.add("server RSS", "\(mib(rssStart)) before, \(mib(rssConnected)) connected, \(mib(rssAfter)) after")
        }
        var serverCPUPerDelivery: Double?
        var serverCPUPerMessage: Double?
        if let cpu0, let cpu1, measured.deliveries > 0 {
            serverCPUPerDelivery = (cpu1 - cpu0) / Double(measured.deliveries) * 1e6
            serverCPUPerMessage = latency.count > 0 ? (cpu1 - cpu0) / Double(latency.count) * 1e6 : nil
            summary.add("server CPU", "\(format(serverCPUPerDelivery!)) µs per delivery, "
                        + "\(serverCPUPerMessage.map { format($0, 1) } ?? "-") µs per message (\(format((cpu1 - cpu0) / seconds * 100, 0))% of one core)")
        }
        let clientCPU = (selfCPU1 - selfCPU0)
        summary.add("client CPU", measured.deliveries > 0
                    ? "\(format(clientCPU / Double(measured.deliveries) * 1e6)) µs per delivery (\(format(clientCPU / seconds * 100, 0))% of one core)" : "-")
        summary.add("connect time", "\(format(connectTimes.welcomed, 3)) s until all welcomed, \(format(connectTimes.settled, 3)) s until presence settled")

        let title = "tabbench\(options.label.map { " [\($0)]" } ?? ""): \(options.server.rawValue) \(options.url!), "
            + "\(options.clients) clients, \(options.rooms.map { "\($0) room\($0 == 1 ? "" : "s"), " } ?? "")"
            + "\(options.senders) sender\(options.senders == 1 ? "" : "s"), \(options.loopDescription), "
            + "\(options.messageBytes)-byte messages"
        summary.print(title: title)
        summary.json = [
            "label": options.label ?? "", "server": options.server.rawValue, "url": options.url!.description,
            "clients": options.clients, "senders": options.senders, "rooms": layout.rooms, "active_rooms": layout.activeRooms, "window": options.rate == nil ? options.window : 0,
            "rate": options.rate ?? 0, "message_bytes": options.messageBytes, "seconds": seconds,
            "messages": measured.sent, "messages_done": latency.count, "deliveries": measured.deliveries, "deliveries_per_second": rate,
            "frame_bytes": measured.deliveries > 0 ? measured.bytes / measured.deliveries : 0,
            "latency_ms": ["p50": latency.p50, "p90": latency.p90, "p99": latency.p99, "p999": latency.p999, "max": latency.max, "count": latency.count],
            "errors": errors, "error_text": errors == 0 ? "" : errorText,
            "check": options.check ? (checkProblems.isEmpty ? "passed" : "failed") : "skipped",
            "check_problems": checkProblems,
            "server_rss_kib": ["before": rssStart ?? -1, "connected": rssConnected ?? -1, "after": rssAfter ?? -1],
            "server_cpu_us_per_delivery": serverCPUPerDelivery ?? -1,
            "server_cpu_us_per_message": serverCPUPerMessage ?? -1,
            "server_cpu_percent": cpu0.flatMap { c0 in cpu1.map { ($0 - c0) / seconds * 100 } } ?? -1,
            "client_cpu_us_per_delivery": measured.deliveries > 0 ? clientCPU / Double(measured.deliveries) * 1e6 : -1,
            "connect_seconds": connectTimes.settled, "welcomed_seconds": connectTimes.welcomed,
        ]
        try summary.write(to: options.json)
        return errors == 0 ? 0 : 1
    }
}
