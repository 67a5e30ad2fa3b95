import Foundation
import TabdLoad

/// A tabd started for one test on a free port, its stderr kept in a file.
final class TabdProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is a Foundation object used only from the test's task;
    // `Process` itself is thread-safe for `terminate`/`waitUntilExit`.
    let process = Process()
    let port: Int
    let stderrPath: String
    /// A fresh state file per daemon (the durable path, as users run it), removed at `stop`.
    let statePath: String

    struct StartError: Error, CustomStringConvertible {
        let description: String
    }

    /// The tabd binary: `TABD_BIN`, else the one built beside this test bundle.
    static func binary() throws -> String {
        if let path = ProcessInfo.processInfo.environment["TABD_BIN"] { return path }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        for _ in 0..<3 {
            let candidate = dir.appendingPathComponent("tabd").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        throw StartError(description: "no tabd binary beside \(exe): build it (swift build --product tabd) or set TABD_BIN")
    }

    init(_ arguments: [String]) throws {
        let bin = try Self.binary()
        let stem = NSTemporaryDirectory() + "tabd-stress-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        stderrPath = stem + ".log"
        statePath = stem + ".sqlite"
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        let out = Pipe()
        process.executableURL = URL(fileURLWithPath: bin)
        process.arguments = ["--port", "0", "--rate-limit", "0", "--log-level", "warn", "--state", statePath] + arguments
        process.standardOutput = out
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // The first stdout line names the port.
        var line: [UInt8] = []
        let reader = out.fileHandleForReading
        let deadline = Date().addingTimeInterval(60)
        while !line.contains(UInt8(ascii: "\n")) && Date() < deadline {
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "tabd listening on http://"),
              let port = Int(text[range.upperBound...].split(separator: "/")[0].split(separator: ":").last ?? "")
        else {
            process.terminate()
            throw StartError(description: "tabd did not start: \(text) \(Self.read(stderrPath))")
        }
        self.port = port
    }

    var pid: Int32 { process.processIdentifier }

    static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// SIGTERM, then waits; returns the exit status and what tabd wrote to stderr.
    func stop() -> (status: Int32, stderr: String) {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(20)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
        let log = Self.read(stderrPath)
        for path in [stderrPath, statePath, statePath + "-wal", statePath + "-shm"] {
            try? FileManager.default.removeItem(atPath: path)
        }
        return (process.terminationStatus, log)
    }
}

/// Knobs from the environment, so `make test-tsan` can run a smaller storm.
enum StressEnvironment {
    static func int(_ name: String, _ fallback: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap { Int($0) } ?? fallback
    }
    static var clients: Int { int("TABD_STRESS_CLIENTS", 64) }
    static var commands: Int { int("TABD_STRESS_COMMANDS", 300) }
}
