import Synchronization

/// An in-process subscriber's view of the event stream.
///
/// `start` is where it begins (a snapshot, or the retained batches after the seq it
/// asked for); `batches` then yields every later batch exactly once, in seq order.
/// The stream never blocks the coordinator: it buffers up to the limit given to
/// ``Coordinator/subscribe(after:bufferLimit:)``. A subscriber that falls further
/// behind is cut off — its stream finishes and ``lagged`` becomes true — instead of
/// silently losing batches; it can subscribe again with `after:` its last seq.
public struct Subscription: Sendable {
    public enum Start: Sendable, Equatable {
        case snapshot(Snapshot)
        case replay([EventBatch])
    }

    public let start: Start
    public let batches: AsyncStream<EventBatch>
    let status: SubscriptionStatus

    /// True once the subscriber fell too far behind and was cut off.
    public var lagged: Bool { status.lagged.load(ordering: .acquiring) }
}

final class SubscriptionStatus: Sendable {
    let lagged = Atomic<Bool>(false)
}
