/// The most recent batches, kept so that a client that reconnects with `resume` gets
/// exactly what it missed. Bounded by event count (the resume window).
///
/// Batches that leave the window are released at once, in amortized O(1): the array is
/// compacted whenever the batches behind `head` are at least as many as those in the window
/// (and at least ``slack``), so it holds at most about twice the window's batches. (It used to
/// wait for 1,024 dropped batches: with 200 rooms of small presence batches that was ~200 MB
/// of history outside every window, about 850 bytes per connection that came and went.)
struct EventHistory: Sendable {
    /// Dropped batches tolerated before compacting, whatever the window.
    static let slack = 16

    let window: Int
    private var batches: [EventBatch] = []
    private var head = 0
    private var eventCount = 0

    init(window: Int) { self.window = max(0, window) }

    mutating func append(_ batch: EventBatch) {
        batches.append(batch)
        eventCount += batch.events.count
        while head < batches.count - 1, eventCount - batches[head].events.count >= window {
            eventCount -= batches[head].events.count
            head += 1
        }
        if head >= Self.slack, head * 2 >= batches.count {
            batches.removeFirst(head)
            head = 0
        }
    }

    /// Batches held, those behind the window included (for tests: memory stays bounded).
    var heldCount: Int { batches.count }
    /// Batches within the window.
    var count: Int { batches.count - head }

    /// The batches after `seq`, or nil when they are not all retained, `seq` is beyond
    /// `current`, or `seq` falls inside a batch.
    func batches(after seq: Int, current: Int) -> [EventBatch]? {
        guard seq >= 0, seq <= current else { return nil }
        if seq == current { return [] }
        guard head < batches.count, batches[head].firstSeq <= seq + 1 else { return nil }
        // Binary search for the batch that starts right after seq.
        var lo = head, hi = batches.count - 1
        while lo < hi {
            let mid = (lo + hi) / 2
            if batches[mid].lastSeq <= seq { lo = mid + 1 } else { hi = mid }
        }
        guard batches[lo].firstSeq == seq + 1 else { return nil }
        return Array(batches[lo...])
    }
}
