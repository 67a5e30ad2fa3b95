/// The scroll-to-top counter's rule: a `scrollToTop` carries the counter's new value,
/// which is above the current one (it never goes down within an epoch).
public enum ScrollToTopRule {
    /// The scroll-to-top counter after `event`: the only code that moves it, live (the
    /// server's counter actor, its published value) and on replay.
    public static func apply(_ event: Event, to value: inout Int) throws(FoldError) {
        guard case let .scrollToTop(_, count) = event else { return }
        guard count > value else { throw FoldError("counter went from \(value) to \(count)") }
        value = count
    }
}

/// The next page number (`p<n>`) and client number (`c<n>`) to hand out: past every id
/// an event has handed out, so ids are never reused within an epoch.
public struct IDCounters: Sendable, Equatable {
    public var nextPage: Int
    public var nextClient: Int

    public init(nextPage: Int, nextClient: Int) { self.nextPage = nextPage; self.nextClient = nextClient }

    /// Counters for continuing from `snapshot`: the stored ones, moved past every page
    /// and client id the snapshot holds (a damaged store's counters could name ids in use).
    public init(covering snapshot: Snapshot, nextPage: Int, nextClient: Int) {
        self.init(nextPage: nextPage, nextClient: nextClient)
        for tab in snapshot.tabs { for page in tab.stack { self.nextPage = max(self.nextPage, Self.after(page.id)) } }
        for client in snapshot.clients { self.nextClient = max(self.nextClient, Self.after(client.id)) }
    }

    public var newPageID: PageID { "p\(nextPage)" }
    public var newClientID: ClientID { "c\(nextClient)" }

    /// Moves past the ids `event` hands out.
    public mutating func apply(_ event: Event) {
        switch event {
        case let .pushed(_, page, _): nextPage = max(nextPage, Self.after(page))
        case let .tabAdded(tab, _): nextPage = max(nextPage, Self.after(tab.stack[0].id))
        case let .clientJoined(client): nextClient = max(nextClient, Self.after(client.id))
        case let .presenceListed(_, clients): for client in clients { nextClient = max(nextClient, Self.after(client.id)) }
        case let .clientIdsReserved(_, from, count):
            // Past the block (wire counts are at most Limits.maxCount: no overflow).
            nextClient = max(nextClient, from + count)
        default: break
        }
    }

    /// The number of `p12` or `c7`; 0 for ids of another shape.
    static func number(_ id: String) -> Int { Int(id.dropFirst()) ?? 0 }

    /// The number after `id`'s (a stored id may hold any number: no overflow).
    static func after(_ id: String) -> Int {
        let n = number(id)
        return n == .max ? n : n + 1
    }
}
