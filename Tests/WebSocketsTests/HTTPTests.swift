import Foundation
import Locking
import Testing
@testable import WebSockets

/// What the handler was asked, as a comparable value.
struct SeenRequest: Sendable, Equatable, CustomStringConvertible {
    var method: HTTPMethod
    var path: String
    var query: [String: String] = [:]
    var authorization: String? = nil
    var body: String = ""
    var tooLarge = false

    init(_ method: HTTPMethod, _ path: String, query: [String: String] = [:], authorization: String? = nil,
         body: String = "", tooLarge: Bool = false) {
        (self.method, self.path, self.query, self.authorization, self.body, self.tooLarge) =
            (method, path, query, authorization, body, tooLarge)
    }

    init(_ request: HTTPRequest) {
        self.init(request.method, request.path, query: request.query, authorization: request.authorization,
                  body: String(decoding: request.body, as: UTF8.self), tooLarge: request.bodyTooLarge)
    }

    var description: String { "\(method.rawValue) \(path) \(query) body=\(body.count) tooLarge=\(tooLarge)" }
}

/// A request the test answers itself, later.
struct DeferredRequest: Sendable {
    let seen: SeenRequest
    let responder: HTTPResponder
}

/// Reports every request on `seen`, in order, and answers by path:
/// `/api/later…` is handed to the test on `later`; `/api/drop` is never answered (its responder
/// is dropped); `/api/status/N` answers N; a too-large body answers 413; anything else answers
/// 200 `METHOD path <body bytes>`.
final class HTTPTestHandler: WebSocketServerHandler {
    let seen: AsyncStream<SeenRequest>
    let later: AsyncStream<DeferredRequest>
    private let seenSink: AsyncStream<SeenRequest>.Continuation
    private let laterSink: AsyncStream<DeferredRequest>.Continuation

    init() {
        (seen, seenSink) = AsyncStream.makeStream(of: SeenRequest.self)
        (later, laterSink) = AsyncStream.makeStream(of: DeferredRequest.self)
    }

    func shouldAccept(_ request: UpgradeRequest) -> UpgradeDecision { .accept }
    func connected(_ id: ConnectionID, request: UpgradeRequest) {}
    func received(_ id: ConnectionID, message: [UInt8]) {}
    func disconnected(_ id: ConnectionID, code: CloseCode?, reason: String) {}

