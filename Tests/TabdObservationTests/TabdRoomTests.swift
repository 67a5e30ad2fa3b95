import Conformance
import Coordinator
import Foundation
import Locking
import Observation
import TabdClient
import TabdLoad
import TabdObservation
import Testing

/// ``TabdRoom`` against real tabds (processes of the built binary), through its public API
/// only, as an app would use it.
@MainActor @Suite(.serialized) struct TabdRoomTests {
    struct TimedOut: Error, CustomStringConvertible { let description: String }

    /// Waits (bounded) until `check` holds, looking again every few milliseconds.
    func until(_ what: String, seconds: Double = 20, _ check: () -> Bool) async throws {
        let end = Date().addingTimeInterval(seconds)
        while !check() {
            guard Date() < end else { throw TimedOut(description: "not within \(seconds) s: \(what)") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Everything `stream` yields, gathered as it comes.
    final class Gathered<T: Sendable>: Sendable {
        let items = Locked<[T]>([])
        init(_ stream: AsyncStream<T>) {
            Task { [items] in for await item in stream { items.withLock { $0.append(item) } } }
        }
        var all: [T] { items.withLock { $0 } }
    }

    @Test func anotherClientsSelectionReachesTheModelAndItsObservers() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let room = try await TabdRoom.connect(url: tabd.url, name: "model")
        let other = try await TabdClient.connect(url: tabd.url, name: "other")
        #expect(room.selected == "home" && room.tabs.map(\.id).contains("profile"))
        let changed = Locked(false)
        withObservationTracking { _ = room.selected } onChange: { changed.withLock { $0 = true } }
        try await other.select("profile")
        try await until("the model's observers told of the selection") { changed.withLock { $0 } }
        try await until("the model's selection") { room.selected == "profile" }
        #expect(room.connection == .live)
        await other.close()
        await room.close()
    }

    @Test func theSecondTapOfTheSelectedTabPopsToRootThenTheThirdMovesTheSharedCounterOnce() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let room = try await TabdRoom.connect(url: tabd.url, name: "model")
        let scrolls = Gathered(room.scrollsToTop())
        try await room.push("detail", on: "home")
        #expect(room.tab("home")?.stack.map(\.route) == ["root", "detail"], "an intent returns once the model holds its events")
        let count = room.scrollToTop
        try await room.tap("home") // the selected tab, not at its root: back to the root
        #expect(room.tab("home")?.stack.map(\.route) == ["root"])
        #expect(room.scrollToTop == count && room.scrolledToTop == nil)
        try await room.tap("home") // at its root: scroll to top
        #expect(room.scrollToTop == count + 1 && room.scrolledToTop == "home")
        try await until("the scroll-to-top heard") { scrolls.all.count == 1 }
        #expect(scrolls.all.map(\.tab) == ["home"] && scrolls.all.map(\.count) == [count + 1])
        // The counter is the room's, one for every tab.
        try await room.select("profile")
        try await room.tap("profile")
        #expect(room.scrollToTop == count + 2 && room.scrolledToTop == "profile")
        // Any other command goes through `perform`, and returns as the intents do.
        try await room.push("x", on: "profile")
        try await room.perform(.popToRoot(tab: "profile"))
        #expect(room.tab("profile")?.stack.map(\.route) == ["root"])
        await room.close()
    }

    @Test func firstAppearFiresOncePerPageAcrossPushPopAndAResumeAndTheModelEqualsAFreshSnapshotAfterAKill() async throws {
        let statePath = NSTemporaryDirectory() + "tabd-observation-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: statePath + suffix) } }
        let first = try TabdProcess([], statePath: statePath)
        let port = first.port
        // A reconnect waits at least 2.5 s: long enough for another client to act meanwhile.
        let room = try await TabdRoom.connect(url: first.url, name: "model",
                                              options: .init(initialBackoff: .seconds(5), maxBackoff: .seconds(5)))
        let firsts = Gathered(room.firstAppears(on: "home"))
        let appears = Gathered(room.appears(on: "home"))
        let disappears = Gathered(room.disappears(on: "home"))
        let root = try #require(room.tab("home")?.stack.first?.id)
        let rootAppears = Gathered(room.appears(on: "home", page: root))
        try await room.push("a", on: "home")
        try await room.pop(on: "home")
        try await room.push("b", on: "home")
        try await room.pop(on: "home")
        try await until("two first appears") { firsts.all.count == 2 && disappears.all.count == 4 }
        #expect(firsts.all.map(\.route) == ["a", "b"], "once per page; the root page's was before the model")
        #expect(appears.all.map(\.route) == ["a", "root", "b", "root"])
        try await until("the root page's own appears") { rootAppears.all.count == 2 }
        #expect(rootAppears.all.map(\.page) == [root, root], "one page's stream hears that page only")
        // A popped page's disappear names the route it had.
        #expect(disappears.all.map(\.route) == ["root", "a", "root", "b"])

        // kill -9; tabd starts again on the same state; another client pushes while the
        // model is away: on its return the model resumes, and that push is a replay.
        first.stop(signal: SIGKILL)
        let second = try TabdProcess([], port: port, statePath: statePath)
        defer { second.stop() }
        let other = try await TabdClient.connect(url: second.url, name: "other")
        try await other.push("c", on: "home")
        try await until("the model back and caught up", seconds: 30) { room.connection == .live && room.tab("home")?.stack.last?.route == "c" }
        try await room.push("d", on: "home")
        try await until("the live push's first appear") { firsts.all.count == 3 }
        #expect(firsts.all.map(\.route) == ["a", "b", "d"], "the replayed push fired nothing")

        // The model is a fresh client's snapshot.
        let fresh = try await TabdClient.connect(url: second.url, name: "fresh")
        let snapshot = try await fresh.sync()
        try await until("the model at the fresh snapshot's seq") { room.seq == snapshot.seq }
        #expect(room.tabs == snapshot.tabs && room.selected == snapshot.selected && room.scrollToTop == snapshot.scrollToTop)
        #expect(room.clients == snapshot.clients && room.clientCount == snapshot.clientCount)
        for client in [other, fresh] { await client.close() }
        await room.close()
    }

    @Test func aModelOnAViewTokenRefusesIntentsWithTheProtocolsError() async throws {
        let secretFile = NSTemporaryDirectory() + "tabd-observation-key-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try String((0..<48).map { _ in Character(UnicodeScalar(UInt8.random(in: 97...122))) }).write(toFile: secretFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: secretFile) }
        let mint = Process()
        let out = Pipe()
        mint.executableURL = URL(fileURLWithPath: try TabdProcess.binary())
        mint.arguments = ["token", "--secret-file", secretFile, "--room", "r", "--role", "view", "--ttl", "1h"]
        mint.standardOutput = out
        try mint.run()
        let token = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        mint.waitUntilExit()
        let tabd = try TabdProcess(["--auth-secret-file", secretFile])
        defer { tabd.stop() }
        let room = try await TabdRoom.connect(url: tabd.url, room: "r", token: token, name: "viewer")
        #expect(room.session.role == "view")
        do {
            try await room.tap("profile")
            Issue.record("a view token's tap was taken")
        } catch let error as TabdClientError {
            #expect(error.code == .forbidden, "\(error)")
        }
        #expect(room.selected == "home", "nothing changed")
        // Through the binding, the refusal is kept for the view to show.
        #expect(room.bindingError == nil)
        room.selection = "profile"
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while room.bindingError == nil, clock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(room.bindingError?.code == .forbidden, "\(String(describing: room.bindingError))")
        #expect(room.selected == "home")
        await room.close()
    }

    @Test func afterRandomSessionsOfSeveralClientsTheModelIsTheFoldOfTheStream() async throws {
        let tabd = try TabdProcess([])
        defer { tabd.stop() }
        let room = try await TabdRoom.connect(url: tabd.url, name: "model")
        let writers = [try await TabdClient.connect(url: tabd.url, name: "w1"), try await TabdClient.connect(url: tabd.url, name: "w2"),
                       try await TabdClient.connect(url: tabd.url, name: "w3")]
        await withTaskGroup(of: Void.self) { group in
            for (n, writer) in writers.enumerated() {
                group.addTask {
                    var rng = SeededRandom(seed: UInt64(11 + n))
                    for _ in 0..<150 { _ = try? await writer.perform(randomCommand(&rng)) }
                }
            }
        }
        let snapshot = try await writers[0].sync()
        try await until("the model at the room's seq") { room.seq == snapshot.seq }
        #expect(room.tabs == snapshot.tabs && room.selected == snapshot.selected && room.scrollToTop == snapshot.scrollToTop)
        #expect(room.clients == snapshot.clients && room.clientCount == snapshot.clientCount)
        for writer in writers { await writer.close() }
        await room.close()
    }
}
