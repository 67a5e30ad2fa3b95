import Synchronization

/// True for the first caller only.
final class OnceFlag: Sendable {
    private let done = Atomic<Bool>(false)
    func claim() -> Bool { !done.exchange(true, ordering: .acquiringAndReleasing) }
}

