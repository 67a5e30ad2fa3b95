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
        let client = try WebSocketClient(
            configuration: .init(maxConnections: connections + 16, logLevel: .error, connectTimeoutSeconds: 60, threadName: "tabbench"),
            handler: bench)
        bench.client.withLock { $0 = client }
        return (bench, client)
    }

    /// Connects `count` clients and waits until each is ready (tabd: welcomed) or failed, then
    /// until tabd's presence batches have reached everyone.
    static func connect(_ bench: BenchClient, _ count: Int, options: BenchOptions) async throws {
        let started = ContinuousClock.now
        bench.connect(upTo: count)
        let ok = await wait(seconds: 60 + Double(count) / 100) {
            bench.state.withLock { s in s.conns.count >= count && s.conns.allSatisfy { $0.ready || $0.close != nil } }
        }
        let (ready, failed, failures) = bench.state.withLock { s in (s.conns.filter(\.ready).count, s.failed, s.failures) }
        guard ok else { throw RunFailure(description: "only \(ready) of \(count) clients connected in time") }
        guard failed == 0 else {
            throw RunFailure(description: "\(failed) of \(count) connections failed, e.g. \(failures.joined(separator: "; "))")
        }
        if options.server == .tabd {
            // Presence: everyone has seen every join when all last seqs agree.
            _ = await wait(seconds: 30 + Double(count) / 100) {
                bench.state.withLock { s in
                    let seqs = s.conns.lazy.filter { $0.close == nil }.map(\.lastSeq)
                    return seqs.min() == seqs.max()
                }
            }
        }
        log(options, "\(count) clients connected in \(started.duration(to: .now))")
    }

    static func run(_ options: BenchOptions) async throws -> Int32 {
        let server = options.pid.map(ProcessStats.init(pid:))
        let rssStart = server?.rssKiB()
        let (bench, client) = try makeClient(options, connections: options.clients)
        let connectStart = ContinuousClock.now
        try await connect(bench, options.clients, options: options)
        let connectTime = connectStart.duration(to: .now)
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
                if await wait(seconds: 30, { bench.state.withLock { $0.sync != nil } }) {
                    let target = bench.state.withLock { $0.sync!.seq }
                    _ = await wait(seconds: 30) {
                        bench.state.withLock { s in s.conns.allSatisfy { $0.close != nil || $0.lastSeq >= target } }
                    }
                } else {
                    checkProblems.append("no answer to the final sync")
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
        var summary = Summary()
        summary.add("messages sent", "\(grouped(measured.sent)) (\(format(Double(measured.sent) / seconds, 0))/s)")
        summary.add("deliveries", "\(grouped(measured.deliveries)) in \(format(seconds)) s = \(grouped(Int(rate)))/s")
        summary.add("frame size", measured.deliveries > 0 ? "\(measured.bytes / measured.deliveries) bytes" : "-")
        summary.add("latency to last client", "p50 \(format(latency.p50, 3)) ms, p90 \(format(latency.p90, 3)) ms, "
                    + "p99 \(format(latency.p99, 3)) ms, max \(format(latency.max, 3)) ms (\(latency.count) messages)")
        var errors = final.errors + final.lost + final.duplicates + final.overflow + final.unknown + (drained ? 0 : 1)
        var errorText = "\(final.errors) error replies, \(final.lost) connections lost, \(final.duplicates) duplicate deliveries, "
            + "\(final.overflow) sends skipped, \(final.unknown) unexpected frames"
        if !drained { errorText += ", messages still in flight after 30 s" }
        if let sample = final.samples.first { errorText += "; e.g. \(sample)" }
        summary.add("errors", errors == 0 ? "none" : errorText)
        if options.check {
            summary.add("stream checks", checkProblems.isEmpty
                        ? "passed (\(options.clients) clients, \(grouped(checkedFrames)) frames each identical\(options.server == .tabd ? ", seqs gap-free, invariants hold, replay = sync" : ""))"
                        : "FAILED: " + checkProblems.prefix(5).joined(separator: "; "))
            errors += checkProblems.count
        }
        func mib(_ k: Int?) -> String { k.map { format(Double($0) / 1024, 1) + " MiB" } ?? "-" }
        if server != nil {
            summary.add("server RSS", "\(mib(rssStart)) before, \(mib(rssConnected)) connected, \(mib(rssAfter)) after")
        }
        var serverCPUPerDelivery: Double?
        if let cpu0, let cpu1, measured.deliveries > 0 {
            serverCPUPerDelivery = (cpu1 - cpu0) / Double(measured.deliveries) * 1e6
            summary.add("server CPU", "\(format(serverCPUPerDelivery!)) µs per delivery (\(format((cpu1 - cpu0) / seconds * 100, 0))% of one core)")
        }
        let clientCPU = (selfCPU1 - selfCPU0)
        summary.add("client CPU", measured.deliveries > 0
                    ? "\(format(clientCPU / Double(measured.deliveries) * 1e6)) µs per delivery (\(format(clientCPU / seconds * 100, 0))% of one core)" : "-")
        summary.add("connect time", "\(connectTime)")

        let title = "tabbench\(options.label.map { " [\($0)]" } ?? ""): \(options.server.rawValue) \(options.url!), "
            + "\(options.clients) clients, \(options.senders) sender\(options.senders == 1 ? "" : "s"), \(options.loopDescription), "
            + "\(options.messageBytes)-byte messages"
        summary.print(title: title)
        summary.json = [
            "label": options.label ?? "", "server": options.server.rawValue, "url": options.url!.description,
            "clients": options.clients, "senders": options.senders, "window": options.rate == nil ? options.window : 0,
            "rate": options.rate ?? 0, "message_bytes": options.messageBytes, "seconds": seconds,
            "messages": measured.sent, "deliveries": measured.deliveries, "deliveries_per_second": rate,
            "frame_bytes": measured.deliveries > 0 ? measured.bytes / measured.deliveries : 0,
            "latency_ms": ["p50": latency.p50, "p90": latency.p90, "p99": latency.p99, "max": latency.max, "count": latency.count],
            "errors": errors, "error_text": errors == 0 ? "" : errorText,
            "check": options.check ? (checkProblems.isEmpty ? "passed" : "failed") : "skipped",
            "check_problems": checkProblems,
            "server_rss_kib": ["before": rssStart ?? -1, "connected": rssConnected ?? -1, "after": rssAfter ?? -1],
            "server_cpu_us_per_delivery": serverCPUPerDelivery ?? -1,
            "client_cpu_us_per_delivery": measured.deliveries > 0 ? clientCPU / Double(measured.deliveries) * 1e6 : -1,
            "connect_seconds": Double(connectTime.components.seconds) + Double(connectTime.components.attoseconds) / 1e18,
        ]
        try summary.write(to: options.json)
        return errors == 0 ? 0 : 1
    }

    /// Every client got the same frames in the same order; tabd: gap-free (checked as frames
    /// arrived), the lifecycle invariants hold on the first client's stream, and its replay
    /// from its welcome equals the final `sync`.
    static func check(_ s: BenchClient.State, options: BenchOptions, frames: inout Int) -> [String] {
        var problems: [String] = []
        for (i, c) in s.conns.enumerated() where c.problem != nil {
            problems.append("client \(i): \(c.problem!)")
            if problems.count > 3 { break }
        }
        guard let first = s.conns.first else { return ["no clients"] }
        frames = first.chained
        let differing = s.conns.filter { $0.close == nil && ($0.chained != first.chained || $0.chain != first.chain) }
        if !differing.isEmpty {
            problems.append("\(differing.count) clients received other frames than client 0 (e.g. \(differing[0].chained) vs \(first.chained))")
        }
        guard options.server == .tabd else { return problems }
        guard let origin = s.referenceOrigin, let sync = s.sync else { return problems + ["no welcome or sync to check against"] }
        var checker = StreamChecker(origin: origin)
        for bytes in s.reference {
            guard case let .events(batch)? = try? ServerFrame(bytes: bytes) else { return problems + ["a frame that does not parse"] }
            do { try checker.check(batch) } catch { return problems + ["\(error)"] }
            if batch.lastSeq == sync.seq { break }
        }
        if checker.state.seq != sync.seq {
            problems.append("client 0 reached seq \(checker.state.seq), the sync is at \(sync.seq)")
        } else if checker.state.capped != sync {
            problems.append("the replay differs from the sync snapshot at seq \(sync.seq)")
        }
        return problems
    }
}
