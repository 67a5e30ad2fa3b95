@_spi(Engine) import WebSocketEngine
/// The output side of every connection, as plain state: what each connection still has to
/// receive, in which order, and which connections must be woken or closed.
///
/// Pure logic (no lws, no locks, no threads): the server keeps one inside a `Locked`; every
/// mutating call returns what the caller must do next (wake the service thread, close).
///
/// Channels. Broadcasts go to *channels*, independent logs each with its own increasing `seq`
/// (two channels' seqs are unrelated). A connection is pending until `activate` puts it on one
/// channel, whose *member* it stays until it is removed (or the channel is). Everything a
/// broadcast does (append, wake-up, sweep) touches its channel's members only. A channel
/// without members and frames is *idle*: it keeps only its last seq (`idleChannels`).
///
/// Pending connections. Which channel a pending connection will join is not known, yet it must get
/// the broadcasts made while it waits (its welcome was computed before them). So every channel also
/// keeps the broadcasts made since the oldest pending connection opened, if among the last
/// `queueLimit` of the whole table (by `clock`; the *horizon*): a sweep does not trim them, and a
/// channel without members holds them (`held` lists them oldest first, to drop each once it falls
/// behind the horizon or nobody is pending). That is at most `queueLimit` frames more in all, and
/// none while no connection is pending: a channel without members then drops a broadcast at once
/// (nobody can need it).
///
/// Ordering model. Within a channel, each log entry has an absolute *position*. A member has a
/// `cursor` (the position of the next broadcast it gets) and a FIFO of direct frames, each
/// tagged with the log position at enqueue time; a direct frame goes out once every broadcast
/// before its tag has gone out. So a `send` is ordered after every `broadcast` made before it on
/// the connection's channel, and frames are never duplicated or skipped. A pending connection's
/// direct frames are tagged with the table's broadcast count (`clock`, which every log entry
/// records too) and get their position at activation. A member more than `queueLimit` frames
/// behind is closed 1008 `too slow`, and each log keeps only what its live members still need,
/// so memory stays bounded.
///
/// Bytes. Frames are not all alike (a snapshot may weigh megabytes, an ack a few dozen bytes),
/// so the same holds in bytes: a member whose frames waiting (broadcasts from its cursor on,
/// direct frames, and what the socket layer still holds of its last write) weigh more than
/// `byteLimit` is closed 1008 `too slow` too, unless that is a single frame (one frame always
/// gets its chance). The frames `activate` hands over count toward neither of a connection's
/// own limits (its welcome and replay; their size is bounded where they are made). And the
/// table keeps `heldBytes`, the bytes every frame it holds weighs (each log once, each direct
/// queue, what the socket layer holds): past `totalByteLimit`, the connections whose sockets
/// take nothing more (`setBlocked`) are closed, the one with the most bytes waiting first,
/// until it is back under. A connection whose socket takes what it is sent is never closed
/// for the total.
///
/// HTTP answers and early input count too. An HTTP answer its peer does not take
/// (`holdAnswer`, by socket: HTTP connections have no `ConnectionID`) is part of `heldBytes`
/// until it is written (`releaseAnswer`), and such a socket is a candidate for the total like
/// a blocked WebSocket (the service thread drops it: `WakeWork.dropAnswers`); one answer per
/// socket, since a connection's next request is not read before its answer is out. What the
/// handler keeps of a pending connection's frames until its welcome (`holdEarly`) counts
/// toward its `byteLimit` and the total until `activate`.
struct ConnectionTable: Sendable {
    static let tooSlowReason = "too slow"

    let queueLimit: Int
    /// Bytes that may wait for one connection (see "Bytes" above).
    let byteLimit: Int
    /// Bytes that may wait for every connection together.
    let totalByteLimit: Int
    /// Bytes of every frame the table holds: each channel's log once, every direct queue,
    /// what the socket layer holds of blocked connections' last writes, the HTTP answers
    /// held for sockets that do not take them, and pending connections' early input.
    private(set) var heldBytes = 0
    /// The HTTP answers held for sockets that take no more, by socket: their bytes.
    private var answers: [UInt64: Int] = [:]
    /// Bytes of `answers` (part of `heldBytes`).
    private(set) var answerBytes = 0
    /// False once a look for connections to close for the total found none: it looks again
    /// when a connection is reported blocked, or once the total was back under its bound.
    private var totalCheckArmed = true
    private(set) var phase = Phase.running
    private(set) var forced = false

