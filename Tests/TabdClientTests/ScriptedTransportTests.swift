import Foundation
import Locking
import TabdClient
import TabdObservation
import Testing

/// A transport whose connections the test plays the server of: it sees every URL opened and
/// every frame sent, and says what the server answers. For what a real tabd never does on
/// purpose: gaps, unreadable frames, answers to nothing.
final class ScriptedTransport: TabdTransport {
    final class Connection: TabdConnection {
        let url: String
        /// The handshake's `Authorization` header.
        let authorization: String?
        let events: AsyncStream<TransportEvent>
        let server: AsyncStream<TransportEvent>.Continuation
        private let sent = Locked<[JSONValue]>([])
        private let closedWith = Locked<UInt16?>(nil)
        private let arrivals: AsyncStream<JSONValue>.Continuation
        let frames: AsyncStream<JSONValue>

        init(url: String, authorization: String?) {
            self.url = url
            self.authorization = authorization
            (events, server) = AsyncStream.makeStream(of: TransportEvent.self)
            (frames, arrivals) = AsyncStream.makeStream(of: JSONValue.self)
        }

        func send(_ text: [UInt8]) {
            let json = (try? JSONParser.parse(text)) ?? .null
            sent.withLock { $0.append(json) }
            if !welcomed.withLock({ $0 }) { early.withLock { $0 += 1 } }
            arrivals.yield(json)
        }

        private let welcomed = Locked(false)
        private let early = Locked(0)
        /// Frames the client sent before this connection's welcome (there must be none).
        var sentBeforeWelcome: Int { early.withLock { $0 } }

        func close(code: UInt16, reason: String) {
            closedWith.withLock { $0 = code }
            server.yield(.closed(TransportClose(code: code, reason: reason, wasOpen: true)))
            server.finish()
        }

        var closeCode: UInt16? { closedWith.withLock { $0 } }
        var sentCount: Int { sent.withLock { $0.count } }

        /// The server's side: one frame.
        func reply(_ text: String) {
            if text.hasPrefix(#"{"type":"welcome""#) { welcomed.withLock { $0 = true } }
            server.yield(.message(Array(text.utf8)))
        }

        func drop() {
            server.yield(.closed(TransportClose(code: nil, reason: "dropped", wasOpen: true)))
            server.finish()
        }

        /// Waits for the next frame the client sends.
        func nextFrame() async throws -> JSONValue {
            try await within(10, "a frame from the client") { [frames] in
                for await frame in frames { return frame }
                throw TimedOut(description: "no more frames")
            }
        }
    }

    private let opened = Locked<[Connection]>([])
    private let openings: AsyncStream<Connection>.Continuation
    private let openingStream: AsyncStream<Connection>

    init() { (openingStream, openings) = AsyncStream.makeStream(of: Connection.self) }

    func open(_ url: String) -> any TabdConnection { open(url, authorization: nil) }

    func open(_ url: String, authorization: String?) -> any TabdConnection {
        let c = Connection(url: url, authorization: authorization)
        opened.withLock { $0.append(c) }
        c.server.yield(.opened)
        openings.yield(c)
        return c
    }

    func shutdown() async {}

    /// How many connections the client opened.
    var connectionsOpened: Int { opened.withLock { $0.count } }

    /// Waits for the client to open its next connection.
    func nextConnection() async throws -> Connection {
        try await within(10, "a connection") { [openingStream] in
            for await c in openingStream { return c }
            throw TimedOut(description: "no more connections")
        }
    }
}

/// The frames of a small room: tabs home and profile, home selected.
enum Frames {
    static func snapshot(seq: Int, count: Int = 0) -> Snapshot {
        func tab(_ id: String, page: String, appeared: Bool) -> TabState {
            TabState(info: TabInfo(id: id, title: id, icon: "house", color: "#FF3B30"),
                     stack: [Page(id: page, route: "root", appeared: appeared, appearCount: appeared ? 1 : 0)])
        }
        return Snapshot(seq: seq, selected: "home", scrollToTop: count,
                        tabs: [tab("home", page: "p1", appeared: true), tab("profile", page: "p2", appeared: false)], clients: [])
    }

    static func welcome(client: String = "c1", epoch: String = "e1", seq: Int) -> String {
        JSONValue.object([
            ("type", .string("welcome")), ("protocol", .int(1)), ("server", .string("tabd 0.1.0")), ("client", .string(client)),
            ("room", .string("main")), ("role", .string("control")), ("epoch", .string(epoch)), ("resumed", .bool(false)),
            ("snapshot", snapshot(seq: seq).json),
        ]).compactString
    }

    static func resumed(client: String, epoch: String = "e1") -> String {
        JSONValue.object([
            ("type", .string("welcome")), ("protocol", .int(1)), ("server", .string("tabd 0.1.0")), ("client", .string(client)),
            ("room", .string("main")), ("role", .string("control")), ("epoch", .string(epoch)), ("resumed", .bool(true)),
        ]).compactString
    }

    static func snapshotAnswer(ref: String, seq: Int, count: Int) -> String {
        ServerFrame.snapshot(ref: ref, snapshot(seq: seq, count: count)).json.compactString
    }

