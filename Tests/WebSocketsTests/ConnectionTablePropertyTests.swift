import Conformance
import Testing
@testable import WebSockets

private struct Close: Equatable {
    var code: CloseCode
    var reason: String
    static let tooSlow = Close(code: .policyViolation, reason: "too slow")
}

/// The table driven as the server drives it (wake-ups, writable callbacks only when requested,
/// random write budgets, closes, disconnects), next to a model as simple as possible: the list
/// of everything that happened, in call order. A connection must receive its `first` frames,
/// then, in call order, its channel's broadcasts above its `afterSeq` (those made while it was
/// pending included) and its sends; then the close decided for it, if any.
private struct Simulation {
    enum Event {
        case broadcast(channel: Int, history: Int, seq: Int, stamp: Int, name: String)
        case send(ConnectionID, String)
    }

    struct ModelChannel {
        let id: ChannelID
        /// Bumped by `removeChannel`: a new history, seqs from 1 again.
        var history = 0
        var lastSeq = 0
        /// The highest seq the table cannot have any more: it had no members while no
        /// connection was pending.
        var dropped = Int.min
        var members: Set<ConnectionID> = []
        /// Broadcast or activated on since created or removed: the table knows it.
        var known = false
    }

    struct ModelConnection {
        /// `clock` when it opened.
        var opened: Int
        var pending = true
        var afterSeq = 0
        var expected: [String] = []
        /// The close the model decided (close, removeChannel, activation too late).
        var close: Close?
        var received: [String] = []
        var receivedClose: Close?
        var removed = false
        /// Removed before its close frame went out: what it got is only a prefix.
        var lost = false
    }

    let seed: UInt64
    /// No sweeps (a queue limit never reached): every outcome is predicted exactly.
    let strict: Bool
    var table: ConnectionTable
    var rng: SeededRandom
    var events: [Event] = []
    var channels: [ModelChannel]
    var connections: [ConnectionID: ModelConnection] = [:]
    var order: [ConnectionID] = []
    /// A call returned true since the last `takeWakeWork` (lws_cancel_service).
    var woken = false
    /// Connections with a writable callback requested.
    var writable: Set<ConnectionID> = []
    var names = 0
    /// Broadcasts so far, as the table counts them.
    var clock = 0

    init(seed: UInt64, strict: Bool) {
        self.seed = seed
        self.strict = strict
        rng = SeededRandom(seed: seed)
        // Not strict: frame and byte limits small enough to be reached (each frame here is
        // 4 to 20 bytes on the wire), and a total over every connection.
        table = strict
            ? ConnectionTable(queueLimit: 1_000_000)
            : ConnectionTable(queueLimit: Int.random(in: 2...12, using: &rng), byteLimit: Int.random(in: 24...160, using: &rng),
                              totalByteLimit: Int.random(in: 160...600, using: &rng))
        channels = (0..<Int.random(in: 3...5, using: &rng)).map { ModelChannel(id: ChannelID(rawValue: UInt64(7 * $0 + 3))) }
    }

    var live: [ConnectionID] { order.filter { !connections[$0]!.removed } }

    mutating func pick<T>(_ list: [T]) -> T? { list.randomElement(using: &rng) }

    mutating func note(_ wake: Bool) { woken = woken || wake }

    mutating func name(_ what: String) -> String {
        names += 1
        return "\(what) #\(names)"
    }

