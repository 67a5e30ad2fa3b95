/// What the coordinator has published, and who hears it: the last published seq, the
/// scroll-to-top counter as of it, the history kept for `resume`, and the observers,
/// subscribers and publishers each publication goes to. A value the ``Coordinator`` owns;
/// its callbacks run on the coordinator's executor.
struct Publication {
    /// The last seq published.
    private(set) var seq: Int
    /// The scroll-to-top counter as of ``seq`` (what ``ScrollCounter/value`` shows), folded
    /// by ``ScrollCounter/apply(_:to:)`` like every other reading of it.
    private var count: Int
    private(set) var history: EventHistory
    private var observers: [@Sendable (EventBatch) -> Void] = []
    private var publishers: [Coordinator.Publisher] = []
    /// In-process subscribers; each skips the batches through the seq its start holds.
    private var subscribers: [Int: (continuation: AsyncStream<EventBatch>.Continuation, status: SubscriptionStatus, skipThrough: Int)] = [:]
    private var nextSubscriber = 0

    init(seq: Int, count: Int, window: Int, history: [EventBatch]) {
        self.seq = seq
        self.count = count
        self.history = EventHistory(window: window)
        for batch in history { self.history.append(batch) }
    }

    /// Takes in published batches, in seq order: the history, the counter's published
    /// value, then observers and subscribers.
    mutating func append(_ batches: [EventBatch], counter: ScrollCounter) {
        for batch in batches {
            seq = batch.lastSeq
            history.append(batch)
            for e in batch.events {
                do { try ScrollCounter.apply(e.event, to: &count) } catch {
                    preconditionFailure("a published event does not fold: \(error)")
                }
            }
            counter.announce(count)
            for observer in observers { observer(batch) }
            for (id, subscriber) in subscribers where batch.lastSeq > subscriber.skipThrough {
                if case .dropped = subscriber.continuation.yield(batch) {
                    subscriber.status.lagged.store(true, ordering: .releasing)
                    subscribers[id] = nil
                    subscriber.continuation.finish()
                }
            }
        }
    }

    /// After a rollback: the counter as of the state rolled back to.
    mutating func resetCount(_ value: Int) { count = value }

    /// Hands the publishers batches and the answers that go after them.
    func deliver(_ batches: [EventBatch], _ answers: [Answer]) {
        guard !batches.isEmpty || !answers.isEmpty else { return }
        for publisher in publishers { publisher(batches, answers) }
    }

    mutating func addPublisher(_ publisher: @escaping Coordinator.Publisher) { publishers.append(publisher) }
    mutating func addObserver(_ observer: @escaping @Sendable (EventBatch) -> Void) { observers.append(observer) }

    /// A new subscriber that hears the batches published after `seq`; `ended` is called
    /// with its id when its stream ends.
    mutating func subscribe(after seq: Int, bufferLimit: Int, ended: @escaping @Sendable (Int) -> Void)
        -> (id: Int, AsyncStream<EventBatch>, SubscriptionStatus) {
        let (stream, continuation) = AsyncStream.makeStream(of: EventBatch.self, bufferingPolicy: .bufferingOldest(max(1, bufferLimit)))
        let status = SubscriptionStatus()
        let id = nextSubscriber
        nextSubscriber += 1
        continuation.onTermination = { _ in ended(id) }
        subscribers[id] = (continuation, status, seq)
        return (id, stream, status)
    }

    mutating func unsubscribe(_ id: Int) { subscribers.removeValue(forKey: id)?.continuation.finish() }

    /// What a client that saw `seq` missed: the published batches after it, then
    /// `pending` (applied, not published yet). Nil when they are not all kept, `seq` is
    /// not a batch's end, or they weigh more than `budget` bytes (a replay may cost what a
    /// snapshot may: past that, the snapshot is the cheaper answer, and as good a one).
    func missed(after seq: Int, pending: [EventBatch], within budget: Int) -> [EventBatch]? {
        guard let published = history.batches(after: seq, current: self.seq) else { return nil }
        let missed = published + pending
        var bytes = 0
        for batch in missed {
            bytes += batch.frameBytes.count
            if bytes > budget { return nil }
        }
        return missed
    }
}
