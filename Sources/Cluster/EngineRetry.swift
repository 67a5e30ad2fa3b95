import FoundationEssentials
import Locking
import Glibc
import Dispatch

/// The one way a node asks the engine again while it answers errors (a stream being
/// created, a leader being elected, a replica catching up, a compare-and-set lost to
/// another node): up to `attempts` tries, pausing after the n-th try `min(n × step,
/// longest)` seconds, and a log line for the first failure and every tenth.
struct EngineRetry: Sendable {
    let attempts: Int
    let step: Double
    let longest: Double

    /// About 15 s: a room's reads, creation, deletion and move.
    static let standard = EngineRetry(attempts: ClusterNode.loadAttempts, step: 0.02, longest: 0.3)
    /// About 30 s: a node's start, while the engine's servers elect their first leaders.
    static let start = EngineRetry(attempts: 100, step: 0.3, longest: 0.3)
    /// About 3 s: a replica that has not got the last message yet.
    static let replica = EngineRetry(attempts: 30, step: 0.01, longest: 0.1)

    /// What one try came to.
    enum Outcome<T> {
        case done(T)
        /// Try again; `why` (if any) is logged for the first try and every tenth.
        case again(String?)
    }

    func pause(after attempt: Int) -> Double { min(step * Double(attempt), longest) }

    /// Runs `body` (given the try's number, from 1) until it is done or the tries run out
    /// (nil). The thread sleeps between tries: call it off the cooperative pool.
    func run<T>(_ what: @autoclosure () -> String, log: (String) -> Void, _ body: (Int) throws(ClusterNode.Failure) -> Outcome<T>) throws(ClusterNode.Failure) -> T? {
        for attempt in 1...attempts {
            if attempt > 1 { Threads.sleep(seconds: pause(after: attempt - 1)) }
            switch try body(attempt) {
            case let .done(value): return value
            case let .again(why?) where attempt % 10 == 1: log("\(what()): \(why); asking again")
            case .again: break
            }
        }
        return nil
    }
}
