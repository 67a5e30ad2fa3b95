import Conformance
import Coordinator
import TabdLoad

/// What a storm showed: problems (empty when every guarantee held) and a few counts.
struct StormReport: Sendable {
    var problems: [String] = []
    var batches = 0
    var framesReceived = 0
    var sessions = 0
    var resumed = 0
    var snapshotsCompared = 0
    var commandsApplied = 0
    var errors = 0
}

/// Checks a finished storm against SEMANTICS.md "Ordering and sync":
/// - the watcher's stream is gap-free, keeps every lifecycle invariant after every batch, and
///   its replay from the watcher's welcome equals the final `sync` snapshot;
/// - every session of every client received exactly the global frames (same bytes, same
///   order, no gap, no repeat) from its welcome on, and every snapshot it was given (welcome
///   or `sync`) equals the replay at that seq; a resumed session continues exactly where the
///   previous one stopped;
/// - each sender's replies come in the order it sent its commands, each `ack` after the
///   command's own events frame and with its last seq; refused commands published nothing.
func verify(_ s: StormHandler.State, plan: StormPlan, final: Snapshot) -> StormReport {
    var report = StormReport()
    func problem(_ m: String) { if report.problems.count < 50 { report.problems.append(m) } }

    // The global stream, from the watcher.
    guard let watcher = s.clients.first, watcher.sessions.count == 1, let welcome = watcher.sessions[0].welcome,
          let origin = welcome.snapshot
    else {
        problem("the watcher has no single welcomed session")
        return report
    }
    let global = watcher.sessions[0]
    var needed: Set<Int> = [final.seq]
    for c in s.clients {
        for session in c.sessions {
            if let snap = session.welcome?.snapshot { needed.insert(snap.seq) }
            for r in session.replies { if case let .snapshot(_, snap) = r.frame { needed.insert(snap.seq) } }
        }
    }
    var states: [Int: Snapshot] = [origin.seq: origin]
    var checker = StreamChecker(origin: origin)
    var byRef: [String: EventBatch] = [:]
    var indexOfFirst: [Int: Int] = [:]
    for (n, bytes) in global.raw.enumerated() {
        guard case let .events(batch)? = try? ServerFrame(bytes: bytes) else {
            problem("global frame \(n) does not parse as events")
            return report
        }
        do { try checker.check(batch) } catch {
            problem("global stream: \(error)")
            return report
        }
        indexOfFirst[batch.firstSeq] = n
        if needed.contains(batch.lastSeq) { states[batch.lastSeq] = checker.state }
        if let ref = batch.ref {
            if byRef[ref] != nil { problem("ref \(ref) published twice") }
            byRef[ref] = batch
        } else if batch.by != Coordinator.daemonID {
            problem("a batch by \(batch.by) without a ref")
        }
    }
    report.batches = global.raw.count
    guard let end = states[final.seq] else {
        problem("the watcher never reached the final seq \(final.seq) (last \(global.lastSeq))")
        return report
    }
    if end.capped != final { problem("the replay at seq \(final.seq) differs from the final sync snapshot") }

    for (i, c) in s.clients.enumerated() {
        for (k, session) in c.sessions.enumerated() {
            let who = "client \(i) (\(c.role)) session \(k)"
            report.sessions += 1
            report.framesReceived += session.frames.count
            for p in session.problems { problem("\(who): \(p)") }
            guard let w = session.welcome else {
                problem("\(who): never welcomed (\(session.close?.description ?? "still open"))")
                continue
            }
            if w.resumed {
                report.resumed += 1
                if session.resumeFrom == nil { problem("\(who): resumed without asking") }
            } else if let snap = w.snapshot {
                report.snapshotsCompared += 1
                if snap.seq < origin.seq {
                    problem("\(who): welcomed at seq \(snap.seq), before the watcher")
                } else if states[snap.seq]?.capped != snap {
                    problem("\(who): welcome snapshot at seq \(snap.seq) is not the replay at that seq")
                }
            } else {
                problem("\(who): a welcome with neither resume nor snapshot")
            }
            if k > 0 {
                let previous = c.sessions[k - 1]
                if session.resumeFrom != previous.lastSeq { problem("\(who): resumed from \(session.resumeFrom ?? -1), saw \(previous.lastSeq)") }
            }
            // The same frames as the global stream, in order, from where the session starts.
            if let first = session.frames.first {
                guard let start = indexOfFirst[first.first] else {
                    problem("\(who): its first frame (seq \(first.first)) is not in the global stream")
                    continue
                }
                for (j, f) in session.frames.enumerated() {
                    let g = start + j
                    guard g < global.frames.count else { problem("\(who): more frames than the global stream"); break }
                    if f != global.frames[g] {
                        problem("\(who): frame \(j) (seq \(f.first)) differs from the global one")
                        break
                    }
                }
            }
        }
        if let last = c.sessions.last, last.lastSeq < final.seq {
            problem("client \(i) ended at seq \(last.lastSeq), before the final \(final.seq)")
        }
        guard c.role == .sender else { continue }
        // Replies in command order, each after its own events.
        let session = c.sessions[0]
        let clientID = session.welcome?.client.id ?? "?"
        if session.replies.count != plan.commandsPerSender || c.sentCommands.count != plan.commandsPerSender {
            problem("sender \(i): \(session.replies.count) replies to \(c.sentCommands.count) commands")
        }
        for (reply, sent) in zip(session.replies, c.sentCommands) {
            let seen = reply.framesBefore > 0 ? session.frames[reply.framesBefore - 1].last : session.startSeq
            let mine = byRef[sent.ref]
            if let mine, mine.by != clientID { problem("sender \(i): \(sent.ref) published by \(mine.by), not \(clientID)") }
            switch reply.frame {
            case let .ack(ref, seq):
                if ref != sent.ref { problem("sender \(i): ack for \(ref ?? "null") where \(sent.ref) was due"); continue }
                if sent.type == "sync" || sent.type == "ping" || sent.type == "clients" { problem("sender \(i): \(sent.type) answered by an ack") }
                if seq > seen { problem("sender \(i): ack of \(sent.ref) at seq \(seq) before its events (seen \(seen))") }
                if let mine {
                    report.commandsApplied += 1
                    if seq != mine.lastSeq { problem("sender \(i): ack of \(sent.ref) says seq \(seq), its batch ends at \(mine.lastSeq)") }
                }
            case let .error(ref, e):
                report.errors += 1
                if ref != sent.ref { problem("sender \(i): error for \(ref ?? "null") where \(sent.ref) was due"); continue }
                if e.code != .unknownTab && e.code != .invalid { problem("sender \(i): \(sent.ref) refused with \(e.code.rawValue): \(e.message)") }
                if mine != nil { problem("sender \(i): \(sent.ref) was refused but published events") }
            case let .snapshot(ref, snap):
                if ref != sent.ref || sent.type != "sync" { problem("sender \(i): a snapshot for \(ref ?? "null") where \(sent.ref) (\(sent.type)) was due"); continue }
                report.snapshotsCompared += 1
                if snap.seq > seen { problem("sender \(i): sync snapshot at seq \(snap.seq) ahead of its stream (\(seen))") }
                if states[snap.seq]?.capped != snap { problem("sender \(i): sync snapshot at seq \(snap.seq) is not the replay at that seq") }
            case let .pong(ref):
                if ref != sent.ref || sent.type != "ping" { problem("sender \(i): a pong for \(ref ?? "null") where \(sent.ref) (\(sent.type)) was due") }
            case let .clients(ref, _, _):
                if ref != sent.ref || sent.type != "clients" { problem("sender \(i): a client list for \(ref ?? "null") where \(sent.ref) (\(sent.type)) was due") }
            default:
                problem("sender \(i): unexpected reply \(reply.frame)")
            }
        }
    }
    return report
}
