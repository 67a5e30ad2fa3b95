/// One page of connected clients, as the `clients` command answers it.
public struct ClientPage: Sendable, Equatable {
    public var clients: [ClientInfo]
    /// The cursor of the next page (the last client's id), nil when none follows.
    public var next: ClientID?
    public init(clients: [ClientInfo], next: ClientID?) { self.clients = clients; self.next = next }
}

/// The clients connected to this coordinator, in join order: what `clients` pages
/// through, in either presence mode. (In a cluster, this node's own; the roster holds the
/// room's, as its stream tells it.)
///
/// Client numbers are handed out in increasing order, so join order is number order: a
/// cursor is a client id, usable after that client left. Adding and removing cost O(1)
/// amortized, a page O(log n + its length): a room of 16,000 that empties pays nothing
/// per departure for the others.
public struct Members: Sendable, Equatable {
    /// By increasing number, with the departed still in place until the next compaction.
    private var list: [(number: Int, client: ClientInfo)] = []
    private var departed: Set<ClientID> = []
    private var present: Set<ClientID> = []

    public init() {}

    public static func == (a: Members, b: Members) -> Bool { a.all == b.all }

    public var count: Int { present.count }
    public var isEmpty: Bool { present.isEmpty }
    public func contains(_ id: ClientID) -> Bool { present.contains(id) }

    /// Every connected client, in join order.
    public var all: [ClientInfo] { list.compactMap { departed.contains($0.client.id) ? nil : $0.client } }

    public mutating func add(_ client: ClientInfo) {
        guard present.insert(client.id).inserted else { return }
        let number = IDCounters.number(client.id)
        if departed.remove(client.id) != nil { list.removeAll { $0.client.id == client.id } }
        if let last = list.last, last.number >= number {
            list.insert((number, client), at: firstIndex(after: number - 1)) // not in order: a stored id's
        } else {
            list.append((number, client))
        }
    }

    /// Forgets `id`; false when it was not connected.
    @discardableResult
    public mutating func remove(_ id: ClientID) -> Bool {
        guard present.remove(id) != nil else { return false }
        departed.insert(id)
        if departed.count > 64, departed.count * 2 > list.count {
            list.removeAll { departed.contains($0.client.id) }
            departed = []
        }
        return true
    }

    /// Up to `limit` clients after the cursor `after` (all from the first when nil), and
    /// the cursor of the rest.
    public func page(after: ClientID?, limit: Int) -> ClientPage {
        var i = after.map { firstIndex(after: IDCounters.number($0)) } ?? 0
        var clients: [ClientInfo] = []
        while i < list.count, clients.count < limit {
            if !departed.contains(list[i].client.id) { clients.append(list[i].client) }
            i += 1
        }
        while i < list.count, departed.contains(list[i].client.id) { i += 1 }
        return ClientPage(clients: clients, next: i < list.count ? clients.last?.id : nil)
    }

    /// Whether `cursor` can be a cursor of this room: a client id (`c` and a number).
    public static func isCursor(_ cursor: ClientID) -> Bool {
        cursor.count >= 2 && cursor.count <= 20 && cursor.first == "c" && cursor.dropFirst().allSatisfy(\.isASCIIDigit)
            && Int(cursor.dropFirst()) != nil
    }

    /// The index of the first entry numbered above `number`.
    private func firstIndex(after number: Int) -> Int {
        var (lo, hi) = (0, list.count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if list[mid].number <= number { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
