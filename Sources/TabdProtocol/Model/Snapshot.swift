/// The whole shared state at one `seq`, as `welcome` and `sync` carry it.
///
/// Events fold into it with ``apply(_:)-(SequencedEvent)`` (`Snapshot+Apply.swift`), by
/// the same functions that change the live state, so replaying a stream from any
/// snapshot reproduces the coordinator's own snapshot at the same seq. Presence is kept
/// in full here; ``capped`` gives the wire form (first 100).
public struct Snapshot: Sendable, Equatable {
    public var seq: Int
    public var selected: TabID
    public var scrollToTop: Int
    /// In display order.
    public var tabs: [TabState]
    /// Whether the room lists its clients or counts them.
    public var presence: PresenceMode
    /// Connected clients in join order (``clientCount`` counts them all); empty in a
    /// counted room.
    public var clients: [ClientInfo]
    /// In a counted room, the count as the stream last reported it (not a live figure).
    public var clientCount: Int
    /// A cluster's counted room: each node's count (``clientCount`` is their sum).
    public var nodes: [String: Int]?

    public init(seq: Int, selected: TabID, scrollToTop: Int, tabs: [TabState], clients: [ClientInfo], clientCount: Int? = nil,
                presence: PresenceMode = .listed, nodes: [String: Int]? = nil) {
        self.seq = seq; self.selected = selected; self.scrollToTop = scrollToTop
        self.tabs = tabs; self.clients = clients; self.clientCount = clientCount ?? clients.count
        self.presence = presence; self.nodes = nodes
    }

    /// Who is connected, as the roster's fold holds it.
    public var roster: Roster {
        get { Roster(mode: presence, clients: clients, count: clientCount, nodes: nodes) }
        set { (presence, clients, clientCount, nodes) = (newValue.mode, newValue.clients, newValue.count, newValue.nodes) }
    }

    public func tab(_ id: TabID) -> TabState? { tabs.first { $0.id == id } }

    /// The visible page: the selected tab's top.
    public var visiblePage: (tab: TabID, page: PageID)? {
        tab(selected).map { ($0.id, $0.top.id) }
    }

    /// The snapshot as sent on the wire: at most 100 clients listed.
    public var capped: Snapshot {
        var s = self
        if s.clients.count > Limits.maxClientsInSnapshot { s.clients = Array(s.clients.prefix(Limits.maxClientsInSnapshot)) }
        return s
    }
}
