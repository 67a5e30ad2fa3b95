import Foundation
import Locking
import TabdClient
import Testing

/// Fresh tokens, cancelling and bounded subscriptions of ``TabdClient``, with the test as
/// the server (``ScriptedTransport``): what goes on the wire, and what the app sees.
@Suite(.serialized)
struct TokensAndCancellingTests {
    /// A JWT-shaped token (unsigned: the client reads only its `exp`) that runs out at `exp`.
    static func token(_ name: String, exp: Double) -> String {
        func b64(_ s: String) -> String {
            Data(s.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_")
        }
        return b64(#"{"alg":"HS256"}"#) + "." + b64(#"{"exp":\#(exp),"sub":"\#(name)"}"#) + ".sig"
    }

    func connect(_ transport: ScriptedTransport, options: TabdClient.Options) async throws -> (TabdClient, ScriptedTransport.Connection) {
        var options = options
        options.transport = transport
        async let client = TabdClient.connect(url: "http://example.test:8080/", room: "main", name: "app", options: options)
        let connection = try await transport.nextConnection()
        connection.reply(Frames.welcome(seq: 5))
        return (try await client, connection)
    }

    @Test func aCommandWhoseTaskIsCancelledBeforeItIsSentIsNeverSent() async throws {
        let transport = ScriptedTransport()
        // The reconnect waits 1 to 2 s: the tap below is issued and cancelled long before.
        let (client, first) = try await connect(transport, options: .init(initialBackoff: .seconds(2), maxBackoff: .seconds(2)))
        // A task cancelled before it asks: nothing goes out.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await client.tap("profile")
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        // Disconnected: a command waits for the next welcome; cancelled meanwhile, it is
        // withdrawn and never sent.
        let updates = await client.updates()
        first.drop()
        _ = try await waitFor(updates, "reconnecting") { if case .reconnecting = $0 { true } else { false } }
        let waiting = Task { try await client.tap("profile") }
        try await Task.sleep(for: .milliseconds(20)) // let it reach the client (it then waits there)
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        let second = try await transport.nextConnection()
        second.reply(Frames.welcome(seq: 5))
        let kept = Task { try await client.select("home") }
        let frame = try await second.nextFrame()
        #expect(frame["type"]?.stringValue == "select", "the cancelled tap was not sent: \(frame.compactString)")
        second.reply(#"{"type":"ack","ref":"\#(frame["ref"]!.stringValue!)","seq":5}"#)
        #expect(try await kept.value == 5)
        #expect(first.sentCount == 0)
        await client.close()
    }

    @Test func aCommandCancelledInFlightStopsWaitingAndItsOutcomeIsStillFolded() async throws {
        let transport = ScriptedTransport()
        let (client, server) = try await connect(transport, options: .init())
        let tap = Task { try await client.tap("home") }
        let frame = try await server.nextFrame()
        tap.cancel()
        await #expect(throws: CancellationError.self) { try await tap.value }
        // tabd answers all the same: its events are folded, and the next command's answer
        // is taken in its turn.
        server.reply(Frames.scrollToTop(seq: 6, count: 1))
        server.reply(#"{"type":"ack","ref":"\#(frame["ref"]!.stringValue!)","seq":6}"#)
        let next = Task { try await client.pop() }
        let second = try await server.nextFrame()
        server.reply(#"{"type":"ack","ref":"\#(second["ref"]!.stringValue!)","seq":6}"#)
        #expect(try await next.value == 6)
        #expect(await client.state.scrollToTop == 1)
        await client.close()
    }

    @Test func aCommandPastItsDeadlineFailsAndTheClientGoesOn() async throws {
        let transport = ScriptedTransport()
        let (client, server) = try await connect(transport, options: .init(commandTimeout: .milliseconds(50)))
        do {
            try await client.tap("home")
            Issue.record("no answer, yet the tap returned")
        } catch let error as TabdClientError {
            #expect(error == .deadlineExceeded)
        }
        let late = try await server.nextFrame()
        server.reply(#"{"type":"ack","ref":"\#(late["ref"]!.stringValue!)","seq":5}"#)
        let answered = Task { try await client.perform(.pop(tab: nil), timeout: .seconds(10)) }
        let frame = try await server.nextFrame()
        server.reply(#"{"type":"ack","ref":"\#(frame["ref"]!.stringValue!)","seq":5}"#)
        #expect(try await answered.value == 5)
        await client.close()
    }

    @Test func theProviderGivesEachConnectionItsTokenAndARefreshGoesOnTheOpenConnection() async throws {
        let transport = ScriptedTransport()
        let asked = Locked<[TabdClient.TokenRequest.Reason]>([])
        let issued = Locked(0)
        let provider: TabdClient.TokenProvider = { request in
            asked.withLock { $0.append(request.reason) }
            let n = issued.withLock { $0 += 1; return $0 }
            // Two seconds of life: the refresh is due half a second before the end.
            return Self.token("t\(n)", exp: Date().timeIntervalSince1970 + 2)
        }
        let (client, first) = try await connect(transport, options: .init(initialBackoff: .milliseconds(1), tokenProvider: provider))
        #expect(first.authorization == "Bearer " + (first.authorization?.dropFirst(7).description ?? ""))
        #expect(first.authorization?.contains(".") == true && asked.withLock { $0 } == [.connect])
        // Before t1 runs out, t2 goes to tabd on this connection.
        let refresh = try await first.nextFrame()
        #expect(refresh["type"]?.stringValue == "refresh")
        #expect(asked.withLock { $0 } == [.connect, .refresh])
        let t2 = try #require(refresh["token"]?.stringValue)
        #expect(t2 != first.authorization?.dropFirst(7).description)
        first.reply(#"{"type":"ack","ref":"\#(refresh["ref"]!.stringValue!)","seq":5}"#)
        // And again before t2 runs out: still no second connection.
        let again = try await first.nextFrame()
        #expect(again["type"]?.stringValue == "refresh")
        #expect(transport.connectionsOpened == 1)
        // Refused: the client drops the connection and opens one with a fresh token, resuming.
        first.reply(#"{"type":"error","ref":"\#(again["ref"]!.stringValue!)","code":"unauthorized","message":"token expired"}"#)
        let second = try await transport.nextConnection()
        #expect(second.url.contains("resume=5&epoch=e1"))
        #expect(asked.withLock { $0.last } == .connect)
        #expect(second.authorization != first.authorization)
        await client.close()
    }

    @Test func aTokenThatRanOutIsNoReasonToCloseWithAProviderAndNoneToGiveCloses() async throws {
        let transport = ScriptedTransport()
        let tokens = Locked<[String?]>(["a.b.c", "d.e.f", nil])
        let provider: TabdClient.TokenProvider = { _ in tokens.withLock { $0.removeFirst() } }
        let (client, first) = try await connect(transport, options: .init(initialBackoff: .milliseconds(1), tokenProvider: provider))
        #expect(first.authorization == "Bearer a.b.c")
        first.close(code: 4001, reason: "token expired")
        let second = try await transport.nextConnection()
        #expect(second.authorization == "Bearer d.e.f")
        #expect(second.url.contains("resume=5"))
        second.reply(Frames.resumed(client: "c2"))
        second.drop()
        let updates = await client.updates()
        let seen = try await waitFor(updates, "closed") { if case .closed = $0 { true } else { false } }
        guard case let .closed(error)? = seen.last else { return }
        #expect(error == .closed(code: nil, reason: "the token provider has no token to give"))
    }

    @Test func aSubscriptionThatDoesNotKeepUpIsBoundedAndSkipsAheadToASnapshot() async throws {
        let transport = ScriptedTransport()
        let (client, server) = try await connect(transport, options: .init(bufferLimit: 8))
        let updates = await client.updates()
        let events = await client.events()
        // 200 batches while neither subscription reads.
        for n in 1...200 { server.reply(Frames.scrollToTop(seq: 5 + n, count: n)) }
        try await waitForSeq(client, 205)
        let final = await client.state
        await client.close()
        var received: [TabdClient.Update] = []
        for await u in updates { received.append(u) }
        // Bounded: never more than the buffer's 8 held for it, however far behind it was.
        #expect(received.count <= 8, "\(received.count) updates")
        #expect(received.contains { if case .snapshot = $0 { true } else { false } })
        #expect(received.last.map { if case .closed = $0 { true } else { false } } == true, "the end is said")
        var state: Snapshot?
        for u in received {
            switch u {
            case let .snapshot(s): state = s
            case let .events(batch): try state?.apply(batch)
            default: break
            }
        }
        #expect(state == final, "folding what the slow consumer got gives the client's state")
        var seqs: [Int] = []
        for await e in events { seqs.append(e.seq) }
        #expect(seqs == Array(6...13), "events() held its 8 oldest and dropped the rest: \(seqs)")
    }
}
