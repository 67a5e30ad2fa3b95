import CSQLite

/// A failure from SQLite, with the database file it concerns.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public let code: Int32
    public let message: String
    public var description: String { message }

    /// A sync (`fsync`/`fdatasync`) of the file, its WAL or its directory failed. What the
    /// kernel did with the unsynced pages is then unknown (it may have dropped them and
    /// marked them clean), so a later sync that succeeds would prove nothing: the file is
    /// not written again by this process.
    var isSyncFailure: Bool {
        code == Self.ioerrFsync || code == Self.ioerrDirFsync
    }

    /// `SQLITE_IOERR_FSYNC` and `SQLITE_IOERR_DIR_FSYNC` (extended result codes; their C
    /// macros are expressions Swift does not import).
    static let ioerrFsync = SQLITE_IOERR | (4 << 8)
    static let ioerrDirFsync = SQLITE_IOERR | (5 << 8)
}

/// One SQLite connection, used from one thread at a time (the store's writer queue, or
/// the opening thread before that). The only place `sqlite3_*` is called.
final class SQLiteConnection {
    let path: String
    private let db: OpaquePointer
    /// Prepared statements by their text, kept for the connection's life: the writer runs
    /// the same few statements for every commit.
    private var statements: [String: OpaquePointer] = [:]

    init(path: String, readOnly: Bool) throws(SQLiteError) {
        self.path = path
        var handle: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let handle { sqlite3_close_v2(handle) }
            throw SQLiteError(code: rc, message: "cannot open state file '\(path)': \(message)")
        }
        db = handle
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 2000)
    }

    deinit {
        for stmt in statements.values { sqlite3_finalize(stmt) }
        sqlite3_close_v2(db)
    }

    private func error(_ rc: Int32, _ what: String) -> SQLiteError {
        SQLiteError(code: rc, message: "state file '\(path)': \(what): \(String(cString: sqlite3_errmsg(db)))")
    }

    /// Runs statements that return no rows.
    func execute(_ sql: String) throws(SQLiteError) {
        let rc = sqlite3_exec(db, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc, sql.prefix(60).description) }
    }

    /// Runs one statement with bound values; returns every row, as columns of `Value`.
    @discardableResult
    func query(_ sql: String, _ bindings: [Value] = []) throws(SQLiteError) -> [[Value]] {
        let stmt: OpaquePointer
        if let cached = statements[sql] {
            stmt = cached
        } else {
            var prepared: OpaquePointer?
            let rc = sqlite3_prepare_v2(db, sql, -1, &prepared, nil)
            guard rc == SQLITE_OK, let prepared else { throw error(rc, "prepare \(sql.prefix(60))") }
            statements[sql] = prepared
            stmt = prepared
        }
        // Ready for the next run whatever happens in this one (also releases its locks).
        defer {
            sqlite3_reset(stmt)
            sqlite3_clear_bindings(stmt)
        }
        for (i, value) in bindings.enumerated() {
            let index = Int32(i + 1)
            let brc: Int32
            switch value {
            case .null: brc = sqlite3_bind_null(stmt, index)
            case let .int(v): brc = sqlite3_bind_int64(stmt, index, Int64(v))
            case let .text(s): brc = sqlite3_bind_text(stmt, index, s, -1, tabd_sqlite_transient())
            case let .blob(b): brc = b.withUnsafeBytes { sqlite3_bind_blob(stmt, index, $0.baseAddress, Int32($0.count), tabd_sqlite_transient()) }
            }
            guard brc == SQLITE_OK else { throw error(brc, "bind") }
        }
        var rows: [[Value]] = []
        while true {
            let step = sqlite3_step(stmt)
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else { throw error(step, sql.prefix(60).description) }
            var row: [Value] = []
            for c in 0..<sqlite3_column_count(stmt) {
                switch sqlite3_column_type(stmt, c) {
                case SQLITE_INTEGER: row.append(.int(Int(sqlite3_column_int64(stmt, c))))
                case SQLITE_TEXT: row.append(.text(String(cString: sqlite3_column_text(stmt, c))))
                case SQLITE_BLOB:
                    let n = Int(sqlite3_column_bytes(stmt, c))
                    let p = sqlite3_column_blob(stmt, c)
                    row.append(.blob(n == 0 ? [] : Array(UnsafeRawBufferPointer(start: p, count: n))))
                default: row.append(.null)
                }
            }
            rows.append(row)
        }
        return rows
    }

    /// One integer from a one-row query (PRAGMAs).
    func integer(_ sql: String) throws(SQLiteError) -> Int {
        guard case let .int(v)? = try query(sql).first?.first else { return 0 }
        return v
    }

    /// True when no transaction is open (SQLite may roll one back by itself on I/O errors).
    var isAutocommit: Bool { sqlite3_get_autocommit(db) != 0 }

    enum Value: Sendable, Equatable {
        case null
        case int(Int)
        case text(String)
        case blob([UInt8])

        var int: Int? { if case let .int(v) = self { return v }; return nil }
        var text: String? { if case let .text(v) = self { return v }; return nil }
        var blob: [UInt8]? {
            switch self {
            case let .blob(b): return b
            case let .text(s): return Array(s.utf8)
            default: return nil
            }
        }
    }
}
