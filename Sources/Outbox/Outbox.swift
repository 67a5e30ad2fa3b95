import FoundationEssentials
import Glibc
import Dispatch
import Locking
import TabdProtocol

/// The events webhooks deliver and `GET /api/events` streams, in the order they were
/// written, each at its *position* (1, 2, 3, … with no hole, for the life of the outbox).
///
/// This is the outbox as memory holds it. With a state file the writer writes each event in
/// the same transaction as the batch or change that caused it, and hands it here once that
/// committed (``committed(_:keptFrom:)``); started again, tabd reads what the file holds back
/// (``restore(_:next:)``). With `--state :memory:` events are written here directly
/// (``append(_:time:)``), and a restart loses them.
///
/// Bounded: the events kept weigh at most `limit` bytes. Past it the oldest go, and a reader
/// that had not got them gets a `gap` event instead (``read(after:maxBytes:)``).
///
/// Threads: any. Readers that wait for new events wait here, as threads
/// (``waitForNews(after:timeout:)``) or tasks (``news(after:)``).
public final class Outbox: @unchecked Sendable {
    // @unchecked Sendable: `state` is only touched with `condition` locked.

    public struct Entry: Sendable, Equatable {
        public let position: Int
        public let room: RoomID
        public let type: String
        public let body: [UInt8]
        /// The event's id where its position is not (`webhook-id`): a cluster's events are
        /// named by their place in the engine's history, the same on every node.
        public let key: String?
        /// The writer's own mark (a cluster's: which shard, read in which turn).
        public let tag: Int
        /// `body` is copied to storage of its exact size: what the outbox holds is what its
        /// bound counts (an encoder's array may have room for twice as much).
        public init(position: Int, room: RoomID, type: String, body: [UInt8], key: String? = nil, tag: Int = 0) {
            self.position = position; self.room = room; self.type = type; self.key = key; self.tag = tag
            self.body = body.capacity > body.count + 16 ? body.withUnsafeBufferPointer { Array($0) } : body
        }
    }

    /// What a reader gets: the positions it missed (dropped before it read them), then entries.
    public struct Read: Sendable {
        public var gap: ClosedRange<Int>?
        public var entries: [Entry]
    }

    /// The outbox's name: a reader tells two outboxes' positions apart by it (a new state
    /// file, or a tabd on `:memory:` started again, begins at position 1 again).
    public let id: String
    /// Bytes the kept events may weigh (`--webhook-outbox-bytes`).
    public let limit: Int
    public let kinds: OutboxKinds

