import Foundation

/// A tabd started for one test or tool run on a free port, its stderr kept in a file.
public final class TabdProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is a Foundation object used only from the test's task;
    // `Process` itself is thread-safe for `terminate`/`waitUntilExit`.
    let process = Process()
    public let port: Int
    public let stderrPath: String
    /// A fresh state file per daemon (the durable path, as users run it), removed at
    /// `stop` unless it was given.
    public let statePath: String
    private let ownsState: Bool

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    /// The tabd binary: `TABD_BIN`, else the one built beside this test bundle.
    public static func binary() throws -> String {
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

    /// Starts tabd with `arguments` on `port` (0: a free one) with `statePath` (nil: a
    /// fresh file, removed at `stop`); returns once it listens.
    public init(_ arguments: [String], port: Int = 0, statePath: String? = nil) throws {
        let bin = try Self.binary()
        let stem = NSTemporaryDirectory() + "tabd-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        stderrPath = stem + ".log"
        self.statePath = statePath ?? stem + ".sqlite"
        ownsState = statePath == nil
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        let out = Pipe()
        process.executableURL = URL(fileURLWithPath: bin)
        process.arguments = ["--port", String(port), "--rate-limit", "0", "--log-level", "warn", "--state", self.statePath] + arguments
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

    public var pid: Int32 { process.processIdentifier }

    /// `http://127.0.0.1:PORT/`, as tabd prints it.
    public var url: String { "http://127.0.0.1:\(port)/" }

    static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// SIGTERM (or `signal`), then waits; returns the exit status and what tabd wrote to
    /// stderr. Removes the log, and the state file unless it was given.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM) -> (status: Int32, stderr: String) {
        if process.isRunning { kill(process.processIdentifier, signal) }
        let deadline = Date().addingTimeInterval(20)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
        let log = Self.read(stderrPath)
        for path in [stderrPath] + (ownsState ? [statePath, statePath + "-wal", statePath + "-shm"] : []) {
            try? FileManager.default.removeItem(atPath: path)
        }
        return (process.terminationStatus, log)
    }
}

