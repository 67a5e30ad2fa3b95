import Dispatch
import Foundation
import Synchronization

/// True for the first caller only.
final class OnceFlag: Sendable {
    private let done = Atomic<Bool>(false)
    func claim() -> Bool { !done.exchange(true, ordering: .acquiringAndReleasing) }
}


/// Waits for SIGINT or SIGTERM and returns which one came. Their default action is
/// switched off first so that the process lives on to stop cleanly. The handlers run on
/// a global queue, so this function must not be isolated to the main actor.
nonisolated func waitForTerminationSignal() async -> Int32 {
    let signals = [SIGINT, SIGTERM]
    for sig in signals { signal(sig, SIG_IGN) }
    let sources = signals.map { DispatchSource.makeSignalSource(signal: $0, queue: .global()) }
    let received: Int32 = await withCheckedContinuation { continuation in
        let once = OnceFlag()
        for (source, sig) in zip(sources, signals) {
            source.setEventHandler { @Sendable in if once.claim() { continuation.resume(returning: sig) } }
            source.resume()
        }
    }
    for source in sources { source.cancel() }
    return received
}
