import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Outbox

/// The outbox as the state file holds it (table `outbox`), kept by the writer: each event is
/// written in the transaction of the batch or change that caused it, so a commit and its
/// events are stored together or not at all.
///
/// A value the writer copies before a transaction and keeps only if it committed: positions
/// are handed out without a hole. Bounded as the ``Outbox`` in memory is: past its `limit`
/// the oldest rows are deleted in the same transaction (never the newest).
struct OutboxRows {
    let outbox: Outbox
    /// Positions and sizes of the rows kept, oldest first (from `start`).
    private var rows: [(position: Int, bytes: Int)] = []
    private var start = 0
    private var bytes = 0
    private(set) var next = 1

    static let tables = """
        CREATE TABLE IF NOT EXISTS outbox(position INTEGER PRIMARY KEY, room TEXT NOT NULL, type TEXT NOT NULL, body BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS outbox_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS webhook_cursors(webhook TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID;
        """

    /// Reads the file's outbox (creating its tables the first time: older tabds ignore
    /// them) into `outbox`'s memory; `outbox`'s id must be the file's (``storedID(_:)``).
    init(db: SQLiteConnection, outbox: Outbox) throws(SQLiteError) {
        self.outbox = outbox
        var entries: [Outbox.Entry] = []
        for row in try db.query("SELECT position, room, type, body FROM outbox ORDER BY position") {
            guard let position = row[0].int, let room = row[1].text, let type = row[2].text, let body = row[3].blob else { continue }
            entries.append(Outbox.Entry(position: position, room: room, type: type, body: body))
            rows.append((position, body.count))
            bytes += body.count
        }
        let storedNext = Int(try db.query("SELECT value FROM outbox_meta WHERE key = 'next'").first?.first?.text ?? "") ?? 1
        next = max(storedNext, (entries.last?.position ?? 0) + 1)
        outbox.restore(entries, next: next)
    }

    /// The file's outbox name, made and stored the first time.
    static func storedID(_ db: SQLiteConnection) throws(SQLiteError) -> String {
        try db.execute(tables)
        if let id = try db.query("SELECT value FROM outbox_meta WHERE key = 'id'").first?.first?.text { return id }
        let id = Outbox.newID()
        try db.query("INSERT INTO outbox_meta(key, value) VALUES ('id', ?)", [.text(id)])
        return id
    }

    /// Inside a transaction: writes `events` at the next positions and deletes the oldest
    /// rows past the bound. Returns the entries to hand the outbox once it committed.
    mutating func write(_ db: SQLiteConnection, _ events: [OutboxEvent], time: Double) throws(SQLiteError) -> [Outbox.Entry] {
        guard !events.isEmpty else { return [] }
        var made: [Outbox.Entry] = []
        for event in events {
            let body = event.encoded(position: next, outbox: outbox.id, time: time)
            try db.query("INSERT INTO outbox(position, room, type, body) VALUES (?, ?, ?, ?)",
                         [.int(next), .text(event.room), .text(event.type), .blob(body)])
            made.append(Outbox.Entry(position: next, room: event.room, type: event.type, body: body))
            rows.append((next, body.count))
            bytes += body.count
            next += 1
        }
        try db.query("INSERT INTO outbox_meta(key, value) VALUES ('next', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                     [.text(String(next))])
        let before = start
        while start < rows.count - 1, bytes > outbox.limit {
            bytes -= rows[start].bytes
            start += 1
        }
        if start > before { try db.query("DELETE FROM outbox WHERE position < ?", [.int(keptFrom)]) }
        if start > 1024, start * 2 > rows.count {
            rows.removeFirst(start)
            start = 0
        }
        return made
    }

    /// The first position kept.
    var keptFrom: Int { start < rows.count ? rows[start].position : next }
}
