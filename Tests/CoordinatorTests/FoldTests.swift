import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The one fold: each part of the state changes only by its own `apply`, and an event
/// that does not fit is refused with nothing changed.
@Suite struct FoldTests {
    static let info = TabInfo(id: "t", title: "T", icon: "star", color: "#112233")

    /// A tab at depth 2 whose top `p2` is visible and whose root `p1` has appeared.
    static func tab() throws -> TabState {
        var t = TabState(info: info, rootPage: "p1")
        for e in t.appearEvents() { try t.apply(e, selected: true) }
        for e in try t.pushEvents(route: "detail", page: "p2", visible: true) { try t.apply(e, selected: true) }
        return t
    }

    @Test func decidedEventsFoldToTheStateTheRulesDescribe() throws {
        let t = try Self.tab()
        #expect(t.stack == [Page(id: "p1", route: "root", appeared: true, appearCount: 1),
                            Page(id: "p2", route: "detail", appeared: true, appearCount: 1)])
        var popped = t
        let events = popped.popEvents(visible: true)
        #expect(events == [.disappear(tab: "t", page: "p2"), .popped(tab: "t", pages: ["p2"]), .appear(tab: "t", page: "p1")])
        for e in events { try popped.apply(e, selected: true) }
        #expect(popped.stack == [Page(id: "p1", route: "root", appeared: true, appearCount: 2)])
    }

    @Test(arguments: [
        Event.firstAppear(tab: "t", page: "p2"),            // already appeared
        Event.firstAppear(tab: "t", page: "p1"),            // not the top
        Event.appear(tab: "t", page: "p1"),                 // not the top
        Event.disappear(tab: "t", page: "p9"),              // not a page of the tab
        Event.pushed(tab: "t", page: "p2", route: "again"), // a page id twice
        Event.popped(tab: "t", pages: ["p1"]),              // not the top
        Event.popped(tab: "t", pages: ["p2", "p1"]),        // would leave no root
        Event.popped(tab: "t", pages: []),                  // pops nothing
        Event.scrolled(tab: "other", offset: 3),            // another tab's event
        Event.selected(from: "t", to: "u"),                 // the bar's event
    ])
    func aTabRefusesAnEventThatDoesNotFitAndKeepsItsState(event: Event) throws {
        var t = try Self.tab()
        let before = t
        #expect(throws: FoldError.self) { try t.apply(event, selected: true) }
        #expect(t == before)
    }

    @Test func onlyTheSelectedTabsTopCanAppear() throws {
        var t = try Self.tab()
        #expect(throws: FoldError.self) { try t.apply(.appear(tab: "t", page: "p2"), selected: false) }
        try t.apply(.appear(tab: "t", page: "p2"), selected: true)
        #expect(t.top.appearCount == 2)
    }

    @Test func theScrollToTopCounterOnlyGoesUp() throws {
        var value = 3
        #expect(throws: FoldError.self) { try ScrollCounter.apply(.scrollToTop(tab: "t", count: 3), to: &value) }
        #expect(value == 3)
        try ScrollCounter.apply(.scrollToTop(tab: "t", count: 4), to: &value)
        #expect(value == 4)
    }

    @Test func aRosterForgetsClientsListedBeyondItsCapByCount() throws {
        var roster = Roster(clients: [ClientInfo(id: "c1", name: "a")], count: 3)
        try roster.apply(.clientLeft("c7"))
        #expect(roster == Roster(clients: [ClientInfo(id: "c1", name: "a")], count: 2))
        try roster.apply(.clientLeft("c8"))
        #expect(throws: FoldError.self) { try roster.apply(.clientLeft("c9")) }
        try roster.apply(.clientLeft("c1"))
        #expect(roster == Roster(clients: [], count: 0))
    }

    @Test func idsMovePastEveryIdAnEventHandsOut() {
        var ids = IDCounters(nextPage: 4, nextClient: 1)
        ids.apply(.pushed(tab: "t", page: "p9", route: "x"))
        ids.apply(.clientJoined(ClientInfo(id: "c5", name: "c5")))
        ids.apply(.pushed(tab: "t", page: "p2", route: "x"))
        #expect(ids == IDCounters(nextPage: 10, nextClient: 6))
    }

    @Test func aSnapshotRefusesAnEventForAnUnknownTabWithItsSeqAndChangesNothing() async throws {
        let c = try Coordinator()
        var snapshot = await c.snapshot()
        let before = snapshot
        let bad = SequencedEvent(seq: snapshot.seq + 1, event: .scrolled(tab: "nope", offset: 1))
        #expect(throws: ReplayError.self) { try snapshot.apply(bad) }
        #expect(snapshot == before)
        let gap = SequencedEvent(seq: snapshot.seq + 2, event: .scrolled(tab: "home", offset: 1))
        #expect(throws: ReplayError.self) { try snapshot.apply(gap) }
        #expect(snapshot == before)
    }
}
