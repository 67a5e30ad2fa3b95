import Testing
@testable import TabdServer

/// A connection's two budgets, and what a `sync` is charged for the snapshot it asks for.
@Suite struct RateLimiterTests {
    let t0 = ContinuousClock.now

    @Test func framesAndBytesEachHaveABurstOfTwiceTheirRate() {
        var limiter = RateLimiter(rate: 10, byteRate: 1_000, now: t0)
        for _ in 0..<20 { let ok1 = limiter.allow(bytes: 10, now: t0); #expect(ok1) }
        let ok2 = limiter.allow(bytes: 10, now: t0); #expect(!ok2, "21 frames in no time: more than the burst of 20")
        var bytes = RateLimiter(rate: 0, byteRate: 1_000, now: t0)
        let ok3 = bytes.allow(bytes: 1_500, now: t0); #expect(ok3)
        let ok4 = bytes.allow(bytes: 1_000, now: t0); #expect(!ok4, "2,500 bytes in no time: more than the burst of 2,000")
        let ok5 = bytes.allow(bytes: 1_000, now: t0 + .milliseconds(500)); #expect(ok5)
    }

    @Test func aChargeForWhatAFrameMakesTabdSendHoldsTheNextFramesUntilPaidBack() {
        var limiter = RateLimiter(rate: 100, byteRate: 1_000_000, now: t0)
        // Two syncs of a 1 MB room fit in the burst of 2 MB: the budget is then spent.
        for _ in 0..<2 {
            let ok = limiter.allow(bytes: 30, now: t0); #expect(ok)
            limiter.charge(bytes: 1_000_000, now: t0)
        }
        let spent = limiter.allow(bytes: 30, now: t0); #expect(!spent)
        // A third goes once a little is paid back, and puts the budget a second in debt.
        let third = limiter.allow(bytes: 30, now: t0 + .milliseconds(10)); #expect(third)
        limiter.charge(bytes: 1_000_000, now: t0 + .milliseconds(10))
        let inDebt = limiter.allow(bytes: 30, now: t0 + .milliseconds(500)); #expect(!inDebt)
        let paid = limiter.allow(bytes: 30, now: t0 + .milliseconds(1_100)); #expect(paid)
    }

    @Test func aChargeLargerThanTheBurstIsChargedInFull() {
        var limiter = RateLimiter(rate: 100, byteRate: 1_000, now: t0)
        let first = limiter.allow(bytes: 10, now: t0); #expect(first)
        // A 10 KB answer at 1,000 bytes a second: the budget is 10 s in debt (less the burst).
        limiter.charge(bytes: 10_000, now: t0)
        let held = limiter.allow(bytes: 10, now: t0 + .seconds(1)); #expect(!held, "one burst is not enough to pay it")
        let stillHeld = limiter.allow(bytes: 10, now: t0 + .milliseconds(7_900)); #expect(!stillHeld)
        let back = limiter.allow(bytes: 10, now: t0 + .milliseconds(8_100)); #expect(back)
    }

    @Test func withoutAByteRateNothingIsCharged() {
        var limiter = RateLimiter(rate: 100, byteRate: 0, now: t0)
        let ok13 = limiter.allow(bytes: 30, now: t0); #expect(ok13)
        limiter.charge(bytes: 50_000_000, now: t0)
        let ok14 = limiter.allow(bytes: 30, now: t0); #expect(ok14)
    }
}