    /// `scrollToTop` on home: the scroll-to-top counter goes to `count`.
    static func scrollToTop(seq: Int, count: Int) -> String {
        ServerFrame.events(EventBatch(by: "c9", ref: nil, events: [SequencedEvent(seq: seq, event: .scrollToTop(tab: "home", count: count))]))
            .json.compactString
    }
}

@Suite(.serialized)
struct ScriptedTransportTests {
    func connect(_ transport: ScriptedTransport, welcome: String = Frames.welcome(seq: 5),
                 backoff: Duration = .milliseconds(1)) async throws -> (TabdClient, ScriptedTransport.Connection) {
        async let client = TabdClient.connect(url: "http://example.test:8080/", room: "main", token: "t.o+k", name: "a b",
                                              options: .init(initialBackoff: backoff, maxBackoff: backoff, transport: transport))
        let connection = try await transport.nextConnection()
        connection.reply(welcome)
        return (try await client, connection)
    }

    @Test func theURLCarriesRoomAndNameEncodedTheTokenGoesInAuthorizationAndAReconnectResumesFromTheLastSeq() async throws {
        let transport = ScriptedTransport()
        let (client, first) = try await connect(transport)
        #expect(first.url == "ws://example.test:8080/ws?room=main&name=a%20b", "no token in the URL: proxies log URLs")
        #expect(first.authorization == "Bearer t.o+k")
        first.reply(Frames.scrollToTop(seq: 6, count: 1))
        try await waitForSeq(client, 6)
        first.drop()
        let second = try await transport.nextConnection()
        #expect(second.url == "ws://example.test:8080/ws?room=main&name=a%20b&resume=6&epoch=e1")
        #expect(second.authorization == "Bearer t.o+k")
        await client.close()
    }

    @Test func aBatchThatDoesNotFollowOnIsNotFoldedTheClientAsksForASnapshot() async throws {
        let transport = ScriptedTransport()
        let (client, server) = try await connect(transport)
        let updates = await client.updates()
        server.reply(Frames.scrollToTop(seq: 8, count: 3)) // seq 6 and 7 are missing
        let sync = try await server.nextFrame()
        #expect(sync["type"]?.stringValue == "sync")
        #expect(await client.state.seq == 5, "the gap was not folded")
        server.reply(Frames.scrollToTop(seq: 9, count: 4)) // still not foldable: skipped while the snapshot is due
        server.reply(Frames.snapshotAnswer(ref: sync["ref"]!.stringValue!, seq: 9, count: 4))
        server.reply(Frames.scrollToTop(seq: 10, count: 5))
        try await waitFor(updates, "seq 10") { if case let .events(b) = $0 { b.lastSeq == 10 } else { false } }
        let state = await client.state
        #expect(state.seq == 10 && state.scrollToTop == 5)
        #expect(server.sentCount == 1, "one sync, however many batches did not fold while it was due")
        await client.close()
    }

