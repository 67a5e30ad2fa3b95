import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The resume window bounds what the history holds in memory, not only what it replays:
/// batches that leave the window are released soon after (churn left them behind).
@Suite struct EventHistoryBoundTests {
    private func batch(_ seq: Int) -> EventBatch {
        EventBatch(by: "tabd", ref: nil, events: [SequencedEvent(seq: seq, event: .clientLeft("c\(seq)"))])
    }

    @Test func batchesOutsideTheWindowAreReleased() {
        for window in [0, 1, 10, 100, 5_000] {
            var history = EventHistory(window: window)
            var most = 0
            for seq in 1...20_000 {
                history.append(batch(seq))
                most = max(most, history.heldCount)
            }
            // At most about twice the window's batches (and a little slack), however long the stream.
            #expect(most <= 2 * max(window, 1) + EventHistory.slack + 1, "window \(window): held \(most)")
            #expect(history.count <= max(window, 1))
        }
    }

    @Test func theWindowStillReplaysWhatItHolds() {
        var history = EventHistory(window: 100)
        for seq in 1...10_000 { history.append(batch(seq)) }
        #expect(history.batches(after: 9_900, current: 10_000)?.count == 100)
        #expect(history.batches(after: 9_950, current: 10_000)?.first?.firstSeq == 9_951)
        #expect(history.batches(after: 9_899, current: 10_000) == nil)
    }
}
