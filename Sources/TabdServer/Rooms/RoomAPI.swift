import Coordinator
import Locking
import WebSockets

/// One room's HTTP API: its budgets (calls and bytes per second, shared by every caller; the
/// answers count), the calls waiting for their answer from the room's publisher, and the last
/// read's answer, reused by the reads that find the same state.
struct RoomAPI {
    /// What the publisher shares with the room's loop.
    final class Shared: Sendable {
        /// HTTP calls waiting for their answer from the publisher, by answer address.
        let waiting = Locked<[UInt64: HTTPResponder]>([:])
        /// The budgets. Locked: the publisher charges the `clients` pages it answers.
        let limiter: Locked<RateLimiter>

        init(rate: Int, byteRate: Int) { limiter = Locked(RateLimiter(rate: rate, byteRate: byteRate)) }

        /// Takes one call of `bytes` from the budgets, if they allow it.
        func allow(bytes: Int) -> Bool { limiter.withLock { $0.allow(bytes: bytes) } }

        /// Charges an answer's bytes (a read costs the snapshot it answers).
        func charge(_ bytes: Int) { limiter.withLock { $0.charge(bytes: bytes) } }

        /// The answer to call `n`, from the publisher: a page of clients costs what it
        /// weighs (a sync was charged when read).
        func answer(_ n: UInt64, _ frame: ServerFrame) {
            if case .clients = frame { charge(frame.bytes.count) }
            waiting.withLock { $0.removeValue(forKey: n) }?.respond(RoomsAPI.response(for: frame))
        }
    }

    let shared: Shared
    private var nextAddress: UInt64 = 0
    /// The last `GET /api/rooms/ID` answer's body and the snapshot it was made of, reused by
    /// the reads that find the same snapshot: reads that come together share one encoding.
    /// Kept for ``readKept`` after it was made, so an idle room holds none.
    private var lastRead: (snapshot: Snapshot, body: [UInt8])?
    /// Nothing but reads came through the loop since `lastRead` was made: the room's state is
    /// still the one it shows (everything that changes it is an input of the loop), so a read
    /// reuses it without asking the coordinator.
    private var readIsCurrent = false
    /// How long a read's answer is kept for the reads after it.
    static let readKept: Duration = .seconds(1)

    init(rate: Int, byteRate: Int) { shared = Shared(rate: rate, byteRate: byteRate) }

    /// The answer address of a call whose answer the publisher gives.
    mutating func park(_ responder: HTTPResponder) -> UInt64 {
        nextAddress += 1
        shared.waiting.withLock { [nextAddress] in $0[nextAddress] = responder }
        return AnswerAddress.apiCall(nextAddress).rawValue
    }

    /// The last read's body, when nothing but reads came through the loop since it was made.
    var currentRead: [UInt8]? { readIsCurrent ? lastRead?.body : nil }

    /// Something other than a read came through the loop: the state may have changed.
    mutating func changed() { readIsCurrent = false }

    /// The read's answer has been kept long enough.
    mutating func dropRead() { lastRead = nil }

    /// The body of a read of `snapshot` (the last read's, when it shows the same state), and
    /// whether it was made anew.
    mutating func read(_ snapshot: Snapshot, room: RoomID, epoch: String) -> (body: [UInt8], made: Bool) {
        defer { readIsCurrent = true }
        if let last = lastRead, last.snapshot == snapshot { return (last.body, false) }
        let body = JSONValue.object([("room", .string(room)), ("epoch", .string(epoch)), ("snapshot", snapshot.json(capped: false))]).compactBytes
        lastRead = (snapshot, body)
        return (body, true)
    }
}
