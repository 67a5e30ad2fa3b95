import Foundation
import TabdClient
import Testing
@testable import TabdServer

/// Event streams (server-sent events) of a daemon in this process, read over raw sockets
/// while a client writes: the room's stream and the outbox's, several readers at once, some
/// leaving in the middle and one left open while the daemon stops (make test-tsan runs it
/// under ThreadSanitizer: the streams' bytes cross from the rooms and the outbox to the
/// service thread).
@Suite(.serialized) struct EventStreamTests {
    /// A blocking reader of one stream: the events' ids and data, as they come.
    final class Reader: @unchecked Sendable {
        let fd: Int32
        private var buffer: [UInt8] = []

        init(port: Int, path: String) throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw Failure("connect: \(errno)") }
            let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8)
            guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else {
                throw Failure("send")
            }
            let head = try read(until: Array("\r\n\r\n".utf8))
            guard head.starts(with: Array("HTTP/1.1 200".utf8)) else { throw Failure("answered \(String(decoding: head, as: UTF8.self))") }
        }

        struct Failure: Error, CustomStringConvertible {
            let description: String
            init(_ d: String) { description = d }
        }

        private func read(until marker: [UInt8]) throws -> [UInt8] {
            while true {
                if let end = buffer.indices.first(where: { buffer[$0...].starts(with: marker) }) {
                    let part = Array(buffer[..<end])
                    buffer.removeFirst(end + marker.count)
                    return part
                }
                var chunk = [UInt8](repeating: 0, count: 65_536)
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0 else { throw Failure(n == 0 ? "the stream ended" : "recv: \(errno)") }
                buffer += chunk[..<n]
            }
        }

        /// The next event (comments skipped): its id and its data's JSON.
        func next() throws -> (id: Int, data: JSONValue) {
            while true {
                let block = String(decoding: try read(until: [0x0A, 0x0A]), as: UTF8.self)
                var id: Int?
                var data: String?
                for line in block.split(separator: "\n") {
                    if line.hasPrefix("id: ") { id = Int(line.dropFirst(4)) }
                    if line.hasPrefix("data: ") { data = String(line.dropFirst(6)) }
                }
                guard let id, let data else { continue }
                return (id, try JSONParser.parse(Array(data.utf8)))
            }
        }

        private var closed = false

        /// Leaves: the socket is closed without a word.
        func close() {
            guard !closed else { return }
            closed = true
            _ = Glibc.close(fd)
        }

        deinit { close() }
    }

    /// A figure of `/metrics` (a blocking call: the test's own thread waits, not tabd's).
    static func metric(_ daemon: Daemon, _ name: String) throws -> Int {
        let answer = try HTTPCall(method: "GET", host: "127.0.0.1", port: daemon.port, path: "/metrics").send(timeoutSeconds: 10)
        let line = answer.body.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return Int(line?.split(separator: " ").last ?? "") ?? -1
    }

    /// Waits (bounded) until `name` reads `value`.
    static func waitFor(_ daemon: Daemon, _ name: String, _ value: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while try metric(daemon, name) != value {
            guard ContinuousClock.now < deadline else { throw Reader.Failure("\(name) never became \(value)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func readersOfARoomAndOfTheOutboxGetEveryBatchOnceWhileAClientWrites() async throws {
        let daemon = try await DaemonTests.start { $0.webhookEvents = .batch; $0.webhookEventsGiven = true; $0.rateLimit = 0 }
        let client = try await TabdClient.connect(url: daemon.url, room: "r", name: "writer")
        let start = await client.state.seq
        let port = daemon.port
        // Four readers of the room (two leave after ten events), two of the outbox from its start.
        let readers = try (0..<4).map { _ in try Reader(port: port, path: "/api/rooms/r/events") }
        let outboxReaders = try (0..<2).map { _ in try Reader(port: port, path: "/api/events?after=0") }
        var last = start
        for n in 0..<200 { last = try await client.scroll(to: Double(n), on: "home") }
        let final = last
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (n, reader) in readers.enumerated() {
                group.addTask {
                    let first = try reader.next()
                    #expect(first.data["type"]?.stringValue == "snapshot" && first.id >= start)
                    var seq = first.id
                    var taken = 0
                    while seq < final, n >= 2 || taken < 10 {
                        let (id, data) = try reader.next()
                        let events = data["events"]?.arrayValue ?? []
                        #expect(events.first?["seq"]?.intValue == seq + 1, "reader \(n): no gap, no duplicate")
                        #expect(id == events.last?["seq"]?.intValue)
                        seq = id
                        taken += 1
                    }
                }
            }
            for reader in outboxReaders {
                group.addTask {
                    var position = 0
                    var seqs: [Int] = []
                    while seqs.last.map({ $0 < final }) ?? true {
                        let (id, data) = try reader.next()
                        #expect(id == position + 1, "positions without a hole")
                        position = id
                        if data["room"]?.stringValue == "r", let seq = data["seq"]?.intValue { seqs.append(seq) }
                    }
                    #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)
                }
            }
            try await group.waitForAll()
        }
        #expect(try Self.metric(daemon, "tabd_event_streams") == 6)
        // Three readers of the room and one of the outbox leave; two are open when tabd stops.
        for reader in readers.prefix(3) + outboxReaders.prefix(1) { reader.close() }
        try await Self.waitFor(daemon, "tabd_event_streams", 2)
        await client.close()
        await daemon.stop(closeTimeout: .seconds(1))
        withExtendedLifetime(readers) {}
        withExtendedLifetime(outboxReaders) {}
    }
}