    private var connections: [ConnectionID: Connection] = [:]
    /// Channels with at least one member, or holding broadcasts for pending connections.
    private var channels: [ChannelID: Channel] = [:]
    /// Channels without members or frames, with their last seq (also the last dropped).
    private var idleChannels: [ChannelID: Int] = [:]
    /// Frames kept by channels without members, for pending connections, oldest first.
    private var held = Ring<Hold>()
    /// Connections in state `.pending`.
    private var pendingCount = 0
    /// Connections in the order they opened, with `clock` then; those no longer pending are
    /// dropped from the front as found, and all at once when they are most of it.
    private var pendingOpens = Ring<Hold.Opened>()
    /// Channels that got broadcasts since the last `takeWakeWork`.
    private var wokenChannels: [ChannelID] = []
    /// Broadcasts made so far, on every channel.
    private var clock = 0
    private var nextID: UInt64 = 1
    private var work = WakeWork()
    private var wakePending = false

    init(queueLimit: Int, byteLimit: Int = .max, totalByteLimit: Int = .max) {
        precondition(queueLimit > 0 && byteLimit > 0 && totalByteLimit > 0)
        self.queueLimit = queueLimit
        self.byteLimit = byteLimit
        self.totalByteLimit = totalByteLimit
    }

    var count: Int { connections.count }
    /// Channels known (with members or idle).
    var channelCount: Int { channels.count + idleChannels.count }
    /// Broadcast entries `channel` retains (for tests: memory stays bounded).
    func retainedLogCount(on channel: ChannelID) -> Int { channels[channel]?.log.count ?? 0 }
    /// The last seq broadcast on `channel`; nil for an unknown channel or one without broadcasts.
    func lastSeq(on channel: ChannelID) -> Int? {
        let last = channels[channel]?.lastSeq ?? idleChannels[channel] ?? .min
        return last == .min ? nil : last
    }
    /// The service loop may end: stopping, and every connection is gone (or time is up).
    var shouldExit: Bool { phase == .stopped || (phase == .stopping && (connections.isEmpty || forced)) }

    func state(of id: ConnectionID) -> State? { connections[id]?.state }

    /// Whether the connection is being closed by this server.
    func isClosing(_ id: ConnectionID) -> Bool {
        if case .closing = connections[id]?.state { return true }
        return false
    }
    func channel(of id: ConnectionID) -> ChannelID? { connections[id]?.channel }

    /// Frames waiting for `id` that count toward `queueLimit`.
    func backlog(of id: ConnectionID) -> Int? {
        connections[id].map { backlog($0) }
    }

    /// Bytes waiting for `id` (everything, counted toward `byteLimit` or not).
    func pendingBytes(of id: ConnectionID) -> Int? {
        connections[id].map { pendingBytes($0) }
    }

    /// `heldBytes` counted again from scratch, frame by frame (for tests: the running count
    /// must always equal it).
    func countHeldBytes() -> Int {
        var bytes = 0
        for channel in channels.values {
            for i in 0..<channel.log.count { bytes += channel.log[i].frame.wire.count }
        }
        for c in connections.values {
            for i in 0..<c.direct.count { bytes += c.direct[i].frame.wire.count }
            bytes += c.inFlight + c.earlyBytes
        }
        return bytes + answers.values.reduce(0, +)
    }

    // MARK: Connections coming and going (service thread)

