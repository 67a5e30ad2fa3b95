@testable import Cluster
import Locking
import Testing

/// A node counts every engine message it does not believe, but logs each kind at most once
/// every ``RejectionLog/interval``: a consumer made again after a server restart delivers
/// thousands of messages again, and a line for each flooded stderr (a pipe that fills
/// blocks every thread that logs: nodes froze for a minute in the shard fault rounds).
@Suite struct RejectionLogTests {
    @Test func aBurstOfRejectionsIsCountedInFullAndLoggedOnceThenSummed() {
        let stats = EngineStats()
        let lines = Locked<[String]>([])
        let log = RejectionLog(stats: stats) { line in lines.withLock { $0.append(line) } }
        for n in 1...5_000 { log.rejected("delivery", "consumer sequence \(n) delivered already", now: 100 + Double(n) / 1_000) }
        #expect(stats.rejections("delivery") == 5_000)
        #expect(lines.withLock { $0 } == ["rejected an engine message (delivery): consumer sequence 1 delivered already"])
        // Another kind has its own allowance.
        log.rejected("seal", "unsealed", now: 101)
        #expect(lines.withLock { $0.count } == 2)
        // After the interval, the next one is logged with how many were not.
        log.rejected("delivery", "consumer sequence 1 delivered already", now: 100.5 + RejectionLog.interval)
        #expect(lines.withLock { $0.last } == "rejected an engine message (delivery): consumer sequence 1 delivered already (and 4999 more since the last such line)")
        #expect(stats.rejections("delivery") == 5_001)
    }
}
