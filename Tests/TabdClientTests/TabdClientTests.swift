import Conformance
import Locking
import Foundation
import TabdClient
import TabdLoad
import Testing

/// TabdClient against real tabd processes over real sockets.
@Suite(.serialized)
struct TabdClientTests {
    @Test func connectsWithTheRoomsStateAndTypedCommandsReturnTheirAckSeq() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let client = try await TabdClient.connect(url: tabd.url, room: "kiosk", name: "swift")
        let session = await client.session
        #expect(session.room == "kiosk")
        #expect(session.role == "control")
        #expect(await client.connection == .connected)
        let start = await client.state
        #expect(start.tabs.map(\.id) == ["home", "favorites", "profile"])
        #expect(start.clients.contains { $0.id == session.client && $0.name == "swift" })

        let pushed = try await client.push("detail", on: "home")
        var state = await client.state
        #expect(pushed == state.seq, "the ack's seq is the state's seq: the events came before the ack")
        #expect(state.tab("home")?.stack.map(\.route) == ["root", "detail"])

        let tapped = try await client.tap("profile")
        state = await client.state
        #expect(tapped == state.seq)
        #expect(tapped > pushed)
        #expect(state.selected == "profile")
        try await client.set("cart", to: .array([.int(1), .string("two")]), on: "favorites")
        try await client.scroll(to: 120.5, on: "favorites")
        try await client.addTab(TabInfo(id: "news", title: "News", icon: "newspaper", color: "#FF9500"), at: 1)
        try await client.updateTab(TabUpdate(id: "news", badge: .some("3")))
        try await client.moveTab("news", to: 3)
        try await client.removeTab("news")
        try await client.popToRoot(on: "home")
        try await client.pop()

