/// Whether a room lists its clients or only counts them (presence in big rooms).
public enum PresenceMode: String, Sendable, Equatable {
    /// Every join and leave is an event, and snapshots list everyone.
    case listed
    /// Past `--presence-limit`: joins and leaves emit no event each; the room reports its
    /// count now and then (`clientCount`).
    case counted
}

/// Who is connected, as presence events leave it: in a listed room, everyone in join
/// order; in a counted room, only how many (and, in a cluster, how many on each node).
///
/// A listed `clients` may hold fewer than `count` (a snapshot of an older tabd listed only
/// its first 100); a departure of an unlisted client then only lowers the count.
public struct Roster: Sendable, Equatable {
    public var mode: PresenceMode
    public var clients: [ClientInfo]
    public var count: Int
    /// A cluster's counted room: each node's count (``count`` is their sum); nil otherwise.
    public var nodes: [String: Int]?

    public init(mode: PresenceMode = .listed, clients: [ClientInfo] = [], count: Int? = nil, nodes: [String: Int]? = nil) {
        self.mode = mode
        self.clients = clients
        self.count = count ?? clients.count
        self.nodes = nodes
    }

    /// What the presence events do: the only code that changes presence. Each case checks
    /// everything before it changes anything.
    public mutating func apply(_ event: Event) throws(FoldError) {
        switch event {
        case let .clientJoined(client):
            guard mode == .listed else { throw FoldError("clientJoined in a counted room") }
            clients.append(client)
            count += 1
        case let .clientLeft(id):
            guard mode == .listed else { throw FoldError("clientLeft in a counted room") }
            if let i = clients.firstIndex(where: { $0.id == id }) {
                clients.remove(at: i)
                count -= 1
            } else if count > clients.count {
                count -= 1 // listed beyond the cap of a capped snapshot
            } else {
                throw FoldError("clientLeft of unknown client \(id)")
            }
        case let .presenceCounted(total, shares):
            guard mode == .listed else { throw FoldError("presenceCounted in a counted room") }
            guard total >= 0 else { throw FoldError("presenceCounted with a negative count") }
            if let shares, try Self.sum(shares) != total {
                throw FoldError("presenceCounted's nodes do not add up to its count \(total)")
            }
            (mode, clients, count, nodes) = (.counted, [], total, shares)
        case let .clientCount(node, n):
            guard mode == .counted else { throw FoldError("clientCount in a listed room") }
            guard n >= 0 else { throw FoldError("clientCount with a negative count") }
            if let node {
                guard var shares = nodes else { throw FoldError("clientCount of node '\(node)' in a room not counted by node") }
                shares[node] = n
                count = try Self.sum(shares)
                nodes = shares
            } else {
                guard nodes == nil else { throw FoldError("clientCount without a node in a room counted by node") }
                count = n
            }
        case let .presenceListed(_, list):
            guard mode == .counted else { throw FoldError("presenceListed in a listed room") }
            guard Set(list.map(\.id)).count == list.count else { throw FoldError("presenceListed lists a client twice") }
            (mode, clients, count, nodes) = (.listed, list, list.count, nil)
        case let .clientIdsReserved(_, from, n):
            guard from >= 1, n >= 1 else { throw FoldError("clientIdsReserved of an empty or negative block") }
        default:
            break
        }
    }

    /// The room's count from each node's: every share in range, and so the total.
    static func sum(_ shares: [String: Int]) throws(FoldError) -> Int {
        var total = 0
        for n in shares.values {
            guard n >= 0, n <= Limits.maxCount, total <= Limits.maxCount - n else { throw FoldError("node counts out of range") }
            total += n
        }
        return total
    }
}
