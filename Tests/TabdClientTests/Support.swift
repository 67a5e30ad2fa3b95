import Foundation
import Locking
import TabdClient
import TabdLoad

struct TimedOut: Error, CustomStringConvertible {
    let description: String
}

/// Runs `body`, failing with `TimedOut` when it takes longer than `seconds`.
func within<T: Sendable>(_ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            throw TimedOut(description: "timed out after \(seconds) s waiting for \(what)")
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// Reads `updates` until one satisfies `match`; returns the updates seen up to it.
@discardableResult
func waitFor(_ updates: AsyncStream<TabdClient.Update>, _ what: String, seconds: Double = 20,
             _ match: @escaping @Sendable (TabdClient.Update) -> Bool) async throws -> [TabdClient.Update] {
    let seen = Locked<[TabdClient.Update]>([])
    do {
        return try await within(seconds, what) {
            for await update in updates {
                seen.withLock { $0.append(update) }
                if match(update) { return seen.withLock { $0 } }
            }
            throw TimedOut(description: "the updates ended before \(what)")
        }
    } catch let error as TimedOut {
        let last = seen.withLock { $0.suffix(5) }.map { "\($0)".prefix(200) }
        throw TimedOut(description: "\(error.description); the last updates: \(last)")
    }
}

/// Waits until the client's state reaches `seq`.
func waitForSeq(_ client: TabdClient, _ seq: Int, seconds: Double = 20) async throws {
    let updates = await client.updates()
    try await waitFor(updates, "seq \(seq)", seconds: seconds) { update in
        switch update {
        case let .snapshot(s): s.seq >= seq
        case let .events(b): b.lastSeq >= seq
        default: false
        }
    }
}

/// The state without presence: what two clients of one room must agree on exactly
/// (presence differs only by the clients each one lists beyond the first 100).
func withoutPresence(_ s: Snapshot) -> Snapshot {
    var s = s
    s.clients = []
    s.clientCount = 0
    return s
}

/// A key for `tabd --auth-secret-file` and tokens minted by `tabd token`.
struct Keys {
    let secretFile: String

    init() throws {
        secretFile = NSTemporaryDirectory() + "tabd-client-key-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let key: [UInt8] = (0..<48).map { _ in UInt8.random(in: 97...122) }
        try String(decoding: key, as: UTF8.self).write(toFile: secretFile, atomically: true, encoding: .utf8)
    }

    func token(room: String, role: String, ttl: String = "1h") throws -> String {
        let process = Process()
        let out = Pipe()
        process.executableURL = URL(fileURLWithPath: try TabdProcess.binary())
        process.arguments = ["token", "--secret-file", secretFile, "--room", room, "--role", role, "--ttl", ttl]
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func remove() { try? FileManager.default.removeItem(atPath: secretFile) }
}

extension TabdClient.Update {
    var isDisconnected: Bool { if case .disconnected = self { true } else { false } }
    var isReconnecting: Bool { if case .reconnecting = self { true } else { false } }
    var isClosed: Bool { if case .closed = self { true } else { false } }
    var isResumedWelcome: Bool { if case .connected(_, resumed: true) = self { true } else { false } }
    var closeCode: UInt16? { if case let .disconnected(close) = self { close.code } else { nil } }
}
