import Locking
/// The output side of every connection, as plain state: what each connection still has to
/// receive, in which order, and which connections must be woken or closed.
///
/// Pure logic (no lws, no locks, no threads): the server keeps one inside a `Locked`; every
/// mutating call returns what the caller must do next (wake the service thread, close).
///
/// Ordering model. Broadcasts go to one shared log, each entry with its `seq`, at increasing
/// absolute *positions*. A connection has a `cursor` (the position of the next broadcast it
/// gets) and a FIFO of direct frames, each tagged with the log position at enqueue time; a
/// direct frame goes out once every broadcast before its tag has gone out. So a `send` is
/// ordered after every `broadcast` made before it, and frames are never duplicated or skipped.
/// A connection more than `queueLimit` frames behind is closed 1008 `too slow`, and the log
/// keeps only what live connections still need, so memory stays bounded.
struct ConnectionTable: Sendable {
    enum Phase: Equatable, Sendable { case running, stopping, stopped }

    struct LogEntry: Sendable {
        let seq: Int
        let frame: OutgoingFrame
    }

    struct DirectEntry: Sendable {
        /// Sent once the cursor reaches this log position.
        var position: Int
        let frame: OutgoingFrame
    }

    enum State: Sendable {
        /// Connected, not yet activated: receives nothing.
        case pending
        case active
        /// To be closed with `code`; when `drainUntil` is set, after everything queued before
        /// the close (direct frames, and broadcasts before that log position) went out.
        case closing(code: CloseCode, reason: String, drainUntil: Int?)
    }

    struct Connection: Sendable {
        var state: State
        var cursor: Int
        var direct = Ring<DirectEntry>()
        /// Direct frames at the front that came with `activate` and do not count toward the limit.
        var uncountedDirect = 0
        /// Broadcasts with `seq` up to this are skipped (the welcome already covered them).
        var skipThrough = Int.min
        var dirty = false
    }

    /// What the service thread must do after a wake-up.
    struct WakeWork: Sendable {
        /// Request a writable callback for every WebSocket connection (new broadcasts).
        var writableAll = false
        /// Request a writable callback for these connections.
        var writable: [ConnectionID] = []
        /// These connections just started closing: bound how long that may take.
        var closing: [ConnectionID] = []
    }

    /// What a connection's writable callback must do.
    enum Output: Equatable, Sendable {
        /// Nothing to send now.
        case idle
        /// Write the frames appended to the array; `more` if frames remain after them.
        case frames(more: Bool)
        /// Send a close frame with this code and reason (nothing else remains).
        case close(CloseCode, String)
        /// The table does not know this connection.
        case unknown
    }

    static let tooSlowReason = "too slow"

    let queueLimit: Int
    private(set) var phase = Phase.running
    private(set) var forced = false

    private var log = Ring<LogEntry>()
    /// Absolute position of `log[0]`.
    private var logStart = 0
    private var lastSeq: Int?
    /// The highest `seq` dropped from the log, so `activate` can tell whether it missed one.
    private var trimmedSeq: Int?
    private var connections: [ConnectionID: Connection] = [:]
    private var nextID: UInt64 = 1
    private var work = WakeWork()
    private var wakePending = false

    init(queueLimit: Int) {
        precondition(queueLimit > 0)
        self.queueLimit = queueLimit
    }

    var count: Int { connections.count }
    var logEnd: Int { logStart + log.count }
    /// Broadcast entries currently retained (for tests: memory stays bounded).
    var retainedLogCount: Int { log.count }
    /// The service loop may end: stopping, and every connection is gone (or time is up).
    var shouldExit: Bool { phase == .stopped || (phase == .stopping && (connections.isEmpty || forced)) }

    func state(of id: ConnectionID) -> State? { connections[id]?.state }

    /// Frames waiting for `id` that count toward `queueLimit`.
    func backlog(of id: ConnectionID) -> Int? {
        connections[id].map { backlog($0) }
    }

    // MARK: Connections coming and going (service thread)

    /// Registers a connection that completed its handshake, pending; nil once stopping.
    mutating func open() -> ConnectionID? {
        guard phase == .running else { return nil }
        let id = ConnectionID(rawValue: nextID)
        nextID += 1
        connections[id] = Connection(state: .pending, cursor: logEnd)
        return id
    }

