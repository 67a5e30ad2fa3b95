import Conformance
import Locking
import Testing
@testable import Coordinator
@testable import TabdProtocol

/// Presence in big rooms: a listed room past `--presence-limit` counts its clients
/// (`presenceCounted`, `clientCount`), reserves ids in blocks, is listed again when it
/// empties, and pages through who is there with `clients`. Time is passed in (`now`).
@Suite struct CountedPresenceTests {
    let t0 = ContinuousClock.now

    /// A room whose limit is `limit`, recording every batch it publishes.
    func room(limit: Int, interval: Duration = .seconds(1)) throws -> (Coordinator, Locked<[EventBatch]>) {
        let c = try Coordinator(configuration: .init(presenceLimit: limit, presenceInterval: interval))
        return (c, Locked([]))
    }

    func record(_ c: Coordinator, into batches: Locked<[EventBatch]>) async {
        await c.addObserver { b in batches.withLock { $0.append(b) } }
    }

    func joins(_ n: Int, _ prefix: String = "v") -> [Coordinator.JoinRequest] { (0..<n).map { .init(name: "\(prefix)\($0)") } }

    @Test func theJoinThatCrossesTheLimitIsReplacedByPresenceCounted() async throws {
        let (c, batches) = try room(limit: 3)
        _ = try await c.presence(joining: joins(2), now: t0)
        await record(c, into: batches)
        let welcomes = try await c.presence(joining: joins(3, "w"), now: t0)
        let events = batches.withLock { $0 }.flatMap(\.events).map(\.event)
        #expect(events == [
            .clientJoined(ClientInfo(id: "c3", name: "w0")),
            .clientIdsReserved(node: nil, from: 4, count: Coordinator.idBlock),
            .presenceCounted(count: 5, nodes: nil),
        ])
        #expect(welcomes.map(\.client.id) == ["c3", "c4", "c5"])
        let s = await c.snapshot()
        #expect(s.presence == .counted && s.clients.isEmpty && s.clientCount == 5)
        #expect(welcomes.allSatisfy { $0.snapshot == s })
    }

    @Test func aRoomThatStaysWithinTheLimitListsEveryJoinAndLeaveAsBefore() async throws {
        let (c, batches) = try room(limit: 100)
        await record(c, into: batches)
        let w = try await c.presence(joining: joins(100), now: t0)
        _ = try await c.presence(joining: [], leaving: [w[0].client.id], now: t0)
        let kinds = batches.withLock { $0 }.map { $0.events.map(\.event.kind) }
        #expect(kinds == [Array(repeating: "clientJoined", count: 100), ["clientLeft"]])
        let s = await c.snapshot()
        #expect(s.presence == .listed && s.clients.count == 99 && s.clientCount == 99)
    }

    @Test func countsAreReportedAtMostOncePerIntervalAndNetOfJoinsAndLeaves() async throws {
        let (c, batches) = try room(limit: 1)
        _ = try await c.presence(joining: joins(2), now: t0) // crosses: reported at t0
        await record(c, into: batches)
        let a = try await c.presence(joining: joins(1, "a"), now: t0 + .milliseconds(100))
        #expect(batches.withLock { $0 }.isEmpty, "within the interval: no event")
        #expect(await c.presenceReportDue == t0 + .seconds(1))
        _ = try await c.presence(joining: joins(2, "b"), leaving: [a[0].client.id], now: t0 + .milliseconds(200))
        try await c.reportPresence(now: t0 + .seconds(1))
        #expect(batches.withLock { $0 }.map { $0.events.map(\.event) } == [[.clientCount(node: nil, count: 4)]])
        #expect(await c.presenceReportDue == nil)
        // A join and a leave that cancel out change nothing to report.
        let d = try await c.presence(joining: joins(1, "d"), now: t0 + .milliseconds(1100))
        _ = try await c.presence(joining: [], leaving: [d[0].client.id], now: t0 + .milliseconds(1200))
        try await c.reportPresence(now: t0 + .seconds(3))
        #expect(batches.withLock { $0 }.count == 1)
        // After a quiet interval, a change is reported in its own batch at once.
        _ = try await c.presence(joining: joins(1, "e"), now: t0 + .seconds(5))
        #expect(batches.withLock { $0 }.last?.events.map(\.event) == [.clientCount(node: nil, count: 5)])
    }

    @Test func aCountedRoomThatEmptiesIsListedAgainAtOnceAndIdsAreNeverReused() async throws {
        let (c, batches) = try room(limit: 2)
        let w = try await c.presence(joining: joins(4), now: t0)
        await record(c, into: batches)
        _ = try await c.presence(joining: [], leaving: w.prefix(3).map(\.client.id), now: t0 + .milliseconds(1))
        #expect(batches.withLock { $0 }.isEmpty)
        _ = try await c.presence(joining: [], leaving: [w[3].client.id], now: t0 + .milliseconds(2))
        #expect(batches.withLock { $0 }.last?.events.map(\.event) == [.presenceListed(node: nil, clients: [])])
        let again = try await c.presence(joining: joins(1, "x"), now: t0 + .milliseconds(3))
        let past = 3 + Coordinator.idBlock // c3… was the reserved block
        #expect(again[0].client.id == "c\(past)")
        #expect(batches.withLock { $0 }.last?.events.map(\.event) == [.clientJoined(ClientInfo(id: "c\(past)", name: "x0"))])
        let s = await c.snapshot()
        #expect(s.presence == .listed && s.clients.map(\.id) == ["c\(past)"])
    }

    @Test func aBlockRunsOutAndAnotherIsReserved() async throws {
        let (c, batches) = try room(limit: 1)
        _ = try await c.presence(joining: joins(Coordinator.idBlock + 1), now: t0) // c1 listed, block c2…
        await record(c, into: batches)
        let w = try await c.presence(joining: joins(2, "n"), now: t0 + .milliseconds(1))
        #expect(Set(w.map(\.client.id)).count == 2)
        let reserved = batches.withLock { $0 }.flatMap(\.events).compactMap { e -> Int? in
            if case let .clientIdsReserved(_, from, _) = e.event { from } else { nil }
        }
        #expect(reserved == [2 + Coordinator.idBlock])
        #expect(w.map(\.client.id) == ["c\(Coordinator.idBlock + 2)", "c\(Coordinator.idBlock + 3)"])
    }

    @Test func clientsPagesThroughEveryConnectedClientOnceInJoinOrder() async throws {
        let (c, _) = try room(limit: 5)
        let w = try await c.presence(joining: joins(250), now: t0)
        _ = try await c.presence(joining: [], leaving: [w[99].client.id, w[100].client.id], now: t0)
        var seen: [ClientID] = []
        var after: ClientID?
        repeat {
            guard case let .clients(page) = try await c.execute(.clients(after: after, limit: 99)) else { Issue.record("no page"); return }
            seen += page.clients.map(\.id)
            after = page.next
        } while after != nil
        let expected = w.map(\.client.id).filter { $0 != w[99].client.id && $0 != w[100].client.id }
        #expect(seen == expected)
        // A cursor of a client that left still works.
        guard case let .clients(page) = try await c.execute(.clients(after: w[99].client.id, limit: 2)) else { return }
        #expect(page.clients.map(\.id) == [w[101].client.id, w[102].client.id])
        #expect(page.next == w[102].client.id)
        guard case let .clients(last) = try await c.execute(.clients(after: w[248].client.id, limit: 5)) else { return }
        #expect(last.clients.map(\.id) == [w[249].client.id] && last.next == nil)
    }

    @Test(arguments: [Command.clients(after: nil, limit: 0), .clients(after: nil, limit: 1001), .clients(after: "p3", limit: nil),
                      .clients(after: "c", limit: nil), .clients(after: "c-1", limit: nil)])
    func clientsRefusesABadLimitOrCursor(command: Command) async throws {
        let (c, _) = try room(limit: 5)
        await expectRefused(c, command, .invalid)
    }

    @Test func replayingTheStreamAcrossBothSwitchesGivesTheSnapshot() async throws {
        let (c, batches) = try room(limit: 3)
        let start = await c.snapshot()
        await record(c, into: batches)
        var now = t0
        var connected: [ClientID] = []
        var rng = SeededRandom(seed: 23)
        for step in 0..<400 {
            now += .milliseconds(Int.random(in: 0..<400, using: &rng))
            switch Int.random(in: 0..<4, using: &rng) {
            case 0, 1: connected += try await c.presence(joining: joins(Int.random(in: 1...4, using: &rng)), now: now).map(\.client.id)
            case 2 where !connected.isEmpty:
                let n = Int.random(in: 1...min(6, connected.count), using: &rng)
                let gone = (0..<n).map { _ in connected.remove(at: Int.random(in: 0..<connected.count, using: &rng)) }
                _ = try await c.presence(joining: [], leaving: gone, now: now)
            default:
                if step % 3 == 0 { _ = try await c.execute(.push(tab: nil, route: "r\(step)")) }
                try await c.reportPresence(now: now)
            }
        }
        // Everyone leaves (listed again), and two come back.
        _ = try await c.presence(joining: [], leaving: connected, now: now)
        connected = try await c.presence(joining: joins(2), now: now).map(\.client.id)
        var folded = start
        for b in batches.withLock({ $0 }) { try folded.apply(b) }
        #expect(folded == (await c.snapshot()))
        let kinds = Set(batches.withLock { $0 }.flatMap { $0.events.map(\.event.kind) })
        #expect(kinds.isSuperset(of: ["clientJoined", "clientLeft", "presenceCounted", "clientCount", "presenceListed", "clientIdsReserved"]))
        #expect((await c.snapshot()).clients.map(\.id) == connected)
    }

    /// A cluster's race: node a's join waited, counted, for a's report, and node b listed
    /// the room again meanwhile (its count of a's clients was 0). a lists its client again.
    @Test func clientsConnectedHereThatAListedRoomDoesNotListAreListedAgain() {
        let rules = PresenceRules(limit: 3, interval: .seconds(1), node: "a", block: 1000)
        var members = Members()
        for n in [5, 6] { members.add(ClientInfo(id: "c\(n)", name: "m\(n)")) }
        let state = PresenceRules.State(roster: Roster(clients: [ClientInfo(id: "c1", name: "b's")]), members: members,
                                        nextClient: 1005, reserved: 7..<1005, lastReport: t0, owner: { $0 == "c1" ? "b" : nil })
        #expect(rules.reportDue(roster: state.roster, members: members, lastReport: t0) != nil)
        // Listed again, then a new join that does not fit: a's share counts all three of its own.
        let d = rules.decide(state, joining: [.init(name: "new")], leaving: [], now: t0)
        #expect(d.events == [
            .clientJoined(ClientInfo(id: "c5", name: "m5")), .clientJoined(ClientInfo(id: "c6", name: "m6")),
            .clientIdsReserved(node: "a", from: 1005, count: 1000),
            .presenceCounted(count: 4, nodes: ["a": 3, "b": 1]),
        ])
        #expect(d.joined == [ClientInfo(id: "c1005", name: "new")])
        // Without joins, the two are listed and nothing else happens.
        #expect(rules.decide(state, joining: [], leaving: [], now: t0).events
            == [.clientJoined(ClientInfo(id: "c5", name: "m5")), .clientJoined(ClientInfo(id: "c6", name: "m6"))])
        // Once listed, nothing is due.
        let listed = Roster(clients: [ClientInfo(id: "c1", name: "b's"), ClientInfo(id: "c5", name: "m5"), ClientInfo(id: "c6", name: "m6")])
        #expect(rules.reportDue(roster: listed, members: members, lastReport: t0) == nil)
    }

    @Test func aStoppingNodeReportsItsCountAtOnceWhateverTheInterval() async throws {
        let (c, batches) = try room(limit: 1, interval: .seconds(3600))
        let w = try await c.presence(joining: joins(3), now: t0)
        await record(c, into: batches)
        _ = try await c.presence(joining: [], leaving: [w[2].client.id], now: t0 + .seconds(1))
        #expect(batches.withLock { $0 }.isEmpty)
        try await c.reportPresence(immediately: true, now: t0 + .seconds(2))
        #expect(batches.withLock { $0 }.map { $0.events.map(\.event) } == [[.clientCount(node: nil, count: 2)]])
    }

    @Test func theFoldRefusesPresenceEventsThatDoNotFitTheMode() throws {
        var listed = Roster()
        #expect(throws: FoldError.self) { try listed.apply(.clientCount(node: nil, count: 3)) }
        #expect(throws: FoldError.self) { try listed.apply(.presenceListed(node: nil, clients: [])) }
        #expect(throws: FoldError.self) { try listed.apply(.presenceCounted(count: 3, nodes: ["a": 1, "b": 1])) }
        #expect(throws: FoldError.self) { try listed.apply(.clientIdsReserved(node: nil, from: 0, count: 5)) }
        #expect(listed == Roster())
        var counted = Roster(mode: .counted, count: 7)
        #expect(throws: FoldError.self) { try counted.apply(.clientJoined(ClientInfo(id: "c9", name: "x"))) }
        #expect(throws: FoldError.self) { try counted.apply(.clientLeft("c9")) }
        #expect(throws: FoldError.self) { try counted.apply(.presenceCounted(count: 3, nodes: nil)) }
        #expect(throws: FoldError.self) { try counted.apply(.clientCount(node: "a", count: 3)) }
        #expect(counted == Roster(mode: .counted, count: 7))
        var byNode = Roster(mode: .counted, count: 5, nodes: ["a": 2, "b": 3])
        #expect(throws: FoldError.self) { try byNode.apply(.clientCount(node: nil, count: 3)) }
        try byNode.apply(.clientCount(node: "b", count: 10))
        #expect(byNode.count == 12 && byNode.nodes == ["a": 2, "b": 10])
        try byNode.apply(.presenceListed(node: "a", clients: []))
        #expect(byNode == Roster())
    }

    @Test func aCountedSnapshotRoundTripsOnTheWireAndAnOlderOneReadsAsListed() throws {
        let s = Snapshot(seq: 9, selected: "home", scrollToTop: 0, tabs: [TabState(info: TabInfo.defaults[0], rootPage: "p1")],
                         clients: [], clientCount: 16_000, presence: .counted, nodes: ["n1": 9_000, "n2": 7_000])
        #expect(try Snapshot(json: s.json) == s)
        #expect(s.json.compactString.contains(#""presence":"counted","clientCount":16000,"clients":[],"nodes":{"n1":9000,"n2":7000}"#))
        var old = s.json(capped: false)
        guard case var .object(members) = old else { return }
        members.removeAll { $0.0 == "presence" || $0.0 == "nodes" }
        members = members.map { $0.0 == "clientCount" ? ("clientCount", .int(0)) : $0 }
        old = .object(members)
        #expect(try Snapshot(json: old).presence == .listed)
        var bad = s
        bad.clientCount = 1
        #expect(throws: WireError.self) { try Snapshot(json: bad.json) }
    }
}
