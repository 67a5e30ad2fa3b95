import Coordinator
import Foundation
import TabdClient
import Testing
@testable import TabdServer

/// Whole daemons started in this process on port 0 (state in memory), driven over real
/// sockets by the Swift client and the HTTP API.
@Suite(.serialized) struct DaemonTests {
    /// The checkout's web page.
    static let webRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("web").path

    static func options(_ change: (inout Options) -> Void = { _ in }) -> Options {
        var o = Options()
        o.port = 0
        o.state = ":memory:"
        o.webRoot = webRoot
        o.logLevel = .warn
        change(&o)
        return o
    }

    static func start(_ change: (inout Options) -> Void = { _ in }) async throws -> Daemon {
        let o = options(change)
        return try await Daemon.start(o, log: Log(level: o.logLevel))
    }

    /// An app's logger, as a `LogHandler`: the records tabd would write, fields and all.
    final class Collector: LogHandler, @unchecked Sendable {
        private let lock = NSLock()
        private var kept: [LogRecord] = []
        func handle(_ record: LogRecord) { lock.withLock { kept.append(record) } }
        var records: [LogRecord] { lock.withLock { kept } }
    }

    @Test func anAppsLoggerGetsTabdsLinesWithTheirFields() async throws {
        let collector = Collector()
        let o = Self.options { $0.logLevel = .info }
        let daemon = try await Daemon.start(o, log: Log(level: .info, handler: collector))
        let client = try await TabdClient.connect(url: daemon.url, room: "logged", name: "app")
        let id = (await client.session).client
        await client.close()
        // Waits for the leave's line (written once the close is read), at most 10 s.
        let deadline = ContinuousClock.now + .seconds(10)
        while !collector.records.contains(where: { $0.message.contains("client \(id) left") }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        await daemon.stop()
        let welcome = try #require(collector.records.first { $0.message.contains("is client \(id)") })
        #expect(welcome.level == .info && welcome.fields.room == "logged" && welcome.fields.client == id)
        #expect(welcome.fields.connection != nil && welcome.fields.peer?.hasPrefix("127.0.0.1") == true)
        let left = try #require(collector.records.first { $0.message.contains("client \(id) left") })
        #expect(left.fields.room == "logged" && left.fields.client == id && left.fields.code == "1000")
    }

    @Test func servesClientsAndTheAPIInProcessThenStops() async throws {
        let daemon = try await Self.start()
        #expect(daemon.port > 0)
        #expect(daemon.url == "http://127.0.0.1:\(daemon.port)/")
        let client = try await TabdClient.connect(url: daemon.url, room: "kiosk", name: "in-process")
        let seq = try await client.push("detail", on: "home")
        #expect(await client.state.tab("home")?.stack.map(\.route) == ["root", "detail"])

        let api = try TabdAPI(url: daemon.url)
        let rooms = try await api.allRooms()
        #expect(rooms.map(\.id) == ["kiosk"])
        #expect(rooms.first?.clients == 1 && rooms.first?.seq == seq && rooms.first?.loaded == true)
        let (_, snapshot) = try await api.room("kiosk")
        #expect(snapshot == (await client.state))
        let tapped = try await api.perform(.tap(tab: "profile"), in: "kiosk")
        let after = try await client.sync()
        #expect(after.seq == tapped && after.selected == "profile")
        #expect(daemon.registry.counts.loaded == 1)

        await client.close()
        await daemon.stop(closeTimeout: .seconds(1))
    }

    @Test func twoDaemonsInOneProcessKeepTheirOwnRooms() async throws {
        let a = try await Self.start()
        let b = try await Self.start { $0.rooms = .api }
        #expect(a.port != b.port)
        let apiA = try TabdAPI(url: a.url), apiB = try TabdAPI(url: b.url)
        _ = try await apiB.createRoom("only-b")
        _ = try await apiA.perform(.tap(tab: "home"), in: "only-a")
        #expect(try await apiA.allRooms().map(\.id) == ["only-a"])
        #expect(try await apiB.allRooms().map(\.id) == ["only-b"])
        // --rooms api on b: a join of an unknown room is refused there, not on a.
        let refused = await TabdClient.outcomeOfConnect(url: b.url, room: "nope")
        #expect(refused?.contains("404") == true, "\(refused ?? "connected")")
        await a.stop(closeTimeout: .seconds(1))
        await b.stop(closeTimeout: .seconds(1))
    }

    @Test func startRefusalsNameWhatIsWrong() async throws {
        await #expect { try await Self.start { $0.webRoot = "/nonexistent/web" } } throws: { error in
            "\(error)".contains("/nonexistent/web")
        }
        await #expect { try await Self.start { $0.tabsFile = "/nonexistent/tabs.json" } } throws: { error in
            "\(error)".contains("/nonexistent/tabs.json")
        }
        await #expect { try await Self.start { $0.tokenFile = "/nonexistent/token" } } throws: { error in
            "\(error)".contains("/nonexistent/token")
        }
        await #expect { try await Self.start { $0.state = "/nonexistent/dir/state.sqlite" } } throws: { error in
            "\(error)".contains("/nonexistent/dir")
        }
    }
}

extension TabdClient {
    /// The error of connecting to `room` at `url`, nil if it connected (then closed).
    static func outcomeOfConnect(url: String, room: RoomID, options: TabdClient.Options = .init()) async -> String? {
        do {
            let client = try await TabdClient.connect(url: url, room: room, options: options)
            await client.close()
            return nil
        } catch {
            return "\(error)"
        }
    }
}
