import Testing
import TabdLoad

/// The meter's percentiles (bench/run, tabbench): nearest rank over the samples, in
/// milliseconds, so that a p99.9 of 1,000 samples is the slowest but none, and the tail a
/// design fault makes is not averaged away.
@Suite struct LatencySummaryTests {
    @Test func percentilesAreNearestRanksInMilliseconds() {
        // 1,000 samples of 1…1,000 µs, shuffled: rank k is k µs.
        var samples = (1...1_000).map { Int64($0) * 1_000 }
        samples.shuffle()
        let summary = LatencySummary(nanoseconds: samples)
        #expect(summary.count == 1_000)
        #expect(summary.p50 == 0.5)
        #expect(summary.p90 == 0.9)
        #expect(summary.p99 == 0.99)
        #expect(summary.p999 == 0.999)
        #expect(summary.max == 1.0)
    }

    @Test func aSingleSlowSampleShowsInTheTailNotTheMedian() {
        let summary = LatencySummary(nanoseconds: Array(repeating: 100_000, count: 999) + [50_000_000])
        #expect(summary.p50 == 0.1 && summary.p99 == 0.1 && summary.p999 == 0.1)
        #expect(summary.max == 50)
        let none = LatencySummary(nanoseconds: [])
        #expect(none.count == 0 && none.p999 == 0)
    }
}