    private struct State {
        var entries: [Entry] = []
        /// Index in `entries` of the first kept (the ones before it are dropped lazily).
        var start = 0
        var bytes = 0
        /// The position the next event gets.
        var next = 1
        /// Events dropped for the bound, since this process started.
        var dropped = 0
        var waiters: [(after: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let condition = ThreadCondition()
    private var state = State()

    public init(id: String, limit: Int, kinds: OutboxKinds) {
        precondition(limit > 0)
        self.id = id
        self.limit = limit
        self.kinds = kinds
    }

    /// A new outbox name: 16 hex digits.
    public static func newID() -> String {
        (0..<8).map { _ in String(UInt8.random(in: 0...255), radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
    }

    // MARK: Writing

    /// Writes `events` (memory only): each gets the next position. Returns the entries.
    @discardableResult
    public func append(_ events: [OutboxEvent], time: Double = Date().timeIntervalSince1970) -> [Entry] {
        guard !events.isEmpty else { return [] }
        return change { s in
            var made: [Entry] = []
            for event in events {
                let entry = Entry(position: s.next, room: event.room, type: event.type,
                                  body: event.encoded(position: s.next, outbox: id, time: time))
                s.next += 1
                add(entry, to: &s)
                made.append(entry)
            }
            trim(&s, keptFrom: nil)
            return made
        }
    }

    /// Events written elsewhere (a cluster's engine), each with its body and id made there:
    /// each gets the next position here. Returns the positions.
    @discardableResult
    public func append(prepared: [(room: RoomID, type: String, body: [UInt8], key: String, tag: Int)]) -> ClosedRange<Int>? {
        guard !prepared.isEmpty else { return nil }
        return change { s in
            let first = s.next
            for p in prepared {
                add(Entry(position: s.next, room: p.room, type: p.type, body: p.body, key: p.key, tag: p.tag), to: &s)
                s.next += 1
            }
            trim(&s, keptFrom: nil)
            return first...(s.next - 1)
        }
    }

    /// Entries a state file committed (their positions given there, in order, following
    /// the last); it kept those from `keptFrom` on.
    public func committed(_ entries: [Entry], keptFrom: Int) {
        change { s in
            for entry in entries {
                add(entry, to: &s)
                s.next = entry.position + 1
            }
            trim(&s, keptFrom: keptFrom)
        }
    }

    /// What a state file held when tabd started: its kept entries and the next position.
    public func restore(_ entries: [Entry], next: Int) {
        change { s in
            s = State(waiters: s.waiters)
            for entry in entries { add(entry, to: &s) }
            s.next = max(next, (entries.last?.position ?? 0) + 1)
            trim(&s, keptFrom: nil)
        }
    }

    private func add(_ entry: Entry, to s: inout State) {
        s.entries.append(entry)
        s.bytes += entry.body.count
    }

    /// Drops the oldest entries past the bound (never the newest one), or those before `keptFrom`.
    private func trim(_ s: inout State, keptFrom: Int?) {
        while s.start < s.entries.count - 1, s.bytes > limit || (keptFrom.map { s.entries[s.start].position < $0 } ?? false) {
            let gone = s.entries[s.start]
            s.bytes -= gone.body.count
            // Its body goes now, not when the array is next compacted.
            s.entries[s.start] = Entry(position: gone.position, room: "", type: "", body: [])
            s.start += 1
            s.dropped += 1
        }
        if s.start > 1024, s.start * 2 > s.entries.count {
            s.entries.removeFirst(s.start)
            s.start = 0
        }
    }

    @discardableResult
    private func change<T>(_ body: (inout State) -> T) -> T {
        condition.lock()
        let result = body(&state)
        let last = state.next - 1
        var ready: [CheckedContinuation<Void, Never>] = []
        state.waiters.removeAll { w in
            guard w.after < last else { return false }
            ready.append(w.continuation)
            return true
        }
        condition.broadcast()
        condition.unlock()
        for continuation in ready { continuation.resume() }
        return result
    }

    // MARK: Reading

    /// The entries after position `after`, up to about `maxBytes` (at least one), with the
    /// positions the reader missed first: those dropped since, past the bound.
    public func read(after: Int, maxBytes: Int = .max, maxCount: Int = .max) -> Read {
        condition.lock()
        defer { condition.unlock() }
        return read(after: after, maxBytes: maxBytes, maxCount: maxCount, state)
    }

    private func read(after: Int, maxBytes: Int, maxCount: Int, _ s: State) -> Read {
        guard s.start < s.entries.count else {
            // Nothing kept: anything between `after` and the next position was dropped.
            return Read(gap: after + 1 < s.next ? (after + 1)...(s.next - 1) : nil, entries: [])
        }
        let first = s.entries[s.start].position
        let gap: ClosedRange<Int>? = after + 1 < first ? (after + 1)...(first - 1) : nil
        var index = s.start + max(0, after + 1 - first)
        var taken: [Entry] = []
        var bytes = 0
        while index < s.entries.count, taken.count < maxCount, taken.isEmpty || bytes + s.entries[index].body.count <= maxBytes {
            taken.append(s.entries[index])
            bytes += s.entries[index].body.count
            index += 1
        }
        return Read(gap: gap, entries: taken)
    }

    /// The first position kept (the next one when none is).
    public var firstKept: Int {
        condition.lock()
        defer { condition.unlock() }
        return state.start < state.entries.count ? state.entries[state.start].position : state.next
    }

    /// The last position written (0: none yet).
    public var lastPosition: Int {
        condition.lock()
        defer { condition.unlock() }
        return state.next - 1
    }

    /// Waits (a thread) until an event after `after` is written, at most `timeout` seconds;
    /// true when there is one.
    public func waitForNews(after: Int, timeout: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while state.next - 1 <= after {
            if deadline.timeIntervalSinceNow <= 0 || !condition.wait(seconds: deadline.timeIntervalSinceNow) { return state.next - 1 > after }
        }
        return true
    }

    /// Waits (a task) until an event after `after` is written.
    public func news(after: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            condition.lock()
            if state.next - 1 > after {
                condition.unlock()
                continuation.resume()
                return
            }
            state.waiters.append((after, continuation))
            condition.unlock()
        }
    }

    /// Wakes every task waiting in ``news(after:)`` (tabd is stopping).
    public func wakeAll() {
        condition.lock()
        let waiting = state.waiters.map(\.continuation)
        state.waiters = []
        condition.broadcast()
        condition.unlock()
        for continuation in waiting { continuation.resume() }
    }

    /// For `/metrics`: events and bytes kept, the first and last positions, events dropped.
    public var figures: (count: Int, bytes: Int, first: Int, last: Int, dropped: Int) {
        condition.lock()
        defer { condition.unlock() }
        let first = state.start < state.entries.count ? state.entries[state.start].position : state.next
        return (state.entries.count - state.start, state.bytes, first, state.next - 1, state.dropped)
    }
}
