import Locking

/// Time for the rooms: what time it is, and waking a room when a deadline comes. Every
/// timer of a room (its idle check, a counted room's count report, the check of commands
/// handed to another writer) and every time it reads goes through one of these. The daemon's is
/// ``SystemRoomClock``; a test's is a ``ManualRoomClock`` that it moves by hand, so an
/// idle timeout of five minutes takes no time at all.
package protocol RoomClock: Sendable {
    var now: ContinuousClock.Instant { get }
    /// Calls `fire` (on no particular thread) once `now` has reached `deadline`.
    func wake(at deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void)
}

extension RoomClock {
    /// Nanoseconds from `origin` to now: the time a ``CommandRouter`` counts in.
    func nanoseconds(since origin: ContinuousClock.Instant) -> UInt64 {
        let (seconds, attoseconds) = origin.duration(to: now).components
        return UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds) / 1_000_000_000)
    }
}

/// The system's continuous clock; a wake is a task that sleeps until its deadline.
package struct SystemRoomClock: RoomClock {
    package init() {}

    package var now: ContinuousClock.Instant { .now }

    package func wake(at deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void) {
        Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            fire()
        }
    }
}

/// A clock that moves only when told (``advance(by:)``), firing the wakes that come due,
/// earliest first. For tests.
package final class ManualRoomClock: RoomClock {
    private struct Wake {
        let deadline: ContinuousClock.Instant
        let order: Int
        let fire: @Sendable () -> Void
    }

    private struct State {
        var now: ContinuousClock.Instant
        var wakes: [Wake] = []
        var made = 0
    }

    private let state: Locked<State>

    package init(start: ContinuousClock.Instant = .now) {
        state = Locked(State(now: start))
    }

    package var now: ContinuousClock.Instant { state.withLock { $0.now } }

    /// Wakes waiting for their deadline.
    package var pending: Int { state.withLock { $0.wakes.count } }

    package func wake(at deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void) {
        let due = state.withLock { s -> Bool in
            if deadline <= s.now { return true }
            s.made += 1
            s.wakes.append(Wake(deadline: deadline, order: s.made, fire: fire))
            return false
        }
        if due { fire() }
    }

    /// Moves the clock on by `duration` and fires every wake now due, earliest first (each
    /// outside the clock's lock).
    package func advance(by duration: Duration) {
        let due = state.withLock { s -> [Wake] in
            s.now = s.now.advanced(by: duration)
            let now = s.now
            let due = s.wakes.filter { $0.deadline <= now }
            s.wakes.removeAll { $0.deadline <= now }
            return due.sorted { ($0.deadline, $0.order) < ($1.deadline, $1.order) }
        }
        for wake in due { wake.fire() }
    }
}

/// Which of a room's timers are armed, and for when: one wake per kind at a time, an
/// earlier deadline arms another, and a wake that comes for a deadline that is gone (the
/// earlier one fired first) is passed over.
struct RoomTimers<Kind: Hashable & Sendable>: Sendable {
    private var armed: [Kind: ContinuousClock.Instant] = [:]

    /// Whether a wake must be scheduled for `kind` at `deadline`: none is armed, or the
    /// armed one is later.
    mutating func arm(_ kind: Kind, at deadline: ContinuousClock.Instant) -> Bool {
        if let current = armed[kind], current <= deadline { return false }
        armed[kind] = deadline
        return true
    }

    /// A wake for `kind` came at `now`: true when an armed deadline is due (it is then
    /// disarmed), false for a wake with nothing due.
    mutating func fired(_ kind: Kind, now: ContinuousClock.Instant) -> Bool {
        guard let deadline = armed[kind], deadline <= now else { return false }
        armed[kind] = nil
        return true
    }

    func isArmed(_ kind: Kind) -> Bool { armed[kind] != nil }
}
