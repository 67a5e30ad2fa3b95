import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import Measuring
import Outbox
import Portable
import Synchronization

/// Why the state file cannot be used. The message names the file.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    public let message: String
    /// ``StateStore/createRoom(_:tabs:)`` found the id taken.
    public var roomExists = false
    public var description: String { message }
}

/// tabd's durable state: one SQLite file (WAL mode) holding every room's event log and
/// snapshots.
///
/// - An `ack` means durable: a room's coordinator publishes a batch only once its
///   ``RoomStore/append(_:generation:done:)`` has committed it. Batches of every room that
///   arrive while a transaction commits go into the next one (group commit across rooms),
///   written by one writer thread.
/// - Synced: with ``Options/syncCommits`` (the default) SQLite runs `synchronous=FULL`, so
///   each transaction's WAL write is synced before the commit returns, and only then are its
///   batches answered; an ack survives a crash of tabd, of the kernel, and a power cut.
///   Without it (`synchronous=NORMAL`) a commit survives a crash of tabd (`kill -9`) but the
///   last ones may be lost on power loss. A newly created file's directory is synced too.
/// - Bounded: per room, a snapshot every ``Options/snapshotEvery`` events; batches older
///   than both the resume window and the latest snapshot are deleted, and older snapshots too.
/// - Only loaded rooms are held in memory (``openRoom(_:)`` … ``RoomStore/unload()``); a
///   stored room costs nothing here until it is opened.
/// - A file is checked read-only before it is written to: another application's file, a
///   newer schema or a corrupt file is refused and left exactly as it was. A file of the
///   single-room version (schema 1) is upgraded in one transaction: its history becomes
///   room `main`.
public final class StateStore: Sendable {
    public struct Options: Sendable {
        public var path: String
        public var resumeWindow: Int
        public var snapshotEvery: Int
        /// Whether a missing directory of `path` is created (tabd's default `.tabd/`); else
        /// a missing directory is an error naming it.
        public var createsDirectory: Bool
        /// Whether each commit is synced before its batches are answered (the default).
        /// Off trades a power cut's safety for speed: see ``StateStore``.
        public var syncCommits: Bool
        public init(path: String, resumeWindow: Int = 10_000, snapshotEvery: Int = 1_000, createsDirectory: Bool = false,
                    syncCommits: Bool = true) {
            self.path = path; self.resumeWindow = resumeWindow; self.snapshotEvery = snapshotEvery
            self.createsDirectory = createsDirectory; self.syncCommits = syncCommits
        }
    }

    /// 'tabd' as PRAGMA application_id, and the schema this build writes.
    static let applicationID = 0x7461_6264
    public static let schemaVersion = 2
    /// The room a schema-1 file's history becomes.
    public static let upgradedRoom = "main"

    public let options: Options
    let writer: Writer
    /// The writer's transactions, for `/metrics` (`tabd_commit_seconds`).
    public var commitTimes: Histogram { writer.commitTimes }

