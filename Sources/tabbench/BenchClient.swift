import Coordinator
import Foundation
import Synchronization
import TabdLoad
import WebSocketsClient

/// The clients of one tabbench run: connects them (a bounded number of handshakes at a time),
/// each to its room (``RoomLayout``), sends messages from the senders, matches every delivery
/// to its message, times the last delivery of each (the last client *of the sender's room*),
/// and keeps what the stream checks need, per room. Its callbacks run on the client's service
/// thread; the run's phases read and change `state` from the main task.
final class BenchClient: WebSocketClientHandler {
    struct Conn {
        let id: ConnectionID
        let room: Int
        var ready = false
        var close: ClientClose?
        /// tabd: the last seq received (gap-free from the welcome on).
        var lastSeq = -1
        /// Digest of every broadcast frame received since the load started, in order.
        var chain: UInt64 = 0
        var chained = 0
        var received = 0
        var problem: String?
    }

    struct State {
        var conns: [Conn] = []
        /// Connection raw id - 1 → index in `conns` (ids are handed out in connect order).
        var indexByRawID: [Int32] = []
        var target = 0
        var connecting = 0
        var readyCount = 0
        /// When the last client so far became ready (its welcome; the open for other servers).
        var lastReadyAt: Int64 = 0
        var failures: [String] = []
        var failed = 0
        var lostAfterReady = 0
        /// Bytes of every message received, with their WebSocket frame headers.
        var receivedBytes = 0

        var running = false
        var chaining = false
        /// Per room: frames after this seq are chained (the reference's last seq when the
        /// load started: presence frames before it reached only some of the clients).
        var checkFrom: [Int]
        var nextMessage = 0
        var nextSender = 0
        var sentAt: [Int64]
        var remaining: [Int32]
        var outstanding = 0
        var overflow = 0
        var duplicates = 0

        var measuring = false
        var deliveries = 0
        var deliveredBytes = 0
        var completed = 0
        var sentMeasured = 0
        var latencies: [Int64] = []

        var acks = 0
        var errors = 0
        var errorSamples: [String] = []
        var unknownFrames = 0

        /// tabd, per room: its reference client's welcome snapshot and every events frame it got
        /// since, and the answer to its final `sync`.
        var referenceOrigin: [Snapshot?]
        var reference: [[[UInt8]]]
        var sync: [Snapshot?]
        var syncs = 0
        /// Welcomes that named another room than the one asked for (a server that ignores `room`).
        var wrongRoom = 0

        init(capacity: Int, rooms: Int) {
            sentAt = [Int64](repeating: 0, count: capacity)
            remaining = [Int32](repeating: 0, count: capacity)
            checkFrom = [Int](repeating: Int.max, count: rooms)
            referenceOrigin = [Snapshot?](repeating: nil, count: rooms)
            reference = [[[UInt8]]](repeating: [], count: rooms)
            sync = [Snapshot?](repeating: nil, count: rooms)
        }
    }

    let options: BenchOptions
    let layout: RoomLayout
    let url: WebSocketURL
    let urls: [WebSocketURL]
    let state: Mutex<State>
    let client = Mutex<WebSocketClient?>(nil)
    private let mask: Int
    private let padding: String

    init(options: BenchOptions) {
        self.options = options
        self.layout = options.layout
        self.url = options.url!
        self.urls = options.urls.isEmpty ? [options.url!] : options.urls
        let capacity = 1 << 20
        mask = capacity - 1
        state = Mutex(State(capacity: capacity, rooms: options.layout.rooms))
        // Pad so that the broadcast frame has about `messageBytes` bytes: the frame without padding
        // is the events frame below (tabd's by/seq fields are a few bytes longer or shorter).
        let bare = Self.broadcastFrame(number: 100_000, padding: "").count
        padding = String(repeating: "x", count: max(1, options.messageBytes - bare))
    }

    private var ws: WebSocketClient { client.withLock { $0! } }

