import Locking
import Measuring
import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import Outbox

/// The one writer of a state file: commits queued batches on its own serial queue, every
/// batch of every room that arrived meanwhile in one transaction (group commit), and keeps
/// each open room's committed state in memory for its coordinator to fall back to.
///
/// Everything else that touches the file (opening, creating, listing, deleting rooms) runs
/// on the same queue through ``perform(_:)``, so it is ordered with the commits: a room
/// opened after another coordinator of it unloaded sees every batch that one queued.
///
/// Every commit is synced before its batches are answered, unless the store was opened with
/// ``StateStore/Options/syncCommits`` off (SQLite's `synchronous=FULL` against `NORMAL`).
/// The sync runs here, on the writer's queue, never on a thread that serves sockets; group
/// commit pays it once per transaction.
///
/// A failed sync breaks the writer for good (``broken``): the batches it covered and every
/// later one are refused `unavailable`, nothing is written to the file again (not even on
/// close), and ``StateStore/onFailure(_:)``'s handler is told once, so tabd can stop and let
/// its supervisor start it again on what the disk really holds.
///
/// `@unchecked Sendable`: the SQLite connection (`db`) and `sinceSnapshot` are only
/// touched on `queue`, a serial queue; everything else shared is behind `state`'s lock.
final class Writer: @unchecked Sendable {
    private struct Pending {
        let room: String
        let batch: EventBatch
        let generation: Int
        let done: @Sendable (CommandError?) -> Void
    }

    /// An open room, as the writer sees it.
    private struct Room {
        var committed: StoredState
        /// After a failed commit, the room's queued batches fail until its coordinator resets.
        var failed = false
        var minGeneration = 0
    }

    private struct State {
        var queue: [Pending] = []
        var draining = false
        var rooms: [String: Room] = [:]
        /// Why the file is written no more (a failed sync), once it is not.
        var broken: String?
        var onFailure: (@Sendable (String) -> Void)?
    }

    private let db: SQLiteConnection
    private let options: StateStore.Options
    private let queue = DispatchQueue(label: "tabd.state-writer")
    /// Each transaction of batches, from its BEGIN to its COMMIT returning (synced, unless
    /// `--state-sync off`).
    let commitTimes = Histogram(name: "tabd_commit_seconds",
                                help: "One transaction of the state file's writer: its batches written and committed (with --state-sync on, synced to disk).")
    private let state = Locked(State())
    /// Events committed per open room since its last snapshot (queue only).
    private var sinceSnapshot: [String: Int] = [:]
    /// The outbox's rows, written with the batches that cause them (queue only; nil: no outbox).
    private var outboxRows: OutboxRows?

    init(db: SQLiteConnection, options: StateStore.Options) {
        self.db = db
        self.options = options
    }

    /// Runs `body` on the writer's queue, after every commit queued before.
    func perform<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws(StoreError) -> T {
        let result: Result<T, StoreError> = await withCheckedContinuation { continuation in
            queue.async { [self] in
                if let broken = state.withLock({ $0.broken }) {
                    continuation.resume(returning: .failure(StoreError(message: broken)))
                    return
                }
                do { continuation.resume(returning: .success(try body(self.db))) } catch let error as StoreError {
                    continuation.resume(returning: .failure(error))
                } catch let error as SQLiteError {
                    if error.isSyncFailure { breakDown(error) }
                    continuation.resume(returning: .failure(StoreError(message: error.message)))
                } catch {
                    continuation.resume(returning: .failure(StoreError(message: "\(error)")))
                }
            }
        }
        return try result.get()
    }

    /// From now on each commit writes its events to the outbox (on the queue, from ``perform(_:)``).
    func keepOutbox(_ rows: OutboxRows) { outboxRows = rows }

    /// The outbox's rows as a transaction starts writing them: keep the result only if
    /// it commits (``outboxCommitted(_:)``). On the queue.
    struct OutboxWrite {
        fileprivate var rows: OutboxRows
        fileprivate var entries: [Outbox.Entry] = []
    }

    /// On the queue, inside a transaction: writes `events` to the outbox (nil: no outbox).
    func writeOutbox(_ db: SQLiteConnection, _ events: [OutboxEvent], into write: inout OutboxWrite?) throws(SQLiteError) {
        if write == nil, let rows = outboxRows { write = OutboxWrite(rows: rows) }
        guard write != nil else { return }
        write!.entries += try write!.rows.write(db, events, time: Date().timeIntervalSince1970)
    }

    /// On the queue: the transaction that wrote `write` committed.
    func outboxCommitted(_ write: OutboxWrite?) {
        guard let write else { return }
        outboxRows = write.rows
        if !write.entries.isEmpty { write.rows.outbox.committed(write.entries, keptFrom: write.rows.keptFrom) }
    }

    /// The kinds of event the outbox keeps (none without one).
    var outboxKinds: OutboxKinds { outboxRows?.outbox.kinds ?? [] }

