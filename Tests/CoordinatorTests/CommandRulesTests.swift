import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The command table's rules as values (``CommandRules``): decided from states, no actor.
/// Each test names the rule of SEMANTICS.md it holds and asserts the whole event list.
@Suite struct CommandRulesTests {
    /// home (selected, at its root p1) and profile (p2, then pushed to p3).
    static func room(counter: Int? = nil) -> (CommandRules.Room, [TabID: TabState]) {
        let home = TabState(info: TabInfo(id: "home", title: "Home", icon: "house", color: "#000000"), rootPage: "p1")
        var profile = TabState(info: TabInfo(id: "profile", title: "Profile", icon: "person", color: "#000000"), rootPage: "p2")
        try! profile.apply(.pushed(tab: "profile", page: "p3", route: "settings"), selected: false)
        let bar = TabBar(order: ["home", "profile"], selected: "home")
        return (CommandRules.Room(bar: bar, newPageID: "p4", counter: counter, weight: 0, maxWeight: 1 << 20),
                ["home": home, "profile": profile])
    }

    static func decide(_ command: Command, counter: Int? = nil) throws(CommandError) -> [Event] {
        let (room, tabs) = room(counter: counter)
        let touched = CommandRules.touchedTabs(command, bar: room.bar)
        let read = tabs.filter { touched.contains($0.key) }
        return try CommandRules.decide(command, room: room, tabs: read)
    }

    @Test func selectingAnotherTabDisappearsTheOldTopAndAppearsTheNewOne() throws {
        #expect(try Self.decide(.select(tab: "profile")) == [
            .selected(from: "home", to: "profile"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "profile", page: "p3"), .appear(tab: "profile", page: "p3"),
        ])
        #expect(try Self.decide(.select(tab: "home")) == [], "the selected tab: nothing")
    }

    @Test func tapOnAnotherTabSelectsIt() throws {
        #expect(try Self.decide(.tap(tab: "profile")) == (try Self.decide(.select(tab: "profile"))))
    }

    @Test func tapOnSelectedTabAtRootScrollsToTopThroughTheCounter() throws {
        let (room, tabs) = Self.room()
        #expect(CommandRules.needsCounter(.tap(tab: "home"), bar: room.bar, tabs: tabs), "a tap at the root reads the counter")
        #expect(try Self.decide(.tap(tab: "home"), counter: 4) == [.scrollToTop(tab: "home", count: 5)])
    }

    @Test func tapOnSelectedTabAwayFromRootPopsToRootFirst() throws {
        var (room, tabs) = Self.room()
        room.bar = TabBar(order: ["home", "profile"], selected: "profile")
        #expect(!CommandRules.needsCounter(.tap(tab: "profile"), bar: room.bar, tabs: tabs))
        // The visible top disappears, the pages above the root go (top first), and the root
        // appears (for the first time: profile was never shown at its root).
        #expect(try CommandRules.decide(.tap(tab: "profile"), room: room, tabs: tabs) == [
            .disappear(tab: "profile", page: "p3"), .popped(tab: "profile", pages: ["p3"]),
            .firstAppear(tab: "profile", page: "p2"), .appear(tab: "profile", page: "p2"),
        ])
        tabs["profile"] = nil
        #expect(throws: CommandError.unknownTab("profile")) { try CommandRules.decide(.tap(tab: "profile"), room: room, tabs: tabs) }
    }

    @Test func pushOnAHiddenTabNamesTheNewPageAndAppearsNothing() throws {
        #expect(try Self.decide(.push(tab: "profile", route: "about")) == [.pushed(tab: "profile", page: "p4", route: "about")])
    }

    @Test func removingTheSelectedTabSelectsItsSuccessorAndAppearsItsTop() throws {
        #expect(try Self.decide(.removeTab(tab: "home")) == [
            .disappear(tab: "home", page: "p1"), .tabRemoved(tab: "home"), .selected(from: "home", to: "profile"),
            .firstAppear(tab: "profile", page: "p3"), .appear(tab: "profile", page: "p3"),
        ])
        #expect(try Self.decide(.removeTab(tab: "profile")) == [.tabRemoved(tab: "profile")], "a hidden tab: just removed")
    }

    @Test func anUnknownTabIsRefusedBeforeAnythingElse() {
        #expect(throws: CommandError.unknownTab("nope")) { try Self.decide(.select(tab: "nope")) }
        #expect(throws: CommandError.unknownTab("nope")) { try Self.decide(.push(tab: "nope", route: "x")) }
        #expect(throws: CommandError.unknownTab("nope")) { try Self.decide(.updateTab(TabUpdate(id: "nope", title: "T"))) }
    }

    @Test func aCommandThatWouldOutgrowTheRoomIsInvalid() {
        var (room, tabs) = Self.room()
        room.weight = room.maxWeight
        #expect(throws: CommandError.self) { try CommandRules.decide(.set(tab: "home", key: "k", value: .string("v")), room: room, tabs: tabs) }
        tabs = [:]
        #expect(throws: CommandError.self) {
            try CommandRules.decide(.addTab(TabInfo(id: "new", title: "N", icon: "star", color: "#000000"), index: nil), room: room, tabs: tabs)
        }
    }

    @Test func queriesCauseNothing() throws {
        for command in [Command.sync, .ping, .clients(after: nil, limit: nil)] { #expect(try Self.decide(command) == []) }
    }
}
