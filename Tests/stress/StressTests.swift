import Coordinator
import Foundation
import TabdLoad
import Testing
import WebSocketsClient

/// Seeds from `TABD_STRESS_SEEDS` (comma-separated), else three fixed ones.
private let seeds: [UInt64] = {
    if let list = ProcessInfo.processInfo.environment["TABD_STRESS_SEEDS"] {
        return list.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
    }
    return [1, 2, 3]
}()

struct StormTimeout: Error, CustomStringConvertible {
    let description: String
}

/// Polls `condition` every 10 ms until it holds or `seconds` pass.
func waitUntil(_ what: @autoclosure () -> String, seconds: Double, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw StormTimeout(description: "timed out waiting for \(what())") }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Runs one storm against a fresh tabd and checks it (see `verify`).
func runStorm(_ plan: StormPlan, tabdArguments: [String] = []) async throws -> StormReport {
    let tabd = try TabdProcess(tabdArguments)
    let handler = StormHandler(plan: plan, url: WebSocketURL(host: "127.0.0.1", port: tabd.port, path: "/ws"))
    let client: WebSocketClient
    do {
        client = try WebSocketClient(configuration: .init(maxConnections: plan.senders + plan.churners + 64,
                                                          logLevel: .error, threadName: "stress-client"), handler: handler)
    } catch {
        _ = tabd.stop()
        throw error
    }
    handler.client.withLock { $0 = client }
    var report = StormReport()
    var final: Snapshot?
    func progress() -> String {
        handler.state.withLock { s in
            let replies = s.clients.filter { $0.role == .sender }.map(\.replied).reduce(0, +)
            let problems = s.clients.flatMap { $0.sessions.flatMap(\.problems) }.prefix(3)
            return "senders done \(s.sendersDone)/\(plan.senders), replies \(replies), reconnects \(s.reconnects)"
                + (problems.isEmpty ? "" : ", problems: \(problems.joined(separator: "; "))")
        }
    }
    do {
        handler.start()
        try await waitUntil("the watcher's welcome", seconds: 30) { handler.state.withLock { $0.clients[0].sessions[0].welcome != nil } }
        handler.openOthers()
        try await waitUntil("the storm to end (\(progress()))", seconds: 180) {
            handler.state.withLock { s in
                s.sendersDone == plan.senders
                    || s.clients.contains { c in c.role != .churner && c.sessions.contains { $0.close != nil } }
            }
        }
        handler.state.withLock { $0.churning = false }
        try await waitUntil("every churner to be back (\(progress()))", seconds: 60) {
            handler.state.withLock { s in
                s.clients.allSatisfy { c in c.role != .churner || (c.sessions.last?.welcome != nil && c.sessions.last?.close == nil) }
            }
        }
        handler.send(RandomCommands.frame(.sync, ref: "final"), from: 0)
        try await waitUntil("the final sync", seconds: 60) {
            handler.state.withLock { s in
                if case let .snapshot("final", snap)? = s.clients[0].sessions[0].replies.last?.frame {
                    final = snap
                    return true
                }
                return false
            }
        }
        try await waitUntil("every client to reach the final seq", seconds: 60) {
            handler.state.withLock { s in s.clients.allSatisfy { ($0.sessions.last?.lastSeq ?? 0) >= final!.seq } }
        }
    } catch {
        report.problems.append("\(error)")
    }
    handler.state.withLock { $0.finished = true }
    await client.shutdown()
    let (status, log) = tabd.stop()
    if let final, report.problems.isEmpty {
        report = handler.state.withLock { s in
            // The watcher's own reply is the final sync, not part of the storm.
            s.clients[0].sessions[0].replies.removeLast()
            return verify(s, plan: plan, final: final)
        }
    }
    if status != 0 { report.problems.append("tabd exited with status \(status)") }
    if log.contains("ThreadSanitizer") || log.contains("Fatal error") {
        report.problems.append("tabd's stderr:\n" + String(log.prefix(4000)))
    }
    return report
}

@Suite(.serialized) struct StressTests {
    /// 64 clients × 300 random commands (every kind; tabs added, moved and removed), all
    /// concurrent, each with four in flight, over WebSockets to one tabd: every client holds the
    /// identical gap-free stream, whose replay equals the `sync` snapshot, the invariants hold
    /// after every batch, and every reply is in order and after its events.
    @Test(arguments: seeds)
    func manyClientsOneOrder(seed: UInt64) async throws {
        let plan = StormPlan(seed: seed, senders: StressEnvironment.clients, commandsPerSender: StressEnvironment.commands)
        let started = ContinuousClock.now
        let report = try await runStorm(plan)
        for p in report.problems { Issue.record("seed \(seed): \(p)") }
        #expect(report.commandsApplied > plan.senders * plan.commandsPerSender / 4, "seed \(seed): too few commands applied")
        print("stress seed \(seed): \(report.batches) batches, \(report.commandsApplied) applied, \(report.errors) refused, "
              + "\(report.framesReceived) frames checked, \(report.snapshotsCompared) snapshots compared in \(ContinuousClock.now - started)")
    }

    /// The same storm while eight clients keep leaving (with a close frame or by vanishing) and
    /// coming back with `resume`: the frames of each one's sessions, put together, are exactly
    /// the global stream. A small resume window makes some of them get a snapshot instead,
    /// which must then equal the replay at its seq.
    @Test(arguments: seeds)
    func clientsComingAndGoingWithResume(seed: UInt64) async throws {
        let plan = StormPlan(seed: seed &+ 1000, senders: max(1, StressEnvironment.clients / 2),
                             commandsPerSender: StressEnvironment.commands, churners: 8)
        let started = ContinuousClock.now
        let report = try await runStorm(plan, tabdArguments: ["--resume-window", "400"])
        for p in report.problems { Issue.record("seed \(seed): \(p)") }
        #expect(report.sessions > plan.senders + 1 + plan.churners * 3, "seed \(seed): churners did not come and go")
        #expect(report.resumed > 0, "seed \(seed): no session was resumed")
        print("stress churn seed \(seed): \(report.sessions) sessions, \(report.resumed) resumed, \(report.batches) batches, "
              + "\(report.framesReceived) frames checked, \(report.snapshotsCompared) snapshots compared in \(ContinuousClock.now - started)")
    }
}