        // The fold the client keeps is the server's: its state equals a fresh snapshot.
        let fresh = try await client.sync()
        #expect(await client.state == fresh)
        #expect(fresh.tab("favorites")?.values["cart"] == .array([.int(1), .string("two")]))
        #expect(fresh.tab("favorites")?.scroll == 120.5)
        let rtt = try await client.ping()
        #expect(rtt < .seconds(10))
        await client.close()
    }

    @Test func refusedCommandsThrowTheProtocolsCodeAndChangeNothing() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let client = try await TabdClient.connect(url: tabd.url)
        let before = await client.state
        let unknown = await outcome { () async throws -> Int in try await client.tap("nope") }
        #expect(unknown == .refused(.unknownTab("nope")))
        do {
            try await client.push(String(repeating: "r", count: 10_000))
            Issue.record("a route over the limit was accepted")
        } catch let error as TabdClientError {
            #expect(error.code == .invalid)
        }
        #expect(await client.state == before)
        try await client.removeTab("home")
        try await client.removeTab("favorites")
        let oneTab = await client.state
        let last = await outcome { () async throws -> Int in try await client.removeTab("profile") }
        #expect(last?.code == .invalid, "the only tab cannot be removed")
        let after = await client.state
        #expect(after == oneTab)
        #expect(after.tabs.map(\.id) == ["profile"])
        let fresh = try await client.sync()
        #expect(fresh == after)
        await client.close()
    }

    @Test func aSecondClientFollowsEveryCommandByTheSameFold() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let writer = try await TabdClient.connect(url: tabd.url, name: "writer")
        let reader = try await TabdClient.connect(url: tabd.url, name: "reader")
        var rng = SeededRandom(seed: 7)
        var last = 0
        for _ in 0..<300 {
            let command = randomCommand(&rng)
            do {
                last = max(last, try await writer.perform(command))
            } catch {
                // refusals (unknown_tab, invalid) are part of a random run; nothing else is
                #expect((error as? TabdClientError)?.code != nil, "\(error)")
            }
        }
        try await waitForSeq(reader, last)
        let (readerState, writerState) = (await reader.state, await writer.state)
        #expect(readerState == writerState)
        let fresh = try await reader.sync()
        #expect(readerState == fresh)
        await writer.close()
        await reader.close()
    }

    @Test func aRestartOfTabdMidStreamIsResumedWithNothingMissed() async throws {
        let statePath = NSTemporaryDirectory() + "tabd-client-restart-\(getpid()).sqlite"
        let first = try TabdProcess([], statePath: statePath)
        let port = first.port
        let logged = Locked<[TabdClient.LogRecord]>([])
        let client = try await TabdClient.connect(url: first.url, name: "survivor",
                                                  options: .init(initialBackoff: .milliseconds(50), maxBackoff: .milliseconds(500),
                                                                 log: { record in logged.withLock { $0.append(record) } }))
        let watcher = try await TabdClient.connect(url: first.url, name: "watcher",
                                                   options: .init(initialBackoff: .milliseconds(50), maxBackoff: .milliseconds(500)))
        let updates = await client.updates()
        let watcherUpdates = await watcher.updates()
        try await client.push("a", on: "home")
        try await client.tap("favorites")
        let ids = (await client.session).client

        // SIGTERM: tabd closes every client with 1001; the client reconnects.
        first.stop(signal: SIGTERM)
        var seen = try await waitFor(updates, "the drop") { $0.isDisconnected }
        // Commands issued while tabd is down wait for the new connection.
        async let pushedWhileDown = client.push("b", on: "favorites")
        let second = try TabdProcess([], port: port, statePath: statePath)
        defer {
            second.stop()
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: statePath + suffix) }
        }
        seen += try await waitFor(updates, "a resumed welcome") { $0.isResumedWelcome }
        let codes = seen.compactMap(\.closeCode)
        #expect(codes == [1001])
        let reconnects = seen.filter(\.isReconnecting).count
        #expect(reconnects >= 1)
        let seq = try await pushedWhileDown
        #expect((await client.session).client != ids, "a reconnect is a new client")
        #expect((await client.state).tab("favorites")?.stack.map(\.route) == ["root", "b"])

        // SIGKILL: the connection drops without a close frame; same again.
        let third: TabdProcess
        do {
            second.stop(signal: SIGKILL)
            third = try TabdProcess([], port: port, statePath: statePath)
        }
        defer { third.stop() }
        try await waitFor(updates, "a second resumed welcome") { $0.isResumedWelcome }
        let after = try await client.tap("favorites")
        #expect(after > seq)
        // The watcher's backoff is its own: it may come back after the client (even skip
        // the second tabd), and its join moves the seq. It is on the third tabd once the
        // third's roster lists its connection (a starting tabd drops the old ones).
        // Until then each look is followed by the watcher's next update.
        let fresh = try await within(20, "the watcher on the third tabd") {
            var iterator = watcherUpdates.makeAsyncIterator()
            while true {
                let snapshot = try await client.sync()
                let id = (await watcher.session).client
                if await watcher.connection == .connected, snapshot.clients.contains(where: { $0.id == id }) { return snapshot }
                guard await iterator.next() != nil else { throw TimedOut(description: "the watcher's updates ended") }
            }
        }
        try await waitForSeq(watcher, fresh.seq)
        #expect(withoutPresence(await client.state) == withoutPresence(fresh))
        #expect(withoutPresence(await watcher.state) == withoutPresence(fresh))
        #expect(await client.state == fresh, "presence too: clientLeft of the old connections, clientJoined of the new")
        await client.close()
        await watcher.close()
        // The app's logger heard each connection, the drops with their codes, the reconnects and the close.
        let lines = logged.withLock { $0 }
        #expect(lines.allSatisfy { $0.room == "main" })
        #expect(lines.filter { $0.message.hasPrefix("connecting to ws") }.count >= 3)
        #expect(lines.contains { $0.level == .warn && $0.code == 1001 }, "the SIGTERM's 1001")
        #expect(lines.contains { $0.message.hasPrefix("reconnecting in") })
        #expect(lines.last?.message == "closed")
    }

    @Test func aDeletedRoomClosesTheClientForGood() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let client = try await TabdClient.connect(url: tabd.url, room: "doomed")
        let updates = await client.updates()
        let api = try TabdAPI(url: tabd.url)
        #expect(try await api.allRooms().map(\.id).contains("doomed"))
        try await api.deleteRoom("doomed")
        let seen = try await waitFor(updates, "closed") { $0.isClosed }
        guard case let .closed(error) = seen.last else { return }
        #expect(error == .closed(code: 4404, reason: "room deleted"))
        #expect(await client.connection == .closed(error))
        let later = await outcome { () async throws -> Int in try await client.tap("home") }
        #expect(later == error)
        await client.close()
    }

    @Test func connectingFailsWithTheReason() async throws {
        let tabd = try TabdProcess(["--rooms", "api"])
        defer { tabd.stop() }
        #expect(await connectError(tabd.url, room: "nowhere") == .status(404))
        #expect(await connectError(tabd.url, room: "not a room id") == .status(400))
        #expect(await connectError("ws://127.0.0.1:1") == .unreachable)
        for url in ["ftp://127.0.0.1:8080", "127.0.0.1:8080", "ws://", "wss://", "https://host:99999", "ws://host:99999"] {
            #expect(await connectError(url) == .invalidURL, "\(url)")
        }
    }

    @Test func rolesAndTokens() async throws {
        let keys = try Keys()
        defer { keys.remove() }
        let tabd = try TabdProcess(["--auth-secret-file", keys.secretFile])
        defer { tabd.stop() }
        #expect(await connectError(tabd.url, room: "r") == .status(401))
        #expect(await connectError(tabd.url, room: "other", token: try keys.token(room: "r", role: "control")) == .status(403))
        let viewer = try await TabdClient.connect(url: tabd.url, room: "r", token: try keys.token(room: "r", role: "view"))
        #expect(await viewer.session.role == "view")
        do {
            try await viewer.tap("home")
            Issue.record("a view client's tap was accepted")
        } catch let error as TabdClientError {
            #expect(error.code == .forbidden)
        }
        #expect(try await viewer.sync().seq == (await viewer.state).seq)
        let controller = try await TabdClient.connect(url: tabd.url, room: "r", token: try keys.token(room: "r", role: "control"))
        let seq = try await controller.tap("profile")
        try await waitForSeq(viewer, seq)
        #expect(await viewer.state.selected == "profile")
        await viewer.close()
        await controller.close()
    }
}

enum ConnectOutcome: Equatable {
    case connected, status(Int), unreachable, invalidURL, other(String)
}

/// How `TabdClient.connect` ended, by kind.
func connectError(_ url: String, room: String? = nil, token: String? = nil) async -> ConnectOutcome {
    do {
        let client = try await TabdClient.connect(url: url, room: room, token: token)
        await client.close()
        return .connected
    } catch {
        switch error {
        case let .connectFailed(status?, _): return .status(status)
        case .connectFailed(nil, _): return .unreachable
        case .invalidURL: return .invalidURL
        default: return .other(error.description)
        }
    }
}

/// The error `body` threw (nil when it returned).
/// (A cancellation is not a TabdClientError: it fails the test.)
func outcome(_ body: () async throws -> Int) async -> TabdClientError? {
    do {
        _ = try await body()
        return nil
    } catch let error as TabdClientError {
        return error
    } catch {
        Issue.record("not a TabdClientError: \(error)")
        return nil
    }
}
