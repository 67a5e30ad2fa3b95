import Foundation

/// What `/proc` says about a process (the server under test).
public struct ProcessStats: Sendable {
    public let pid: Int32
    public init(pid: Int32) { self.pid = pid }

    /// Resident memory in KiB (`VmRSS` of `/proc/PID/status`).
    public func rssKiB() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
        }
        return nil
    }

    /// CPU time used so far (user + system, all threads), in seconds (`/proc/PID/stat`).
    public func cpuSeconds() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        // Fields after the command name: state is field 3; utime and stime are 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return (user + system) / ticks
    }

    /// This process's own CPU time (user + system), in seconds.
    public static func selfCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }
}

/// Latency samples in nanoseconds and their percentiles.
public struct LatencySummary: Sendable, Equatable {
    public var count: Int
    public var p50: Double
    public var p90: Double
    public var p99: Double
    public var p999: Double
    public var max: Double

    /// Percentiles (nearest rank) of `samples`, reported in milliseconds.
    public init(nanoseconds samples: [Int64]) {
        let sorted = samples.sorted()
        count = sorted.count
        func rank(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            let i = Swift.min(sorted.count - 1, Swift.max(0, Int((q * Double(sorted.count)).rounded(.up)) - 1))
            return Double(sorted[i]) / 1e6
        }
        p50 = rank(0.50)
        p90 = rank(0.90)
        p99 = rank(0.99)
        p999 = rank(0.999)
        max = sorted.last.map { Double($0) / 1e6 } ?? 0
    }
}

/// A monotonic clock in nanoseconds (cheap: vDSO `clock_gettime`).
@inline(__always) public func monotonicNanos() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}
