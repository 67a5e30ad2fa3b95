import Testing
@testable import Coordinator
@testable import TabdProtocol

/// One test per row of SEMANTICS.md's command table: the complete list of events
/// (kinds, fields, order, seqs) and the complete resulting snapshot.
@Suite struct CommandTableTests {
    @Test func firstStartSelectsFirstTabAndShowsItsRoot() async throws {
        let c = try freshCoordinator()
        let sub = await c.subscribe(after: 0)
        guard case let .replay(batches) = sub.start else { Issue.record("expected a replay"); return }
        #expect(batches == [EventBatch(by: "tabd", ref: nil, events: sequenced(from: 1, [
            .firstAppear(tab: "home", page: "p1"), .appear(tab: "home", page: "p1"),
        ]))])
        var expected = c.origin
        expected.seq = 2
        expected.tabs[0].stack[0].appeared = true
        expected.tabs[0].stack[0].appearCount = 1
        #expect(await c.snapshot() == expected)
        #expect(c.origin.tabs.map(\.id) == ["home", "favorites", "profile"])
        #expect(c.origin.tabs.map(\.info.color) == ["#FF3B30", "#007AFF", "#34C759"])
    }

    @Test func selectOtherTabEmitsSelectedDisappearFirstAppearAppear() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .select(tab: "favorites"), by: "c1", ref: "r1")
        #expect(batch == EventBatch(by: "c1", ref: "r1", events: sequenced(from: 3, [
            .selected(from: "home", to: "favorites"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "favorites", page: "p2"), .appear(tab: "favorites", page: "p2"),
        ])))
        expected.seq = 6
        expected.selected = "favorites"
        expected.tabs[1].stack[0].appeared = true
        expected.tabs[1].stack[0].appearCount = 1
        #expect(await c.snapshot() == expected)
    }

    @Test func selectBackToAnAppearedPageHasNoFirstAppear() async throws {
        let c = try freshCoordinator()
        try await run(c, .select(tab: "favorites"))
        let batch = try await run(c, .select(tab: "home"))
        #expect(batch?.events == sequenced(from: 7, [
            .selected(from: "favorites", to: "home"), .disappear(tab: "favorites", page: "p2"), .appear(tab: "home", page: "p1"),
        ]))
        #expect(await c.snapshot().tabs[0].stack[0].appearCount == 2)
    }

    @Test func selectSelectedTabEmitsNothing() async throws {
        let c = try freshCoordinator()
        let before = await c.snapshot()
        let outcome = try await c.execute(.select(tab: "home"), by: "c1", ref: "r")
        #expect(outcome == .applied(seq: 2, batch: nil))
        #expect(await c.snapshot() == before)
    }

    @Test func pushOnSelectedTabEmitsPushedDisappearFirstAppearAppear() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .push(tab: nil, route: "next"))
        #expect(batch?.events == sequenced(from: 3, [
            .pushed(tab: "home", page: "p4", route: "next"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "home", page: "p4"), .appear(tab: "home", page: "p4"),
        ]))
        expected.seq = 6
        expected.tabs[0].stack.append(Page(id: "p4", route: "next", appeared: true, appearCount: 1))
        #expect(await c.snapshot() == expected)
    }

    @Test func pushOnUnselectedTabOnlyEmitsPushed() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .push(tab: "profile", route: "settings"))
        #expect(batch?.events == sequenced(from: 3, [.pushed(tab: "profile", page: "p4", route: "settings")]))
        expected.seq = 3
        expected.tabs[2].stack.append(Page(id: "p4", route: "settings"))
        #expect(await c.snapshot() == expected)
        // It first appears when its tab is selected.
        let select = try await run(c, .select(tab: "profile"))
        #expect(select?.events == sequenced(from: 4, [
            .selected(from: "home", to: "profile"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "profile", page: "p4"), .appear(tab: "profile", page: "p4"),
        ]))
        #expect(await c.snapshot().tabs[2].stack.map(\.appeared) == [false, true])
    }

    @Test func popOnSelectedTabEmitsDisappearPoppedAppear() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: "home", route: "next"))
        var expected = await c.snapshot()
        let batch = try await run(c, .pop(tab: "home"))
        #expect(batch?.events == sequenced(from: 7, [
            .disappear(tab: "home", page: "p4"), .popped(tab: "home", pages: ["p4"]), .appear(tab: "home", page: "p1"),
        ]))
        expected.seq = 9
        expected.tabs[0].stack.removeLast()
        expected.tabs[0].stack[0].appearCount = 2
        #expect(await c.snapshot() == expected)
    }

    @Test func popOnUnselectedTabOnlyEmitsPopped() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: "profile", route: "a"))
        try await run(c, .push(tab: "profile", route: "b"))
        var expected = await c.snapshot()
        let batch = try await run(c, .pop(tab: "profile"))
        #expect(batch?.events == sequenced(from: 5, [.popped(tab: "profile", pages: ["p5"])]))
        expected.seq = 5
        expected.tabs[2].stack.removeLast()
        #expect(await c.snapshot() == expected)
    }

    @Test(arguments: [Command.pop(tab: "home"), .popToRoot(tab: "home"), .pop(tab: "profile"), .popToRoot(tab: nil)])
    func popAtDepthOneEmitsNothing(command: Command) async throws {
        let c = try freshCoordinator()
        let before = await c.snapshot()
        #expect(try await c.execute(command) == .applied(seq: 2, batch: nil))
        #expect(await c.snapshot() == before)
    }

    @Test func popToRootOnSelectedTabPopsEverythingAboveRootTopFirst() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: nil, route: "a"))
        try await run(c, .push(tab: nil, route: "b"))
        var expected = await c.snapshot()
        let batch = try await run(c, .popToRoot(tab: nil))
        #expect(batch?.events == sequenced(from: 11, [
            .disappear(tab: "home", page: "p5"), .popped(tab: "home", pages: ["p5", "p4"]), .appear(tab: "home", page: "p1"),
        ]))
        expected.seq = 13
        expected.tabs[0].stack.removeLast(2)
        expected.tabs[0].stack[0].appearCount = 2
        #expect(await c.snapshot() == expected)
    }

    @Test func popToRootOnUnselectedTabOnlyEmitsPopped() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: "profile", route: "a"))
        try await run(c, .push(tab: "profile", route: "b"))
        var expected = await c.snapshot()
        let batch = try await run(c, .popToRoot(tab: "profile"))
        #expect(batch?.events == sequenced(from: 5, [.popped(tab: "profile", pages: ["p5", "p4"])]))
        expected.seq = 5
        expected.tabs[2].stack.removeLast(2)
        #expect(await c.snapshot() == expected)
    }

    @Test func tapOnUnselectedTabIsSelect() async throws {
        let c = try freshCoordinator()
        let batch = try await run(c, .tap(tab: "profile"))
        #expect(batch?.events == sequenced(from: 3, [
            .selected(from: "home", to: "profile"), .disappear(tab: "home", page: "p1"),
            .firstAppear(tab: "profile", page: "p3"), .appear(tab: "profile", page: "p3"),
        ]))
        #expect(await c.snapshot().selected == "profile")
    }

    @Test func tapOnSelectedTabWithPushedPagesPopsToRoot() async throws {
        let c = try freshCoordinator()
        try await run(c, .push(tab: nil, route: "a"))
        try await run(c, .scroll(tab: nil, offset: 50))
        var expected = await c.snapshot()
        let batch = try await run(c, .tap(tab: "home"))
        #expect(batch?.events == sequenced(from: 8, [
            .disappear(tab: "home", page: "p4"), .popped(tab: "home", pages: ["p4"]), .appear(tab: "home", page: "p1"),
        ]))
        expected.seq = 10
        expected.tabs[0].stack.removeLast()
        expected.tabs[0].stack[0].appearCount = 2
        #expect(await c.snapshot() == expected, "the scroll-to-top counter and the scroll offset are untouched by the first tap")
    }

    @Test func tapOnSelectedTabAtRootScrollsToTop() async throws {
        let c = try freshCoordinator()
        try await run(c, .scroll(tab: "home", offset: 120.5))
        var expected = await c.snapshot()
        let batch = try await run(c, .tap(tab: "home"))
        #expect(batch?.events == sequenced(from: 4, [.scrollToTop(tab: "home", count: 1)]))
        expected.seq = 4
        expected.scrollToTop = 1
        expected.tabs[0].scroll = 0
        #expect(await c.snapshot() == expected)
        #expect(c.counter.value == 1)
    }

    @Test func scrollEmitsScrolledOnAnyTab() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .scroll(tab: "favorites", offset: 33.25))
        #expect(batch?.events == sequenced(from: 3, [.scrolled(tab: "favorites", offset: 33.25)]))
        expected.seq = 3
        expected.tabs[1].scroll = 33.25
        #expect(await c.snapshot() == expected)
    }

    @Test func setStoresValueAndNullRemovesIt() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let value = try JSONParser.parse(#"{"b":[1,2.50,true,null],"a":"x"}"#)
        let batch = try await run(c, .set(tab: nil, key: "greeting", value: value))
        #expect(batch?.events == sequenced(from: 3, [.valueSet(tab: "home", key: "greeting", value: value)]))
        expected.seq = 3
        expected.tabs[0].values["greeting"] = value
        #expect(await c.snapshot() == expected)
        #expect(await c.snapshot().tabs[0].values["greeting"]?.compactString == #"{"b":[1,2.50,true,null],"a":"x"}"#)

        let removal = try await run(c, .set(tab: "home", key: "greeting", value: .null))
        #expect(removal?.events == sequenced(from: 4, [.valueSet(tab: "home", key: "greeting", value: .null)]))
        expected.seq = 4
        expected.tabs[0].values["greeting"] = nil
        #expect(await c.snapshot() == expected)
    }

    @Test func setIsEmittedEvenWhenNothingChanges() async throws {
        let c = try freshCoordinator()
        let batch = try await run(c, .set(tab: "profile", key: "missing", value: .null))
        #expect(batch?.events == sequenced(from: 3, [.valueSet(tab: "profile", key: "missing", value: .null)]))
    }

    @Test func addTabAppendsUnselectedTabWithFreshRoot() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let info = TabInfo(id: "mail", title: "Mail", icon: "envelope", color: "#aabbcc", badge: "3")
        let batch = try await run(c, .addTab(info, index: nil))
        var added = TabState(info: info, rootPage: "p4")
        added.info.color = "#AABBCC"
        #expect(batch?.events == sequenced(from: 3, [.tabAdded(added, index: 3)]))
        expected.seq = 3
        expected.tabs.append(added)
        #expect(await c.snapshot() == expected)
    }

    @Test func addTabAtIndexInsertsThere() async throws {
        let c = try freshCoordinator()
        let info = TabInfo(id: "search", title: "Search", icon: "magnifyingglass", color: "#000000")
        let batch = try await run(c, .addTab(info, index: 0))
        #expect(batch?.events == sequenced(from: 3, [.tabAdded(TabState(info: info, rootPage: "p4"), index: 0)]))
        #expect(await c.snapshot().tabs.map(\.id) == ["search", "home", "favorites", "profile"])
        #expect(await c.snapshot().selected == "home")
    }

    @Test func updateTabThatChangesSomethingEmitsTabUpdated() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .updateTab(TabUpdate(id: "favorites", title: "Likes", badge: .some("9+"))))
        expected.seq = 3
        expected.tabs[1].info.title = "Likes"
        expected.tabs[1].info.badge = "9+"
        #expect(batch?.events == sequenced(from: 3, [.tabUpdated(expected.tabs[1])]))
        #expect(await c.snapshot() == expected)
        // null clears the badge
        let clear = try await run(c, .updateTab(TabUpdate(id: "favorites", badge: .some(nil))))
        expected.seq = 4
        expected.tabs[1].info.badge = nil
        #expect(clear?.events == sequenced(from: 4, [.tabUpdated(expected.tabs[1])]))
    }

    @Test func updateTabThatChangesNothingEmitsNothing() async throws {
        let c = try freshCoordinator()
        let before = await c.snapshot()
        // The color differs only in case: stored upper case, so nothing changes.
        let outcome = try await c.execute(.updateTab(TabUpdate(id: "home", title: "Home", color: "#ff3b30", badge: .some(nil))))
        #expect(outcome == .applied(seq: 2, batch: nil))
        #expect(await c.snapshot() == before)
    }

    @Test func moveTabEmitsItsNewPosition() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .moveTab(tab: "home", index: 2))
        #expect(batch?.events == sequenced(from: 3, [.tabMoved(tab: "home", index: 2)]))
        expected.seq = 3
        expected.tabs = [expected.tabs[1], expected.tabs[2], expected.tabs[0]]
        #expect(await c.snapshot() == expected)
    }

    @Test func moveTabToSamePositionEmitsNothing() async throws {
        let c = try freshCoordinator()
        #expect(try await c.execute(.moveTab(tab: "favorites", index: 1)) == .applied(seq: 2, batch: nil))
    }

    @Test func removeUnselectedTabEmitsTabRemoved() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .removeTab(tab: "favorites"))
        #expect(batch?.events == sequenced(from: 3, [.tabRemoved(tab: "favorites")]))
        expected.seq = 3
        expected.tabs.remove(at: 1)
        #expect(await c.snapshot() == expected)
    }

    @Test func removeSelectedTabSelectsTheTabThatTookItsPlace() async throws {
        let c = try freshCoordinator()
        var expected = await c.snapshot()
        let batch = try await run(c, .removeTab(tab: "home"))
        #expect(batch?.events == sequenced(from: 3, [
            .disappear(tab: "home", page: "p1"), .tabRemoved(tab: "home"), .selected(from: "home", to: "favorites"),
            .firstAppear(tab: "favorites", page: "p2"), .appear(tab: "favorites", page: "p2"),
        ]))
        expected.seq = 7
        expected.tabs.remove(at: 0)
        expected.selected = "favorites"
        expected.tabs[0].stack[0].appeared = true
        expected.tabs[0].stack[0].appearCount = 1
        #expect(await c.snapshot() == expected)
    }

    @Test func removeSelectedLastPositionTabSelectsTheOneBefore() async throws {
        let c = try freshCoordinator()
        try await run(c, .select(tab: "profile"))
        try await run(c, .select(tab: "favorites"))
        try await run(c, .select(tab: "profile"))
        let batch = try await run(c, .removeTab(tab: "profile"))
        #expect(batch?.events == sequenced(from: 14, [
            .disappear(tab: "profile", page: "p3"), .tabRemoved(tab: "profile"), .selected(from: "profile", to: "favorites"),
            .appear(tab: "favorites", page: "p2"),
        ]))
    }

    @Test func removeTheLastTabIsInvalid() async throws {
        let c = try freshCoordinator([TabInfo(id: "only", title: "Only", icon: "star", color: "#123456")])
        await expectRefused(c, .removeTab(tab: "only"), .invalid)
    }

    @Test func syncAnswersWithTheSnapshotAndPingWithPong() async throws {
        let c = try freshCoordinator()
        // Seq 1–2: home's root p1 appears. Then every part of the state moves once.
        let ann = try await c.connect(.init(name: "ann"))                         // 3: clientJoined c1
        try await run(c, .scroll(tab: nil, offset: 80))                            // 4: home scrolled
        try await run(c, .tap(tab: "home"))                                        // 5: scrollToTop 1, home at 0
        try await run(c, .push(tab: "favorites", route: "detail"))                 // 6: p4 on favorites
        try await run(c, .select(tab: "favorites"))                                // 7–10: p4 first appears
        try await run(c, .scroll(tab: nil, offset: 42.5))                          // 11: favorites scrolled
        try await run(c, .set(tab: "profile", key: "theme", value: .string("dark"))) // 12
        #expect(ann.client == ClientInfo(id: "c1", name: "ann"))

        let (home, favorites, profile) = (TabInfo.defaults[0], TabInfo.defaults[1], TabInfo.defaults[2])
        let expected = Snapshot(
            seq: 12, selected: "favorites", scrollToTop: 1,
            tabs: [
                TabState(info: home, stack: [Page(id: "p1", route: "root", appeared: true, appearCount: 1)], scroll: 0),
                TabState(info: favorites, stack: [
                    Page(id: "p2", route: "root"),
                    Page(id: "p4", route: "detail", appeared: true, appearCount: 1),
                ], scroll: 42.5),
                TabState(info: profile, stack: [Page(id: "p3", route: "root")], values: ["theme": .string("dark")]),
            ],
            clients: [ClientInfo(id: "c1", name: "ann")], clientCount: 1)
        #expect(try await c.execute(.sync, by: "c1", ref: "s") == .snapshot(expected))
        #expect(try await c.execute(.ping, by: "c1", ref: "p") == .pong)
        #expect(await c.currentSeq == 12, "sync and ping record nothing")
        #expect(await c.snapshot() == expected)
    }
}
