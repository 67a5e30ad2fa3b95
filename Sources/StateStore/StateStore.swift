import Coordinator
import Dispatch
import Foundation
import Synchronization

/// Why the state file cannot be used. The message names the file.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// tabd's durable state: an SQLite file (WAL mode) holding the event log and snapshots.
///
/// - An `ack` means durable: the coordinator publishes a batch only once ``append``
///   has committed it. Batches that arrive while a transaction commits go into the next
///   one (group commit), written by one writer thread.
/// - `synchronous=NORMAL`: a commit survives a crash of tabd (`kill -9`) but may be lost
///   on power loss; `FULL` would fsync every transaction and cap throughput far lower.
/// - Bounded: a snapshot every ``Options/snapshotEvery`` events; batches older than both
///   the resume window and the latest snapshot are deleted, and older snapshots too.
/// - A file is checked read-only before it is written to: another application's file, a
///   newer schema or a corrupt file is refused and left exactly as it was.
public final class StateStore: Durability {
    public struct Options: Sendable {
        public var path: String
        public var resumeWindow: Int
        public var snapshotEvery: Int
        public init(path: String, resumeWindow: Int = 10_000, snapshotEvery: Int = 1_000) {
            self.path = path; self.resumeWindow = resumeWindow; self.snapshotEvery = snapshotEvery
        }
    }

    /// 'tabd' as PRAGMA application_id, and the schema this build writes.
    static let applicationID = 0x7461_6264
    public static let schemaVersion = 1

    public let options: Options
    /// What the file held when it was opened (or the new history it now holds).
    public let loaded: StoredState
    private let writer: Writer

