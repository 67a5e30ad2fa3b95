import CTLS
import FoundationEssentials
import Glibc
import Dispatch
import Portable
import WebSocketEngine

/// One blocking HTTP/1.1 request over a fresh TCP connection (`Connection: close`): enough
/// for tabd's HTTP API and `/metrics` (TabdClient's `TabdAPI` runs it off the caller's
/// thread; the benchmark calls it directly) and for tabd's webhooks (on threads of their own).
public struct HTTPCall: Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var body: String
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    public var method: String
    public var host: String
    public var port: Int
    public var path: String
    public var body: [UInt8]
    /// Extra header lines, e.g. `("Authorization", "Bearer …")`.
    public var headers: [(String, String)]
    /// HTTPS, verified against this trust (nil: plain HTTP).
    public var tls: TLSTrust?

    public init(method: String, host: String, port: Int, path: String, body: [UInt8] = [], headers: [(String, String)] = [],
                tls: TLSTrust? = nil) {
        self.method = method; self.host = host; self.port = port; self.path = path; self.body = body; self.headers = headers
        self.tls = tls
    }

    /// Sends the request and reads the whole answer (its `Content-Length`, or up to the close),
    /// or its first `maxAnswerBytes` (the rest is not read). `timeoutSeconds` bounds each
    /// read and write, `connectTimeoutSeconds` (default: the same) the connection, and
    /// `totalSeconds` (if given) the whole exchange: a peer that answers a byte at a time
    /// holds the call no longer.
    public func send(timeoutSeconds: Int = 30, connectTimeoutSeconds: Int? = nil, totalSeconds: Double? = nil,
                     maxAnswerBytes: Int = .max) throws(Failure) -> Response {
        let deadline = totalSeconds.map { ContinuousClock.now + .milliseconds(Int($0 * 1000)) }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let info = list else {
            throw Failure(description: "cannot resolve \(host)")
        }
        defer { freeaddrinfo(list) }
        // Each address in turn (`localhost` may resolve to ::1 first, tabd listen on 127.0.0.1).
        var fd: Int32 = -1
        var lastErrno: Int32 = 0
        var next: UnsafeMutablePointer<addrinfo>? = info
        while let a = next, fd < 0 {
            next = a.pointee.ai_next
            let s = socket(a.pointee.ai_family, a.pointee.ai_socktype, a.pointee.ai_protocol)
            guard s >= 0 else { lastErrno = errno; continue }
            var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let outcome = Self.connect(s, a.pointee.ai_addr, a.pointee.ai_addrlen, timeoutSeconds: connectTimeoutSeconds ?? timeoutSeconds)
            if outcome == 0 { fd = s } else { lastErrno = outcome; close(s) }
        }
        guard fd >= 0 else { throw Failure(description: "connect to \(host):\(port): \(String(cString: strerror(lastErrno)))") }
        defer { close(fd) }
        let stream = try Stream(fd: fd, host: host, tls: tls)
        defer { stream.close() }
        let hostHeader = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(hostHeader)\r\nConnection: close\r\n"
        head += "Content-Length: \(body.count)\r\n"
        if !body.isEmpty { head += "Content-Type: application/json\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let request = Array((head + "\r\n").utf8) + body
        var sent = 0
        while sent < request.count {
            sent += try stream.send(request[sent...])
        }
        var answer: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16_384, alignment: 8)
        defer { buffer.deallocate() }
        var expected: Int?
        while expected.map({ answer.count < $0 }) ?? true, answer.count < maxAnswerBytes {
            if let deadline {
                // Each read waits at most what is left of the whole exchange.
                let left = deadline - ContinuousClock.now
                guard left > .zero else { throw Failure(description: "no whole answer within \(totalSeconds!) s") }
                let (seconds, attoseconds) = min(left, .seconds(timeoutSeconds)).components
                var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(max(1000, attoseconds / 1_000_000_000_000)))
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            }
            let n = try stream.receive(into: buffer)
            if n == 0 { break }
            answer += buffer[0..<n]
            if expected == nil, let end = Self.headerEnd(answer) {
                let header = String(decoding: answer[0..<end], as: UTF8.self).lowercased()
                if let line = header.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
                   let length = Int(line.dropFirst("content-length:".count).trimmingWhitespace) {
                    expected = end + 4 + length
                }
            }
        }
        guard let end = Self.headerEnd(answer) else { throw Failure(description: "an answer without headers") }
        let statusLine = String(decoding: answer[0..<end], as: UTF8.self).split(separator: " ", maxSplits: 2)
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw Failure(description: "no status line") }
        return Response(status: status, body: String(decoding: answer[(end + 4)...], as: UTF8.self))
    }

    /// Connects `fd` within `timeoutSeconds` (a peer that drops the SYN does not hold the
    /// caller for the kernel's two minutes); 0, or the errno.
    private static func connect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t, timeoutSeconds: Int) -> Int32 {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        if Glibc.connect(fd, address, length) == 0 { return 0 }
        guard errno == EINPROGRESS else { return errno }
        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        let ready = poll(&p, 1, Int32(clamping: timeoutSeconds * 1000))
        guard ready > 0 else { return ready == 0 ? ETIMEDOUT : errno }
        var failure: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size) == 0 else { return errno }
        return failure
    }

    /// The index of the `\r\n\r\n` that ends the headers.
    private static func headerEnd(_ b: [UInt8]) -> Int? {
        guard b.count >= 4 else { return nil }
        for i in 0...(b.count - 4) where b[i] == 13 && b[i + 1] == 10 && b[i + 2] == 13 && b[i + 3] == 10 { return i }
        return nil
    }

    /// The connection's bytes: as they are, or through TLS.
    private final class Stream {
        let fd: Int32
        let tls: OpaquePointer?

        init(fd: Int32, host: String, tls trust: TLSTrust?) throws(Failure) {
            self.fd = fd
            guard let trust else { tls = nil; return }
            var reason = [CChar](repeating: 0, count: 256)
            let client = trust.withExtra { pem, count in
                tabd_tls_client_connect(fd, host, trust.bundle, pem, count, &reason, reason.count)
            }
            guard let client else { throw Failure(description: "TLS with \(host): \(Self.text(reason))") }
            tls = client
        }

        func send(_ bytes: ArraySlice<UInt8>) throws(Failure) -> Int {
            var reason = [CChar](repeating: 0, count: 256)
            let n = bytes.withUnsafeBytes { bytes in
                tls.map { tabd_tls_client_write($0, bytes.baseAddress, bytes.count, &reason, reason.count) }
                    ?? Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            }
            guard n > 0 else { throw Failure(description: tls == nil ? "send: \(String(cString: strerror(errno)))" : "TLS: \(Self.text(reason))") }
            return n
        }

        func receive(into bytes: UnsafeMutableRawBufferPointer) throws(Failure) -> Int {
            var reason = [CChar](repeating: 0, count: 256)
            let n = tls.map { tabd_tls_client_read($0, bytes.baseAddress, bytes.count, &reason, reason.count) }
                ?? recv(fd, bytes.baseAddress, bytes.count, 0)
            guard n >= 0 else { throw Failure(description: tls == nil ? "recv: \(String(cString: strerror(errno)))" : "TLS: \(Self.text(reason))") }
            return n
        }

        func close() {
            if let tls { tabd_tls_client_free(tls) }
        }

        static func text(_ reason: [CChar]) -> String {
            String(nulTerminated: reason)
        }
    }
}