    /// A room is open (on the queue, from ``perform(_:)``).
    func register(_ room: String, committed: StoredState) throws {
        var base = committed
        base.history = []
        let added = state.withLock { s -> Bool in
            guard s.rooms[room] == nil else { return false }
            s.rooms[room] = Room(committed: base)
            return true
        }
        guard added else { throw StoreError(message: "room '\(room)' is open already") }
        sinceSnapshot[room] = 0
    }

    /// Whether the writer holds `room` in memory.
    func isOpen(_ room: String) -> Bool { state.withLock { $0.rooms[room] != nil } }

    func committed(_ room: String) -> StoredState {
        state.withLock { $0.rooms[room]!.committed }
    }

    func enqueue(_ batch: EventBatch, room: String, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        let (start, broken) = state.withLock { s -> (Bool, String?) in
            if let broken = s.broken { return (false, broken) }
            s.queue.append(Pending(room: room, batch: batch, generation: generation, done: done))
            defer { s.draining = true }
            return (!s.draining, nil)
        }
        if let broken { return queue.async { done(.unavailable(broken)) } }
        if start { queue.async { self.drain() } }
    }

    /// Calls `handler` once the file is written no more (a failed sync), with the reason; at
    /// once if it is already so.
    func onFailure(_ handler: @escaping @Sendable (String) -> Void) {
        let broken = state.withLock { s -> String? in
            if s.broken == nil { s.onFailure = handler }
            return s.broken
        }
        if let broken { handler(broken) }
    }

    /// The reason the writer stopped writing, if it did.
    var broken: String? { state.withLock { $0.broken } }

    /// A sync failed (on the queue): nothing is written to the file again; `refusing`, every
    /// queued batch and every later one are refused.
    private func breakDown(_ error: SQLiteError, refusing batches: [Pending] = []) {
        let reason = "the state file could not be synced (\(error.message)); nothing more is written to it"
        let (queued, handler) = state.withLock { s -> ([Pending], (@Sendable (String) -> Void)?) in
            defer { s.queue = [] }
            guard s.broken == nil else { return (s.queue, nil) }
            s.broken = reason
            defer { s.onFailure = nil }
            return (s.queue, s.onFailure)
        }
        for item in batches + queued { item.done(.unavailable(reason)) }
        handler?(reason)
    }

    /// Commits since the last checkpoint. SQLite's own automatic checkpoint is off
    /// (``StateStore``): it ignores a failed sync of the main file, so the writer runs the
    /// checkpoints itself and breaks on one.
    private var commitsSinceCheckpoint = 0
    /// A checkpoint every this many commits (each commit adds at least one page to the WAL;
    /// SQLite's default is every 1,000 pages).
    static let checkpointEvery = 256

    /// Copies the WAL into the main file (and syncs it) once enough commits went by; a
    /// failed sync breaks the writer. On the queue.
    private func checkpointIfDue(commits: Int) {
        commitsSinceCheckpoint += commits
        guard commitsSinceCheckpoint >= Self.checkpointEvery else { return }
        commitsSinceCheckpoint = 0
        do { _ = try db.query("PRAGMA wal_checkpoint(PASSIVE)") } catch where error.isSyncFailure {
            breakDown(error)
        } catch {}
    }

    func reset(_ room: String, generation: Int) {
        state.withLock { s in
            s.rooms[room]?.failed = false
            s.rooms[room]?.minGeneration = generation
        }
    }

    /// Snapshots the room if it changed since its last snapshot, and forgets it.
    func unload(_ room: String) async {
        _ = try? await perform { [self] db in
            if sinceSnapshot.removeValue(forKey: room) ?? 0 > 0, let committed = state.withLock({ $0.rooms[room]?.committed }) {
                try? db.execute("BEGIN IMMEDIATE")
                try? StateStore.insertSnapshot(db, room: room, committed)
                _ = try? db.query("DELETE FROM snapshots WHERE room = ? AND seq < ?", [.text(room), .int(committed.snapshot.seq)])
                do { try db.execute("COMMIT") } catch let error as SQLiteError where error.isSyncFailure {
                    if !db.isAutocommit { try? db.execute("ROLLBACK") }
                    throw error // perform breaks the writer
                } catch {}
                if !db.isAutocommit { try? db.execute("ROLLBACK") }
            }
            state.withLock { _ = $0.rooms.removeValue(forKey: room) }
        }
    }

