import Coordinator
import Foundation
import Locking
import TabdClient
import Testing
@testable import TabdServer

/// The rooms' one scheduler: ``RoomTimers`` (one wake per kind, an earlier deadline arms
/// another, a wake with nothing due is passed over), ``ManualRoomClock``, and whole
/// daemons whose rooms run on a manual clock: their timers wait for that clock, not for
/// the system's.
@Suite(.serialized) struct RoomClockTests {
    enum Kind: Hashable, Sendable { case a, b }

    @Test func oneWakePerKindAndAnEarlierDeadlineArmsAnother() {
        let t0 = ContinuousClock.now
        var timers = RoomTimers<Kind>()
        let first = timers.arm(.a, at: t0 + .seconds(10))
        let later = timers.arm(.a, at: t0 + .seconds(20))
        let earlier = timers.arm(.a, at: t0 + .seconds(5))
        let other = timers.arm(.b, at: t0 + .seconds(20))
        #expect(first && !later && earlier && other, "a later deadline waits for the armed wake; an earlier one, or another kind, needs its own")
        let early = timers.fired(.a, now: t0 + .seconds(4))
        let due = timers.fired(.a, now: t0 + .seconds(5))
        #expect(!early && due)
        #expect(!timers.isArmed(.a))
        // The wake of the replaced deadline still comes: nothing is due then.
        let stale = timers.fired(.a, now: t0 + .seconds(10))
        #expect(!stale)
        #expect(timers.isArmed(.b))
    }

    @Test func aManualClockFiresDueWakesEarliestFirstAndNoneEarly() {
        let clock = ManualRoomClock()
        let fired = Locked<[String]>([])
        let start = clock.now
        clock.wake(at: start + .seconds(3)) { fired.withLock { $0.append("3") } }
        clock.wake(at: start + .seconds(1)) { fired.withLock { $0.append("1") } }
        clock.wake(at: start + .seconds(2)) { fired.withLock { $0.append("2") } }
        clock.advance(by: .milliseconds(999))
        #expect(fired.withLock { $0 }.isEmpty)
        clock.advance(by: .seconds(2))
        #expect(fired.withLock { $0 } == ["1", "2"])
        #expect(clock.pending == 1)
        clock.wake(at: start) { fired.withLock { $0.append("past") } }
        #expect(fired.withLock { $0 } == ["1", "2", "past"], "a deadline already passed fires at once")
    }

    /// Waits (bounded, in real time) until `check` holds.
    static func until(_ what: String, within seconds: Double = 10, _ check: () async -> Bool) async throws {
        let end = Date().addingTimeInterval(seconds)
        while !(await check()) {
            guard Date() < end else { throw Failure("not within \(seconds) s: \(what)") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    @Test func anIdleRoomRetiresWhenItsClockPassesRoomIdleAndNotBefore() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-clock-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let clock = ManualRoomClock()
        let o = DaemonTests.options { $0.state = dir.appendingPathComponent("state.sqlite").path; $0.roomIdle = 300 }
        let daemon = try await Daemon.start(o, log: Log(level: o.logLevel), clock: clock)
        let api = try TabdAPI(url: daemon.url)
        _ = try await api.perform(.tap(tab: "profile"), in: "kiosk")
        // The call's answer released the room's last user: its idle check is armed.
        try await Self.until("the idle check armed") { clock.pending == 1 }
        #expect(daemon.registry.counts.loaded == 1)
        clock.advance(by: .seconds(299))
        #expect(clock.pending == 1, "not due before --room-idle")
        #expect(daemon.registry.counts.loaded == 1)
        clock.advance(by: .seconds(1))
        try await Self.until("the room unloaded") { daemon.registry.counts.loaded == 0 }
        // Its state was kept: the next call loads it again.
        let (_, snapshot) = try await api.room("kiosk")
        #expect(snapshot.selected == "profile")
        await daemon.stop(closeTimeout: .seconds(1))
    }

    @Test func aCountedRoomReportsItsChangedCountAtItsClocksInterval() async throws {
        let clock = ManualRoomClock()
        // Counted past one client; a changed count is reported at most once a minute.
        let o = DaemonTests.options { $0.presenceLimit = 1; $0.presenceInterval = 60_000 }
        let daemon = try await Daemon.start(o, log: Log(level: o.logLevel), clock: clock)
        let first = try await TabdClient.connect(url: daemon.url, room: "hall", name: "first")
        let second = try await TabdClient.connect(url: daemon.url, room: "hall", name: "second")
        try await Self.until("the room counted") { await first.state.clientCount == 2 }
        let third = try await TabdClient.connect(url: daemon.url, room: "hall", name: "third")
        // The third join changed the count; its report waits for the interval.
        try await Self.until("the report armed") { clock.pending >= 1 }
        clock.advance(by: .seconds(59))
        #expect(clock.pending >= 1, "not due before the interval")
        #expect(await first.state.clientCount == 2)
        clock.advance(by: .seconds(1))
        try await Self.until("the count reported") { await first.state.clientCount == 3 }
        for client in [first, second, third] { await client.close() }
        await daemon.stop(closeTimeout: .seconds(1))
    }
}
