import Locking
import Coordinator
import Dispatch


/// The one writer of a state file: commits queued batches on its own serial queue,
/// every batch that arrived meanwhile in one transaction (group commit), and keeps the
/// committed state in memory for the coordinator to fall back to.
///
/// `@unchecked Sendable`: the SQLite connection (`db`) and `sinceSnapshot` are only
/// touched on `queue`, a serial queue; everything else shared is behind `state`'s lock.
final class Writer: @unchecked Sendable {
    private struct Pending {
        let batch: EventBatch
        let generation: Int
        let done: @Sendable (CommandError?) -> Void
    }

    private struct State {
        var queue: [Pending] = []
        var draining = false
        /// After a failed commit, everything queued fails until the coordinator resets.
        var failed = false
        var minGeneration = 0
        var committed: StoredState
    }

    private let db: SQLiteConnection
    private let options: StateStore.Options
    private let queue = DispatchQueue(label: "tabd.state-writer")
    private let state: Locked<State>
    private var sinceSnapshot = 0

    init(db: SQLiteConnection, options: StateStore.Options, model: StoredState) {
        self.db = db
        self.options = options
        var committed = model
        committed.history = []
        state = Locked(State(committed: committed))
    }

    var committed: StoredState { state.withLock { $0.committed } }

    func enqueue(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        let start = state.withLock { s -> Bool in
            s.queue.append(Pending(batch: batch, generation: generation, done: done))
            defer { s.draining = true }
            return !s.draining
        }
        if start { queue.async { self.drain() } }
    }

    func reset(generation: Int) {
        state.withLock { s in
            s.failed = false
            s.minGeneration = generation
        }
    }

    /// Commits until the queue is empty.
    private func drain() {
        while true {
            let (items, failed, minGeneration, base) = state.withLock { s -> ([Pending], Bool, Int, StoredState) in
                let items = s.queue
                s.queue = []
                if items.isEmpty { s.draining = false }
                return (items, s.failed, s.minGeneration, s.committed)
            }
            guard !items.isEmpty else { return }
            let stale = items.filter { failed || $0.generation < minGeneration }
            let live = items.filter { !failed && $0.generation >= minGeneration }
            for item in stale { item.done(.unavailable("an earlier command could not be stored")) }
            guard !live.isEmpty else { continue }
            switch commit(live.map(\.batch), onto: base) {
            case let .success(next):
                state.withLock { $0.committed = next }
                for item in live { item.done(nil) }
            case let .failure(error):
                state.withLock { $0.failed = true }
                for item in live { item.done(.unavailable("state store: \(error.message)")) }
            }
        }
    }

    /// One transaction: the batches, and a snapshot when one is due. Returns the new
    /// committed state; on failure nothing of it is kept.
    private func commit(_ batches: [EventBatch], onto base: StoredState) -> Result<StoredState, SQLiteError> {
        var next = base
        do {
            try db.execute("BEGIN IMMEDIATE")
            for batch in batches {
                try db.query("INSERT INTO batches(first_seq, last_seq, frame) VALUES (?, ?, ?)",
                             [.int(batch.firstSeq), .int(batch.lastSeq), .blob(batch.frameBytes)])
                do { try next.apply(batch) } catch {
                    throw SQLiteError(code: 1, message: "batch \(batch.firstSeq) does not apply to the stored state: \(error)")
                }
            }
            let events = batches.reduce(0) { $0 + $1.events.count }
            if sinceSnapshot + events >= options.snapshotEvery {
                try StateStore.insertSnapshot(db, next)
                // The snapshot covers everything up to now: keep only the resume window.
                try db.query("DELETE FROM batches WHERE last_seq <= ?", [.int(next.snapshot.seq - options.resumeWindow)])
                try db.query("DELETE FROM snapshots WHERE seq < ?", [.int(next.snapshot.seq)])
            }
            try db.execute("COMMIT")
            sinceSnapshot = sinceSnapshot + events >= options.snapshotEvery ? 0 : sinceSnapshot + events
            return .success(next)
        } catch let error as SQLiteError {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            return .failure(error)
        } catch {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            return .failure(SQLiteError(code: 1, message: "\(error)"))
        }
    }

    /// Waits for the queue, then snapshots and checkpoints.
    func close() {
        queue.sync {
            let final = committed
            try? db.execute("BEGIN IMMEDIATE")
            try? StateStore.insertSnapshot(db, final)
            _ = try? db.query("DELETE FROM snapshots WHERE seq < ?", [.int(final.snapshot.seq)])
            try? db.execute("COMMIT")
            try? db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }
}
