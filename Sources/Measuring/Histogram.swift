import Locking

/// A Prometheus histogram of durations (seconds), safe from any thread: counts per bucket,
/// their sum and count, rendered as `/metrics` lines. Recording costs one lock and a scan
/// of a dozen bounds.
public final class Histogram: Sendable {
    /// Bounds from 0.5 ms to 10 s: what a command, a commit or a welcome takes, from a
    /// memory room's fraction of a millisecond to an engine's election.
    public static let defaultBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10]

    public let name: String
    public let help: String
    public let buckets: [Double]
    private let state: Locked<(counts: [Int], sum: Double)>

    public init(name: String, help: String, buckets: [Double] = Histogram.defaultBuckets) {
        precondition(buckets == buckets.sorted() && !buckets.isEmpty)
        self.name = name
        self.help = help
        self.buckets = buckets
        state = Locked(([Int](repeating: 0, count: buckets.count + 1), 0))
    }

    /// One observation of `seconds`.
    public func observe(_ seconds: Double) {
        let i = buckets.firstIndex { seconds <= $0 } ?? buckets.count
        state.withLock { s in
            s.counts[i] += 1
            s.sum += seconds
        }
    }

    /// One observation of what passed since `start`.
    public func observe(since start: ContinuousClock.Instant) {
        let d = ContinuousClock.now - start
        observe(Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
    }

    /// How many observations so far.
    public var count: Int { state.withLock { $0.counts.reduce(0, +) } }

    /// Its `# HELP`, `# TYPE` and sample lines.
    public var text: String {
        let (counts, sum) = state.withLock { ($0.counts, $0.sum) }
        var out = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        var cumulative = 0
        for (i, bound) in buckets.enumerated() {
            cumulative += counts[i]
            out += "\(name)_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        cumulative += counts[buckets.count]
        out += "\(name)_bucket{le=\"+Inf\"} \(cumulative)\n\(name)_sum \(sum)\n\(name)_count \(cumulative)\n"
        return out
    }
}
