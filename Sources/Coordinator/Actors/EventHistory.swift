/// The most recent batches, kept so that a client that reconnects with `resume` gets
/// exactly what it missed. Bounded by event count (the resume window).
struct EventHistory: Sendable {
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
        if head > 1024, head * 2 > batches.count {
            batches.removeFirst(head)
            head = 0
        }
    }

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