    /// Forgets a closed connection; returns the close this server had decided on, if any.
    mutating func remove(_ id: ConnectionID) -> (code: CloseCode, reason: String)? {
        guard let connection = connections.removeValue(forKey: id) else { return nil }
        if connections.isEmpty { trim(to: logEnd) }
        if case let .closing(code, reason, _) = connection.state { return (code, reason) }
        return nil
    }

    // MARK: Output requests (any thread). Each returns true when the service thread must be woken.

    /// Appends a broadcast for every active connection (and pending ones, once activated).
    mutating func broadcast(_ frame: OutgoingFrame, seq: Int) -> Bool {
        guard phase != .stopped else { return false }
        if let lastSeq {
            precondition(seq > lastSeq, "broadcast seq \(seq) not above the previous \(lastSeq)")
        }
        lastSeq = seq
        log.append(LogEntry(seq: seq, frame: frame))
        if connections.isEmpty {
            trim(to: logEnd)
            return false
        }
        if log.count > queueLimit + Swift.max(1, queueLimit / 8) { sweep() }
        work.writableAll = true
        return requestWake()
    }

    /// Starts sending to a pending connection: `first`, then every broadcast with seq > `afterSeq`.
    mutating func activate(_ id: ConnectionID, first: [OutgoingFrame], afterSeq: Int) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id),
            case .pending = connections.values[index].state
        else { return false }
        if let trimmedSeq, trimmedSeq > afterSeq {
            // A broadcast this connection needs is gone already.
            beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
            return requestWake()
        }
        let start = logStart + log.partitionPoint { $0.seq <= afterSeq }
        var direct = Ring<DirectEntry>()
        for frame in first { direct.append(DirectEntry(position: start, frame: frame)) }
        let queued = connections.values[index].direct
        for i in 0..<queued.count {
            var entry = queued[i]
            entry.position = Swift.max(entry.position, start)
            direct.append(entry)
        }
        connections.values[index].direct = direct
        connections.values[index].uncountedDirect = first.count
        connections.values[index].cursor = start
        connections.values[index].skipThrough = afterSeq
        connections.values[index].state = .active
        markDirty(at: index)
        return requestWake()
    }

    /// Queues `frame` for one connection, after every broadcast made so far.
    mutating func send(_ frame: OutgoingFrame, to id: ConnectionID) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id) else { return false }
        switch connections.values[index].state {
        case .closing: return false
        case .pending, .active: break
        }
        connections.values[index].direct.append(DirectEntry(position: logEnd, frame: frame))
        if backlog(connections.values[index]) > queueLimit {
            beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
        } else if case .active = connections.values[index].state {
            markDirty(at: index)
        } else {
            return false  // pending: delivered after activation
        }
        return requestWake()
    }

    /// Closes a connection after what was queued for it before this call.
    mutating func close(_ id: ConnectionID, code: CloseCode, reason: String) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id) else { return false }
        if case .closing = connections.values[index].state { return false }
        beginClosing(at: index, code: code, reason: reason, drain: true)
        return requestWake()
    }

    /// Refuses new connections and closes every open one now, with `code`.
    mutating func beginShutdown(code: CloseCode, reason: String) -> Bool {
        guard phase == .running else { return false }
        phase = .stopping
        for index in connections.indices {
            beginClosing(at: index, code: code, reason: reason, drain: false)
        }
        return requestWake()
    }

    /// Lets the service loop end even though connections remain.
    mutating func forceStop() -> Bool {
        guard phase == .stopping, !forced else { return false }
        forced = true
        return requestWake()
    }

    /// The service loop is ending: nothing may wake it any more.
    mutating func markStopped() {
        phase = .stopped
        forced = true
    }

    // MARK: Service thread

    /// Hands over (and clears) what accumulated since the last wake-up.
    mutating func takeWakeWork() -> WakeWork {
        wakePending = false
        let taken = work
        work = WakeWork()
        for id in taken.writable {
            if let index = connections.index(forKey: id) { connections.values[index].dirty = false }
        }
        return taken
    }

    /// Moves the next frames for `id` (about `maxBytes` on the wire, at least one) into `frames`.
    mutating func takeOutput(_ id: ConnectionID, maxBytes: Int, into frames: inout [OutgoingFrame]) -> Output {
        guard let index = connections.index(forKey: id) else { return .unknown }
        let logLimit: Int
        var draining = false
        switch connections.values[index].state {
        case .pending:
            return .idle
        case .active:
            logLimit = logEnd
        case let .closing(code, reason, drainUntil):
            guard let drainUntil else { return .close(code, reason) }
            logLimit = drainUntil
            draining = true
            skipCovered(at: index, logLimit: logLimit)
            if !hasOutput(connections.values[index], logLimit: logLimit) { return .close(code, reason) }
        }
        var bytes = 0
        var taken = 0
        while true {
            skipCovered(at: index, logLimit: logLimit)
            let c = connections.values[index]
            let frame: OutgoingFrame
            let isDirect: Bool
            if let d = c.direct.first, d.position <= c.cursor {
                (frame, isDirect) = (d.frame, true)
            } else if c.cursor < logLimit {
                (frame, isDirect) = (log[c.cursor - logStart].frame, false)
            } else {
                break
            }
            if taken > 0 && bytes + frame.wire.count > maxBytes { break }
            if isDirect {
                connections.values[index].direct.removeFirst()
                if c.uncountedDirect > 0 { connections.values[index].uncountedDirect -= 1 }
            } else {
                connections.values[index].cursor += 1
            }
            frames.append(frame)
            bytes += frame.wire.count
            taken += 1
        }
        if taken == 0 { return .idle }
        // A draining close still owes its close frame: ask to be called again.
        return .frames(more: draining || hasOutput(connections.values[index], logLimit: logLimit))
    }

    // MARK: Internals

    private func backlog(_ c: Connection) -> Int {
        Swift.max(0, logEnd - c.cursor) + c.direct.count - c.uncountedDirect
    }

    /// Moves the cursor past broadcasts the connection's welcome already covered.
    private mutating func skipCovered(at index: Dictionary<ConnectionID, Connection>.Index, logLimit: Int) {
        var cursor = Swift.max(connections.values[index].cursor, logStart)
        let skipThrough = connections.values[index].skipThrough
        while cursor < logLimit && log[cursor - logStart].seq <= skipThrough { cursor += 1 }
        connections.values[index].cursor = cursor
    }

    /// Whether anything remains to send (seqs increase, so checking the last entry suffices).
    private func hasOutput(_ c: Connection, logLimit: Int) -> Bool {
        if !c.direct.isEmpty { return true }
        return c.cursor < logLimit && log[logLimit - 1 - logStart].seq > c.skipThrough
    }

    private mutating func beginClosing(
        at index: Dictionary<ConnectionID, Connection>.Index, code: CloseCode, reason: String, drain: Bool
    ) {
        connections.values[index].state = .closing(code: code, reason: reason, drainUntil: drain ? logEnd : nil)
        if !drain {
            connections.values[index].direct = Ring()
            connections.values[index].uncountedDirect = 0
        }
        work.closing.append(connections.keys[index])
        markDirty(at: index)
    }

    private mutating func markDirty(at index: Dictionary<ConnectionID, Connection>.Index) {
        guard !connections.values[index].dirty else { return }
        connections.values[index].dirty = true
        work.writable.append(connections.keys[index])
    }

    private mutating func requestWake() -> Bool {
        guard !wakePending, phase != .stopped else { return false }
        wakePending = true
        return true
    }

    /// Closes connections more than `queueLimit` frames behind and drops the broadcasts no
    /// remaining connection needs. O(connections), run once per `queueLimit / 8` broadcasts.
    private mutating func sweep() {
        var needed = logEnd
        for index in connections.indices {
            let c = connections.values[index]
            switch c.state {
            case .closing(_, _, nil):
                continue
            case let .closing(code, reason, .some):
                if c.cursor < logStart || backlog(c) > queueLimit {
                    beginClosing(at: index, code: code, reason: reason, drain: false)
                    continue
                }
            case .pending, .active:
                if c.cursor < logStart || backlog(c) > queueLimit {
                    beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
                    continue
                }
            }
            needed = Swift.min(needed, c.cursor)
        }
        trim(to: needed)
    }

    private mutating func trim(to position: Int) {
        let k = position - logStart
        guard k > 0 else { return }
        trimmedSeq = log[k - 1].seq
        log.removeFirst(k)
        logStart = position
    }
}