    /// Opens (or creates) the state file. A new or empty file starts a new history with
    /// `tabs`; an existing one continues where it stopped.
    public init(options: Options, tabs: [TabInfo]) throws(StoreError) {
        self.options = options
        let path = options.path
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
        do {
            if let size, size > 0 {
                try Self.check(path)
                let db = try Self.openForWriting(path)
                loaded = try Self.load(db, options: options)
                writer = Writer(db: db, options: options, model: loaded)
            } else {
                let directory = (path as NSString).deletingLastPathComponent
                if !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) {
                    do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
                        throw StoreError(message: "cannot create the directory of state file '\(path)': \(error.localizedDescription)")
                    }
                }
                let db = try Self.openForWriting(path)
                loaded = try Self.create(db, path: path, tabs: tabs)
                writer = Writer(db: db, options: options, model: loaded)
            }
        } catch let error as SQLiteError {
            throw StoreError(message: error.message)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(message: "state file '\(path)': \(error)")
        }
    }

    // MARK: Opening

    /// Read-only checks: whose file, which schema, intact.
    private static func check(_ path: String) throws {
        let db: SQLiteConnection
        do { db = try SQLiteConnection(path: path, readOnly: true) } catch {
            throw StoreError(message: "cannot read state file '\(path)': \(error.message)")
        }
        let appID: Int
        do { appID = try db.integer("PRAGMA application_id") } catch {
            throw StoreError(message: "state file '\(path)' is not an SQLite database or is corrupt (\(error.message)); move it away or pass another --state")
        }
        guard appID == applicationID else {
            throw StoreError(message: "'\(path)' is not a tabd state file (application_id \(appID)); refusing to touch it")
        }
        let version = try db.integer("PRAGMA user_version")
        guard version <= schemaVersion else {
            throw StoreError(message: "state file '\(path)' was written by a newer tabd (schema \(version), this tabd knows \(schemaVersion)); refusing to touch it")
        }
        let result = try db.query("PRAGMA quick_check").first?.first?.text ?? "no answer"
        guard result == "ok" else {
            throw StoreError(message: "state file '\(path)' is corrupt (quick_check: \(result)); it was left as it is")
        }
    }

    private static func openForWriting(_ path: String) throws -> SQLiteConnection {
        let db = try SQLiteConnection(path: path, readOnly: false)
        do {
            let mode = try db.query("PRAGMA journal_mode=WAL").first?.first?.text
            guard mode == "wal" else { throw StoreError(message: "state file '\(path)': cannot switch to WAL mode (got \(mode ?? "nothing"))") }
            try db.execute("PRAGMA synchronous=NORMAL")
        } catch let error as SQLiteError {
            throw StoreError(message: "cannot write state file '\(path)': \(error.message)")
        }
        return db
    }

    private static func create(_ db: SQLiteConnection, path: String, tabs: [TabInfo]) throws -> StoredState {
        let origin: Snapshot
        do { origin = try Coordinator.origin(tabs: tabs) } catch { throw StoreError(message: "tabs: \(error.message)") }
        let state = StoredState(epoch: Coordinator.newEpoch(), snapshot: origin, nextPage: origin.tabs.count + 1, nextClient: 1, history: [])
        do {
            try db.execute("BEGIN IMMEDIATE")
            try db.execute("""
                CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE batches(first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, frame BLOB NOT NULL);
                CREATE TABLE snapshots(seq INTEGER PRIMARY KEY, next_page INTEGER NOT NULL, next_client INTEGER NOT NULL, state BLOB NOT NULL);
                PRAGMA application_id = \(applicationID);
                PRAGMA user_version = \(schemaVersion);
                """)
            try db.query("INSERT INTO meta(key, value) VALUES ('epoch', ?)", [.text(state.epoch)])
            try insertSnapshot(db, state)
            try db.execute("COMMIT")
        } catch {
            throw StoreError(message: "cannot write state file '\(path)': \(error.message)")
        }
        return state
    }

    static func insertSnapshot(_ db: SQLiteConnection, _ state: StoredState) throws(SQLiteError) {
        try db.query("INSERT OR REPLACE INTO snapshots(seq, next_page, next_client, state) VALUES (?, ?, ?, ?)",
                     [.int(state.snapshot.seq), .int(state.nextPage), .int(state.nextClient),
                      .blob(state.snapshot.json(capped: false).compactBytes)])
    }

    /// The latest snapshot with every later batch applied, and the retained history.
    private static func load(_ db: SQLiteConnection, options: Options) throws -> StoredState {
        let path = options.path
        func corrupt(_ why: String) -> StoreError { StoreError(message: "state file '\(path)' is inconsistent: \(why); it was left as it is") }
        guard let epoch = try db.query("SELECT value FROM meta WHERE key = 'epoch'").first?.first?.text else { throw corrupt("no epoch") }
        guard let row = try db.query("SELECT seq, next_page, next_client, state FROM snapshots ORDER BY seq DESC LIMIT 1").first,
              let nextPage = row[1].int, let nextClient = row[2].int, let blob = row[3].blob
        else { throw corrupt("no snapshot") }
        var state: StoredState
        do {
            state = StoredState(epoch: epoch, snapshot: try Snapshot(json: try JSONParser.parse(blob)),
                                nextPage: nextPage, nextClient: nextClient, history: [])
        } catch { throw corrupt("unreadable snapshot: \(error)") }
        guard !state.snapshot.tabs.isEmpty, state.snapshot.tab(state.snapshot.selected) != nil else {
            throw corrupt("the snapshot has no tabs or selects a tab it does not have")
        }
        let floor = max(0, state.snapshot.seq)
        var history: [EventBatch] = []
        for row in try db.query("SELECT frame FROM batches ORDER BY first_seq") {
            guard let frame = row.first?.blob, case let .events(batch)? = try? ServerFrame(bytes: frame) else { throw corrupt("unreadable batch") }
            if batch.firstSeq > floor {
                do { try state.apply(batch) } catch { throw corrupt("\(error)") }
            }
            history.append(batch)
        }
        // Keep the batches of the resume window that connect to the current seq.
        var kept: [EventBatch] = []
        var count = 0
        for batch in history.reversed() {
            if let next = kept.last, next.firstSeq != batch.lastSeq + 1 { break }
            if kept.isEmpty, batch.lastSeq != state.snapshot.seq { break }
            kept.append(batch)
            count += batch.events.count
            if count >= options.resumeWindow { break }
        }
        state.history = kept.reversed()
        return state
    }

    // MARK: Durability

    public func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        writer.enqueue(batch, generation: generation, done: done)
    }

    public func committedState() -> StoredState { writer.committed }

    public func reset(generation: Int) { writer.reset(generation: generation) }

    /// Waits for queued batches, then writes a final snapshot and checkpoints the WAL.
    public func close() { writer.close() }
}
