import Foundation
import Testing

/// A real NATS server with JetStream (Debian's `nats-server`) on a free loopback port, in
/// a temporary directory, stopped (and removed) on `stop()`.
final class EngineServer: @unchecked Sendable {
    // @unchecked: set once in init; `process` is only terminated.
    let port: Int
    let directory: URL
    private let process: Process

    var url: String { "nats://127.0.0.1:\(port)" }

    init() throws {
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-nats-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let binary = ["/usr/sbin/nats-server", "/usr/bin/nats-server"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let binary else { throw Failure("nats-server is not installed: run scripts/install-deps") }
        process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", directory.path]
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
