import Coordinator
import CSQLite
import Foundation
import StateStore

/// The state file loader (`StateStore(options:)`, `openRoom`) fed a database file: a
/// mutated SQLite file as it is, or (input not starting with SQLite's magic) a valid
/// schema-2 file built here holding room `main` whose snapshot is the input's first line
/// and whose batches are its next lines. Then what tabd does with a room that loads: a
/// coordinator restores it, starts and takes a client and a few commands, and the store
/// closes. It must refuse (throw) or work: never crash or trap.
enum StateFileTarget {
    static let path = (scratchDirectory as NSString).appendingPathComponent("state.db")
    static let magic = Array("SQLite format 3\0".utf8)

    static func run(_ bytes: [UInt8]) {
        for suffix in ["", "-wal", "-shm", "-journal"] { unlink(path + suffix) }
        if bytes.starts(with: magic) || bytes.first != UInt8(ascii: "{") {
            guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { fatalError("cannot write \(path)") }
        } else {
            build(bytes)
        }
        blocking { await open() }
    }

    static func open() async {
        let store: StateStore
        do { store = try StateStore(options: .init(path: path, resumeWindow: 100, snapshotEvery: 4)) } catch {
            require(!error.message.isEmpty, "an empty refusal")
            return
        }
        let rooms = (try? await store.roomIDs()) ?? []
        for id in rooms.prefix(3) {
            guard let opened = try? await store.openRoom(id) else { continue }
            let coordinator = Coordinator(restoring: opened.loaded, durability: opened, configuration: .init(resumeWindow: 100))
            if (try? await coordinator.start()) != nil, let welcome = try? await coordinator.connect(.init(name: "fuzz")) {
                let first = await coordinator.snapshot().tabs.first?.id
                let commands: [Command] = [.push(tab: nil, route: "fuzz"), .set(tab: nil, key: "k", value: .int(1)), .pop(tab: nil),
                                           .select(tab: first ?? "home"), .sync]
                for command in commands { _ = try? await coordinator.execute(command, by: welcome.client.id) }
                try? await coordinator.disconnect(welcome.client.id)
            }
            await opened.unload()
        }
        _ = try? await store.listRooms(after: nil, limit: 10)
        store.close()
    }

    /// A schema-2 file with room `main`: line 1 the snapshot blob (its `seq`, `next_page`,
    /// `next_client` members, when integers, fill those columns), each further line a batch.
    static func build(_ bytes: [UInt8]) {
        var db: OpaquePointer?
        guard sqlite3_open(path, &db) == SQLITE_OK, let db else { fatalError("cannot create \(path)") }
        defer { sqlite3_close(db) }
        let schema = """
            CREATE TABLE rooms(id TEXT PRIMARY KEY, epoch TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE batches(room TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, frame BLOB NOT NULL,
                                 PRIMARY KEY(room, first_seq)) WITHOUT ROWID;
            CREATE TABLE snapshots(room TEXT NOT NULL, seq INTEGER NOT NULL, next_page INTEGER NOT NULL, next_client INTEGER NOT NULL,
                                   state BLOB NOT NULL, PRIMARY KEY(room, seq)) WITHOUT ROWID;
            PRAGMA application_id = \(0x7461_6264);
            PRAGMA user_version = 2;
            """
        guard sqlite3_exec(db, "BEGIN; \(schema) COMMIT;", nil, nil, nil) == SQLITE_OK else { fatalError("schema") }
        let lines = pieces(bytes, separator: 0x0A, limit: 16)
        let snapshot = try? JSONParser.parse(lines[0])
        let seq = snapshot?["seq"]?.intValue ?? 0
        let nextPage = snapshot?["next_page"]?.intValue ?? 100
        let nextClient = snapshot?["next_client"]?.intValue ?? 100
        insert(db, "INSERT INTO rooms(id, epoch, seq) VALUES ('main', '00000000000000ff', ?)", [.int(seq)])
        insert(db, "INSERT INTO snapshots(room, seq, next_page, next_client, state) VALUES ('main', ?, ?, ?, ?)",
               [.int(seq), .int(nextPage), .int(nextClient), .blob(lines[0])])
        for (n, frame) in lines.dropFirst().enumerated() {
            var first = seq &+ 1 &+ n, last = first
            if case let .events(batch)? = try? ServerFrame(bytes: frame) { first = batch.firstSeq; last = batch.lastSeq }
            insert(db, "INSERT OR REPLACE INTO batches(room, first_seq, last_seq, frame) VALUES ('main', ?, ?, ?)",
                   [.int(first), .int(last), .blob(frame)])
        }
    }

    enum Value { case int(Int), blob([UInt8]) }

    static func insert(_ db: OpaquePointer, _ sql: String, _ values: [Value]) {
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &stmt, nil) == SQLITE_OK, let stmt else { fatalError("prepare \(sql)") }
        defer { sqlite3_finalize(stmt) }
        for (i, v) in values.enumerated() {
            switch v {
            case let .int(n): sqlite3_bind_int64(stmt, Int32(i + 1), Int64(n))
            case let .blob(b): _ = b.withUnsafeBytes { sqlite3_bind_blob(stmt, Int32(i + 1), $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count), tabd_sqlite_transient()) }
            }
        }
        guard sqlite3_step(stmt) == SQLITE_DONE else { fatalError("insert \(sql)") }
    }
}
