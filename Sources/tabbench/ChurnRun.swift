import Foundation
import TabdLoad
import WebSocketsClient

/// Churn beside a load run: `--churn R` clients join and R leave every second, for
/// `--duration` seconds, into the same room; about R are connected at a time (each stays
/// about a second). Reports how many joined and left, and the welcomes' times. No load.
enum ChurnRun {
    static func run(_ options: BenchOptions) async throws -> Int32 {
        let rate = options.churn!
        let total = Int(rate * options.duration)
        let (bench, client) = try LoadRun.makeClient(options, connections: total + Int(rate) + 16)
        let tick = 0.05
        let perTick = rate * tick
        let started = monotonicNanos()
        var opened = 0, closed = 0
        var due = 0.0
        var ready: [ConnectionID] = []
        var next = 0
        while Double(monotonicNanos() - started) / 1e9 < options.duration {
            due += perTick
            let n = Int(due) - opened
            if n > 0 {
                bench.connect(upTo: opened + n)
                opened += n
            }
            // The ones welcomed since, oldest first; each leaves about a second after it joined.
            bench.state.withLock { s in
                while next < s.conns.count, s.conns[next].ready || s.conns[next].close != nil {
                    if s.conns[next].ready && s.conns[next].close == nil { ready.append(s.conns[next].id) }
                    next += 1
                }
            }
            let leaving = max(0, ready.count - Int(rate))
            for id in ready.prefix(leaving) { client.close(id) }
            ready.removeFirst(leaving)
            closed += leaving
            await sleep(seconds: tick)
        }
        let elapsed = Double(monotonicNanos() - started) / 1e9
        let (welcomed, failed) = bench.state.withLock { ($0.readyCount, $0.failed) }
        await client.shutdown()
        var summary = Summary()
        summary.add("churn", "\(format(rate, 0)) joins and leaves a second asked for \(format(elapsed, 1)) s")
        summary.add("joined", "\(welcomed) welcomed of \(opened) opened (\(format(Double(welcomed) / elapsed, 0)) per second), \(failed) failed")
        summary.add("left", "\(closed) (\(format(Double(closed) / elapsed, 0)) per second)")
        summary.print(title: "tabbench\(options.label.map { " [\($0)]" } ?? ""): churn, \(options.url!)")
        summary.json = ["label": options.label ?? "", "churn_rate": rate, "elapsed_seconds": elapsed, "opened": opened,
                        "welcomed": welcomed, "failed": failed, "closed": closed]
        try summary.write(to: options.json)
        return failed == 0 ? 0 : 1
    }
}
