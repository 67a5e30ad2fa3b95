import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The four native tab bar behaviours tabd carries (README: tabs stay alive yet appear when selected; tab items; firstAppear once per page; tap pops, then scrolls to the top), end to end against one coordinator.
@Suite struct SeedScenarioTests {
    /// Seed 000: switching tabs fires appear (the ZStack/opacity bar does not, tabd does),
    /// while the other tab keeps its stack, scroll and values.
    @Test func switchingTabsFiresAppearAndKeepsEveryTabsState() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: "home", route: "detail"))
        try await run(c, .scroll(tab: "home", offset: 240))
        try await run(c, .set(tab: "home", key: "draft", value: .string("hello")))
        let homeBefore = await c.snapshot().tab("home")!

        let away = try await run(c, .select(tab: "favorites"))
        #expect(away?.events.map(\.event) == [
            .selected(from: "home", to: "favorites"), .disappear(tab: "home", page: "p4"),
            .firstAppear(tab: "favorites", page: "p2"), .appear(tab: "favorites", page: "p2"),
        ])
        let back = try await run(c, .select(tab: "home"))
        #expect(back?.events.map(\.event) == [
            .selected(from: "favorites", to: "home"), .disappear(tab: "favorites", page: "p2"), .appear(tab: "home", page: "p4"),
        ])
        var homeAfter = homeBefore
        homeAfter.stack[1].appearCount += 1
        #expect(await c.snapshot().tab("home") == homeAfter, "stack, scroll and values survive the switch")
    }

    /// Seed 002: push then pop — the root appears again, but its firstAppear does not fire again.
    @Test func pushThenPopFiresAppearAgainButNotFirstAppear() async throws {
        let c = try freshCoordinator()
        try await run(c, .set(tab: "home", key: "greeting", value: .string("Tapped")))
        try await run(c, .push(tab: "home", route: "pushed"))
        let pop = try await run(c, .pop(tab: "home"))
        #expect(pop?.events.map(\.event) == [
            .disappear(tab: "home", page: "p4"), .popped(tab: "home", pages: ["p4"]), .appear(tab: "home", page: "p1"),
        ])
        let home = await c.snapshot().tab("home")!
        #expect(home.stack == [Page(id: "p1", route: "root", appeared: true, appearCount: 2)])
        #expect(home.values["greeting"] == .string("Tapped"), "the greeting persists across push/pop")
        // A page pushed again is a new page: it gets its own firstAppear.
        let again = try await run(c, .push(tab: "home", route: "pushed"))
        #expect(again?.events.map(\.event).contains(.firstAppear(tab: "home", page: "p5")) == true)
    }

    /// Seed 003: tapping the selected tab pops to its first page; tapping again
    /// increments the scroll-to-top counter, which all tabs share and which never resets.
    @Test func tapPopsToRootThenScrollsToTopThroughTheScrollToTopCounter() async throws {
        let c = try freshCoordinator()
        let changes = c.counter.changes()
        try await run(c, .push(tab: "home", route: "next"))
        try await run(c, .push(tab: "home", route: "next2"))

        let first = try await run(c, .tap(tab: "home"))
        #expect(first?.events.map(\.event) == [
            .disappear(tab: "home", page: "p5"), .popped(tab: "home", pages: ["p5", "p4"]), .appear(tab: "home", page: "p1"),
        ])
        let second = try await run(c, .tap(tab: "home"))
        #expect(second?.events.map(\.event) == [.scrollToTop(tab: "home", count: 1)])

        try await run(c, .tap(tab: "profile"))
        let third = try await run(c, .tap(tab: "profile"))
        #expect(third?.events.map(\.event) == [.scrollToTop(tab: "profile", count: 2)], "one counter for every tab")
        try await run(c, .tap(tab: "home"))
        let fourth = try await run(c, .tap(tab: "home"))
        #expect(fourth?.events.map(\.event) == [.scrollToTop(tab: "home", count: 3)], "switching tabs never resets it")

        var seen: [Int] = []
        for await value in changes {
            seen.append(value)
            if seen.count == 3 { break }
        }
        #expect(seen == [1, 2, 3], "observers of the scroll-to-top counter see each change")
        #expect(await c.snapshot().scrollToTop == 3)
    }
}
