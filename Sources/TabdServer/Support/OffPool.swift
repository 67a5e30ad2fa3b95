import Dispatch

/// Runs blocking work (a call to the cluster's engine) on a Dispatch thread, so it never
/// holds one of the cooperative pool's few threads.
func offPool<T: Sendable, E: Error>(_ work: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
    let result: Result<T, E> = await withCheckedContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(returning: Result(catching: work)) }
    }
    return try result.get()
}