    @Test func anAnswerToNoCommandDropsTheConnectionAndTheReconnectStartsFromASnapshot() async throws {
        let transport = ScriptedTransport()
        let (client, first) = try await connect(transport)
        first.reply(#"{"type":"ack","ref":"7","seq":5}"#)
        let second = try await transport.nextConnection()
        #expect(first.closeCode == 1002)
        #expect(!second.url.contains("resume="), "a client whose stream broke does not resume")
        second.reply(Frames.welcome(client: "c2", epoch: "e1", seq: 12))
        try await waitForSeq(client, 12)
        #expect(await client.session.client == "c2")
        await client.close()
    }

    @Test func anUnknownFrameTypeIsIgnored() async throws {
        let transport = ScriptedTransport()
        let (client, server) = try await connect(transport)
        server.reply(#"{"type":"notice","text":"from a newer tabd"}"#)
        server.reply(Frames.scrollToTop(seq: 6, count: 1))
        try await waitForSeq(client, 6)
        #expect(await client.connection == .connected)
        await client.close()
    }

    @Test func aCommandInFlightAtADropFailsAndOneIssuedWhileDownWaitsForTheNextWelcome() async throws {
        let transport = ScriptedTransport()
        // A reconnect waits 300 ms: the command below reaches the client long before the
        // new connection exists, let alone its welcome.
        let (client, first) = try await connect(transport, backoff: .milliseconds(300))
        let updates = await client.updates()
        async let lost = outcome { () async throws -> Int in try await client.tap("home") }
        _ = try await first.nextFrame()
        first.drop()
        #expect(await lost == .connectionLost)
        // The drop was seen (the command above failed); a command now waits for a welcome.
        async let later = client.tap("profile")
        let second = try await transport.nextConnection()
        second.reply(Frames.resumed(client: "c2"))
        // First the catch-up ping (the missed batches come before its pong), then the command.
        let ping = try await second.nextFrame()
        #expect(ping["type"]?.stringValue == "ping")
        let tap = try await second.nextFrame()
        #expect(tap["type"]?.stringValue == "tap" && tap["tab"]?.stringValue == "profile")
        #expect(second.sentBeforeWelcome == 0, "a command waits for the welcome of the new connection")
        second.reply(ServerFrame.pong(ref: ping["ref"]!.stringValue!).json.compactString)
        second.reply(ServerFrame.ack(ref: tap["ref"]!.stringValue!, seq: 5).json.compactString)
        #expect(try await later == 5)
        let seen = try await waitFor(updates, "caught up") { $0 == .caughtUp }
        #expect(seen.contains { $0.isDisconnected } && seen.contains { $0.isResumedWelcome })
        await client.close()
    }

    @Test func aSubscriptionMadeWhileCatchingUpHearsTheResumeAndAModelFollowingItTakesTheReplaysAsReplays() async throws {
        let transport = ScriptedTransport()
        let (client, first) = try await connect(transport)
        first.drop()
        let second = try await transport.nextConnection()
        second.reply(Frames.resumed(client: "c1"))
        let ping = try await second.nextFrame()
        #expect(ping["type"]?.stringValue == "ping", "the catch-up ping is out: the client is catching up")
        let updates = await client.updates()
        let room = await TabdRoom(following: client)
        #expect(await MainActor.run { room.connection } == .catchingUp, "the model starts as the client is: catching up")
        let scrolls = await room.scrollsToTop()
        // A replay (the missed batch), the pong, then a live batch.
        second.reply(Frames.scrollToTop(seq: 6, count: 1))
        second.reply(ServerFrame.pong(ref: ping["ref"]!.stringValue!).json.compactString)
        second.reply(Frames.scrollToTop(seq: 7, count: 2))
        let seen = try await waitFor(updates, "the live batch") { if case let .events(b) = $0 { b.lastSeq == 7 } else { false } }
        #expect(seen.prefix(2) == [.snapshot(Frames.snapshot(seq: 5)), .connected(await client.session, resumed: true)],
                "a subscription made while catching up is told the events before caughtUp are replays")
        #expect(seen.firstIndex(of: .caughtUp).map { $0 > 2 && $0 < seen.count - 1 } == true, "\(seen)")
        // The model fires its scroll-to-top stream for the live batch only.
        let fired = try await within(10, "a scroll to top fired") {
            for await s in scrolls { return s }
            throw TimedOut(description: "the stream ended")
        }
        #expect(fired.count == 2 && fired.seq == 7, "the replayed scroll to top (count 1) fired: \(fired)")
        let (connection, count) = await MainActor.run { (room.connection, room.scrollToTop) }
        #expect(connection == .live && count == 2)
        await client.close()
    }

    @Test func aWelcomeOfAnotherEpochReplacesTheState() async throws {
        let transport = ScriptedTransport()
        let (client, first) = try await connect(transport)
        first.drop()
        let second = try await transport.nextConnection()
        #expect(second.url.hasSuffix("resume=5&epoch=e1"))
        let updates = await client.updates()
        second.reply(Frames.welcome(client: "c7", epoch: "e2", seq: 2))
        let seen = try await waitFor(updates, "the new epoch") { if case let .connected(s, false) = $0 { s.epoch == "e2" } else { false } }
        _ = seen
        try await waitFor(updates, "the new state") { if case let .snapshot(s) = $0 { s.seq == 2 } else { false } }
        #expect(await client.session.epoch == "e2")
        #expect(await client.state.seq == 2)
        await client.close()
    }

    @Test func aCommandWhoseBatchDoesNotFoldReturnsOnlyOnceTheSnapshotIsIn() async throws {
        let transport = ScriptedTransport()
        let (client, server) = try await connect(transport)
        async let tapped = client.tap("home")
        let tap = try await server.nextFrame()
        let ref = tap["ref"]!.stringValue!
        // Its batch skips a seq (5 → 8): the client cannot fold it and asks for a snapshot.
        server.reply(ServerFrame.events(EventBatch(by: "c1", ref: ref, events: [SequencedEvent(seq: 8, event: .scrollToTop(tab: "home", count: 1))]))
            .json.compactString)
        let sync = try await server.nextFrame()
        #expect(sync["type"]?.stringValue == "sync")
        server.reply(ServerFrame.ack(ref: ref, seq: 8).json.compactString)
        server.reply(Frames.snapshotAnswer(ref: sync["ref"]!.stringValue!, seq: 8, count: 1))
        #expect(try await tapped == 8)
        #expect(await client.state.seq == 8, "when the command returns, state holds its events")
        await client.close()
    }

    @Test func closeDuringAReconnectReturnsAndSoDoTwoClosesAtOnce() async throws {
        let transport = ScriptedTransport()
        let (client, first) = try await connect(transport)
        first.drop()
        let second = try await transport.nextConnection() // opened, never welcomed
        async let a: Void = client.close()
        async let b: Void = client.close()
        _ = await (a, b)
        #expect(second.closeCode == 1000)
        #expect(await client.connection == .closed(.closed(code: 1000, reason: "closed by this client")))
        let after = await outcome { () async throws -> Int in try await client.tap("home") }
        #expect(after == .closed(code: 1000, reason: "closed by this client"))
    }
}
