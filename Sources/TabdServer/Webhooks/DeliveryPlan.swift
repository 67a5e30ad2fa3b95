import Coordinator
import Outbox

/// Which of the outbox's events a webhook posts next, and how far it has delivered: every
/// decision of one webhook's delivery, as a value (``WebhookDelivery`` performs it).
///
/// In order per room: a room's next event goes only once its previous one was delivered;
/// events of different rooms go side by side (up to the delivery's threads). The *cursor* is
/// the last position up to which everything was delivered (or dropped, and told in a `gap`):
/// a restart goes on after it, so what was delivered past it is posted again (at least once).
struct DeliveryPlan: Sendable {
    enum Job: Sendable, Equatable {
        case event(Outbox.Entry)
        /// Positions the outbox dropped (past its bound) before this webhook got them: all of
        /// the range.
        case gap(ClosedRange<Int>)
    }

    /// Everything up to here is delivered (or dropped and told).
    private(set) var cursor: Int
    /// Positions up to here were read from the outbox (handed out, waiting, or done).
    private var scanned: Int
    /// Read, not yet handed out (their room was busy), in order.
    private var waiting: [Outbox.Entry] = []
    /// Rooms with an event on its way.
    private var busy: Set<RoomID> = []
    /// Delivered positions past the cursor.
    private var done: Set<Int> = []
    /// Told gaps past the cursor (kept as ranges: a gap may span millions of positions).
    private var doneRanges: [ClosedRange<Int>] = []
    /// Dropped positions to tell, before anything read after them.
    private var gaps: [ClosedRange<Int>] = []
    /// A gap being told.
    private var gapOut = false
    /// At most this many read ahead and not handed out.
    let readAhead: Int

    /// `readAhead`: events read and held here beyond those on their way (memory past the
    /// outbox's bound: a busy room's next events wait here, at most this many).
    init(cursor: Int, readAhead: Int = 256) {
        self.cursor = cursor
        scanned = cursor
        self.readAhead = readAhead
    }

    /// The next job, reading from `outbox` when nothing read is ready; nil when there is
    /// none now (all busy, or nothing new).
    mutating func next(from outbox: Outbox) -> Job? {
        // What the outbox dropped meanwhile is told, not sent: its events were read ahead
        // only because their room was busy, so they are the first after the cursor and each
        // other (the ones in between went out already or are on their way, and stay so).
        let kept = outbox.firstKept
        var dropped = false
        if let oldest = waiting.first, oldest.position < kept {
            dropped = true
            let gone = waiting.prefix { $0.position < kept }
            waiting.removeFirst(gone.count)
            if gone.last!.position - oldest.position + 1 == gone.count {
                addGap(oldest.position...gone.last!.position)
            } else {
                // Not one range: told one by one (at most `readAhead` of them).
                for entry in gone { addGap(entry.position...entry.position) }
            }
        }
        // (After a drop, what follows is read first: a gap it starts with makes one with it.)
        if !dropped, let job = ready() { return job }
        guard waiting.count < readAhead else { return nil }
        let read = outbox.read(after: scanned, maxCount: readAhead - waiting.count)
        if let gap = read.gap {
            addGap(gap)
            scanned = gap.upperBound
        }
        for entry in read.entries {
            waiting.append(entry)
            scanned = entry.position
        }
        return ready()
    }

    /// A gap to tell; one that follows the last not told yet makes it longer.
    private mutating func addGap(_ range: ClosedRange<Int>) {
        let pending = gapOut ? 1 : 0
        if gaps.count > pending, let last = gaps.last, last.upperBound + 1 == range.lowerBound {
            gaps[gaps.count - 1] = last.lowerBound...range.upperBound
        } else {
            gaps.append(range)
        }
    }

    private mutating func ready() -> Job? {
        if !gapOut, let gap = gaps.first {
            gapOut = true
            return .gap(gap)
        }
        guard let n = waiting.firstIndex(where: { !busy.contains($0.room) }) else { return nil }
        // The first waiting event of a free room is that room's earliest undelivered one.
        let entry = waiting.remove(at: n)
        busy.insert(entry.room)
        return .event(entry)
    }

    /// `job` was delivered (answered 2xx).
    mutating func delivered(_ job: Job) {
        switch job {
        case let .event(entry):
            busy.remove(entry.room)
            done.insert(entry.position)
        case let .gap(range):
            gapOut = false
            gaps.removeFirst()
            doneRanges.append(range)
        }
        while true {
            if done.remove(cursor + 1) != nil {
                cursor += 1
            } else if let n = doneRanges.firstIndex(where: { $0.lowerBound == cursor + 1 }) {
                cursor = doneRanges.remove(at: n).upperBound
            } else {
                break
            }
        }
    }
}
