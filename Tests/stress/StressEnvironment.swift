import Foundation

/// Knobs from the environment, so `make test-tsan` can run a smaller storm.
enum StressEnvironment {
    static func int(_ name: String, _ fallback: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap { Int($0) } ?? fallback
    }
    static var clients: Int { int("TABD_STRESS_CLIENTS", 64) }
    static var commands: Int { int("TABD_STRESS_COMMANDS", 300) }
}
