import Auth
import Cluster
import Foundation
import Testing

/// The cluster secret the tests' nodes share.
let testTrust: EngineTrust = {
    let key = Array("a cluster secret for the tests, 32+ bytes long".utf8)
    return EngineTrust(secret: try! ClusterSecret(keys: [key], source: "the tests' secret"))
}()

/// A real NATS server with JetStream on a free loopback port, in a temporary directory,
/// stopped (and removed) on `stop()`. The server is the project's pinned one,
/// `.venv/bin/nats-server` (2.15.1, from scripts/install-pinned), unless `$NATS_SERVER`
/// names another (Debian's 2.9.10 is `/usr/sbin/nats-server`). From NATS 2.10 on its config
/// says `jetstream { sync_interval: always }`: every write is synced to disk before its ack,
/// as the project runs the engine everywhere; 2.9 refuses that setting, so it is left out.
final class EngineServer: @unchecked Sendable {
    // @unchecked: set once in init; `process` is only terminated.
    let port: Int
    let directory: URL
    /// The server's version, from `nats-server --version`.
    let version: [Int]
    private let process: Process

    var url: String { "nats://127.0.0.1:\(port)" }
    /// Whether the server syncs every JetStream write before acking it.
    var synced: Bool { !version.lexicographicallyPrecedes([2, 10, 0]) }

    /// The repository's root: this file is Tests/ClusterTests/EngineServer.swift.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `$NATS_SERVER`, else the pinned server in the project's .venv.
    static func binary() throws -> String {
        if let named = ProcessInfo.processInfo.environment["NATS_SERVER"], !named.isEmpty { return named }
        let pinned = root.appendingPathComponent(".venv/bin/nats-server").path
        guard FileManager.default.isExecutableFile(atPath: pinned) else {
            throw Failure("no nats-server at \(pinned): run scripts/install-pinned (or set NATS_SERVER=/usr/sbin/nats-server for Debian's 2.9)")
        }
        return pinned
    }

    /// `binary --version` ("nats-server: v2.15.1") as [2, 15, 1].
    static func version(of binary: String) throws -> [Int] {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["--version"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        let digits = text.split(whereSeparator: { !"0123456789.".contains($0) }).first { $0.contains(".") } ?? ""
        let parts = digits.split(separator: ".").compactMap { Int($0) }
        guard parts.count >= 2 else { throw Failure("\(binary) --version said \(text): not a nats-server version") }
        return parts
    }

    init() throws {
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-nats-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let binary = try Self.binary()
        version = try Self.version(of: binary)
        let store = directory.appendingPathComponent("js").path
        let config = directory.appendingPathComponent("server.conf")
        var lines = ["listen: 127.0.0.1:\(port)", "jetstream {", "  store_dir: \"\(store)\""]
        if !version.lexicographicallyPrecedes([2, 10, 0]) { lines.append("  sync_interval: always") }
        lines.append("}")
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-c", config.path]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: { let log = directory.appendingPathComponent("server.log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil); return log }())
        try process.run()
        // Ready once it accepts connections (bounded).
        let deadline = Date().addingTimeInterval(10)
        while !Self.accepts(port) {
            guard Date() < deadline, process.isRunning else { stop(); throw Failure("nats-server did not start on port \(port)") }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    func stop() {
        if process.isRunning { process.terminate(); process.waitUntilExit() }
        try? FileManager.default.removeItem(at: directory)
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard bound else { throw Failure("no free port") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    static func accepts(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
