/// The one counter every tab shares (seed 003's `ValuesModel.count`): it starts at 0,
/// goes up by one for each scroll-to-top and never goes down within an epoch.
///
/// Only the ``Coordinator`` increments it (inside a command, so the `scrollToTop`
/// event and the new value agree); anyone can read it or observe it.
public actor ScrollCounter {
    public private(set) var value: Int
    private var observers: [Int: AsyncStream<Int>.Continuation] = [:]
    private var nextObserver = 0

    public init(value: Int = 0) { self.value = value }

    func increment() -> Int {
        value += 1
        for continuation in observers.values { continuation.yield(value) }
        return value
    }

    /// Every later value of the counter. An observer that falls more than 64 values
    /// behind skips to the newest ones: only "it changed" matters to a scroll view.
    public func changes() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(64))
        let id = nextObserver
        nextObserver += 1
        observers[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { await self?.removeObserver(id) }
        }
        return stream
    }

    private func removeObserver(_ id: Int) { observers[id] = nil }
}
