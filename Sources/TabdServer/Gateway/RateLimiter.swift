/// Two token buckets per connection: `rate` frames per second and `byteRate` bytes per
/// second, each with bursts of twice its rate. A rate of 0 turns that bucket off.
///
/// Counting bytes as well as frames bounds the work one connection can ask for: parsing
/// is linear in the input, so a byte budget is a parse budget.
struct RateLimiter: Sendable {
    private var frames: Bucket
    private var bytes: Bucket

    init(rate: Int, byteRate: Int = 0, now: ContinuousClock.Instant = .now) {
        frames = Bucket(rate: Double(rate), now: now)
        bytes = Bucket(rate: Double(byteRate), now: now)
    }

    /// Takes one frame of `size` bytes from the budgets; false (and nothing taken) when
    /// the connection is sending too fast.
    mutating func allow(bytes size: Int = 0, now: ContinuousClock.Instant = .now) -> Bool {
        frames.refill(now)
        bytes.refill(now)
        guard frames.has(1), bytes.has(Double(size)) else { return false }
        frames.take(1)
        bytes.take(Double(size))
        return true
    }

    /// Takes `size` more bytes from the byte budget for what a frame already let through
    /// makes tabd send (a `sync`'s snapshot, a `clients` page): all of it, so the budget
    /// may go into debt by more than a burst, and the connection's next frames wait until
    /// it is paid back (at the byte rate: a 2 MB snapshot at 1 MB/s, two seconds).
    mutating func charge(bytes size: Int, now: ContinuousClock.Instant = .now) {
        bytes.refill(now)
        bytes.charge(Double(size))
    }

    private struct Bucket: Sendable {
        let rate: Double
        var tokens: Double
        var last: ContinuousClock.Instant

        init(rate: Double, now: ContinuousClock.Instant) {
            self.rate = rate
            tokens = rate * 2
            last = now
        }

        mutating func refill(_ now: ContinuousClock.Instant) {
            let elapsed = now - last
            last = now
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            tokens = min(rate * 2, tokens + seconds * rate)
        }

        /// A frame larger than the whole burst still passes when the bucket is full, so
        /// a limit below the message size does not refuse every large frame forever.
        func has(_ n: Double) -> Bool { rate == 0 || tokens >= min(n, rate * 2) }
        mutating func take(_ n: Double) { if rate > 0 { tokens -= min(n, rate * 2) } }
        /// Takes all of `n`, however far into debt that goes.
        mutating func charge(_ n: Double) { if rate > 0 { tokens -= n } }
    }
}