    /// Registers a connection that completed its handshake, pending; nil once stopping.
    mutating func open() -> ConnectionID? {
        guard phase == .running else { return nil }
        let id = ConnectionID(rawValue: nextID)
        nextID += 1
        connections[id] = Connection(state: .pending)
        pendingCount += 1
        if pendingOpens.count >= 2 * pendingCount + 64 {
            let stillPending = (0..<pendingOpens.count).map { pendingOpens[$0] }.filter { isPending($0.id) }
            pendingOpens = Ring(stillPending)
        }
        pendingOpens.append(Hold.Opened(id: id, clock: clock))
        return id
    }

    /// Forgets a closed connection; returns the close this server had decided on, if any.
    mutating func remove(_ id: ConnectionID) -> (code: CloseCode, reason: String)? {
        guard let connection = connections.removeValue(forKey: id) else { return nil }
        heldBytes -= connection.direct.bytes + connection.inFlight + connection.earlyBytes
        if let key = connection.channel, let ci = channels.index(forKey: key) {
            channels.values[ci].members.remove(id)
            settleIfMemberless(ci, holding: true)
        }
        switch connection.state {
        case let .closing(code, reason, _): return (code, reason)
        case .pending: leavePending()
        case .active: break
        }
        return nil
    }

    // MARK: Output requests (any thread). Each returns true when the service thread must be woken.

    /// Appends a broadcast for the members of `channel` (and connections activated on it later).
    /// Costs O(1) (amortized), plus a sweep of the channel's members once per `queueLimit / 8`
    /// broadcasts.
    mutating func broadcast(_ frame: OutgoingFrame, seq: Int, on channel: ChannelID) -> Bool {
        guard phase != .stopped else { return false }
        let stamp = clock
        clock += 1
        releaseHeld()
        let ci: Dictionary<ChannelID, Channel>.Index
        if let live = channels.index(forKey: channel) {
            ci = live
        } else {
            let last = idleChannels[channel, default: .min]
            precondition(seq > last, "broadcast seq \(seq) on \(channel) not above the previous \(last)")
            guard pendingCount > 0 else {
                // Nobody can need it.
                idleChannels[channel] = seq
                return false
            }
            idleChannels[channel] = nil
            channels[channel] = Channel(lastSeq: last, trimmedSeq: last)
            ci = channels.index(forKey: channel)!
        }
        let last = channels.values[ci].lastSeq
        precondition(seq > last, "broadcast seq \(seq) on \(channel) not above the previous \(last)")
        channels.values[ci].lastSeq = seq
        channels.values[ci].log.append(LogEntry(seq: seq, stamp: stamp, offset: channels.values[ci].bytesEnd, frame: frame))
        channels.values[ci].bytesEnd += frame.wire.count
        heldBytes += frame.wire.count
        if channels.values[ci].members.isEmpty {
            // Kept for the pending connections only.
            held.append(Hold(stamp: stamp, channel: channel))
            if pendingCount == 0 { settleIfMemberless(ci, holding: false) }  // not expected: it would be idle
            return false
        }
        let channelBytes = channels.values[ci]
        if channelBytes.log.count > queueLimit + Swift.max(1, queueLimit / 8)
            || (channelBytes.logBytes > byteLimit && channelBytes.bytesEnd - channelBytes.sweptAtBytes >= Swift.max(1, byteLimit / 8))
        {
            sweep(ci)
        }
        if !channels.values[ci].wakeQueued {
            channels.values[ci].wakeQueued = true
            wokenChannels.append(channel)
        }
        enforceTotal()
        return requestWake()
    }

