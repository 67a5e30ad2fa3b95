/// The whole shared state at one `seq`, as `welcome` and `sync` carry it.
///
/// It is also the replay model: ``apply(_:)`` folds events into it, so replaying a
/// stream from any snapshot must reproduce the coordinator's own snapshot at the same
/// seq. Presence is kept in full here; ``capped`` gives the wire form (first 100).
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

/// An event that does not fit the state it is applied to: the stream is broken.
public struct ReplayError: Error, Sendable, CustomStringConvertible {
    public let seq: Int
    public let message: String
    public var description: String { "replay failed at seq \(seq): \(message)" }
    public init(seq: Int, message: String) { self.seq = seq; self.message = message }
}

extension Snapshot {
    /// Applies one batch (its seqs must follow on from ``seq``).
    public mutating func apply(_ batch: EventBatch) throws(ReplayError) {
        for e in batch.events { try apply(e) }
    }

    /// Applies one event: the state after it, exactly as the coordinator has it.
    public mutating func apply(_ e: SequencedEvent) throws(ReplayError) {
        func fail(_ m: String) -> ReplayError { ReplayError(seq: e.seq, message: m) }
        guard e.seq == seq + 1 else { throw fail("expected seq \(seq + 1)") }
        func withTab(_ id: TabID, _ body: (inout TabState) throws(ReplayError) -> Void) throws(ReplayError) {
            guard let i = tabs.firstIndex(where: { $0.id == id }) else { throw fail("no tab '\(id)'") }
            try body(&tabs[i])
        }
        switch e.event {
        case let .selected(from, to):
            guard from == selected, tab(to) != nil else { throw fail("selected from \(from) to \(to), but \(selected) is selected") }
            selected = to
        case let .firstAppear(t, p):
            try withTab(t) { (tab) throws(ReplayError) in
                guard tab.top.id == p, !tab.top.appeared else { throw fail("firstAppear of \(p) which is not a fresh top page") }
                tab.stack[tab.stack.count - 1].appeared = true
            }
        case let .appear(t, p):
            guard t == selected else { throw fail("appear on unselected tab \(t)") }
            try withTab(t) { (tab) throws(ReplayError) in
                guard tab.top.id == p, tab.top.appeared else { throw fail("appear of \(p) which is not the top or never first-appeared") }
                tab.stack[tab.stack.count - 1].appearCount += 1
            }
        case let .disappear(t, p):
            // It changes no state. Its place in the batch (after `selected`, after
            // `pushed`) is the lifecycle order, checked by whoever watches the stream.
            guard let tab = tab(t), tab.stack.contains(where: { $0.id == p }) else { throw fail("disappear of unknown page \(p)") }
        case let .pushed(t, p, route):
            try withTab(t) { tab in tab.stack.append(Page(id: p, route: route)) }
        case let .popped(t, pages):
            try withTab(t) { (tab) throws(ReplayError) in
                let top = tab.stack.suffix(pages.count).reversed().map(\.id)
                guard pages.count < tab.stack.count, top == pages else { throw fail("popped \(pages) but the top is \(top)") }
                tab.stack.removeLast(pages.count)
            }
        case let .scrollToTop(t, count):
            guard count > scrollToTop else { throw fail("counter went from \(scrollToTop) to \(count)") }
            scrollToTop = count
            try withTab(t) { tab in tab.scroll = 0 }
        case let .scrolled(t, offset):
            try withTab(t) { tab in tab.scroll = offset }
        case let .valueSet(t, key, value):
            try withTab(t) { tab in tab.values[key] = value.isNull ? nil : value }
        case let .tabAdded(tab, index):
            guard self.tab(tab.id) == nil, index >= 0, index <= tabs.count else { throw fail("tabAdded \(tab.id) at \(index)") }
            tabs.insert(tab, at: index)
        case let .tabUpdated(updated):
            try withTab(updated.id) { tab in tab.info = updated.info }
        case let .tabMoved(t, index):
            guard let from = tabs.firstIndex(where: { $0.id == t }), index >= 0, index < tabs.count else {
                throw fail("tabMoved \(t) to \(index)")
            }
            tabs.insert(tabs.remove(at: from), at: index)
        case let .tabRemoved(t):
            guard let i = tabs.firstIndex(where: { $0.id == t }), tabs.count > 1 else { throw fail("tabRemoved \(t)") }
            tabs.remove(at: i)
            // The batch's next event (`selected`) names the new selection when it was selected.
        case let .clientJoined(client):
            clients.append(client)
            clientCount += 1
        case let .clientLeft(id):
            if let i = clients.firstIndex(where: { $0.id == id }) {
                clients.remove(at: i)
                clientCount -= 1
            } else if clientCount > clients.count {
                clientCount -= 1 // listed beyond the cap of a capped snapshot
            } else {
                throw fail("clientLeft of unknown client \(id)")
            }
        }
        seq = e.seq
    }
}
