import ArgumentParsing
import Foundation
import Synchronization
import TabdClient
import TabdLoad
import WebSocketsClient

/// Memory left behind by connections that come and go: waves of `--clients` clients over
/// `--rooms` rooms, each of which connects, is welcomed and leaves at once (every other one
/// with a close frame, the rest by dropping the TCP connection), `--connect-concurrency`
/// handshakes in flight. After each wave it waits until tabd counts no client
/// (`tabd_clients` in `/metrics`), then reads tabd's RSS. The first `--warmup-waves` waves
/// fill tabd's pools; the RSS after them is "before", and the report is the growth from there
/// per connection that came and went after it (the least-squares slope, and end minus before).
/// Runs `--waves` waves, or until `--duration` seconds when that is given.
enum ChurnWavesRun {
    /// What the handler counts; read by the main task.
    struct Counts {
        var opened = 0
        var welcomed = 0
        var closed = 0
        var failed = 0
        var failures: [String] = []
        /// Connections of this wave still to open.
        var toOpen = 0
    }

    final class Handler: WebSocketClientHandler {
        let counts = Mutex(Counts())
        let client = Mutex<WebSocketClient?>(nil)
        let urls: [WebSocketURL]
        let rooms: Int
        let concurrency: Int

        init(urls: [WebSocketURL], rooms: Int, concurrency: Int) {
            self.urls = urls
            self.rooms = rooms
            self.concurrency = concurrency
        }

        private var ws: WebSocketClient { client.withLock { $0! } }

        /// Starts a wave of `n` connections, `concurrency` at a time.
        func start(wave n: Int) {
            let first = counts.withLock { c -> Int in
                c.toOpen = n
                return min(n, concurrency)
            }
            for _ in 0..<first { openOne() }
        }

        private func openOne() {
            let number = counts.withLock { c -> Int? in
                guard c.toOpen > 0 else { return nil }
                c.toOpen -= 1
                c.opened += 1
                return c.opened
            }
            guard let number else { return }
            let url = urls[number % urls.count]
            let sep = url.path.contains("?") ? "&" : "?"
            let path = url.path + sep + "name=churn-\(number % 100_000)&room=\(RoomLayout.name(number % rooms))"
            ws.connect(url.with(path: path), subprotocols: "tabd.v1")
        }

        func opened(_ id: ConnectionID, subprotocol: String?) {}

        func received(_ id: ConnectionID, message: UnsafeRawBufferPointer, binary: Bool) {
            guard FrameScan.kind(message) == .welcome else { return }
            counts.withLock { $0.welcomed += 1 }
            // Welcomed: gone at once, half politely, half by dropping the connection.
            if id.rawValue % 2 == 0 { ws.close(id) } else { ws.abort(id) }
        }

        func closed(_ id: ConnectionID, _ close: ClientClose) {
            counts.withLock { c in
                c.closed += 1
                if !close.wasOpen {
                    c.failed += 1
                    if c.failures.count < 5 { c.failures.append(close.description) }
                }
            }
            openOne()
        }
    }

    struct Sample {
        var wave: Int
        var seconds: Double
        var connections: Int
        var rssKiB: Int
    }

