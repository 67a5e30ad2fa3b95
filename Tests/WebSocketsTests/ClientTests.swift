import Locking
import Foundation
import Testing
@testable import WebSockets

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

/// A server handler for the tests: welcomes, echoes, broadcasts `all:` messages, closes on `close:`,
/// and refuses upgrades that ask for `?refuse`.
final class EchoServerHandler: WebSocketServerHandler {
    let server = Locked<WebSocketServer?>(nil)
    let disconnects = Locked<[ConnectionID: CloseCode?]>([:])
    private let seq = Locked(0)

    func shouldAccept(_ request: UpgradeRequest) -> UpgradeDecision {
        request.query["refuse"] != nil ? .reject(status: 403) : .accept
    }
    func connected(_ id: ConnectionID, request: UpgradeRequest) {
        server.withLock { $0 }?.activate(id, first: [OutgoingFrame("welcome \(request.query["name"] ?? "")")], afterSeq: 0)
    }
    func received(_ id: ConnectionID, message: [UInt8]) {
        guard let s = server.withLock({ $0 }) else { return }
        let text = String(decoding: message, as: UTF8.self)
        if text.hasPrefix("all:") {
            let n = seq.withLock { $0 += 1; return $0 }
            s.broadcast(OutgoingFrame(text), seq: n)
        } else if text.hasPrefix("close:") {
            s.close(id, code: .policyViolation, reason: String(text.dropFirst(6)))
        } else {
            s.send(OutgoingFrame(message), to: id)
        }
    }
    func disconnected(_ id: ConnectionID, code: CloseCode?, reason: String) {
        disconnects.withLock { $0[id] = code }
    }
    func httpRequest(_ request: HTTPRequest) -> HTTPResponse? { nil }
}

struct Deadline: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Reads events until `match` returns a value, failing after `seconds`.
func next<T: Sendable>(
    _ iterator: inout AsyncStream<ClientEvent>.Iterator, _ what: String, seconds: Double = 10,
    _ match: (ClientEvent) -> T?
) async throws -> T {
    let start = ContinuousClock.now
    while ContinuousClock.now - start < .seconds(seconds) {
        guard let event = await iterator.next() else { break }
        if let value = match(event) { return value }
    }
    throw Deadline(what: what)
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
        #expect(WebSocketURL("wss://h/") == nil)
        #expect(WebSocketURL("ws://h:0/") == nil)
        #expect(WebSocketURL(host: "::1", port: 9).hostHeader == "[::1]:9")
    }

    @Test func manyConnectionsEchoBroadcastAndCloseCodes() async throws {
        let (server, serverHandler) = try startServer()
        let handler = RecordingClientHandler()
        let client = try WebSocketClient(configuration: .init(maxConnections: 64), handler: handler)
        var events = handler.events.makeAsyncIterator()
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
            let event = try await next(&events, "opens and echoes") { $0 }
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
            let id = try await next(&events, "the broadcast") { if case let .message(id, "all:hi") = $0 { id } else { nil } }
            #expect(reached.insert(id).inserted)
        }
        let big = String(repeating: "x", count: 60_000)
        client.send(big, on: ids[0])
        _ = try await next(&events, "the big echo") { if case let .message(id, text) = $0, id == ids[0], text == big { true } else { nil } }

        // Server-initiated close with a code; client close; client abort.
        client.send("close:bye", on: ids[1])
        let c1 = try await next(&events, "the server's close") { if case let .closed(id, c) = $0, id == ids[1] { c } else { nil } }
        #expect(c1.code == 1008 && c1.reason == "bye" && c1.wasOpen)
        client.close(ids[2], code: .goingAway, reason: "done")
        let c2 = try await next(&events, "our close") { if case let .closed(id, c) = $0, id == ids[2] { c } else { nil } }
        #expect(c2.code == 1001 && c2.wasOpen)
        client.abort(ids[4])
        let c4 = try await next(&events, "the abort") { if case let .closed(id, c) = $0, id == ids[4] { c } else { nil } }
        #expect(c4.code == nil)
        // A message over the server's limit: 1009.
        client.send(String(repeating: "y", count: 70_000), on: ids[5])
        let c5 = try await next(&events, "the 1009") { if case let .closed(id, c) = $0, id == ids[5] { c } else { nil } }
        #expect(c5.code == 1009)
        try await Task.sleep(for: .milliseconds(200))
        serverHandler.disconnects.withLock { d in
            #expect(d.count == 4)
        }

        // A refused upgrade reports the HTTP status; a closed port fails to open.
        let refused = client.connect(url.with(path: "/ws?refuse=1"))
        let cr = try await next(&events, "the refusal") { if case let .closed(id, c) = $0, id == refused { c } else { nil } }
        #expect(!cr.wasOpen && cr.httpStatus == 403)
        let nowhere = client.connect(WebSocketURL(host: "127.0.0.1", port: 1, path: "/ws"))
        let cn = try await next(&events, "the failed connect") { if case let .closed(id, c) = $0, id == nowhere { c } else { nil } }
        #expect(!cn.wasOpen)

        // Stopping reports every connection still open.
        #expect(client.connectionCount == 6)
        await client.shutdown()
        var closedAtStop = 0
        while closedAtStop < 6 {
            _ = try await next(&events, "closes at shutdown") { if case .closed = $0 { true } else { nil } }
            closedAtStop += 1
        }
        #expect(client.connectionCount == 0)
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func sendsFromOtherThreadsKeepTheirOrder() async throws {
        let (server, _) = try startServer()
        let handler = RecordingClientHandler()
        let client = try WebSocketClient(configuration: .init(maxConnections: 8), handler: handler)
        var events = handler.events.makeAsyncIterator()
        let id = client.connect(WebSocketURL(host: "127.0.0.1", port: server.port, path: "/ws"))
        _ = try await next(&events, "open") { if case .opened = $0 { true } else { nil } }
        let n = 2_000
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 {
                group.addTask { for i in 0..<n { client.send("t\(t)-\(i)", on: id) } }
            }
        }
        var last = [Int](repeating: -1, count: 4)
        var count = 0
        while count < 4 * n {
            let text = try await next(&events, "echoes") { if case let .message(_, t) = $0, t.hasPrefix("t") { t } else { nil } }
            let parts = text.dropFirst().split(separator: "-").compactMap { Int($0) }
            #expect(parts[1] == last[parts[0]] + 1, "echo \(text) out of order")
            last[parts[0]] = parts[1]
            count += 1
        }
        await client.shutdown()
        await server.shutdown(timeout: .seconds(2))
    }
}
