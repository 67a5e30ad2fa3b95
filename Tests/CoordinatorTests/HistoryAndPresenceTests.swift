import Testing
@testable import Coordinator
@testable import TabdProtocol

@Suite struct HistoryAndPresenceTests {
    @Test func joinEmitsClientJoinedAndTheWelcomeSnapshotIncludesIt() async throws {
        let c = try freshCoordinator()
        let w = try await c.connect(.init(name: "kiosk-1"))
        #expect(w.client == ClientInfo(id: "c1", name: "kiosk-1"))
        #expect(w.resumed == false)
        #expect(w.seq == 3)
        #expect(w.snapshot?.seq == 3)
        #expect(w.snapshot?.clients == [ClientInfo(id: "c1", name: "kiosk-1")])
        #expect(w.epoch == c.epoch)
    }

    @Test func namesAreCutTo64AndDefaultToTheId() async throws {
        let c = try freshCoordinator()
        let long = try await c.connect(.init(name: String(repeating: "n", count: 80)))
        #expect(long.client.name.count == 64)
        let anonymous = try await c.connect(.init(name: ""))
        #expect(anonymous.client.name == anonymous.client.id)
    }

    @Test func resumeReplaysExactlyTheMissedBatchesEndingWithTheJoin() async throws {
        let c = try freshCoordinator()
        let first = try await c.connect(.init(name: "a"))
        try await c.disconnect(first.client.id)
        try await run(c, .push(tab: nil, route: "x"))
        let w = try await c.connect(.init(name: "a", resume: first.seq, epoch: c.epoch))
        #expect(w.resumed)
        #expect(w.snapshot == nil)
        #expect(w.replay.map(\.events).map { $0.map(\.event.kind) } == [
            ["clientLeft"], ["pushed", "disappear", "firstAppear", "appear"], ["clientJoined"],
        ])
        #expect(w.replay.first?.firstSeq == first.seq + 1)
        #expect(w.replay.last?.lastSeq == w.seq)
    }

    @Test(arguments: [
        Coordinator.JoinRequest(resume: 99), .init(resume: 1), .init(resume: -1), .init(resume: 0, epoch: "another"),
    ])
    func resumeThatCannotBeServedGivesASnapshot(request: Coordinator.JoinRequest) async throws {
        // seq 1 is inside the first batch (1–2); 99 was never reached; another epoch is another history.
        let c = try freshCoordinator()
        let w = try await c.connect(request)
        #expect(!w.resumed)
        #expect(w.snapshot == (await c.snapshot()))
    }

    @Test func resumeOlderThanTheWindowGivesASnapshot() async throws {
        let c = try Coordinator(configuration: .init(resumeWindow: 10))
        for i in 0..<20 { try await run(c, .scroll(tab: nil, offset: Double(i))) }
        let old = try await c.connect(.init(resume: 2, epoch: c.epoch))
        #expect(!old.resumed)
        let recent = try await c.connect(.init(resume: 15, epoch: c.epoch))
        #expect(recent.resumed)
        #expect(recent.replay.map(\.firstSeq) == Array(16...24), "scrolls 16–22, then both joins")
    }

    @Test func joinsAndLeavesInOneCallTravelInOneBatch() async throws {
        let c = try freshCoordinator()
        let a = try await c.connect(.init(name: "a"))
        let sub = await c.subscribe()
        let welcomes = try await c.presence(joining: [.init(name: "b"), .init(name: "c")], leaving: [a.client.id, "c999"])
        #expect(welcomes.map(\.client.name) == ["b", "c"])
        #expect(welcomes.allSatisfy { $0.snapshot?.clients.map(\.name) == ["b", "c"] })
        for await batch in sub.batches {
            #expect(batch == EventBatch(by: "tabd", ref: nil, events: sequenced(from: 4, [
                .clientLeft(a.client.id), .clientJoined(ClientInfo(id: "c2", name: "b")), .clientJoined(ClientInfo(id: "c3", name: "c")),
            ])))
            break
        }
    }

    @Test func aSubscriberThatFallsBehindIsCutOffNotSilentlyDropped() async throws {
        let c = try freshCoordinator()
        let slow = await c.subscribe(bufferLimit: 4)
        let fast = await c.subscribe(bufferLimit: 1000)
        for i in 0..<10 { try await run(c, .scroll(tab: nil, offset: Double(i))) }
        #expect(slow.lagged)
        var received = 0
        for await _ in slow.batches { received += 1 }
        #expect(received == 4, "it keeps what it had buffered, then its stream ends")
        #expect(!fast.lagged)
    }
}

