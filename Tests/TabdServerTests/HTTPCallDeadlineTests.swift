import Foundation
import Testing
import WebSocketsClient

/// A webhook receiver that answers a byte at a time holds a delivery thread no longer than
/// the whole exchange's bound (`HTTPCall.send(totalSeconds:)`), though no single read waits
/// as long as its own timeout.
@Suite struct HTTPCallDeadlineTests {
    /// Listens on a free port of 127.0.0.1; each connection gets `HTTP/1.1 204 …` one byte
    /// every `every` seconds, after its request was read. Returns the port and a stop.
    static func dribbler(every: Double) throws -> (port: Int, stop: @Sendable () -> Void) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) } }
        try #require(bound == 0 && listen(fd, 4) == 0)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let stopped = Stopped()
        let thread = Thread {
            let client = accept(fd, nil, nil)
            guard client >= 0 else { return }
            var buffer = [UInt8](repeating: 0, count: 4096)
            _ = recv(client, &buffer, buffer.count, 0)
            for byte in Array("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n".utf8) {
                if stopped.value { break }
                var b = byte
                _ = send(client, &b, 1, Int32(MSG_NOSIGNAL))
                Thread.sleep(forTimeInterval: every)
            }
            close(client)
        }
        thread.start()
        return (port, { stopped.value = true; shutdown(fd, Int32(SHUT_RDWR)); close(fd) })
    }

    final class Stopped: @unchecked Sendable {
        private let lock = NSLock()
        private var stopped = false
        var value: Bool {
            get { lock.withLock { stopped } }
            set { lock.withLock { stopped = newValue } }
        }
    }

    @Test func anAnswerAByteAtATimeEndsTheCallAtItsWholeBound() throws {
        // 46 bytes, one every 0.25 s: about 11 s to answer, each read well within its 5 s.
        let (port, stop) = try Self.dribbler(every: 0.25)
        defer { stop() }
        let started = ContinuousClock.now
        let call = HTTPCall(method: "POST", host: "127.0.0.1", port: port, path: "/hook", body: Array("{}".utf8))
        #expect(throws: HTTPCall.Failure.self) { _ = try call.send(timeoutSeconds: 5, connectTimeoutSeconds: 5, totalSeconds: 1) }
        let took = ContinuousClock.now - started
        // A bound only a call that ignored its deadline breaks (the answer takes 11 s).
        #expect(took < .seconds(4), "the call took \(took)")
    }
}