    /// Puts a pending connection on `channel` and starts sending to it: `first`, then every
    /// broadcast on the channel with seq > `afterSeq`. O(log of retained frames + frames queued).
    mutating func activate(_ id: ConnectionID, on channel: ChannelID, first: [OutgoingFrame], afterSeq: Int) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id),
            case .pending = connections.values[index].state
        else { return false }
        let ci: Dictionary<ChannelID, Channel>.Index
        if let live = channels.index(forKey: channel) {
            ci = live
        } else {
            let last = idleChannels.removeValue(forKey: channel) ?? .min
            channels[channel] = Channel(lastSeq: last, trimmedSeq: last)
            ci = channels.index(forKey: channel)!
        }
        if channels.values[ci].trimmedSeq > afterSeq {
            // A broadcast this connection needs is gone already.
            settleIfMemberless(ci, holding: true)
            beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
            return requestWake()
        }
        let (log, logStart) = (channels.values[ci].log, channels.values[ci].logStart)
        let start = logStart + log.partitionPoint { $0.seq <= afterSeq }
        var direct = DirectQueue()
        for frame in first { direct.append(DirectEntry(position: start, frame: frame)) }
        let firstBytes = direct.bytes
        let queued = connections.values[index].direct
        for i in 0..<queued.count {
            var entry = queued[i]
            let clockThen = entry.position
            entry.position = Swift.max(start, logStart + log.partitionPoint { $0.stamp < clockThen })
            direct.append(entry)
        }
        channels.values[ci].members.insert(id)
        heldBytes += direct.bytes - connections.values[index].direct.bytes - connections.values[index].earlyBytes
        connections.values[index].earlyBytes = 0
        connections.values[index].direct = direct
        connections.values[index].uncountedDirect = first.count
        connections.values[index].uncountedBytes = firstBytes
        connections.values[index].cursor = start
        connections.values[index].skipThrough = afterSeq
        connections.values[index].channel = channel
        connections.values[index].state = .active
        markDirty(at: index)
        leavePending()
        enforceTotal()
        return requestWake()
    }

    /// Queues `frame` for one connection, after every broadcast made so far on its channel.
    mutating func send(_ frame: OutgoingFrame, to id: ConnectionID) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id) else { return false }
        let position: Int
        switch connections.values[index].state {
        case .closing: return false
        case .pending: position = clock
        case .active: position = logEnd(of: connections.values[index])
        }
        connections.values[index].direct.append(DirectEntry(position: position, frame: frame))
        heldBytes += frame.wire.count
        if isTooSlow(connections.values[index]) {
            beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
        } else if case .active = connections.values[index].state {
            markDirty(at: index)
            enforceTotal()
        } else {
            return enforceTotal() ? requestWake() : false  // pending: delivered after activation
        }
        return requestWake()
    }

    /// The service thread found `id`'s socket taking no more (`blocked`), holding `inFlight`
    /// bytes of its last write unsent; or (`blocked` false) taking writes again.
    mutating func setBlocked(_ id: ConnectionID, _ blocked: Bool, inFlight: Int = 0) -> Bool {
        guard let index = connections.index(forKey: id) else { return false }
        let before = connections.values[index].inFlight
        connections.values[index].blocked = blocked
        connections.values[index].inFlight = blocked ? inFlight : 0
        heldBytes += connections.values[index].inFlight - before
        guard blocked else { return false }
        totalCheckArmed = true
        return enforceTotal() && requestWake()
    }

    /// The handler keeps `bytes` more of a pending connection's frames until its welcome: they
    /// count toward its `byteLimit` (past it, it is closed 1008 `too slow`) and the total,
    /// until `activate`. Ignored for a connection that is not pending.
    mutating func holdEarly(_ id: ConnectionID, bytes: Int) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id), case .pending = connections.values[index].state
        else { return false }
        connections.values[index].earlyBytes += bytes
        heldBytes += bytes
        if connections.values[index].earlyBytes > byteLimit {
            heldBytes -= connections.values[index].earlyBytes
            connections.values[index].earlyBytes = 0
            beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
            return requestWake()
        }
        return enforceTotal() && requestWake()
    }

    /// The service thread holds an HTTP answer of `bytes` for `socket`, whose peer takes no
    /// more of it now: counted with what the table holds until `releaseAnswer`; past the
    /// total, the socket may be chosen to be dropped (`WakeWork.dropAnswers`).
    mutating func holdAnswer(socket: UInt64, bytes: Int) -> Bool {
        guard phase != .stopped else { return false }
        let before = answers.updateValue(bytes, forKey: socket) ?? 0
        answerBytes += bytes - before
        heldBytes += bytes - before
        totalCheckArmed = true
        return enforceTotal() && requestWake()
    }

    /// The sockets chosen to be dropped for the total since the last `takeWakeWork` (the
    /// service thread, reporting an answer held, drops them at once rather than a pass later).
    mutating func takeDroppedAnswers() -> [UInt64] {
        defer { work.dropAnswers = [] }
        return work.dropAnswers
    }

    /// The answer held for `socket` is written, or its connection is gone.
    mutating func releaseAnswer(socket: UInt64) {
        guard let bytes = answers.removeValue(forKey: socket) else { return }
        answerBytes -= bytes
        heldBytes -= bytes
    }

    /// Closes a connection after what was queued for it before this call.
    mutating func close(_ id: ConnectionID, code: CloseCode, reason: String) -> Bool {
        guard phase != .stopped, let index = connections.index(forKey: id) else { return false }
        if case .closing = connections.values[index].state { return false }
        beginClosing(at: index, code: code, reason: reason, drain: true)
        return requestWake()
    }

    /// Forgets `channel`: its frames and its last seq. Its members are closed with `code` after
    /// what was queued for them (those closing already keep their close); what they still have
    /// to receive becomes direct frames, so the log can go at once. O(members + their backlogs).
    mutating func removeChannel(_ channel: ChannelID, code: CloseCode, reason: String) -> Bool {
        idleChannels[channel] = nil
        guard let ci = channels.index(forKey: channel) else { return false }
        for id in channels.values[ci].members {
            if let index = connections.index(forKey: id), case .active = connections.values[index].state {
                beginClosing(at: index, code: code, reason: reason, drain: true)
            }
        }
        let removed = channels.remove(at: ci).value
        heldBytes -= removed.logBytes
        for id in removed.members {
            if let index = connections.index(forKey: id) {
                let before = connections.values[index].direct.bytes
                Self.detach(&connections.values[index], from: removed)
                heldBytes += connections.values[index].direct.bytes - before
            }
        }
        return removed.members.isEmpty ? false : requestWake()
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

    /// Hands over (and clears) what accumulated since the last wake-up. The members of the
    /// channels that got broadcasts are listed one by one (O(members)), unless they make up
    /// nearly every connection: then `writableAll`, one flag.
    mutating func takeWakeWork() -> WakeWork {
        wakePending = false
        var taken = work
        work = WakeWork()
        let woken = wokenChannels
        wokenChannels = []
        var members = 0
        for key in woken {
            guard let ci = channels.index(forKey: key) else { continue }
            channels.values[ci].wakeQueued = false
            members += channels.values[ci].members.count
        }
        if members > 0 && members * 16 >= connections.count * 15 {
            taken.writableAll = true
        } else if members > 0 {
            for key in woken {
                guard let members = channels[key]?.members else { continue }
                for id in members {
                    guard let index = connections.index(forKey: id), !connections.values[index].dirty else { continue }
                    connections.values[index].dirty = true
                    taken.writable.append(id)
                }
            }
        }
        for id in taken.writable {
            if let index = connections.index(forKey: id) { connections.values[index].dirty = false }
        }
        return taken
    }

    /// Moves the next frames for `id` (about `maxBytes` on the wire, at least one) into `frames`.
    mutating func takeOutput(_ id: ConnectionID, maxBytes: Int, into frames: inout [OutgoingFrame]) -> Output {
        guard let index = connections.index(forKey: id) else { return .unknown }
        let before = connections.values[index].direct.bytes
        defer { heldBytes += connections.values[index].direct.bytes - before }
        guard let key = connections.values[index].channel else {
            return Self.takeOutput(&connections.values[index], maxBytes: maxBytes, into: &frames)
        }
        guard let ci = channels.index(forKey: key) else { preconditionFailure("\(id) is on \(key), which is gone") }
        return Self.takeOutput(&connections.values[index], from: channels.values[ci], maxBytes: maxBytes, into: &frames)
    }

    // MARK: Internals

    private func logEnd(of c: Connection) -> Int {
        c.channel.flatMap { channels[$0]?.logEnd } ?? 0
    }

    private func backlog(_ c: Connection) -> Int {
        Self.backlog(c, logEnd: logEnd(of: c))
    }

    private static func backlog(_ c: Connection, logEnd: Int) -> Int {
        (c.channel == nil ? 0 : Swift.max(0, logEnd - c.cursor)) + c.direct.count - c.uncountedDirect
    }

    /// Every byte waiting for `c`: broadcasts from its cursor on, direct frames, in flight.
    private func pendingBytes(_ c: Connection) -> Int {
        Self.pendingBytes(c, broadcasts: c.channel.flatMap { channels[$0] }.map { $0.bytes(from: c.cursor) } ?? 0)
    }

    private static func pendingBytes(_ c: Connection, broadcasts: Int) -> Int {
        broadcasts + c.direct.bytes + c.inFlight + c.earlyBytes
    }

    /// More than `queueLimit` frames behind, or more than `byteLimit` bytes in more than one
    /// frame (`frames`: its backlog; `pending`: every byte waiting for it).
    private func exceedsLimits(_ c: Connection, frames: Int, pending: Int) -> Bool {
        frames > queueLimit || (frames > 1 && pending - c.uncountedBytes > byteLimit)
    }

    private func isTooSlow(_ c: Connection) -> Bool {
        exceedsLimits(c, frames: backlog(c), pending: pendingBytes(c))
    }

    /// Also ends a pending state, which may drop held frames (and so move channels, not connections).
    private mutating func beginClosing(
        at index: Dictionary<ConnectionID, Connection>.Index, code: CloseCode, reason: String, drain: Bool
    ) {
        var wasPending = false
        if case .pending = connections.values[index].state { wasPending = true }
        let drainUntil = drain ? logEnd(of: connections.values[index]) : nil
        connections.values[index].state = .closing(code: code, reason: reason, drainUntil: drainUntil)
        if !drain {
            heldBytes -= connections.values[index].direct.bytes
            connections.values[index].direct = DirectQueue()
            connections.values[index].uncountedDirect = 0
            connections.values[index].uncountedBytes = 0
        }
        work.closing.append(connections.keys[index])
        markDirty(at: index)
        if wasPending { leavePending() }
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

    /// Closes the channel's members more than `queueLimit` frames behind and drops the
    /// broadcasts no remaining member needs, nor a pending connection may need.
    /// O(members), run once per `queueLimit / 8` broadcasts.
    private mutating func sweep(_ ci: Dictionary<ChannelID, Channel>.Index) {
        let (logStart, logEnd) = (channels.values[ci].logStart, channels.values[ci].logEnd)
        channels.values[ci].sweptAtBytes = channels.values[ci].bytesEnd
        var needed = logEnd
        if pendingCount > 0 {
            let horizon = horizon()
            needed = logStart + channels.values[ci].log.partitionPoint { $0.stamp < horizon }
        }
        for id in channels.values[ci].members {
            guard let index = connections.index(forKey: id) else { continue }
            let c = connections.values[index]
            let frames = Self.backlog(c, logEnd: logEnd)
            let pending = Self.pendingBytes(c, broadcasts: channels.values[ci].bytes(from: c.cursor))
            let behind = c.cursor < logStart || exceedsLimits(c, frames: frames, pending: pending)
            switch c.state {
            case .closing(_, _, nil):
                continue
            case let .closing(code, reason, .some):
                if behind {
                    beginClosing(at: index, code: code, reason: reason, drain: false)
                    continue
                }
            case .pending, .active:
                if behind {
                    beginClosing(at: index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
                    continue
                }
            }
            needed = Swift.min(needed, c.cursor)
        }
        trim(ci, count: needed - logStart)
    }

    private mutating func trim(_ ci: Dictionary<ChannelID, Channel>.Index, count k: Int) {
        guard k > 0 else { return }
        let channel = channels.values[ci]
        heldBytes -= (k < channel.log.count ? channel.log[k].offset : channel.bytesEnd) - channel.log[0].offset
        channels.values[ci].trimmedSeq = channels.values[ci].log[k - 1].seq
        channels.values[ci].log.removeFirst(k)
        channels.values[ci].logStart += k
    }

    /// Past `totalByteLimit`: closes blocked connections and drops sockets holding an HTTP
    /// answer, the one with the most bytes waiting first, until the table holds no more than
    /// that (what a closed member alone needed of its channel's log goes with it). True if it
    /// closed or dropped one. O(connections + held answers) per look; a look that finds none
    /// is not repeated until a connection is reported blocked or an answer held.
    @discardableResult
    private mutating func enforceTotal() -> Bool {
        guard heldBytes > totalByteLimit else {
            totalCheckArmed = true
            return false
        }
        guard totalCheckArmed else { return false }
        var closed = false
        while heldBytes > totalByteLimit {
            var victim: (index: Dictionary<ConnectionID, Connection>.Index, bytes: Int)?
            for index in connections.indices {
                let c = connections.values[index]
                guard c.blocked, case .active = c.state else { continue }
                let bytes = pendingBytes(c)
                if bytes > (victim?.bytes ?? 0) { victim = (index, bytes) }
            }
            var answer: (socket: UInt64, bytes: Int)?
            for (socket, bytes) in answers where bytes > (answer?.bytes ?? 0) { answer = (socket, bytes) }
            if let answer, answer.bytes > (victim?.bytes ?? 0) {
                releaseAnswer(socket: answer.socket)
                work.dropAnswers.append(answer.socket)
                closed = true
                continue
            }
            guard let victim else {
                totalCheckArmed = false
                break
            }
            let channel = connections.values[victim.index].channel
            heldBytes -= connections.values[victim.index].inFlight
            connections.values[victim.index].inFlight = 0
            beginClosing(at: victim.index, code: .policyViolation, reason: Self.tooSlowReason, drain: false)
            if let channel, let ci = channels.index(forKey: channel) { sweep(ci) }
            closed = true
        }
        return closed
    }

    // MARK: Frames held for pending connections

    /// Broadcasts made before this `clock` are not kept for pending connections: those made
    /// before the oldest pending connection opened, or before the last `queueLimit` broadcasts.
    private mutating func horizon() -> Int {
        guard pendingCount > 0 else { return .max }
        while let oldest = pendingOpens.first {
            if isPending(oldest.id) { return Swift.max(oldest.clock, clock - queueLimit) }
            pendingOpens.removeFirst()
        }
        return clock - queueLimit
    }

    private func isPending(_ id: ConnectionID) -> Bool {
        guard let c = connections[id], case .pending = c.state else { return false }
        return true
    }

    /// A connection stopped being pending: once none is, nothing is held any more.
    private mutating func leavePending() {
        pendingCount -= 1
        if pendingCount == 0 {
            pendingOpens.removeAll()
            releaseHeld()
        }
    }

    /// Drops the held frames that left the window. O(1) amortized: each hold is dropped once.
    private mutating func releaseHeld() {
        guard !held.isEmpty else { return }
        let horizon = horizon()
        while let hold = held.first, hold.stamp < horizon {
            held.removeFirst()
            if let ci = channels.index(forKey: hold.channel) { settleIfMemberless(ci, holding: false) }
        }
    }

    /// A channel without members keeps only what pending connections may need; with nothing
    /// left it becomes idle (its index is then invalid). `holding`: it just lost its last member
    /// (or never had one), so its frames have no holds yet: one hold, not older than any of them
    /// (nor than the last hold: they stay in order), drops them all in time.
    /// Leaves channels with members alone.
    private mutating func settleIfMemberless(_ ci: Dictionary<ChannelID, Channel>.Index, holding: Bool) {
        guard channels.values[ci].members.isEmpty else { return }
        let horizon = horizon()
        trim(ci, count: channels.values[ci].log.partitionPoint { $0.stamp < horizon })
        let log = channels.values[ci].log
        if log.isEmpty {
            let (key, channel) = channels.remove(at: ci)
            idleChannels[key] = channel.lastSeq
        } else if holding {
            let stamp = Swift.max(log[log.count - 1].stamp, held.isEmpty ? .min : held[held.count - 1].stamp)
            held.append(Hold(stamp: stamp, channel: channels.keys[ci]))
        }
    }
}