    mutating func step() {
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<8: open()
        case 8..<20: activate()
        case 20..<50: broadcast()
        case 50..<65: send()
        case 65..<69: close()
        case 69..<71: removeChannel()
        case 71..<94: service(unlimited: false)
        case 94..<97: block()
        default: remove()
        }
        #expect(table.count == live.count, "seed \(seed)")
        #expect(table.heldBytes == table.countHeldBytes(), "seed \(seed): the running count of bytes held drifted")
        // Nobody pending and nobody on a channel: the table must have dropped all it had.
        if !live.contains(where: { connections[$0]!.pending && connections[$0]!.close == nil }) {
            for c in channels.indices where channels[c].members.isEmpty && channels[c].lastSeq > 0 {
                channels[c].dropped = channels[c].lastSeq
            }
        }
    }

    mutating func open() {
        guard let id = table.open() else {
            Issue.record("seed \(seed): open refused")
            return
        }
        connections[id] = ModelConnection(opened: clock)
        order.append(id)
    }

    mutating func activate() {
        guard let id = pick(live.filter { connections[$0]!.pending && connections[$0]!.close == nil }),
            let c = pick(Array(channels.indices))
        else { return }
        let channel = channels[c]
        let afterSeq = max(0, channel.lastSeq + Int.random(in: -3...2, using: &rng))
        let first = (0..<Int.random(in: 0...2, using: &rng)).map { "first \(id.rawValue).\($0)" }
        note(table.activate(id, on: channel.id, first: first.map(f), afterSeq: afterSeq))
        channels[c].known = true
        connections[id]!.pending = false
        connections[id]!.afterSeq = afterSeq
        let needed = events.compactMap { event -> Int? in
            guard case let .broadcast(e, history, seq, stamp, _) = event, e == c, history == channel.history,
                seq > afterSeq
            else { return nil }
            return stamp
        }
        // Made while it was pending: the table must still have them. Dropped: it cannot.
        let mustSucceed = needed.allSatisfy { $0 >= connections[id]!.opened }
        let mustFail = channel.dropped > afterSeq
        guard case .active = table.state(of: id) else {
            #expect(!mustSucceed || !strict, "seed \(seed): \(id) closed on activation, though pending while its frames came")
            connections[id]!.close = .tooSlow
            return
        }
        #expect(!mustFail, "seed \(seed): \(id) activated after frames it needs were dropped")
        channels[c].members.insert(id)
        connections[id]!.expected = first + events.compactMap { event in
            switch event {
            case let .broadcast(e, history, seq, _, name):
                e == c && history == channel.history && seq > afterSeq ? name : nil
            case let .send(to, name):
                to == id ? name : nil
            }
        }
    }

    mutating func broadcast() {
        guard let c = pick(Array(channels.indices)) else { return }
        channels[c].lastSeq += Int.random(in: 1...2, using: &rng)
        let seq = channels[c].lastSeq
        let name = name("\(channels[c].id)/\(channels[c].history)/\(seq)")
        note(table.broadcast(f(name), seq: seq, on: channels[c].id))
        channels[c].known = true
        events.append(.broadcast(channel: c, history: channels[c].history, seq: seq, stamp: clock, name: name))
        clock += 1
        for id in channels[c].members where connections[id]!.close == nil && seq > connections[id]!.afterSeq {
            connections[id]!.expected.append(name)
        }
    }

    mutating func send() {
        guard let id = pick(live) else { return }
        let name = name("to \(id)")
        note(table.send(f(name), to: id))
        guard connections[id]!.close == nil else { return }
        if connections[id]!.pending {
            events.append(.send(id, name))
        } else {
            connections[id]!.expected.append(name)
        }
    }

    mutating func close() {
        guard let id = pick(live.filter { connections[$0]!.close == nil }),
            let code = pick([CloseCode.normal, .goingAway, .internalError])
        else { return }
        let close = Close(code: code, reason: "bye \(id)")
        note(table.close(id, code: close.code, reason: close.reason))
        if connections[id]!.pending {
            // Drains what was sent to it while pending.
            connections[id]!.expected = events.compactMap { if case let .send(to, name) = $0, to == id { name } else { nil } }
        }
        connections[id]!.close = close
    }

    mutating func removeChannel() {
        guard let c = pick(Array(channels.indices)) else { return }
        note(table.removeChannel(channels[c].id, code: .roomGone, reason: "room deleted"))
        for id in channels[c].members where connections[id]!.close == nil {
            connections[id]!.close = Close(code: .roomGone, reason: "room deleted")
        }
        channels[c] = ModelChannel(id: channels[c].id, history: channels[c].history + 1)
    }

    /// The service thread: takes the wake work if woken, then runs some requested callbacks.
    mutating func service(unlimited: Bool) {
        if woken {
            woken = false
            let work = table.takeWakeWork()
            if work.writableAll { writable.formUnion(live) }
            // The server skips connections it no longer has (work queued before they closed).
            writable.formUnion(work.writable.filter { connections[$0]?.removed == false })
        }
        for id in writable.sorted(by: { $0.rawValue < $1.rawValue }) where unlimited || Bool.random(using: &rng) {
            writeable(id, unlimited: unlimited)
        }
    }

    /// One writable callback, as `ServiceLoop.writeable` runs it.
    mutating func writeable(_ id: ConnectionID, unlimited: Bool) {
        let writes = unlimited ? 10_000 : Int.random(in: 1...3, using: &rng)
        for _ in 0..<writes {
            var batch: [OutgoingFrame] = []
            let output = table.takeOutput(id, maxBytes: unlimited ? 1 << 20 : Int.random(in: 1...120, using: &rng), into: &batch)
            connections[id]!.received += batch.map(text)
            switch output {
            case .frames(more: true):
                continue
            case .frames(more: false), .idle:
                break
            case let .close(code, reason):
                connections[id]!.receivedClose = Close(code: code, reason: reason)
            case .unknown:
                Issue.record("seed \(seed): \(id) unknown to the table")
            }
            writable.remove(id)
            return
        }
        // Still more: the callback asks for another one (stays requested).
    }

    /// The service thread finds a socket taking no more (holding some bytes of its last
    /// write), or taking writes again.
    mutating func block() {
        guard let id = pick(live) else { return }
        note(table.setBlocked(id, Bool.random(using: &rng), inFlight: Int.random(in: 0...40, using: &rng)))
    }

    /// lws reports a connection closed: mostly one whose close frame went out, sometimes one lost.
    mutating func remove() {
        let done = live.filter { connections[$0]!.receivedClose != nil }
        guard let id = Bool.random(using: &rng) || done.isEmpty ? pick(live) : pick(done) else { return }
        let decided = table.remove(id).map { Close(code: $0.code, reason: $0.reason) }
        if let sent = connections[id]!.receivedClose {
            #expect(decided == sent, "seed \(seed): \(id)")
        } else {
            connections[id]!.lost = true
        }
        connections[id]!.removed = true
        writable.remove(id)
        for c in channels.indices { channels[c].members.remove(id) }
    }

    /// Lets everything out, then compares every connection with the model.
    mutating func finish() {
        var rounds = 0
        while woken || !writable.isEmpty {
            service(unlimited: true)
            rounds += 1
            if rounds > 10 {
                Issue.record("seed \(seed): output never ends")
                break
            }
        }
        for id in order {
            let c = connections[id]!
            let prefix = c.received.count <= c.expected.count && Array(c.expected.prefix(c.received.count)) == c.received
            let context = "seed \(seed) \(strict ? "strict" : "with sweeps") \(id): got \(c.received) \(String(describing: c.receivedClose)), model \(c.expected) \(String(describing: c.close))"
            if c.lost {
                #expect(prefix, "\(context)")
            } else if strict || c.receivedClose == nil {
                #expect(c.received == c.expected && c.receivedClose == c.close, "\(context)")
            } else {
                // A sweep may close it too slow, or end the drain of its close early.
                #expect(prefix && (c.receivedClose == .tooSlow || c.receivedClose == c.close), "\(context)")
            }
        }
        // Once every connection is gone, no channel keeps a frame; each keeps its last seq.
        for id in live { _ = table.remove(id) }
        for channel in channels {
            #expect(table.retainedLogCount(on: channel.id) == 0, "seed \(seed)")
            #expect(table.lastSeq(on: channel.id) == (channel.lastSeq > 0 ? channel.lastSeq : nil), "seed \(seed)")
        }
        #expect(table.channelCount == channels.filter(\.known).count, "seed \(seed)")
    }
}

struct ConnectionTablePropertyTests {
    @Test(arguments: [true, false], 0..<25)
    func everyConnectionGetsItsChannelsBroadcastsAboveAfterSeqAndItsSendsInCallOrder(strict: Bool, seed: UInt64) {
        var simulation = Simulation(seed: seed, strict: strict)
        for _ in 0..<400 { simulation.step() }
        simulation.finish()
    }
}
