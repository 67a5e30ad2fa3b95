import Locking
import Foundation
import Testing
@testable import WebSockets
@testable import WebSocketsClient

/// What a test client heard, in order.
enum ClientEvent: Sendable, Equatable {
    case opened(ConnectionID, String?)
    case message(ConnectionID, String)
    case closed(ConnectionID, ClientClose)
}

/// Turns client callbacks into an async sequence the test reads with a deadline.
final class RecordingClientHandler: WebSocketClientHandler {
    let events: AsyncStream<ClientEvent>
    private let sink: AsyncStream<ClientEvent>.Continuation

    init() { (events, sink) = AsyncStream.makeStream(of: ClientEvent.self) }

    func opened(_ id: ConnectionID, subprotocol: String?) { sink.yield(.opened(id, subprotocol)) }
    func received(_ id: ConnectionID, message: UnsafeRawBufferPointer, binary: Bool) {
        sink.yield(.message(id, String(decoding: message, as: UTF8.self)))
    }
    func closed(_ id: ConnectionID, _ close: ClientClose) { sink.yield(.closed(id, close)) }
}

/// How the server saw a connection end.
struct Disconnect: Sendable, Equatable {
    /// The `name` the connection asked with (`?name=`), "" without one.
    var name: String
    var code: CloseCode?
    var reason: String
}

/// A server handler for the tests: welcomes, echoes, broadcasts `all:` messages, closes on `close:`,
/// and refuses upgrades that ask for `?refuse`. Reports every disconnect, in order, on `disconnects`.
final class EchoServerHandler: WebSocketServerHandler {
    let server = Locked<WebSocketServer?>(nil)
    let disconnects: AsyncStream<Disconnect>
    private let disconnectSink: AsyncStream<Disconnect>.Continuation
    private let names = Locked<[ConnectionID: String]>([:])
    private let seq = Locked(0)
    /// Every connection is on this one channel.
    static let channel = ChannelID(rawValue: 1)

    init() { (disconnects, disconnectSink) = AsyncStream.makeStream(of: Disconnect.self) }

    func shouldAccept(_ request: UpgradeRequest) -> UpgradeDecision {
        request.query["refuse"] != nil ? .reject(status: 403) : .accept
    }
    func connected(_ id: ConnectionID, request: UpgradeRequest) {
        names.withLock { $0[id] = request.query["name"] ?? "" }
        server.withLock { $0 }?.activate(id, on: Self.channel, first: [OutgoingFrame("welcome \(request.query["name"] ?? "")")], afterSeq: 0)
    }
    func received(_ id: ConnectionID, message: [UInt8]) {
        guard let s = server.withLock({ $0 }) else { return }
        let text = String(decoding: message, as: UTF8.self)
        if text.hasPrefix("all:") {
            let n = seq.withLock { $0 += 1; return $0 }
            s.broadcast(OutgoingFrame(text), seq: n, on: Self.channel)
        } else if text.hasPrefix("close:") {
            s.close(id, code: .policyViolation, reason: String(text.dropFirst(6)))
        } else {
            s.send(OutgoingFrame(message), to: id)
        }
    }
    func disconnected(_ id: ConnectionID, code: CloseCode?, reason: String) {
        let name = names.withLock { $0.removeValue(forKey: id) }
        disconnectSink.yield(Disconnect(name: name ?? "unknown connection \(id)", code: code, reason: reason))
    }
    func httpRequest(_ request: HTTPRequest, responder: HTTPResponder) {
        responder.respond(HTTPResponse(status: 404, text: "404 Not Found\n"))
    }
}

struct Deadline: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Reads elements until `match` returns a value. Throws ``Deadline`` once `seconds` have passed,
/// whether or not anything more arrives, and when the stream ends first.
func next<Element: Sendable, T>(
    _ stream: AsyncStream<Element>, _ what: String, seconds: Double = 10,
    _ match: (Element) -> T?
) async throws -> T {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while let element = try await nextElement(of: stream, before: deadline, what) {
        if let value = match(element) { return value }
    }
    throw Deadline(what: "\(what) (the stream ended)")
}

