/// Deadlines of many connections, checked a tick at a time: scheduling is O(1), and a tick
/// costs only the deadlines due in it. A connection keeps one deadline; moving it leaves the
/// old entry behind, which is skipped when its tick comes (its deadline no longer matches).
struct TimerWheel {
    /// The resolution: a deadline fires within one tick after it passes.
    static let tickNanoseconds: UInt64 = 250_000_000

    struct Entry {
        let socket: UInt64
        let deadline: UInt64
    }

    private var buckets: [UInt64: [Entry]] = [:]
    /// The first tick not looked at yet.
    private var nextTick: UInt64

    init(now: UInt64) {
        nextTick = now / Self.tickNanoseconds
    }

    /// Entries waiting (stale ones included), for tests.
    var count: Int { buckets.values.reduce(0) { $0 + $1.count } }

    /// Remembers that `socket`'s deadline is `deadline` (uptime nanoseconds).
    mutating func schedule(_ socket: UInt64, at deadline: UInt64) {
        let tick = Swift.max(nextTick, (deadline + Self.tickNanoseconds - 1) / Self.tickNanoseconds)
        buckets[tick, default: []].append(Entry(socket: socket, deadline: deadline))
    }

    /// The entries of every tick up to `now`, removed.
    mutating func takeDue(now: UInt64) -> [Entry] {
        let current = now / Self.tickNanoseconds
        var due: [Entry] = []
        while nextTick <= current {
            if let entries = buckets.removeValue(forKey: nextTick) { due += entries }
            nextTick += 1
        }
        return due
    }
}