    /// Commits until the queue is empty.
    private func drain() {
        while true {
            let (items, rooms) = state.withLock { s -> ([Pending], [String: Room]) in
                let items = s.queue
                s.queue = []
                if items.isEmpty { s.draining = false }
                // Only the rooms these items touch: a transaction costs what it carries.
                var rooms: [String: Room] = [:]
                for item in items where rooms[item.room] == nil { rooms[item.room] = s.rooms[item.room] }
                return (items, rooms)
            }
            guard !items.isEmpty else { return }
            if let broken = state.withLock({ $0.broken }) {
                for item in items { item.done(.unavailable(broken)) }
                continue
            }
            var live: [Pending] = []
            for item in items {
                guard let room = rooms[item.room] else {
                    item.done(.unavailable("room '\(item.room)' is not open"))
                    continue
                }
                if room.failed || item.generation < room.minGeneration {
                    item.done(.unavailable("an earlier command could not be stored"))
                } else {
                    live.append(item)
                }
            }
            guard !live.isEmpty else { continue }
            switch commit(live, onto: rooms.mapValues(\.committed)) {
            case let .success(next):
                state.withLock { s in
                    for (room, committed) in next { s.rooms[room]?.committed = committed }
                }
                for item in live { item.done(nil) }
                checkpointIfDue(commits: 1)
            case let .failure(error) where error.isSyncFailure:
                // Never acknowledged, never retried on this file (the kernel may have
                // dropped the pages it failed to write): the writer breaks before anyone
                // hears of it.
                breakDown(error, refusing: live)
            case let .failure(error):
                state.withLock { s in
                    for item in live { s.rooms[item.room]?.failed = true }
                }
                for item in live { item.done(.unavailable("state store: \(error.message)")) }
            }
        }
    }

    /// One transaction: the batches, each room's new seq, and a room's snapshot when one is
    /// due. Returns the new committed state of every room it touched; on failure nothing of
    /// it is kept.
    private func commit(_ items: [Pending], onto base: [String: StoredState]) -> Result<[String: StoredState], SQLiteError> {
        var next: [String: StoredState] = [:]
        var events: [String: Int] = [:]
        var outbox: OutboxWrite?
        let kinds = outboxKinds
        let started = ContinuousClock.now
        do {
            try db.execute("BEGIN IMMEDIATE")
            for item in items {
                let batch = item.batch
                try db.query("INSERT INTO batches(room, first_seq, last_seq, frame) VALUES (?, ?, ?, ?)",
                             [.text(item.room), .int(batch.firstSeq), .int(batch.lastSeq), .blob(batch.frameBytes)])
                var state = next[item.room] ?? base[item.room]!
                do { try state.apply(batch) } catch {
                    throw SQLiteError(code: 1, message: "batch \(batch.firstSeq) of room '\(item.room)' does not apply to its stored state: \(error)")
                }
                if !kinds.isEmpty {
                    try writeOutbox(db, OutboxEvent.of(batch, room: item.room, epoch: state.epoch, kinds: kinds), into: &outbox)
                }
                next[item.room] = state
                events[item.room, default: 0] += batch.events.count
            }
            var snapshotted: [String] = []
            for (room, state) in next {
                try db.query("UPDATE rooms SET seq = ? WHERE id = ?", [.int(state.snapshot.seq), .text(room)])
                guard (sinceSnapshot[room] ?? 0) + events[room]! >= options.snapshotEvery else { continue }
                try StateStore.insertSnapshot(db, room: room, state)
                // The snapshot covers everything up to now: keep only the resume window.
                try db.query("DELETE FROM batches WHERE room = ? AND last_seq <= ?", [.text(room), .int(state.snapshot.seq - options.resumeWindow)])
                try db.query("DELETE FROM snapshots WHERE room = ? AND seq < ?", [.text(room), .int(state.snapshot.seq)])
                snapshotted.append(room)
            }
            try db.execute("COMMIT")
            commitTimes.observe(since: started)
            outboxCommitted(outbox)
            for (room, n) in events { sinceSnapshot[room, default: 0] += n }
            for room in snapshotted { sinceSnapshot[room] = 0 }
            return .success(next)
        } catch let error as SQLiteError {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            return .failure(error)
        } catch {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            return .failure(SQLiteError(code: 1, message: "\(error)"))
        }
    }

    /// Waits for the queue, then snapshots every open room and checkpoints.
    func close() {
        queue.sync {
            guard state.withLock({ $0.broken }) == nil else { return }
            let rooms = state.withLock { $0.rooms }
            try? db.execute("BEGIN IMMEDIATE")
            for (room, r) in rooms where (sinceSnapshot[room] ?? 0) > 0 {
                try? StateStore.insertSnapshot(db, room: room, r.committed)
                _ = try? db.query("DELETE FROM snapshots WHERE room = ? AND seq < ?", [.text(room), .int(r.committed.snapshot.seq)])
            }
            do {
                try db.execute("COMMIT")
                _ = try db.query("PRAGMA wal_checkpoint(TRUNCATE)")
            } catch let error as SQLiteError where error.isSyncFailure {
                if !db.isAutocommit { try? db.execute("ROLLBACK") }
                breakDown(error)
            } catch {
                if !db.isAutocommit { try? db.execute("ROLLBACK") }
            }
        }
    }
}
