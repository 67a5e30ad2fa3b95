import Locking
import Conformance
import Coordinator
import Foundation
import TabdLoad
import WebSocketsClient

/// One events frame as a client received it: its seqs and a digest of its bytes.
struct FrameRecord: Sendable, Equatable {
    var first: Int
    var last: Int
    var digest: UInt64
}

/// A reply to a command, and how many events frames the session had received before it.
struct ReplyRecord: Sendable {
    var frame: ServerFrame
    var framesBefore: Int
}

/// One connection of one client, from its welcome to its close.
struct SessionRecord: Sendable {
    var connection: ConnectionID
    /// The `resume` it asked for.
    var resumeFrom: Int?
    var welcome: Welcome?
    /// The seq its frames continue from: the welcome snapshot's, or the resume point.
    var startSeq = 0
    var frames: [FrameRecord] = []
    /// The watcher keeps the bytes too, to parse the global stream once.
    var raw: [[UInt8]] = []
    var replies: [ReplyRecord] = []
    var problems: [String] = []
    var close: ClientClose?

    var lastSeq: Int { frames.last?.last ?? startSeq }
}

enum Role: Sendable, Equatable { case watcher, sender, churner }

struct StormClient {
    let role: Role
    var rng: SeededRandom
    var sent = 0
    var replied = 0
    var sessions: [SessionRecord] = []
    /// Churner: frames to receive before leaving again.
    var leaveAfter = 0
    /// The refs and types of the commands sent, in order.
    var sentCommands: [(ref: String, type: String)] = []
}

/// Parameters of one storm.
struct StormPlan: Sendable {
    var seed: UInt64
    var senders = 64
    var commandsPerSender = 300
    /// Commands each sender keeps in flight.
    var window = 4
    var churners = 0
}

/// The client side of a storm: a watcher that keeps the whole stream, senders that each send
/// their random commands (a few in flight), and churners that keep leaving (closing or
/// vanishing) and coming back with `resume`. Everything runs on the client's service thread.
final class StormHandler: WebSocketClientHandler {
    /// Not Sendable (the generators are not): read it only inside `state.withLock`.
    struct State {
        var clients: [StormClient] = []
        var byConnection: [ConnectionID: Int] = [:]
        var churning = true
        /// The test is over: closes are expected from now on.
        var finished = false
        var sendersDone = 0
        var reconnects = 0
        var aborts = 0
    }

    let plan: StormPlan
    let url: WebSocketURL
    /// `Locked` (a pthread mutex), not `Mutex`: the TSan run must see this synchronisation.
    let state = Locked(State())
    let client = Locked<WebSocketClient?>(nil)

    init(plan: StormPlan, url: WebSocketURL) {
        self.plan = plan
        self.url = url
    }

    private var ws: WebSocketClient { client.withLock { $0! } }

    /// Opens the watcher; it must be welcomed before the others connect, so that it sees every
    /// batch any of them sees.
    func start() {
        state.withLock { s in
            s.clients.append(StormClient(role: .watcher, rng: SeededRandom(seed: plan.seed)))
            open(0, resume: nil, in: &s)
        }
    }

    /// Opens the senders and churners.
    func openOthers() {
        state.withLock { s in
            var roles: [Role] = Array(repeating: .sender, count: plan.senders)
            roles += Array(repeating: .churner, count: plan.churners)
            for role in roles {
                let i = s.clients.count
                s.clients.append(StormClient(role: role, rng: SeededRandom(seed: plan.seed &* 1_000_003 &+ UInt64(i))))
                open(i, resume: nil, in: &s)
            }
        }
    }

    private func open(_ i: Int, resume: (seq: Int, epoch: String)?, in s: inout State) {
        var path = "/ws?name=stress-\(i)"
        if let resume { path += "&resume=\(resume.seq)&epoch=\(resume.epoch)" }
        let id = ws.connect(url.with(path: path), subprotocols: "tabd.v1")
        s.byConnection[id] = i
        s.clients[i].sessions.append(SessionRecord(connection: id, resumeFrom: resume?.seq))
    }

    func opened(_ id: ConnectionID, subprotocol: String?) {}