    func httpRequest(_ request: HTTPRequest, responder: HTTPResponder) {
        let seen = SeenRequest(request)
        seenSink.yield(seen)
        if request.path.hasPrefix("/api/later") {
            laterSink.yield(DeferredRequest(seen: seen, responder: responder))
        } else if request.path == "/api/drop" {
            return
        } else if request.path.hasPrefix("/api/status/"), let status = Int(request.path.dropFirst(12)) {
            responder.respond(HTTPResponse(status: status, text: "status \(status)"))
        } else if request.bodyTooLarge {
            responder.respond(HTTPResponse(status: 413, contentType: "application/json", body: Array(#"{"error":"too_large"}"#.utf8)))
        } else {
            responder.respond(HTTPResponse(status: 200, text: "\(request.method.rawValue) \(request.path) \(request.body.count)"))
        }
    }
}

/// One HTTP response as read off the wire.
struct RawResponse: Sendable {
    var status: Int
    /// Header names lowercased; a repeated header keeps its last value.
    var headers: [String: String]
    var body: [UInt8]
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// One plain TCP connection to 127.0.0.1 speaking HTTP/1.1 by hand, so each test controls
/// exactly which bytes go out and when. Every wait is bounded; blocking reads run on a thread
/// of their own, never on the test's executor.
final class RawHTTPConnection: @unchecked Sendable {
    // @unchecked Sendable: one test uses it, one call at a time (it awaits each read).
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var closed = false

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RawHTTPError("socket: \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            Glibc.close(fd)
            throw RawHTTPError("connect: \(errno)")
        }
    }

    deinit { if !closed { Glibc.close(fd) } }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Sends one request and reads its response, as clients that do not pipeline do.
    func exchange(_ request: String, head: Bool = false) async throws -> RawResponse {
        try send(request)
        return try await response(head: head)
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw RawHTTPError("send: \(errno)") }
            offset += n
        }
    }

    /// The next response; `head` for a response to HEAD (no body follows its headers).
    func response(head: Bool = false, seconds: Double = 10) async throws -> RawResponse {
        try await onOwnThread { try self.readResponse(head: head, until: .now + .seconds(seconds)) }
    }

    /// Waits for the server to close the connection; false if it sends bytes instead.
    func closedByServer(seconds: Double = 10) async throws -> Bool {
        try await onOwnThread {
            guard self.buffer.isEmpty else { return false }
            return try self.read(until: .now + .seconds(seconds)) == 0
        }
    }

    /// Closes gracefully (FIN).
    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    /// Closes with a reset (RST), as a crashed client would.
    func reset() {
        guard !closed else { return }
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    private func readResponse(head: Bool, until deadline: ContinuousClock.Instant) throws -> RawResponse {
        let separator = Array("\r\n\r\n".utf8)
        var end: Int?
        while true {
            if buffer.count >= 4 {
                end = (0...(buffer.count - 4)).first { buffer[$0..<$0 + 4].elementsEqual(separator) }
            }
            if end != nil { break }
            guard try read(until: deadline) > 0 else { throw RawHTTPError("closed before a response") }
        }
        let lines = String(decoding: buffer[..<end!], as: UTF8.self).components(separatedBy: "\r\n")
        buffer.removeFirst(end! + 4)
        let statusParts = lines[0].split(separator: " ", maxSplits: 2)
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw RawHTTPError("bad status line \(lines[0])")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw RawHTTPError("bad header \(line)") }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var length = 0
        if !head && status != 204 && status != 304 && status >= 200 {
            guard let text = headers["content-length"], let n = Int(text) else {
                throw RawHTTPError("no content-length in \(lines)")
            }
            length = n
        }
        while buffer.count < length {
            guard try read(until: deadline) > 0 else { throw RawHTTPError("closed inside a body") }
        }
        let body = Array(buffer[..<length])
        buffer.removeFirst(length)
        return RawResponse(status: status, headers: headers, body: body)
    }

    /// Reads what is there (waiting until `deadline`); 0 at end of stream (or a reset).
    private func read(until deadline: ContinuousClock.Instant) throws -> Int {
        let left = deadline - .now
        let milliseconds = Int32(clamping: max(0, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, milliseconds) > 0 else { throw Deadline(what: "data from the server") }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = recv(fd, &chunk, chunk.count, 0)
        if n < 0 && errno == ECONNRESET { return 0 }
        guard n >= 0 else { throw RawHTTPError("recv: \(errno)") }
        buffer.append(contentsOf: chunk[..<n])
        return n
    }
}

struct RawHTTPError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs a blocking call on a thread of its own.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result(catching: body)) }.start()
    }
}

/// Checks `condition` until it holds; throws ``Deadline`` after `seconds`.
func waitUntil(_ what: String, seconds: Double = 10, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw Deadline(what: what) }
        try await Task.sleep(for: .milliseconds(2))
    }
}

/// A request as bytes; `body` adds a `content-length`.
func httpRequest(_ method: String, _ target: String, body: String? = nil, headers: [String] = []) -> String {
    var text = "\(method) \(target) HTTP/1.1\r\nhost: 127.0.0.1\r\n"
    for header in headers { text += header + "\r\n" }
    if let body { text += "content-length: \(body.utf8.count)\r\n" }
    return text + "\r\n" + (body ?? "")
}

@Suite struct HTTPTests {
    static let limit = 64

    private func startServer() throws -> (WebSocketServer, HTTPTestHandler) {
        let handler = HTTPTestHandler()
        var configuration = Configuration(
            port: 0, dynamicPaths: ["/healthz"], dynamicPrefixes: ["/api/"], maxRequestBodyBytes: Self.limit,
            logLevel: .error)
        // These tests are about framing and order, not timeouts (408 is tested elsewhere): the
        // default 5 s passed between two writes of one test under ThreadSanitizer on a loaded
        // machine (twice in six CI runs), and the server rightly closed the connection.
        configuration.requestTimeoutSeconds = 60
        let server = try WebSocketServer(configuration: configuration, handler: handler)
        server.start()
        return (server, handler)
    }

    /// The next `count` requests the handler saw.
    private func seen(_ handler: HTTPTestHandler, _ count: Int) async throws -> [SeenRequest] {
        var result: [SeenRequest] = []
        while result.count < count { result.append(try await next(handler.seen, "request \(result.count + 1)") { $0 }) }
        return result
    }