/// The stream's next element, racing the wait against `deadline`: whichever loses is cancelled
/// and awaited before this returns, so no wait outlives it. (A cancelled wait ends the stream,
/// which only happens once the test has failed.)
private func nextElement<Element: Sendable>(
    of stream: AsyncStream<Element>, before deadline: ContinuousClock.Instant, _ what: String
) async throws -> Element? {
    try await withThrowingTaskGroup(of: Element?.self) { group in
        group.addTask {
            var iterator = stream.makeAsyncIterator()
            return await iterator.next()
        }
        group.addTask {
            try await Task.sleep(until: deadline, clock: .continuous)
            throw Deadline(what: what)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

@Suite(.serialized) struct ClientTests {
    private func startServer() throws -> (WebSocketServer, EchoServerHandler) {
        let handler = EchoServerHandler()
        let server = try WebSocketServer(configuration: Configuration(port: 0, logLevel: .error), handler: handler)
        handler.server.withLock { $0 = server }
        server.start()
        return (server, handler)
    }

    @Test func urlsParse() {
        #expect(WebSocketURL("ws://127.0.0.1:8080/ws?name=a") == WebSocketURL(host: "127.0.0.1", port: 8080, path: "/ws?name=a"))
        #expect(WebSocketURL("ws://localhost") == WebSocketURL(host: "localhost", port: 80, path: "/"))
        #expect(WebSocketURL("ws://[::1]:9/x") == WebSocketURL(host: "::1", port: 9, path: "/x"))
        #expect(WebSocketURL("ws://h:9?q=1")?.path == "/?q=1")
        #expect(WebSocketURL("wss://h/") == WebSocketURL(host: "h", port: 443, path: "/", secure: true))
        #expect(WebSocketURL("http://h/") == nil)
        #expect(WebSocketURL("ws://h:0/") == nil)
        #expect(WebSocketURL(host: "::1", port: 9).hostHeader == "[::1]:9")
    }

    @Test func manyConnectionsEchoBroadcastAndCloseCodes() async throws {
        let (server, serverHandler) = try startServer()
        let handler = RecordingClientHandler()
        let client = try WebSocketClient(configuration: .init(maxConnections: 64), handler: handler)
        let events = handler.events
        let url = WebSocketURL(host: "127.0.0.1", port: server.port, path: "/ws")

        // Ten connections, each offering the subprotocol; messages queued before the open wait for it.
        var ids: [ConnectionID] = []
        for i in 0..<10 {
            let id = client.connect(url.with(path: "/ws?name=n\(i)"), subprotocols: "tabd.v1")
            client.send("early \(i)", on: id)
            ids.append(id)
        }
        var opened: [ConnectionID: String?] = [:]
        var got: [ConnectionID: [String]] = [:]
        while opened.count < 10 || got.values.reduce(0, { $0 + $1.count }) < 20 {
            let event = try await next(events, "opens and echoes") { $0 }
            switch event {
            case let .opened(id, p): opened[id] = p
            case let .message(id, text): got[id, default: []].append(text)
            case let .closed(id, c): Issue.record("\(id) closed early: \(c)")
            }
        }
        for (i, id) in ids.enumerated() {
            #expect(opened[id] == .some("tabd.v1"))
            #expect(got[id] == ["welcome n\(i)", "early \(i)"])
        }

        // A broadcast reaches every connection once; a large message is reassembled.
        client.send("all:hi", on: ids[3])
        var reached = Set<ConnectionID>()
        while reached.count < 10 {
            let id = try await next(events, "the broadcast") { if case let .message(id, "all:hi") = $0 { id } else { nil } }
            #expect(reached.insert(id).inserted)
        }
        let big = String(repeating: "x", count: 60_000)
        client.send(big, on: ids[0])
        _ = try await next(events, "the big echo") { if case let .message(id, text) = $0, id == ids[0], text == big { true } else { nil } }

        // Server-initiated close with a code; client close; client abort.
        client.send("close:bye", on: ids[1])
        let c1 = try await next(events, "the server's close") { if case let .closed(id, c) = $0, id == ids[1] { c } else { nil } }
        #expect(c1 == ClientClose(code: 1008, reason: "bye", wasOpen: true))
        client.close(ids[2], code: .goingAway, reason: "done")
        let c2 = try await next(events, "our close") { if case let .closed(id, c) = $0, id == ids[2] { c } else { nil } }
        #expect(c2 == ClientClose(code: 1001, reason: "done", wasOpen: true))
        client.abort(ids[4])
        let c4 = try await next(events, "the abort") { if case let .closed(id, c) = $0, id == ids[4] { c } else { nil } }
        #expect(c4 == ClientClose(code: nil, reason: "aborted", wasOpen: true))
        // A message over the server's limit: 1009.
        client.send(String(repeating: "y", count: 70_000), on: ids[5])
        let c5 = try await next(events, "the 1009") { if case let .closed(id, c) = $0, id == ids[5] { c } else { nil } }
        #expect(c5 == ClientClose(code: 1009, reason: "message too big", wasOpen: true))
        // The server saw these four go, each with the close it decided on or was sent.
        var gone: [Disconnect] = []
        while gone.count < 4 {
            gone.append(try await next(serverHandler.disconnects, "the server's four disconnects") { $0 })
        }
        #expect(gone.sorted { $0.name < $1.name } == [
            Disconnect(name: "n1", code: .policyViolation, reason: "bye"),
            Disconnect(name: "n2", code: .goingAway, reason: "done"),
            Disconnect(name: "n4", code: nil, reason: "connection lost"),
            Disconnect(name: "n5", code: .messageTooBig, reason: "message too big"),
        ])

        // A refused upgrade reports the HTTP status; a closed port fails to open.
        let refused = client.connect(url.with(path: "/ws?refuse=1"))
        let cr = try await next(events, "the refusal") { if case let .closed(id, c) = $0, id == refused { c } else { nil } }
        #expect((cr.code, cr.wasOpen, cr.httpStatus) == (nil, false, 403))  // the reason is libwebsockets' text
        let nowhere = client.connect(WebSocketURL(host: "127.0.0.1", port: 1, path: "/ws"))
        let cn = try await next(events, "the failed connect") { if case let .closed(id, c) = $0, id == nowhere { c } else { nil } }
        #expect((cn.code, cn.wasOpen, cn.httpStatus) == (nil, false, nil))

        // Stopping reports every connection still open.
        #expect(client.connectionCount == 6)
        await client.shutdown()
        var closedAtStop = 0
        while closedAtStop < 6 {
            _ = try await next(events, "closes at shutdown") { if case .closed = $0 { true } else { nil } }
            closedAtStop += 1
        }
        #expect(client.connectionCount == 0)
        // The server saw each of the other six dropped, once, before it stops.
        var rest: [Disconnect] = []
        while rest.count < 6 {
            rest.append(try await next(serverHandler.disconnects, "the server's other six disconnects") { $0 })
        }
        #expect(rest.sorted { $0.name < $1.name } == ["n0", "n3", "n6", "n7", "n8", "n9"].map {
            Disconnect(name: $0, code: nil, reason: "connection lost")
        })
        #expect(server.connectionCount == 0)
        await server.shutdown(timeout: .seconds(2))
    }

    /// Failed connects (refused, to "localhost" with both address families) beside live
    /// connections, many times over: each failure is reported once, the live connections keep
    /// working, and nothing of a failed attempt is left behind (lws 4.1's libuv loop closes a
    /// refused socket behind libuv's back; the next socket with that number then trips it).
    @Test(arguments: [WebSocketEventLoop.libuv, .poll])
    func failedConnectsLeaveNothingBehind(loop: WebSocketEventLoop) async throws {
        let (server, _) = try startServer()
        let handler = RecordingClientHandler()
        let client = try WebSocketClient(configuration: .init(maxConnections: 64, eventLoop: loop), handler: handler)
        let events = handler.events
        let live = client.connect(WebSocketURL(host: "127.0.0.1", port: server.port, path: "/ws"))
        _ = try await next(events, "the live open") { if case let .opened(id, _) = $0, id == live { true } else { nil } }
        for round in 0..<300 {
            let host = round % 2 == 0 ? "localhost" : "127.0.0.1"
            let nowhere = client.connect(WebSocketURL(host: host, port: 1, path: "/ws"))
            let other = client.connect(WebSocketURL(host: "127.0.0.1", port: server.port, path: "/ws"))
            var failed = false, opened = false
            while !(failed && opened) {
                let event = try await next(events, "round \(round)") { $0 }
                switch event {
                case let .closed(id, c) where id == nowhere:
                    #expect(!failed && !c.wasOpen)
                    failed = true
                case let .opened(id, _) where id == other: opened = true
                case .message, .closed(_, ClientClose(code: 1000, reason: "", wasOpen: true)): break
                default: Issue.record("round \(round): \(event)")
                }
            }
            client.close(other, code: .normal, reason: "")
            client.send("r\(round)", on: live)
            _ = try await next(events, "the echo of round \(round)") { if case let .message(id, text) = $0, id == live, text == "r\(round)" { true } else { nil } }
        }
        await client.shutdown()
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func sendsFromOtherThreadsKeepTheirOrder() async throws {
        let (server, _) = try startServer()
        let handler = RecordingClientHandler()
        let client = try WebSocketClient(configuration: .init(maxConnections: 8), handler: handler)
        let events = handler.events
        let id = client.connect(WebSocketURL(host: "127.0.0.1", port: server.port, path: "/ws"))
        _ = try await next(events, "open") { if case .opened = $0 { true } else { nil } }
        let n = 2_000
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 {
                group.addTask { for i in 0..<n { client.send("t\(t)-\(i)", on: id) } }
            }
        }
        var last = [Int](repeating: -1, count: 4)
        var count = 0
        while count < 4 * n {
            let text = try await next(events, "echoes") { if case let .message(_, t) = $0, t.hasPrefix("t") { t } else { nil } }
            let parts = text.dropFirst().split(separator: "-").compactMap { Int($0) }
            #expect(parts[1] == last[parts[0]] + 1, "echo \(text) out of order")
            last[parts[0]] = parts[1]
            count += 1
        }
        await client.shutdown()
        await server.shutdown(timeout: .seconds(2))
    }
}
