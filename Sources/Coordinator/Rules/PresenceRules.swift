/// The rules of presence: which events a batch of joins and leaves causes, in a listed
/// room (each one) and in a counted room (a count now and then). They decide from the
/// state they are given and change nothing; the coordinator applies what they return.
///
/// - A listed room lists each leave (`clientLeft`) and join (`clientJoined`) while it has
///   at most ``limit`` clients. The first join that does not fit is replaced by a
///   reserved block of ids and `presenceCounted` (the count after every join of the
///   batch); the batch's later joins emit nothing.
/// - A counted room's joins take ids from a reserved block (`clientIdsReserved` when it
///   runs out); its count is reported (`clientCount`) when it differs from the last one
///   reported, at most once per ``interval``. When the room empties it is listed again
///   (`presenceListed`), at once.
/// - In a cluster (``node`` set) counts are per node: each node reports its own share.
public struct PresenceRules: Sendable {
    public var limit: Int
    public var interval: Duration
    public var node: String?
    /// How many ids a reservation takes at least.
    public var block: Int

    public init(limit: Int, interval: Duration, node: String?, block: Int) {
        self.limit = limit; self.interval = interval; self.node = node; self.block = block
    }

    /// A join: its display name (nil: its id).
    public struct Join: Sendable {
        public var name: String?
        public init(name: String?) { self.name = name }
    }

    /// What the rules read.
    public struct State: Sendable {
        public var roster: Roster
        /// The clients connected here.
        public var members: Members
        public var nextClient: Int
        public var reserved: Range<Int>
        public var lastReport: ContinuousClock.Instant?
        /// In a cluster, the node of each listed client (for the switch's per-node counts).
        public var owner: @Sendable (ClientID) -> String?

        public init(roster: Roster, members: Members, nextClient: Int, reserved: Range<Int>, lastReport: ContinuousClock.Instant?,
                    owner: @escaping @Sendable (ClientID) -> String? = { _ in nil }) {
            self.roster = roster; self.members = members; self.nextClient = nextClient
            self.reserved = reserved; self.lastReport = lastReport; self.owner = owner
        }
    }

    /// What a batch comes to.
    public struct Decision: Sendable {
        public var events: [Event] = []
        /// The joining clients, in the order of the joins.
        public var joined: [ClientInfo] = []
        /// Clients connected here that left.
        public var left: [ClientID] = []
        /// The reserved ids still to hand out after the batch.
        public var reserved: Range<Int>
        /// Whether the batch reports this node's count.
        public var reported = false
    }

