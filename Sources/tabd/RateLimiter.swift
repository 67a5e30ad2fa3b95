/// A token bucket: `rate` commands per second, bursts of `2 × rate`. Rate 0 = unlimited.
struct RateLimiter: Sendable {
    let rate: Double
    private var tokens: Double
    private var last: ContinuousClock.Instant

    init(rate: Int, now: ContinuousClock.Instant = .now) {
        self.rate = Double(rate)
        tokens = Double(rate * 2)
        last = now
    }

    /// Takes one token; false when the connection is sending too fast.
    mutating func allow(now: ContinuousClock.Instant = .now) -> Bool {
        guard rate > 0 else { return true }
        let elapsed = now - last
        last = now
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        tokens = min(rate * 2, tokens + seconds * rate)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
