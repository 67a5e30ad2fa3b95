import ArgumentParsing
import Foundation
import TabdLoad

/// Memory per idle connection: idle clients added step by step, the server's RSS read at
/// each step, and the least-squares slope of RSS over the number of connections.
enum IdleRun {
    static func run(_ options: BenchOptions) async throws -> Int32 {
        guard let steps = options.idleSteps, let pid = options.pid else {
            throw UsageError("--idle-steps needs --pid (the server whose memory is measured)")
        }
        let server = ProcessStats(pid: pid)
        let most = steps.last ?? 0
        let (bench, client) = try LoadRun.makeClient(options, connections: most)
        var points: [(Int, Int)] = []
        for step in steps {
            if step > 0 { try await LoadRun.connect(bench, step, options: options) }
            await sleep(seconds: options.settle)
            guard let rss = server.rssKiB() else { throw RunFailure(description: "cannot read /proc/\(pid)/status") }
            points.append((step, rss))
            log(options, "\(step) idle clients: server RSS \(rss) KiB")
        }
        var lost = 0
        if options.hold > 0 {
            await sleep(seconds: options.hold)
            lost = bench.state.withLock { $0.lostAfterReady }
        }
        let held = bench.state.withLock { s in s.conns.filter { $0.ready && $0.close == nil }.count }
        await client.shutdown()

        // Least squares: RSS = a + b·n.
        let slope = RoomMemoryRun.leastSquaresSlope(points.map { (Double($0.0), Double($0.1)) })

        var summary = Summary()
        for (count, rss) in points { summary.add("\(count) clients", "\(format(Double(rss) / 1024, 1)) MiB") }
        summary.add("per idle connection", "\(format(slope, 1)) KiB (least-squares slope)")
        summary.add("held", "\(held) of \(most) connections open at the end\(options.hold > 0 ? " of a \(options.hold) s hold" : ""), \(lost) lost")
        summary.print(title: "tabbench\(options.label.map { " [\($0)]" } ?? ""): idle memory of \(options.server.rawValue) (pid \(pid)) at \(options.url!)")
        summary.json = [
            "label": options.label ?? "", "server": options.server.rawValue,
            "steps": points.map { ["clients": $0.0, "rss_kib": $0.1] },
            "kib_per_connection": slope, "held": held, "lost": lost,
        ]
        try summary.write(to: options.json)
        return held == most && lost == 0 ? 0 : 1
    }
}
