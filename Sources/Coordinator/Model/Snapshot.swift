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
    /// Connected clients in join order (``clientCount`` counts them all).
    public var clients: [ClientInfo]
    public var clientCount: Int

    public init(seq: Int, selected: TabID, scrollToTop: Int, tabs: [TabState], clients: [ClientInfo], clientCount: Int? = nil) {
        self.seq = seq; self.selected = selected; self.scrollToTop = scrollToTop
        self.tabs = tabs; self.clients = clients; self.clientCount = clientCount ?? clients.count
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