    /// The frame every client receives, in tabd's shape (mirror and broadcast servers relay it as is).
    static func broadcastFrame(number: Int, padding: String) -> [UInt8] {
        Array(#"{"type":"events","by":"c1","ref":"r\#(number)","events":[{"seq":\#(number),"kind":"valueSet","tab":"home","key":"k","value":"\#(padding)"}]}"#.utf8)
    }

    /// What a sender sends for message `number`.
    func message(_ number: Int) -> [UInt8] {
        switch options.server {
        case .tabd:
            return Array(#"{"type":"set","ref":"r\#(number)","tab":"home","key":"k","value":"\#(padding)"}"#.utf8)
        case .mirror, .broadcast:
            return Self.broadcastFrame(number: number, padding: padding)
        }
    }

    // MARK: Connecting

    /// Opens connections until `target` are open or opening, at most `connectConcurrency` at a time.
    func connect(upTo target: Int) {
        state.withLock { s in
            s.target = max(s.target, target)
            openMore(&s)
        }
    }

    private func openMore(_ s: inout State) {
        while s.connecting < options.connectConcurrency && s.conns.count < s.target {
            let name = "bench-\(s.conns.count)"
            let room = layout.room(of: s.conns.count)
            let url = options.spread(urls[s.conns.count % urls.count], client: s.conns.count)
            let sep = url.path.contains("?") ? "&" : "?"
            var path = options.server == .tabd ? url.path + sep + "name=\(name)" : url.path
            if options.rooms != nil { path += "&room=\(RoomLayout.name(room))" }
            if let resume = options.resume { path += "&resume=\(resume.seq)&epoch=\(resume.epoch)" }
            let id = ws.connect(url.with(path: path), subprotocols: options.subprotocol)
            let raw = Int(id.rawValue) - 1
            while s.indexByRawID.count <= raw { s.indexByRawID.append(-1) }
            s.indexByRawID[raw] = Int32(s.conns.count)
            s.conns.append(Conn(id: id, room: room))
            s.connecting += 1
        }
    }

    private func index(_ id: ConnectionID, _ s: borrowing State) -> Int? {
        let raw = Int(id.rawValue) - 1
        guard raw >= 0, raw < s.indexByRawID.count, s.indexByRawID[raw] >= 0 else { return nil }
        return Int(s.indexByRawID[raw])
    }

    private func becameReady(_ i: Int, _ s: inout State) {
        guard !s.conns[i].ready else { return }
        s.conns[i].ready = true
        s.readyCount += 1
        s.lastReadyAt = monotonicNanos()
        s.connecting -= 1
        openMore(&s)
    }

    func opened(_ id: ConnectionID, subprotocol: String?) {
        guard options.server != .tabd else { return }  // tabd clients are ready at their welcome
        state.withLock { s in
            if let i = index(id, s) { becameReady(i, &s) }
        }
    }

    func closed(_ id: ConnectionID, _ close: ClientClose) {
        state.withLock { s in
            guard let i = index(id, s) else { return }
            s.conns[i].close = close
            if s.conns[i].ready {
                s.lostAfterReady += 1
            } else {
                s.failed += 1
                s.connecting -= 1
                if s.failures.count < 5 { s.failures.append(close.description) }
                openMore(&s)
            }
        }
    }

    // MARK: Receiving

    func received(_ id: ConnectionID, message: UnsafeRawBufferPointer, binary: Bool) {
        let now = monotonicNanos()
        let kind = FrameScan.kind(message)
        state.withLock { s in
            guard let i = index(id, s) else { return }
            s.receivedBytes += message.count + (message.count < 126 ? 2 : message.count < 65_536 ? 4 : 10)
            switch kind {
            case .events:
                delivered(i, message, now, &s)
            case .welcome:
                welcome(i, message, &s)
            case .ack:
                s.acks += 1
            case .error:
                s.errors += 1
                if s.errorSamples.count < 5 { s.errorSamples.append(String(decoding: message.prefix(200), as: UTF8.self)) }
            case .snapshot:
                // Only the references ask for `sync` (``requestSync()``): client r for room r.
                if i < layout.rooms, case let .snapshot(_, snap)? = try? ServerFrame(bytes: Array(message)) {
                    if s.sync[i] == nil { s.syncs += 1 }
                    s.sync[i] = snap
                }
            case .pong, .clients, .other:
                s.unknownFrames += 1
            }
        }
    }

    private func welcome(_ i: Int, _ message: UnsafeRawBufferPointer, _ s: inout State) {
        guard options.server == .tabd else { s.unknownFrames += 1; return }
        if case let .welcome(w, _)? = try? ServerFrame(bytes: Array(message)), w.resumed, let resume = options.resume {
            s.conns[i].lastSeq = resume.seq // the missed batches follow
            becameReady(i, &s)
            return
        }
        guard case let .welcome(w, _)? = try? ServerFrame(bytes: Array(message)), let snap = w.snapshot else {
            s.conns[i].problem = s.conns[i].problem ?? "a welcome that does not parse or has no snapshot"
            becameReady(i, &s)
            return
        }
        s.conns[i].lastSeq = snap.seq
        if options.rooms != nil && w.room != RoomLayout.name(s.conns[i].room) {
            s.wrongRoom += 1
            s.conns[i].problem = s.conns[i].problem
                ?? "welcomed to room \(w.room ?? "(none named)"), asked for \(RoomLayout.name(s.conns[i].room))"
        }
        if i < layout.rooms && options.check { s.referenceOrigin[i] = snap }
        becameReady(i, &s)
    }

    private func delivered(_ i: Int, _ message: UnsafeRawBufferPointer, _ now: Int64, _ s: inout State) {
        s.conns[i].received += 1
        if s.measuring {
            s.deliveries += 1
            s.deliveredBytes += message.count
        }
        if options.server == .tabd {
            // The last seq seen is kept with or without the checks: the connect phase waits on it.
            let (first, last) = FrameScan.seqRange(message) ?? (-1, -1)
            if options.check {
                if first != s.conns[i].lastSeq + 1, s.conns[i].problem == nil {
                    s.conns[i].problem = "seq \(first) after \(s.conns[i].lastSeq)"
                }
            }
            s.conns[i].lastSeq = last
            if options.check {
                if first > s.checkFrom[s.conns[i].room] { chain(i, message, &s) }
                if i < layout.rooms { s.reference[i].append(Array(message)) }
            }
        } else if s.chaining && options.check {
            chain(i, message, &s)
        }
        guard let n = FrameScan.refNumber(message) else { return }
        let slot = n & mask
        guard s.remaining[slot] > 0 else {
            s.duplicates += 1
            return
        }
        s.remaining[slot] -= 1
        guard s.remaining[slot] == 0 else { return }
        s.outstanding -= 1
        s.completed += 1
        if s.measuring { s.latencies.append(now - s.sentAt[slot]) }
        if s.running && options.rate == nil { send(at: now, &s) }
    }

    private func chain(_ i: Int, _ message: UnsafeRawBufferPointer, _ s: inout State) {
        s.conns[i].chain = FrameScan.chain(s.conns[i].chain, FrameScan.digest(message))
        s.conns[i].chained += 1
    }

    // MARK: Sending

    /// Sends the next message from the next sender (``RoomLayout/sender(_:)``: the active rooms
    /// in turn); `at` is its (scheduled) send time. It is done when every client of the sender's
    /// room has received it.
    func send(at time: Int64, _ s: inout State) {
        guard s.outstanding <= mask else {
            s.overflow += 1
            return
        }
        let n = s.nextMessage
        s.nextMessage += 1
        let slot = n & mask
        let sender = layout.sender(s.nextSender)
        s.nextSender += 1
        s.sentAt[slot] = time
        s.remaining[slot] = Int32(layout.size(of: layout.room(of: sender)))
        s.outstanding += 1
        if s.measuring { s.sentMeasured += 1 }
        ws.send(message(n), on: s.conns[sender].id)
    }

    /// Starts the load: the first window (closed loop) or the pacing thread (open loop).
    func startLoad() {
        state.withLock { s in
            s.running = true
            s.chaining = true
            for r in 0..<min(layout.rooms, s.conns.count) { s.checkFrom[r] = s.conns[r].lastSeq }
            if options.rate == nil {
                let now = monotonicNanos()
                for _ in 0..<options.window { send(at: now, &s) }
            }
        }
        if let rate = options.rate {
            let thread = Thread { [self] in pace(rate: rate) }
            thread.name = "tabbench-pacer"
            thread.start()
        }
    }

    /// Open loop: sends at evenly spaced scheduled times, whatever the server does.
    private func pace(rate: Double) {
        let start = monotonicNanos()
        let interval = 1e9 / rate
        var k = 0.0
        while true {
            let due = start + Int64(k * interval)
            var now = monotonicNanos()
            if due > now {
                var ts = timespec(tv_sec: Int((due - now) / 1_000_000_000), tv_nsec: Int((due - now) % 1_000_000_000))
                nanosleep(&ts, nil)
                now = monotonicNanos()
            }
            let keepGoing = state.withLock { s -> Bool in
                guard s.running else { return false }
                send(at: due, &s)
                return true
            }
            guard keepGoing else { return }
            k += 1
        }
    }

    func stopLoad() {
        state.withLock { $0.running = false }
    }

    /// tabd: asks each room's reference client for a `sync` snapshot (the end of the stream check).
    func requestSync() {
        state.withLock { s in
            s.sync = [Snapshot?](repeating: nil, count: layout.rooms)
            s.syncs = 0
            for r in 0..<min(layout.rooms, s.conns.count) {
                ws.send(Array(#"{"type":"sync","ref":"final"}"#.utf8), on: s.conns[r].id)
            }
        }
    }
}