@Suite struct TabBarTests {
    @Test func removingTheSelectedTabSelectsTheOneThatTookItsPlaceElseTheOneBefore() {
        #expect(TabBar(order: ["a", "b", "c"], selected: "b").successor(ofRemoved: "b") == "c")
        #expect(TabBar(order: ["a", "b", "c"], selected: "c").successor(ofRemoved: "c") == "b")
        #expect(TabBar(order: ["a", "b", "c"], selected: "a").successor(ofRemoved: "c") == nil, "not selected: the selection stays")
    }

    @Test func theBarChangesOnlyByEventsThatFitIt() throws {
        var bar = TabBar(order: ["a", "b", "c"], selected: "b")
        try bar.apply(.tabRemoved(tab: "b"))
        #expect(bar == TabBar(unchecked: ["a", "c"], selected: "b"), "the selection names the removed tab until the batch's `selected`")
        try bar.apply(.selected(from: "b", to: "c"))
        #expect(bar == TabBar(order: ["a", "c"], selected: "c"))
        try bar.apply(.tabMoved(tab: "c", index: 0))
        #expect(bar == TabBar(order: ["c", "a"], selected: "c"))
        let before = bar
        #expect(throws: FoldError.self) { try bar.apply(.selected(from: "a", to: "c")) }
        #expect(throws: FoldError.self) { try bar.apply(.tabMoved(tab: "zz", index: 0)) }
        #expect(throws: FoldError.self) { try bar.apply(.tabMoved(tab: "a", index: 2)) }
        #expect(bar == before, "a refused event changes nothing")
        try bar.apply(.tabRemoved(tab: "a"))
        #expect(throws: FoldError.self) { try bar.apply(.tabRemoved(tab: "c")) }
    }

    @Test func insertionIndexDefaultsToTheEnd() throws {
        let bar = TabBar(order: ["a", "b"], selected: "a")
        #expect(try bar.insertionIndex(for: "c", at: nil) == 2)
        #expect(throws: CommandError.self) { try bar.insertionIndex(for: "a", at: nil) }
    }
}

@Suite struct TabsFileTests {
    @Test func loadsAListAndNormalizesColors() throws {
        let path = "/tmp/tabd-tabs-\(UInt32.random(in: 0...UInt32.max)).json"
        let text = ##"[{"id":"inbox","title":"Inbox","icon":"envelope","color":"#ff9500","badge":"3"},{"id":"me","title":"Me","icon":"person","color":"#5856D6"}]"##
        try text.write(toFile: path)
        let tabs = try TabInfo.load(contentsOf: path)
        #expect(tabs == [TabInfo(id: "inbox", title: "Inbox", icon: "envelope", color: "#FF9500", badge: "3"),
                         TabInfo(id: "me", title: "Me", icon: "person", color: "#5856D6")])
    }

    @Test func aBadTabIsNamedInTheError() throws {
        let path = "/tmp/tabd-tabs-\(UInt32.random(in: 0...UInt32.max)).json"
        try ##"{"tabs":[{"id":"ok","title":"Ok","icon":"star","color":"#000000"},{"id":"Bad!","title":"B","icon":"star","color":"#000000"}]}"##.write(toFile: path)
        do {
            _ = try TabInfo.load(contentsOf: path)
            Issue.record("accepted")
        } catch {
            #expect(error.message.contains("tab 2"))
        }
    }
}