    func received(_ id: ConnectionID, message: UnsafeRawBufferPointer, binary: Bool) {
        state.withLock { s in
            guard let i = s.byConnection[id] else { return }
            let k = s.clients[i].sessions.count - 1
            switch FrameScan.kind(message) {
            case .events:
                guard let first = FrameScan.firstSeq(message), let last = FrameScan.lastSeq(message) else {
                    s.clients[i].sessions[k].problems.append("an events frame without seqs")
                    return
                }
                let expected = s.clients[i].sessions[k].lastSeq + 1
                if s.clients[i].sessions[k].welcome == nil {
                    s.clients[i].sessions[k].problems.append("events before the welcome")
                } else if first != expected {
                    s.clients[i].sessions[k].problems.append("events from seq \(first), expected \(expected)")
                }
                s.clients[i].sessions[k].frames.append(FrameRecord(first: first, last: last, digest: FrameScan.digest(message)))
                if s.clients[i].role == .watcher { s.clients[i].sessions[k].raw.append(Array(message)) }
                if s.clients[i].role == .churner, s.churning, s.clients[i].sessions[k].frames.count == s.clients[i].leaveAfter {
                    // Leave: mostly with a close frame, sometimes by vanishing.
                    if Int.random(in: 0..<4, using: &s.clients[i].rng) == 0 {
                        s.aborts += 1
                        ws.abort(id)
                    } else {
                        ws.close(id, code: .goingAway, reason: "churn")
                    }
                }
            case .welcome:
                let frame: ServerFrame
                do { frame = try ServerFrame(bytes: Array(message)) } catch {
                    s.clients[i].sessions[k].problems.append("bad welcome: \(error)")
                    return
                }
                guard case let .welcome(w, _) = frame else { return }
                if s.clients[i].sessions[k].welcome != nil { s.clients[i].sessions[k].problems.append("a second welcome") }
                s.clients[i].sessions[k].welcome = w
                if w.resumed {
                    s.clients[i].sessions[k].startSeq = s.clients[i].sessions[k].resumeFrom ?? -1
                } else {
                    s.clients[i].sessions[k].startSeq = w.snapshot?.seq ?? -1
                }
                switch s.clients[i].role {
                case .sender:
                    while s.clients[i].sent < min(plan.window, plan.commandsPerSender) { sendNext(i, id, in: &s) }
                case .churner:
                    s.clients[i].leaveAfter = Int.random(in: 5...150, using: &s.clients[i].rng)
                case .watcher:
                    break
                }
            case .ack, .error, .snapshot, .pong, .clients:
                let frame: ServerFrame
                do { frame = try ServerFrame(bytes: Array(message)) } catch {
                    s.clients[i].sessions[k].problems.append("bad reply: \(error)")
                    return
                }
                s.clients[i].sessions[k].replies.append(ReplyRecord(frame: frame, framesBefore: s.clients[i].sessions[k].frames.count))
                s.clients[i].replied += 1
                if s.clients[i].role == .sender {
                    if s.clients[i].sent < plan.commandsPerSender {
                        sendNext(i, id, in: &s)
                    } else if s.clients[i].replied == plan.commandsPerSender {
                        s.sendersDone += 1
                    }
                }
            case .other:
                s.clients[i].sessions[k].problems.append("an unknown frame: \(String(decoding: message.prefix(80), as: UTF8.self))")
            }
        }
    }

    private func sendNext(_ i: Int, _ id: ConnectionID, in s: inout State) {
        let n = s.clients[i].sent
        s.clients[i].sent += 1
        let ref = "s\(i)-\(n)"
        let command = RandomCommands.next(&s.clients[i].rng)
        s.clients[i].sentCommands.append((ref, command.type))
        ws.send(RandomCommands.frame(command, ref: ref), on: id)
    }

    /// Sends one command from outside the storm (the final `sync`).
    func send(_ bytes: [UInt8], from i: Int) {
        state.withLock { s in
            guard let id = s.clients[i].sessions.last?.connection else { return }
            ws.send(bytes, on: id)
        }
    }

    func closed(_ id: ConnectionID, _ close: ClientClose) {
        state.withLock { s in
            guard let i = s.byConnection.removeValue(forKey: id) else { return }
            let k = s.clients[i].sessions.count - 1
            s.clients[i].sessions[k].close = close
            guard !s.finished else { return }
            guard s.clients[i].role == .churner, let welcome = s.clients[i].sessions[k].welcome else {
                s.clients[i].sessions[k].problems.append("closed during the storm: \(close)")
                return
            }
            // Come back where it left off (also after the storm, so that it ends connected).
            s.reconnects += 1
            open(i, resume: (s.clients[i].sessions[k].lastSeq, welcome.epoch), in: &s)
        }
    }
}