    /// Opens (or creates) the state file, upgrading a single-room file. No room is loaded.
    public init(options: Options) throws(StoreError) {
        self.options = options
        let path = options.path
        var info = stat()
        let size: Int? = stat(path, &info) == 0 ? Int(info.st_size) : nil
        do {
            let db: SQLiteConnection
            if let size, size > 0 {
                let version = try Self.check(path)
                db = try Self.openForWriting(path)
                if version < Self.schemaVersion { try Self.upgrade(db, from: version, path: path) }
            } else {
                let directory = directoryPart(of: path)
                if !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) {
                    guard options.createsDirectory else {
                        throw StoreError(message: "the directory of state file '\(path)' does not exist: \(directory)")
                    }
                    try Self.createPrivateDirectories(directory, for: path)
                }
                try Self.createPrivately(path)
                db = try Self.openForWriting(path)
                try Self.create(db, path: path)
                // The schema and its header into the main file, synced: whatever the mode, a
                // power cut must not leave a new file that is not a state file.
                _ = try db.query("PRAGMA wal_checkpoint(TRUNCATE)")
                // The new file's name is only durable once its directory is synced (SQLite
                // does this itself for the WAL it creates, not for the main file).
                try Self.syncDirectory(of: path)
            }
            // Creating and upgrading ran synced; the commits from now on as configured.
            if !options.syncCommits { try db.execute("PRAGMA synchronous=NORMAL") }
            writer = Writer(db: db, options: options)
        } catch let error as SQLiteError {
            throw StoreError(message: error.message)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(message: "state file '\(path)': \(error)")
        }
    }

    // MARK: Rooms

    /// Every stored room's id.
    public func roomIDs() async throws(StoreError) -> [String] {
        try await writer.perform { db in try db.query("SELECT id FROM rooms ORDER BY id").compactMap { $0.first?.text } }
    }

    /// Stored rooms in id order after `after`, at most `limit`, with the seq they were last committed at.
    public func listRooms(after: String?, limit: Int) async throws(StoreError) -> [(id: String, seq: Int)] {
        try await writer.perform { db in
            try db.query("SELECT id, seq FROM rooms WHERE id > ? ORDER BY id LIMIT ?", [.text(after ?? ""), .int(limit)])
                .compactMap { row in row[0].text.flatMap { id in row[1].int.map { (id, $0) } } }
        }
    }

    /// Loads a stored room for its coordinator; nil when no such room is stored. Opening a
    /// room that is open already is a programmer error (one coordinator per room).
    public func openRoom(_ id: String) async throws(StoreError) -> RoomStore? {
        let options = options
        let state: StoredState? = try await writer.perform { db in
            guard let state = try Self.load(db, room: id, options: options) else { return nil }
            try self.writer.register(id, committed: state)
            return state
        }
        return state.map { RoomStore(room: id, loaded: $0, writer: writer) }
    }

    /// Stores a new room with `tabs` and a new epoch, and opens it. Throws an error whose
    /// `roomExists` is true when the id is taken.
    public func createRoom(_ id: String, tabs: [TabInfo]) async throws(StoreError) -> RoomStore {
        let state: StoredState
        do { state = try StoredState.genesis(tabs: tabs, epoch: Coordinator.newEpoch()) } catch { throw StoreError(message: "tabs: \(error.message)") }
        let path = options.path
        try await writer.perform { db in
            guard try db.query("SELECT 1 FROM rooms WHERE id = ?", [.text(id)]).isEmpty else {
                throw StoreError(message: "room '\(id)' exists", roomExists: true)
            }
            do {
                var outbox: Writer.OutboxWrite?
                try db.execute("BEGIN IMMEDIATE")
                try db.query("INSERT INTO rooms(id, epoch, seq) VALUES (?, ?, 0)", [.text(id), .text(state.epoch)])
                try Self.insertSnapshot(db, room: id, state)
                if self.writer.outboxKinds.contains(.roomCreated) {
                    try self.writer.writeOutbox(db, [.roomCreated(id, epoch: state.epoch)], into: &outbox)
                }
                try db.execute("COMMIT")
                self.writer.outboxCommitted(outbox)
            } catch {
                if !db.isAutocommit { try? db.execute("ROLLBACK") }
                // A failed sync goes up as it is: the writer then stops writing the file.
                if let error = error as? SQLiteError, error.isSyncFailure { throw error }
                throw StoreError(message: "cannot write state file '\(path)': \(error)")
            }
            try self.writer.register(id, committed: state)
        }
        return RoomStore(room: id, loaded: state, writer: writer)
    }

    /// Removes a room's whole state (it must not be open); false when it was not stored.
    public func deleteRoom(_ id: String) async throws(StoreError) -> Bool {
        let path = options.path
        return try await writer.perform { db in
            do {
                var outbox: Writer.OutboxWrite?
                try db.execute("BEGIN IMMEDIATE")
                let stored = try db.query("SELECT epoch, seq FROM rooms WHERE id = ?", [.text(id)]).first
                try db.query("DELETE FROM rooms WHERE id = ?", [.text(id)])
                try db.query("DELETE FROM batches WHERE room = ?", [.text(id)])
                try db.query("DELETE FROM snapshots WHERE room = ?", [.text(id)])
                if let stored, self.writer.outboxKinds.contains(.roomDeleted) {
                    try self.writer.writeOutbox(db, [.roomDeleted(id, epoch: stored[0].text ?? "", seq: stored[1].int)], into: &outbox)
                }
                try db.execute("COMMIT")
                self.writer.outboxCommitted(outbox)
                return stored != nil
            } catch {
                if !db.isAutocommit { try? db.execute("ROLLBACK") }
                // A failed sync goes up as it is: the writer then stops writing the file.
                if let error = error as? SQLiteError, error.isSyncFailure { throw error }
                throw StoreError(message: "cannot write state file '\(path)': \(error)")
            }
        }
    }

    // MARK: The outbox

    /// Keeps the outbox in the file from now on: its events are read back into `outbox`
    /// (whose id must be ``outboxID()``'s), and every later commit writes its own.
    public func keepOutbox(_ outbox: Outbox) async throws(StoreError) {
        try await writer.perform { db in self.writer.keepOutbox(try OutboxRows(db: db, outbox: outbox)) }
    }

    /// The file's outbox name (made the first time).
    public func outboxID() async throws(StoreError) -> String {
        try await writer.perform { db in try OutboxRows.storedID(db) }
    }

    /// Where each webhook's delivery stands: the last position it delivered in order.
    public func webhookCursors() async throws(StoreError) -> [String: Int] {
        try await writer.perform { db in
            var cursors: [String: Int] = [:]
            for row in try db.query("SELECT webhook, position FROM webhook_cursors") {
                if let name = row[0].text, let position = row[1].int { cursors[name] = position }
            }
            return cursors
        }
    }

    /// Stores where a webhook's delivery stands (after the commits queued before).
    public func saveWebhookCursor(_ webhook: String, position: Int) async throws(StoreError) {
        _ = try await writer.perform { db in
            try db.query("INSERT INTO webhook_cursors(webhook, position) VALUES (?, ?) ON CONFLICT(webhook) DO UPDATE SET position = excluded.position",
                         [.text(webhook), .int(position)])
        }
    }

    /// Waits for queued batches, then writes a final snapshot of every open room and
    /// checkpoints the WAL.
    public func close() { writer.close() }

    /// Calls `handler` once, with the reason, when the file can be written no more: a sync
    /// failed, so what the disk holds is unknown. Every command from then on is refused
    /// `unavailable`; tabd stops so that its supervisor starts it again on the file.
    public func onFailure(_ handler: @escaping @Sendable (String) -> Void) { writer.onFailure(handler) }

    /// Why the file is written no more (a sync failed), or nil while it is written.
    public var failure: String? { writer.broken }

    // MARK: Opening the file

    /// Read-only checks: whose file, which schema, intact. Returns the schema version.
    private static func check(_ path: String) throws -> Int {
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
        guard version >= 1 else { throw StoreError(message: "state file '\(path)' has no schema version; it was left as it is") }
        let result = try db.query("PRAGMA quick_check").first?.first?.text ?? "no answer"
        guard result == "ok" else {
            throw StoreError(message: "state file '\(path)' is corrupt (quick_check: \(result)); it was left as it is")
        }
        return version
    }

    /// Creates the state file, empty, readable and writable by tabd's user only (0600,
    /// whatever the umask), before SQLite opens it: SQLite gives the files it makes beside it
    /// (`-wal`, `-shm`, `-journal`) the main file's mode. A file that exists already is left
    /// with the mode it has.
    static func createPrivately(_ path: String) throws(StoreError) {
        let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { return }
            throw StoreError(message: "cannot create state file '\(path)': \(String(cString: strerror(errno)))")
        }
        defer { _ = Glibc.close(fd) }
        // The umask only takes bits away; this gives back what a strict one (0277) took.
        guard fchmod(fd, 0o600) == 0 else {
            throw StoreError(message: "cannot set the mode of state file '\(path)': \(String(cString: strerror(errno)))")
        }
    }

    /// Creates `directory` and every missing parent, each 0700 whatever the umask;
    /// directories that exist keep their mode.
    static func createPrivateDirectories(_ directory: String, for path: String) throws(StoreError) {
        var prefix = directory.hasPrefix("/") ? "/" : ""
        for component in directory.split(separator: "/") {
            prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + component
            if mkdir(prefix, 0o700) == 0 {
                guard chmod(prefix, 0o700) == 0 else {
                    throw StoreError(message: "cannot set the mode of '\(prefix)', the directory of state file '\(path)': \(String(cString: strerror(errno)))")
                }
                try syncDirectory(of: prefix)
            } else if errno != EEXIST {
                throw StoreError(message: "cannot create the directory of state file '\(path)': \(prefix): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Syncs the directory that holds `path`, so that a file just created in it (or a
    /// directory just made) survives a power cut under its name.
    static func syncDirectory(of path: String) throws(StoreError) {
        let directory = directoryPart(of: path)
        let name = directory.isEmpty ? "." : directory
        let fd = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            throw StoreError(message: "cannot open '\(name)', the directory of state file '\(path)', to sync it: \(String(cString: strerror(errno)))")
        }
        defer { _ = Glibc.close(fd) }
        guard fsync(fd) == 0 else {
            throw StoreError(message: "cannot sync '\(name)', the directory of state file '\(path)': \(String(cString: strerror(errno)))")
        }
    }

    /// Opens the file for the writer: WAL, `synchronous=FULL`, no automatic checkpoint.
    private static func openForWriting(_ path: String) throws -> SQLiteConnection {
        let db = try SQLiteConnection(path: path, readOnly: false)
        do {
            let mode = try db.query("PRAGMA journal_mode=WAL").first?.first?.text
            guard mode == "wal" else { throw StoreError(message: "state file '\(path)': cannot switch to WAL mode (got \(mode ?? "nothing"))") }
            // FULL: every commit syncs the WAL before it returns (one sync per transaction;
            // checkpoints sync the main file as well). NORMAL (`--state-sync off`, set by
            // init once the file is created or upgraded): only checkpoints sync.
            try db.execute("PRAGMA synchronous=FULL")
            // The writer checkpoints itself (Writer.checkpointIfDue): SQLite's automatic
            // checkpoint would ignore a failed sync of the main file.
            try db.execute("PRAGMA wal_autocheckpoint=0")
        } catch let error as SQLiteError {
            throw StoreError(message: "cannot write state file '\(path)': \(error.message)")
        }
        return db
    }

    static let tables = """
        CREATE TABLE rooms(id TEXT PRIMARY KEY, epoch TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE batches(room TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, frame BLOB NOT NULL,
                             PRIMARY KEY(room, first_seq)) WITHOUT ROWID;
        CREATE TABLE snapshots(room TEXT NOT NULL, seq INTEGER NOT NULL, next_page INTEGER NOT NULL, next_client INTEGER NOT NULL,
                               state BLOB NOT NULL, PRIMARY KEY(room, seq)) WITHOUT ROWID;
        """

    private static func create(_ db: SQLiteConnection, path: String) throws {
        do {
            try db.execute("BEGIN IMMEDIATE")
            try db.execute("""
                \(tables)
                PRAGMA application_id = \(applicationID);
                PRAGMA user_version = \(schemaVersion);
                """)
            try db.execute("COMMIT")
        } catch {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            throw StoreError(message: "cannot write state file '\(path)': \(error.message)")
        }
    }

    /// Schema 1 (one history: `meta`, `batches`, `snapshots`) → schema 2: the history
    /// becomes room ``upgradedRoom`` with its epoch, seqs, pages and batches as they were.
    private static func upgrade(_ db: SQLiteConnection, from version: Int, path: String) throws {
        precondition(version == 1)
        do {
            try db.execute("BEGIN IMMEDIATE")
            try db.execute("""
                ALTER TABLE batches RENAME TO batches_v1;
                ALTER TABLE snapshots RENAME TO snapshots_v1;
                \(tables)
                INSERT INTO rooms(id, epoch, seq)
                    SELECT '\(upgradedRoom)', value, max(
                        (SELECT coalesce(max(last_seq), 0) FROM batches_v1), (SELECT coalesce(max(seq), 0) FROM snapshots_v1))
                    FROM meta WHERE key = 'epoch';
                INSERT INTO batches(room, first_seq, last_seq, frame)
                    SELECT '\(upgradedRoom)', first_seq, last_seq, frame FROM batches_v1;
                INSERT INTO snapshots(room, seq, next_page, next_client, state)
                    SELECT '\(upgradedRoom)', seq, next_page, next_client, state FROM snapshots_v1;
                DROP TABLE batches_v1;
                DROP TABLE snapshots_v1;
                DROP TABLE meta;
                PRAGMA user_version = \(schemaVersion);
                """)
            guard try db.integer("SELECT count(*) FROM rooms") == 1 else {
                throw StoreError(message: "state file '\(path)' (schema 1) has no epoch; it was left as it is")
            }
            try db.execute("COMMIT")
        } catch let error as StoreError {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            throw error
        } catch let error as SQLiteError {
            if !db.isAutocommit { try? db.execute("ROLLBACK") }
            throw StoreError(message: "cannot upgrade state file '\(path)' from schema 1: \(error.message); it was left as it is")
        }
    }

    static func insertSnapshot(_ db: SQLiteConnection, room: String, _ state: StoredState) throws(SQLiteError) {
        try db.query("INSERT OR REPLACE INTO snapshots(room, seq, next_page, next_client, state) VALUES (?, ?, ?, ?, ?)",
                     [.text(room), .int(state.snapshot.seq), .int(state.nextPage), .int(state.nextClient),
                      .blob(state.snapshot.json(capped: false).compactBytes)])
    }

    /// A room's latest snapshot with every later batch applied, and its retained history;
    /// nil when the room is not stored.
    static func load(_ db: SQLiteConnection, room: String, options: Options) throws -> StoredState? {
        let path = options.path
        func corrupt(_ why: String) -> StoreError {
            StoreError(message: "state file '\(path)' is inconsistent in room '\(room)': \(why); it was left as it is")
        }
        guard let roomRow = try db.query("SELECT epoch FROM rooms WHERE id = ?", [.text(room)]).first else { return nil }
        guard let epoch = roomRow[0].text else { throw corrupt("no epoch") }
        guard let row = try db.query("SELECT seq, next_page, next_client, state FROM snapshots WHERE room = ? ORDER BY seq DESC LIMIT 1",
                                     [.text(room)]).first,
              let nextPage = row[1].int, let nextClient = row[2].int, let blob = row[3].blob
        else { throw corrupt("no snapshot") }
        var state: StoredState
        do {
            state = StoredState(epoch: epoch, snapshot: try Snapshot(json: try JSONParser.parse(blob)),
                                nextPage: nextPage, nextClient: nextClient, history: [])
        } catch { throw corrupt("unreadable snapshot: \(error)") }
        if let why = state.unrestorableReason { throw corrupt(why) }
        let floor = max(0, state.snapshot.seq)
        var history: [EventBatch] = []
        for row in try db.query("SELECT frame FROM batches WHERE room = ? ORDER BY first_seq", [.text(room)]) {
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
}

/// One open room's part of the state file: the ``Durability`` of its coordinator.
public final class RoomStore: Durability {
    public let room: String
    /// What the file held when the room was opened (or the new room's origin).
    public let loaded: StoredState
    private let writer: Writer

    init(room: String, loaded: StoredState, writer: Writer) {
        self.room = room; self.loaded = loaded; self.writer = writer
    }

    public func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        writer.enqueue(batch, room: room, generation: generation, done: done)
    }

    public func committedState() -> StoredState { writer.committed(room) }

    public func reset(generation: Int) { writer.reset(room, generation: generation) }

    /// The room's coordinator is gone: once what it queued is committed, the writer writes
    /// a snapshot and forgets the room (it stays stored; ``StateStore/openRoom(_:)`` loads it again).
    public func unload() async { await writer.unload(room) }
}
