/// The shared scroll-to-top counter's rule: a `scrollToTop` carries the counter's new
/// value, which is above the current one (it never goes down within an epoch).
public enum SharedCount {
    /// The counter after `event`: the only code that moves it, live and on replay.
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

    public var newPageID: PageID { "p\(nextPage)" }
    public var newClientID: ClientID { "c\(nextClient)" }

    /// Moves past the ids `event` hands out.
    public mutating func apply(_ event: Event) {
        switch event {
        case let .pushed(_, page, _): nextPage = max(nextPage, Self.number(page) + 1)
        case let .tabAdded(tab, _): nextPage = max(nextPage, Self.number(tab.stack[0].id) + 1)
        case let .clientJoined(client): nextClient = max(nextClient, Self.number(client.id) + 1)
        default: break
        }
    }

    /// The number of `p12` or `c7`; 0 for ids of another shape.
    static func number(_ id: String) -> Int { Int(id.dropFirst()) ?? 0 }
}
