import Locking


/// The scroll-to-top counter, one for every tab (the idea is seed 003's
/// `ValuesModel.count`): it starts at 0, goes up by one for each scroll-to-top and never
/// goes down within an epoch. Its rule is ``apply(_:to:)`` (`Fold/Counters.swift`).
///
/// Only the ``Coordinator`` changes it, inside a command, so the `scrollToTop` event and
/// the new value agree; it runs on the coordinator's executor, which visits it synchronously. ``value`` and ``changes()`` show published values only: with a
/// durable store, a value is announced once its event is committed.
public actor ScrollCounter {
    /// The value as the coordinator applies commands (may run ahead of ``value`` while
    /// a commit is pending).
    private(set) var working: Int
    private let observers = Observers()
    private nonisolated let home: any Actor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { home.unownedExecutor }

    /// `home`: the actor whose serial executor it shares (its coordinator's).
    public init(value: Int = 0, home: any Actor = RoomExecutor()) {
        self.home = home
        working = value
        observers.announce(value)
    }

    /// The last published value.
    public nonisolated var value: Int { observers.latest }

    /// Moves the working value by a decided `scrollToTop` (the rule ``apply(_:to:)``).
    func apply(_ event: Event) {
        do { try Self.apply(event, to: &working) } catch {
            preconditionFailure("scroll-to-top counter: a decided event does not fold: \(error)")
        }
    }

    /// Rolls the working value back (a failed commit) or sets it on a restore.
    func reset(to value: Int) {
        working = value
        observers.announce(value)
    }

    /// Tells observers about a published value.
    nonisolated func announce(_ value: Int) { observers.announce(value) }

    /// Every later published value. An observer that falls more than 64 values behind
    /// skips to the newest ones: only "it changed" matters to a scroll view.
    public nonisolated func changes() -> AsyncStream<Int> { observers.subscribe() }

    private final class Observers: Sendable {
        private struct State {
            var latest = 0
            var next = 0
            var continuations: [Int: AsyncStream<Int>.Continuation] = [:]
        }
        private let state = Locked(State())

        var latest: Int { state.withLock { $0.latest } }

        func announce(_ value: Int) {
            let targets = state.withLock { s -> [AsyncStream<Int>.Continuation] in
                guard value != s.latest else { return [] }
                s.latest = value
                return Array(s.continuations.values)
            }
            for c in targets { c.yield(value) } // outside the lock
        }

        func subscribe() -> AsyncStream<Int> {
            let (stream, continuation) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(64))
            let id = state.withLock { s in
                defer { s.next += 1 }
                s.continuations[s.next] = continuation
                return s.next
            }
            continuation.onTermination = { [weak self] _ in
                _ = self?.state.withLock { $0.continuations.removeValue(forKey: id) }
            }
            return stream
        }
    }
}
