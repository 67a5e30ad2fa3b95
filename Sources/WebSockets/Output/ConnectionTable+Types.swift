@_spi(Engine) import WebSocketEngine
/// The values the connection table is made of, and what it answers.
extension ConnectionTable {
    enum Phase: Equatable, Sendable { case running, stopping, stopped }

    struct LogEntry: Sendable {
        let seq: Int
        /// `clock` when it was made: orders it against sends to connections still pending.
        let stamp: Int
        /// Bytes broadcast on the channel before this entry (its place in `Channel.bytesEnd`'s count).
        let offset: Int
        let frame: OutgoingFrame
    }

    struct DirectEntry: Sendable {
        /// On a channel: sent once the cursor reaches this log position. Pending: the `clock`
        /// when queued. After the channel was removed: unused (every direct frame is due).
        var position: Int
        let frame: OutgoingFrame
    }

    /// A connection's direct frames, oldest first, with the bytes they hold.
    struct DirectQueue: Sendable {
        private var entries = Ring<DirectEntry>()
        /// Wire bytes of every frame queued (shared frames counted in full).
        private(set) var bytes = 0

        init() {}
        init(_ entries: [DirectEntry]) { for entry in entries { append(entry) } }

        var count: Int { entries.count }
        var isEmpty: Bool { entries.isEmpty }
        var first: DirectEntry? { entries.first }
        subscript(index: Int) -> DirectEntry { entries[index] }

        mutating func append(_ entry: DirectEntry) {
            entries.append(entry)
            bytes += entry.frame.wire.count
        }

        @discardableResult
        mutating func removeFirst() -> DirectEntry {
            let entry = entries.removeFirst()
            bytes -= entry.frame.wire.count
            return entry
        }
    }

    enum State: Sendable {
        /// Connected, not yet activated: receives nothing.
        case pending
        /// A member of its channel.
        case active
        /// To be closed with `code`; when `drainUntil` is set, after everything queued before
        /// the close (direct frames, and broadcasts before that position of its channel's log;
        /// without a channel, every direct frame).
        case closing(code: CloseCode, reason: String, drainUntil: Int?)
    }

    struct Connection: Sendable {
        var state: State
        /// The channel it is a member of: set by `activate`, cleared by `removeChannel`.
        var channel: ChannelID?
        var cursor = 0
        var direct = DirectQueue()
        /// Direct frames at the front that came with `activate` and do not count toward the
        /// limits of one connection (frames and bytes), and their bytes.
        var uncountedDirect = 0
        var uncountedBytes = 0
        /// The service thread found its socket taking no more (reported by `setBlocked`):
        /// it is not reading what it is sent, as far as this server can tell.
        var blocked = false
        /// Bytes the service thread handed to the socket layer that it holds unsent (at most
        /// the last write), counted with what the table holds.
        var inFlight = 0
        /// Bytes of its frames the handler keeps until its welcome (`holdEarly`); 0 once active.
        var earlyBytes = 0
        /// Broadcasts with `seq` up to this are skipped (the welcome already covered them).
        var skipThrough = Int.min
        /// Listed in the pending `WakeWork.writable`.
        var dirty = false
    }

    /// A channel with members: its log and who reads it.
    struct Channel: Sendable {
        var log = Ring<LogEntry>()
        /// Absolute position of `log[0]`.
        var logStart = 0
        /// The last seq broadcast (`Int.min`: none yet).
        var lastSeq: Int
        /// The highest seq dropped from the log, so `activate` can tell whether it missed one.
        var trimmedSeq: Int
        var members: Set<ConnectionID> = []
        /// Listed in `wokenChannels`.
        var wakeQueued = false
        /// Bytes broadcast on the channel so far (`LogEntry.offset` counts from 0 too).
        var bytesEnd = 0
        /// `bytesEnd` at the last sweep: a sweep for bytes comes once per `byteLimit / 8`.
        var sweptAtBytes = 0

        var logEnd: Int { logStart + log.count }
        /// Bytes of the frames the log holds.
        var logBytes: Int { log.isEmpty ? 0 : bytesEnd - log[0].offset }

        /// Bytes of the broadcasts from position `cursor` on (from the log's start if before it).
        func bytes(from cursor: Int) -> Int {
            let at = Swift.max(cursor, logStart)
            return at < logEnd ? bytesEnd - log[at - logStart].offset : 0
        }
    }

    /// A broadcast kept for pending connections by a channel without members, or (`stamp` =
    /// `clock`) such a channel's older frames: to drop once `stamp` leaves the window.
    struct Hold: Sendable {
        let stamp: Int
        let channel: ChannelID

        /// When a connection opened (`clock`): it may need the broadcasts made from then on.
        struct Opened: Sendable {
            let id: ConnectionID
            let clock: Int
        }
    }

    /// What the service thread must do after a wake-up.
    struct WakeWork: Sendable {
        /// Write to every WebSocket connection at the end of the pass: the channels with new
        /// broadcasts hold (nearly) every connection, so listing them one by one is not worth it.
        var writableAll = false
        /// Write to these connections at the end of the pass.
        var writable: [ConnectionID] = []
        /// These connections just started closing: bound how long that may take.
        var closing: [ConnectionID] = []
        /// Drop these sockets now: each held an HTTP answer its peer did not take, and the
        /// total was past its bound (their answers are no longer counted).
        var dropAnswers: [UInt64] = []
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
}