    /// The events of one batch: `leaving` go (clients of any node in a listed room; this
    /// node's in a counted one), `joining` join, and in a cluster's counted room the shares
    /// of `forgettingNodes` (nodes that are gone) go to 0.
    ///
    /// `immediately`: a changed count is reported now, whatever the interval (a node that
    /// stops says so before it goes).
    public func decide(_ state: State, joining: [Join], leaving: [ClientID], forgettingNodes: Set<String> = [],
                       immediately: Bool = false, now: ContinuousClock.Instant) -> Decision {
        var d = Decision(reserved: state.reserved)
        var roster = state.roster
        var next = state.nextClient
        func emit(_ event: Event) {
            d.events.append(event)
            do { try roster.apply(event) } catch { preconditionFailure("a presence rule decided an event that does not fold: \(error)") }
        }
        func reserve(_ n: Int) {
            let count = max(n, block)
            emit(.clientIdsReserved(node: node, from: next, count: count))
            d.reserved = next..<(next + count)
            next += count
        }

        var gone = Set<ClientID>()
        for id in leaving where gone.insert(id).inserted {
            if roster.mode == .listed, roster.clients.contains(where: { $0.id == id }) { emit(.clientLeft(id)) }
            if state.members.contains(id) { d.left.append(id) }
        }

        // Clients connected here that a listed room does not list: in a cluster, another
        // node listed the room again while their joins, counted, waited for this node's
        // report. They join the list again, with their ids, before the new joins.
        let unlisted = roster.mode == .listed ? Self.unlisted(roster, state.members).filter { !gone.contains($0.id) } : []
        let arrivals = unlisted.map(Arrival.again) + joining.map(Arrival.new)

        var crossed = false
        for (k, arrival) in arrivals.enumerated() {
            if roster.mode == .listed, roster.count < limit {
                switch arrival {
                case let .again(client):
                    emit(.clientJoined(client))
                case let .new(join):
                    let client = Self.client(next, join)
                    next += 1
                    emit(.clientJoined(client))
                    d.joined.append(client)
                }
                continue
            }
            if roster.mode == .listed {
                // The first join that does not fit: the room counts from here on.
                let remaining = arrivals.count - k
                let newOnes = arrivals[k...].count { if case .new = $0 { true } else { false } }
                if newOnes > 0 { reserve(newOnes) }
                emit(.presenceCounted(count: roster.count + remaining, nodes: switchShares(roster, state, plus: remaining)))
                crossed = true
                d.reported = true
            }
            guard case let .new(join) = arrival else { continue }
            if d.reserved.isEmpty { reserve(arrivals.count - k) }
            d.joined.append(Self.client(d.reserved.lowerBound, join))
            d.reserved = d.reserved.dropFirst()
        }

        if roster.mode == .counted, !crossed {
            let live = state.members.count - d.left.count + d.joined.count
            let node = roster.nodes == nil ? nil : self.node
            let own = node.map { roster.nodes?[$0] ?? 0 } ?? roster.count
            let dead = (roster.nodes ?? [:]).filter { $0.value > 0 && $0.key != node && forgettingNodes.contains($0.key) }
            let others = roster.count - own - dead.values.reduce(0, +)
            if live + others == 0 {
                emit(.presenceListed(node: node, clients: []))
                return d
            }
            for name in dead.keys.sorted() { emit(.clientCount(node: name, count: 0)) }
            if live != own, immediately || state.lastReport.map({ now - $0 >= interval }) ?? true {
                emit(.clientCount(node: node, count: live))
                d.reported = true
            }
        }
        return d
    }

    /// A join to apply: a new client, or one connected here that must be listed again.
    enum Arrival {
        case new(Join)
        case again(ClientInfo)
    }

    /// The clients connected here that a listed room does not list, in join order.
    static func unlisted(_ roster: Roster, _ members: Members) -> [ClientInfo] {
        guard !members.isEmpty else { return [] }
        let listed = Set(roster.clients.map(\.id))
        return members.all.filter { !listed.contains($0.id) }
    }

    /// When a counted room's changed count is due, or a listed room must list clients
    /// connected here again (then: now); nil when the stream is current.
    public func reportDue(roster: Roster, members: Members, lastReport: ContinuousClock.Instant?) -> ContinuousClock.Instant? {
        let live = members.count
        if roster.mode == .listed { return Self.unlisted(roster, members).isEmpty ? nil : .now }
        let own = roster.nodes == nil ? roster.count : (node.map { roster.nodes?[$0] ?? 0 } ?? 0)
        guard live != own else { return nil }
        return lastReport.map { $0 + interval } ?? .now
    }

    /// The per-node counts at a cluster's switch: each listed client counted for the node
    /// that owns it, this node's after its leaves and with the crossing joins.
    private func switchShares(_ roster: Roster, _ state: State, plus joins: Int) -> [String: Int]? {
        guard let node else { return nil }
        var shares: [String: Int] = [node: 0]
        for client in roster.clients {
            let owner = state.members.contains(client.id) ? node : (state.owner(client.id) ?? node)
            shares[owner, default: 0] += 1
        }
        shares[node, default: 0] += joins
        return shares
    }

    static func client(_ number: Int, _ join: Join) -> ClientInfo {
        let id = "c\(number)"
        return ClientInfo(id: id, name: join.name ?? id)
    }
}
