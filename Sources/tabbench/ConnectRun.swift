import Foundation
import TabdLoad

/// A connect storm: every client connects (`--connect-concurrency` handshakes in flight),
/// each to its room; reports the time until the last one was welcomed and until every
/// room's presence had settled, keeps them `--hold` seconds and checks that all stay. No load.
enum ConnectRun {
    static func run(_ options: BenchOptions) async throws -> Int32 {
        let server = options.pid.map(ProcessStats.init(pid:))
        let rssStart = server?.rssKiB()
        let cpu0 = server?.cpuSeconds()
        let (bench, client) = try LoadRun.makeClient(options, connections: options.clients)
        let started = monotonicNanos()
        var times: LoadRun.ConnectTimes?
        var failure: String?
        do {
            times = try await LoadRun.connect(bench, options.clients, options: options)
        } catch let f as RunFailure {
            failure = f.description
        }
        let elapsed = Double(monotonicNanos() - started) / 1e9
        // What the storm cost the clients (the hold's frames are not counted).
        let received = bench.state.withLock { $0.receivedBytes }
        let cpu1 = server?.cpuSeconds()
        let rssConnected = server?.rssKiB()
        if options.hold > 0 && failure == nil { await sleep(seconds: options.hold) }
        let (held, lost, problems, wrongRoom, welcomed) = bench.state.withLock { s in
            (s.conns.filter { $0.ready && $0.close == nil }.count, s.lostAfterReady,
             s.conns.compactMap(\.problem).prefix(3), s.wrongRoom, s.readyCount)
        }
        await client.shutdown()

        let layout = options.layout
        var summary = Summary()
        summary.add("clients", "\(grouped(options.clients)) in \(layout.rooms) room\(layout.rooms == 1 ? "" : "s")"
                    + (options.rooms == nil ? " (no room named: main)" : "") + ", \(options.connectConcurrency) handshakes in flight")
        if let times {
            summary.add("all welcomed after", "\(format(times.welcomed, 3)) s (\(format(Double(options.clients) / times.welcomed, 0)) per second)")
            summary.add("presence settled after", "\(format(times.settled, 3)) s")
            summary.add("received", "\(format(Double(received) / 1e6, 1)) MB by all clients together until settled (\(grouped(received / max(1, options.clients))) bytes each)")
        } else {
            summary.add("all welcomed after", "never: \(failure ?? "")")
        }
        func mib(_ k: Int?) -> String { k.map { format(Double($0) / 1024, 1) + " MiB" } ?? "-" }
        if server != nil { summary.add("server RSS", "\(mib(rssStart)) before, \(mib(rssConnected)) connected") }
        var cpu: Double?
        if let cpu0, let cpu1 {
            cpu = cpu1 - cpu0
            summary.add("server CPU", "\(format(cpu!, 2)) s while connecting (\(format(cpu! / elapsed * 100, 0))% of one core), "
                        + "\(format(cpu! / Double(options.clients) * 1e6, 0)) µs per client")
        }
        summary.add("held", "\(held) of \(options.clients) open at the end\(options.hold > 0 ? " of a \(format(options.hold, 0)) s hold" : ""), \(lost) lost")
        let failures = (held == options.clients ? 0 : 1) + lost + problems.count + (wrongRoom > 0 ? 1 : 0) + (failure == nil ? 0 : 1)
        let problemTexts = (failure.map { [$0] } ?? []) + Array(problems) + (wrongRoom > 0 ? ["\(wrongRoom) welcomes named another room"] : [])
        summary.add("problems", failures == 0 ? "none" : problemTexts.joined(separator: "; "))
        summary.print(title: "tabbench\(options.label.map { " [\($0)]" } ?? ""): connect storm, \(options.server.rawValue) \(options.url!)")
        summary.json = [
            "label": options.label ?? "", "server": options.server.rawValue, "url": options.url!.description,
            "clients": options.clients, "rooms": layout.rooms, "connect_concurrency": options.connectConcurrency,
            "welcomed_seconds": times?.welcomed ?? -1, "connect_seconds": times?.settled ?? -1, "elapsed_seconds": elapsed,
            "error_text": problemTexts.joined(separator: "; "),
            "server_rss_kib": ["before": rssStart ?? -1, "connected": rssConnected ?? -1],
            "server_cpu_seconds": cpu ?? -1, "welcomed": welcomed, "held": held, "lost": lost, "errors": failures,
            "received_bytes": received, "resumed": options.resume != nil,
        ]
        try summary.write(to: options.json)
        return failures == 0 ? 0 : 1
    }
}