    static func run(_ options: BenchOptions) async throws -> Int32 {
        guard let pid = options.pid else { throw UsageError("--waves needs --pid (the server whose memory is measured)") }
        let server = ProcessStats(pid: pid)
        let url = options.url!
        let perWave = options.clients
        let rooms = options.rooms ?? 1
        let handler = Handler(urls: options.urls.isEmpty ? [url] : options.urls, rooms: rooms,
                              concurrency: options.connectConcurrency)
        let configuration = ClientConfiguration(maxConnections: options.connectConcurrency + 16, logLevel: .error,
                                                connectTimeoutSeconds: 30, threadName: "tabbench-churn",
                                                eventLoop: options.eventLoop, keepAliveSeconds: nil)
        let client = try WebSocketClient(configuration: configuration, handler: handler)
        handler.client.withLock { $0 = client }

        let started = monotonicNanos()
        func elapsed() -> Double { Double(monotonicNanos() - started) / 1e9 }
        var samples: [Sample] = []
        var problems: [String] = []
        var wave = 0
        guard let rss0 = server.rssKiB() else { throw RunFailure(description: "cannot read /proc/\(pid)/status") }
        samples.append(Sample(wave: 0, seconds: 0, connections: 0, rssKiB: rss0))
        while options.durationGiven ? elapsed() < options.duration || wave < options.warmupWaves + 1 : wave < options.waves! {
            wave += 1
            let target = wave * perWave
            handler.start(wave: perWave)
            let done = await wait(seconds: 60 + Double(perWave) / 100) { handler.counts.withLock { $0.closed >= target } }
            if !done { problems.append("wave \(wave): only \(handler.counts.withLock { $0.closed - (target - perWave) }) of \(perWave) came and went in time"); break }
            // Gone from tabd too: it counts no client.
            let departed = await wait(seconds: 30) { (try? clients(url)) == 0 }
            if !departed { problems.append("wave \(wave): tabd still counts \((try? clients(url)).map(String.init) ?? "?") clients 30 s after the wave"); break }
            guard let rss = server.rssKiB() else { throw RunFailure(description: "cannot read /proc/\(pid)/status") }
            samples.append(Sample(wave: wave, seconds: elapsed(), connections: target, rssKiB: rss))
            log(options, "wave \(wave): \(grouped(target)) connections came and went in \(format(elapsed(), 1)) s, tabd RSS \(format(Double(rss) / 1024, 1)) MiB")
        }
        let counts = handler.counts.withLock { $0 }
        await client.shutdown()
        if counts.failed > 0 { problems.append("\(counts.failed) connections failed, e.g. \(counts.failures.joined(separator: "; "))") }
        if counts.welcomed < counts.closed - counts.failed { problems.append("\(counts.closed - counts.failed - counts.welcomed) opened without a welcome") }

        let measured = samples.filter { $0.wave >= options.warmupWaves }
        let before = measured.first
        let after = measured.last
        let departedAfterWarmup = (after?.connections ?? 0) - (before?.connections ?? 0)
        let slope = measured.count >= 2 ? RoomMemoryRun.leastSquaresSlope(measured.map { (Double($0.connections), Double($0.rssKiB)) }) * 1024 : 0
        let endMinusBefore = departedAfterWarmup > 0 ? Double((after!.rssKiB - before!.rssKiB) * 1024) / Double(departedAfterWarmup) : 0
        let seconds = elapsed()

        var summary = Summary()
        summary.add("waves", "\(wave) of \(grouped(perWave)) clients over \(rooms) room\(rooms == 1 ? "" : "s"), \(options.connectConcurrency) handshakes in flight, \(options.warmupWaves) warm-up")
        summary.add("connections", "\(grouped(counts.closed)) came and went in \(format(seconds, 1)) s (\(format(Double(counts.closed) / seconds, 0)) per second), \(grouped(counts.welcomed)) welcomed")
        func mib(_ k: Int?) -> String { k.map { format(Double($0) / 1024, 1) + " MiB" } ?? "-" }
        summary.add("tabd RSS", "\(mib(rss0)) at the start, \(mib(before?.rssKiB)) after the warm-up, \(mib(after?.rssKiB)) at the end, "
                    + "\(mib(measured.map(\.rssKiB).max())) at most")
        summary.add("per departed connection", "\(format(slope, 1)) bytes (least-squares slope after the warm-up), "
                    + "\(format(endMinusBefore, 1)) bytes (end minus after the warm-up, over \(grouped(departedAfterWarmup)))")
        summary.add("problems", problems.isEmpty ? "none" : problems.joined(separator: "; "))
        summary.print(title: "tabbench\(options.label.map { " [\($0)]" } ?? ""): churn waves, tabd (pid \(pid)) at \(url)")
        summary.json = [
            "label": options.label ?? "", "clients_per_wave": perWave, "rooms": rooms, "waves": wave, "warmup_waves": options.warmupWaves,
            "connections": counts.closed, "welcomed": counts.welcomed, "failed": counts.failed, "seconds": seconds,
            "rss_start_kib": rss0, "rss_before_kib": before?.rssKiB ?? -1, "rss_end_kib": after?.rssKiB ?? -1,
            "bytes_per_connection_slope": slope, "bytes_per_connection": endMinusBefore,
            "samples": samples.map { ["wave": $0.wave, "t": $0.seconds, "connections": $0.connections, "rss_kib": $0.rssKiB] },
            "errors": problems.count, "error_text": problems.joined(separator: "; "),
        ]
        try summary.write(to: options.json)
        return problems.isEmpty ? 0 : 1
    }

    /// `tabd_clients` from `/metrics`: the connections tabd counts now.
    static func clients(_ url: WebSocketURL) throws -> Int? {
        let r = try HTTPCall(method: "GET", host: url.host, port: url.port, path: "/metrics").send()
        return r.body.split(separator: "\n").first { $0.hasPrefix("tabd_clients ") }
            .flatMap { Int($0.split(separator: " ").last ?? "") }
    }
}