    @Test func bodiesReachTheHandlerWholeWithMethodPathAndQuery() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        let json = #"{"type":"open","tab":"t1","url":"https://example.org/ü"}"#
        // One keep-alive connection for all of them: each body is read exactly.
        let requests = [
            httpRequest("POST", "/api/rooms/r1/commands?after=a%20b&flag", body: json,
                        headers: ["authorization: Bearer s3cret", "content-type: application/json"]),
            httpRequest("PUT", "/api/rooms/r1", body: #"{"title":"x"}"#),
            httpRequest("DELETE", "/api/rooms/r1"),
            httpRequest("DELETE", "/api/rooms/r2", body: "why"),
            httpRequest("PATCH", "/api/rooms/r1", body: "p"),
            httpRequest("OPTIONS", "/api/rooms"),
            httpRequest("POST", "/api/rooms/r1/commands", body: ""),
            httpRequest("GET", "/api/rooms?after=r0"),
        ]
        var texts: [String] = []
        for request in requests { texts.append(try await c.exchange(request).text) }
        #expect(texts == [
            "POST /api/rooms/r1/commands \(json.utf8.count)", "PUT /api/rooms/r1 13", "DELETE /api/rooms/r1 0",
            "DELETE /api/rooms/r2 3", "PATCH /api/rooms/r1 1", "OPTIONS /api/rooms 0", "POST /api/rooms/r1/commands 0",
            "GET /api/rooms 0",
        ])
        #expect(try await seen(handler, 8) == [
            SeenRequest(.post, "/api/rooms/r1/commands", query: ["after": "a b", "flag": ""],
                        authorization: "Bearer s3cret", body: json),
            SeenRequest(.put, "/api/rooms/r1", body: #"{"title":"x"}"#),
            SeenRequest(.delete, "/api/rooms/r1"),
            SeenRequest(.delete, "/api/rooms/r2", body: "why"),
            SeenRequest(.patch, "/api/rooms/r1", body: "p"),
            SeenRequest(.options, "/api/rooms"),
            SeenRequest(.post, "/api/rooms/r1/commands"),
            SeenRequest(.get, "/api/rooms", query: ["after": "r0"]),
        ])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func aBodyOfTheLimitPassesAndOneByteMoreIsTooLarge() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        let atLimit = String(repeating: "a", count: Self.limit)
        let overLimit = String(repeating: "b", count: Self.limit + 1)
        let answers = [
            try await c.exchange(httpRequest("POST", "/api/x", body: atLimit)),
            try await c.exchange(httpRequest("POST", "/api/y", body: overLimit)),
            try await c.exchange(httpRequest("GET", "/api/after")),
        ]
        #expect(answers.map(\.status) == [200, 413, 200])
        #expect(answers[1].text == #"{"error":"too_large"}"#)
        // The refused body's bytes were dropped, not taken for the next request.
        #expect(answers[2].text == "GET /api/after 0")
        #expect(try await seen(handler, 3) == [
            SeenRequest(.post, "/api/x", body: atLimit),
            SeenRequest(.post, "/api/y", tooLarge: true),
            SeenRequest(.get, "/api/after"),
        ])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func aTooLargeBodyReachesTheHandlerBeforeItIsSent() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        // Only the headers and a few bytes: the handler hears of it and answers at once.
        let total = 10_000
        try c.send(httpRequest("PUT", "/api/big", headers: ["content-length: \(total)"]) + "0123456789")
        #expect(try await c.response().status == 413)
        #expect(try await seen(handler, 1) == [SeenRequest(.put, "/api/big", tooLarge: true)])
        // The rest is read and dropped; the connection stays usable.
        try c.send(String(repeating: "z", count: total - 10) + httpRequest("GET", "/api/next"))
        #expect(try await c.response().text == "GET /api/next 0")

        // Far more than can be dropped cheaply: answered, then the connection is closed.
        let d = try RawHTTPConnection(port: server.port)
        try d.send(httpRequest("POST", "/api/huge", headers: ["content-length: 50000000"]))
        let refused = try await d.response()
        #expect((refused.status, refused.headers["connection"]) == (413, "close"))
        #expect(try await d.closedByServer())
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func aDeferredAnswerArrivesAndKeepAliveGoesOn() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("POST", "/api/later/commands", body: #"{"type":"close"}"#))
        let pending = try await next(handler.later, "the deferred request") { $0 }
        #expect(pending.seen == SeenRequest(.post, "/api/later/commands", body: #"{"type":"close"}"#))
        #expect(pending.responder.isPending)
        // Answered from another thread once some other work is done.
        let durable = Task.detached { Array(#"{"ok":true}"#.utf8) }
        let answering = Task.detached {
            pending.responder.respond(HTTPResponse(
                status: 201, contentType: "application/json", body: await durable.value,
                headers: [("Location", "/api/rooms/r9")]))
        }
        let answer = try await c.response()
        await answering.value
        #expect(answer.status == 201)
        #expect(answer.headers["content-type"] == "application/json")
        #expect(answer.headers["content-length"] == "11")
        #expect(answer.headers["location"] == "/api/rooms/r9")
        #expect(answer.text == #"{"ok":true}"#)
        #expect(!pending.responder.isPending)
        // A second answer is ignored.
        pending.responder.respond(HTTPResponse(status: 500, text: "again"))

        // The same connection serves the next request, deferred (bodiless) or not.
        try c.send(httpRequest("GET", "/api/later/read"))
        let second = try await next(handler.later, "the second deferred request") { $0 }
        second.responder.respond(HTTPResponse(status: 200, text: "read"))
        #expect(try await c.response().text == "read")
        try c.send(httpRequest("GET", "/api/now"))
        #expect(try await c.response().text == "GET /api/now 0")
        #expect(pending.responder.pendingCount == 0)
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func pipelinedRequestsWaitForTheDeferredAnswerAndKeepTheirOrder() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("GET", "/api/later/first") + httpRequest("DELETE", "/api/second"))
        let first = try await next(handler.later, "the first request") { $0 }
        first.responder.respond(HTTPResponse(status: 200, text: "first"))
        #expect(try await c.response().text == "first")
        #expect(try await c.response().text == "DELETE /api/second 0")
        #expect(try await seen(handler, 2) == [SeenRequest(.get, "/api/later/first"), SeenRequest(.delete, "/api/second")])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func aTooLargeBodyAnsweredLaterIsStillDropped() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        let total = 5_000
        try c.send(httpRequest("POST", "/api/later/big", headers: ["content-length: \(total)"]) + "xy")
        let pending = try await next(handler.later, "the too-large request") { $0 }
        #expect(pending.seen == SeenRequest(.post, "/api/later/big", tooLarge: true))
        pending.responder.respond(HTTPResponse(status: 413, text: "too large"))
        #expect(try await c.response().status == 413)
        try c.send(String(repeating: "y", count: total - 2) + httpRequest("GET", "/api/next"))
        #expect(try await c.response().text == "GET /api/next 0")
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func aClientGoneBeforeTheDeferredAnswerIsHarmless() async throws {
        let (server, handler) = try startServer()
        // Gone quietly (FIN): noticed when the answer is written.
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("POST", "/api/later/quiet", body: "{}"))
        let quiet = try await next(handler.later, "the first request") { $0 }
        c.close()
        quiet.responder.respond(HTTPResponse(status: 200, text: "nobody reads this"))
        try await waitUntil("the answered exchange to be forgotten") { quiet.responder.pendingCount == 0 }

        // Gone with a reset: noticed at once (LWS_CALLBACK_CLOSED_HTTP); the answer is a no-op.
        let d = try RawHTTPConnection(port: server.port)
        try d.send(httpRequest("GET", "/api/later/reset"))
        let reset = try await next(handler.later, "the second request") { $0 }
        d.reset()
        try await waitUntil("the reset exchange to be forgotten") { !reset.responder.isPending }
        reset.responder.respond(HTTPResponse(status: 200, text: "nobody reads this"))
        #expect(reset.responder.pendingCount == 0)

        // The server goes on.
        let e = try RawHTTPConnection(port: server.port)
        try e.send(httpRequest("GET", "/healthz"))
        #expect(try await e.response().text == "GET /healthz 0")
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func statusCodesComeThroughWithContentLength() async throws {
        let (server, _) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        let statuses = [201, 409, 204, 400, 401, 403, 404, 405, 413, 429, 503, 200]
        var got: [String] = []
        for status in statuses {
            let r = try await c.exchange(httpRequest("GET", "/api/status/\(status)"))
            got.append("\(r.status) \(r.headers["content-length"] ?? "-") \(r.text)")
        }
        // A 204 has no content (HTTP forbids a content-length on it, and the handler's body is
        // not sent); every other answer says how long it is, so keep-alive goes on.
        #expect(got == statuses.map { $0 == 204 ? "204 - " : "\($0) 10 status \($0)" })
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func headSendsTheHeadersWithoutTheBody() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("HEAD", "/api/rooms/r1"))
        try c.send(httpRequest("GET", "/api/rooms/r1"))
        let head = try await c.response(head: true)
        #expect((head.status, head.headers["content-length"], head.body) == (200, "\("HEAD /api/rooms/r1 0".utf8.count)", []))
        // Had the body been sent, it would stand where this response starts.
        #expect(try await c.response().text == "GET /api/rooms/r1 0")
        #expect(try await seen(handler, 2) == [SeenRequest(.head, "/api/rooms/r1"), SeenRequest(.get, "/api/rooms/r1")])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func onlyDynamicPathsReachTheHandler() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        var answers: [RawResponse] = []
        for request in [
            httpRequest("GET", "/api/no/such/thing"), httpRequest("POST", "/elsewhere", body: "abc"),
            httpRequest("GET", "/api"), httpRequest("GET", "/healthz/more"), httpRequest("POST", "/healthz", body: "1"),
        ] {
            answers.append(try await c.exchange(request))
        }
        #expect(answers.map(\.status) == [200, 405, 404, 404, 200])
        #expect(answers[1].headers["allow"] == "GET, HEAD")
        // The handler saw only the prefixed path and the exact one, with its method.
        #expect(try await seen(handler, 2) == [SeenRequest(.get, "/api/no/such/thing"), SeenRequest(.post, "/healthz", body: "1")])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func chunkedBodiesAreDecodedAndABodylessPutHasNoBody() async throws {
        let (server, handler) = try startServer()
        let chunked = try RawHTTPConnection(port: server.port)
        // Chunks, one with an extension, and a trailer field: the handler sees the body whole.
        try chunked.send(httpRequest("POST", "/api/x", headers: ["transfer-encoding: chunked"])
            + "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nx-trailer: t\r\n\r\n")
        #expect(try await chunked.response().text == "POST /api/x 5")
        // `curl -X PUT URL`: neither content-length nor transfer-encoding, so no body (RFC 9112
        // §6.3); the connection goes on.
        try chunked.send(httpRequest("PUT", "/api/x"))
        let r2 = try await chunked.response()
        #expect((r2.status, r2.headers["connection"], r2.text) == (200, nil, "PUT /api/x 0"))
        // A chunked body over the limit reaches the handler as too large; the connection closes
        // after the answer (where such a body ends is not worth reading on to).
        try chunked.send(httpRequest("POST", "/api/big", headers: ["transfer-encoding: chunked"])
            + "40\r\n" + String(repeating: "a", count: 64) + "\r\n1\r\nb\r\n")
        let r3 = try await chunked.response()
        #expect((r3.status, r3.headers["connection"]) == (413, "close"))
        #expect(try await chunked.closedByServer())
        #expect(try await seen(handler, 3) == [
            SeenRequest(.post, "/api/x", body: "abcde"), SeenRequest(.put, "/api/x"), SeenRequest(.post, "/api/big", tooLarge: true),
        ])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func expectContinueGetsTheBodySent() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("POST", "/api/x", headers: ["content-length: 5", "expect: 100-continue"]))
        #expect(try await c.response().status == 100)
        try c.send("hello")
        #expect(try await c.response().text == "POST /api/x 5")
        #expect(try await seen(handler, 1) == [SeenRequest(.post, "/api/x", body: "hello")])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func aDroppedResponderAnswers500() async throws {
        let (server, _) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("GET", "/api/drop"))
        #expect(try await c.response().status == 500)
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func shutdownDropsPendingRequests() async throws {
        let (server, handler) = try startServer()
        let c = try RawHTTPConnection(port: server.port)
        try c.send(httpRequest("GET", "/api/later/forever"))
        let pending = try await next(handler.later, "the deferred request") { $0 }
        let started = ContinuousClock.now
        await server.shutdown(timeout: .seconds(5))
        #expect(ContinuousClock.now - started < .seconds(4), "a pending request held the shutdown up")
        #expect(try await c.closedByServer())
        #expect(pending.responder.pendingCount == 0)
        pending.responder.respond(HTTPResponse(status: 200, text: "too late"))
    }
}
