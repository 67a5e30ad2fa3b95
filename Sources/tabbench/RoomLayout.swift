/// Which room each client joins and which clients send: a pure value, the same for every
/// phase of a run.
///
/// Client `i` is in room `i % rooms` (so clients `0..<rooms` are the first client of each
/// room, and each room's clients differ in number by at most one); its rank in the room is
/// `i / rooms`. Client `r` (for `r < rooms`) is room `r`'s *reference*: its welcome, frames
/// and `sync` are what the room's stream is checked against. The senders are the first
/// `senders / activeRooms` clients of each of the first `activeRooms` rooms, taken in turn
/// room by room, so that consecutive messages go to different rooms. With one room this is
/// tabbench's old layout: every client in one stream, clients `0..<senders` send in turn.
struct RoomLayout: Sendable, Equatable {
    let clients: Int
    let rooms: Int
    let activeRooms: Int
    let senders: Int

    /// Nil when the numbers do not fit together: `rooms` more than `clients`, `activeRooms`
    /// more than `rooms`, `senders` not a multiple of `activeRooms`, or more senders in a
    /// room than it has clients.
    init?(clients: Int, rooms: Int, activeRooms: Int, senders: Int) {
        guard clients >= 1, rooms >= 1, rooms <= clients, activeRooms >= 1, activeRooms <= rooms,
              senders >= activeRooms, senders % activeRooms == 0, senders / activeRooms <= clients / rooms
        else { return nil }
        self.clients = clients
        self.rooms = rooms
        self.activeRooms = activeRooms
        self.senders = senders
    }

    /// The room of client `i`.
    func room(of i: Int) -> Int { i % rooms }

    /// How many of the clients are in room `r`.
    func size(of r: Int) -> Int { clients / rooms + (r < clients % rooms ? 1 : 0) }

    /// The client that sends the `k`-th message (`k` counts every message of the run).
    func sender(_ k: Int) -> Int {
        let j = k % senders
        return (j / activeRooms) * rooms + j % activeRooms
    }

    /// The room id clients of room `r` join: `bench-r`.
    static func name(_ r: Int) -> String { "bench-\(r)" }
}
