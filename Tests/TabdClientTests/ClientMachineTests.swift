import Coordinator
import Testing
@testable import TabdClient

/// The client's rules without a transport or a clock: welcomes, commands and their
/// answers, gaps and resyncs, drops, reconnects with resume, protocol violations, closing.
@Suite struct ClientMachineTests {
    typealias Machine = ClientMachine
    typealias Action = ClientMachine.Action

    static func machine(reconnects: Bool = true) throws -> Machine {
        Machine(endpoint: try Endpoint(url: "ws://127.0.0.1:9/ws", room: "kiosk", name: nil, token: nil),
                settings: .init(reconnects: reconnects, initialBackoff: .milliseconds(100), maxBackoff: .seconds(1), connectTimeout: .seconds(3)))
    }

    static let origin: Snapshot = {
        var s = try! Coordinator.origin(tabs: TabInfo.defaults)
        s.seq = 4
        return s
    }()

    static func welcome(epoch: String = "e1", resumed: Bool = false, seq: Int = 4) -> [UInt8] {
        JSONValue.object([
            ("type", .string("welcome")), ("protocol", .int(1)), ("server", .string("tabd 0.1.0")), ("client", .string("c1")),
            ("room", .string("kiosk")), ("role", .string("control")), ("epoch", .string(epoch)), ("resumed", .bool(resumed)),
        ] + (resumed ? [] : [("snapshot", snapshot(seq: seq).json)])).compactBytes
    }

    /// The origin's state at `seq`.
    static func snapshot(seq: Int) -> Snapshot {
        var s = origin
        s.seq = seq
        return s
    }

    static func events(_ seq: Int, offset: Double = 1) -> [UInt8] {
        ServerFrame.events(EventBatch(by: "c1", ref: nil, events: [SequencedEvent(seq: seq, event: .scrolled(tab: "home", offset: offset))])).bytes
    }

    static func sent(_ actions: [Action]) -> [JSONValue] {
        actions.compactMap { if case let .send(frame) = $0 { try? JSONParser.parse(frame) } else { nil } }
    }

    /// A machine welcomed on its first connection (generation 1).
    static func welcomed() throws -> Machine {
        var m = try machine()
        _ = m.start()
        _ = m.received(welcome(), generation: 1)
        return m
    }

    @Test func theFirstConnectionIsWelcomedAndCommandsWaitForIt() throws {
        var m = try Self.machine()
        let start = m.start()
        #expect(start == [.open(url: "ws://127.0.0.1:9/ws?room=kiosk", authorization: nil, generation: 1), .scheduleWelcomeTimeout(generation: 1, after: .seconds(3))])
        #expect(m.request(.tap(tab: "home"), id: 7).isEmpty, "nothing is sent before the welcome")
        let welcomed = m.received(Self.welcome(), generation: 1)
        #expect(welcomed.first == .publish(.connected(m.session, resumed: false)))
        #expect(welcomed.contains(.publish(.snapshot(Self.origin))))
        #expect(Self.sent(welcomed).map { $0["type"] } == [.string("tap")], "the waiting command goes out after the welcome")
        #expect(welcomed.last == .firstWelcome(nil))
        #expect(m.connection == .connected && m.state == Self.origin && m.session.epoch == "e1")
        // The ack answers it; a batch before it is folded first (the server sends it first).
        #expect(m.received(Self.events(5, offset: 3), generation: 1).count == 1)
        #expect(m.received(Array(#"{"type":"ack","ref":"1","seq":5}"#.utf8), generation: 1) == [.reply(7, .success(.ack(5)))])
        #expect(m.state.seq == 5 && m.state.tabs[0].scroll == 3)
    }

    @Test func inputOfAnOlderConnectionIsIgnored() throws {
        var m = try Self.welcomed()
        #expect(m.received(Self.events(5), generation: 0).isEmpty)
        #expect(m.closed(TransportClose(code: 1006, reason: "", wasOpen: true), generation: 0, jitter: 1).isEmpty)
        #expect(m.state.seq == 4)
    }

    @Test func aGapAsksForOneSyncAndAnswersWaitForItsSnapshot() throws {
        var m = try Self.welcomed()
        _ = m.request(.tap(tab: "home"), id: 1)
        // Seq 7 does not follow 4: one sync, and nothing folded.
        let gap = m.received(Self.events(7), generation: 1)
        #expect(Self.sent(gap).map { $0["type"] } == [.string("sync")])
        #expect(Self.sent(m.received(Self.events(8), generation: 1)).isEmpty, "one sync at a time")
        #expect(m.state.seq == 4)
        // The tap's ack comes before the snapshot: held, so it never returns before `state` has its events.
        #expect(m.received(Array(#"{"type":"ack","ref":"1","seq":8}"#.utf8), generation: 1).isEmpty)
        var fresh = Self.origin
        fresh.seq = 8
        let snapshot = ServerFrame.snapshot(ref: "2", fresh).bytes
        #expect(m.received(snapshot, generation: 1) == [.publish(.snapshot(fresh)), .reply(1, .success(.ack(8)))])
        #expect(m.state == fresh)
    }

    @Test func aRefusedResyncAsksAgainAfterItsDelayHoldingTheAnswersMeanwhile() throws {
        var m = try Self.welcomed()
        _ = m.request(.tap(tab: "home"), id: 1)
        _ = m.received(Self.events(7), generation: 1)
        #expect(m.received(Array(#"{"type":"ack","ref":"1","seq":7}"#.utf8), generation: 1).isEmpty)
        // tabd refuses the sync before parsing it (no ref): not asked again at once, which
        // tabd would refuse too until the connection's budget refills.
        let refusal = Array(#"{"type":"error","ref":null,"code":"rate_limited","message":"slow down"}"#.utf8)
        #expect(m.received(refusal, generation: 1) == [.scheduleResync(generation: 1, after: .milliseconds(500))])
        #expect(Self.sent(m.received(Self.events(8), generation: 1)).isEmpty, "a batch that does not fold meanwhile asks nothing")
        #expect(m.resyncDue(generation: 0).isEmpty, "a delay of another connection")
        let again = m.resyncDue(generation: 1)
        #expect(Self.sent(again).map { $0["type"] } == [.string("sync")])
        #expect(m.resyncDue(generation: 1).isEmpty, "asked once")
        #expect(m.state.seq == 4, "the ack is still held: the state does not hold its seq")
        var fresh = Self.origin
        fresh.seq = 8
        #expect(m.received(ServerFrame.snapshot(ref: "3", fresh).bytes, generation: 1)
            == [.publish(.snapshot(fresh)), .reply(1, .success(.ack(7)))])
    }

    @Test func anAckHeldAcrossADropFailsWhenTheNextWelcomeIsOfANewHistory() throws {
        var m = try Self.welcomed()
        _ = m.request(.tap(tab: "home"), id: 1)
        _ = m.received(Self.events(7), generation: 1)   // a gap: a snapshot is asked for
        #expect(m.received(Array(#"{"type":"ack","ref":"1","seq":7}"#.utf8), generation: 1).isEmpty, "held for the snapshot")
        _ = m.closed(TransportClose(code: 1006, reason: "", wasOpen: true), generation: 1, jitter: 1)
        _ = m.reconnectDue(generation: 2)
        // Another history, already past seq 7: its seq 7 is not this command's.
        let welcome = m.received(Self.welcome(epoch: "e2", seq: 20), generation: 3)
        #expect(welcome.contains(.reply(1, .failure(.connectionLost))), "\(welcome)")
        #expect(!welcome.contains(.reply(1, .success(.ack(7)))))
    }

    @Test func aDropFailsWhatWasInFlightAndResumesAfterABackoff() throws {
        var m = try Self.welcomed()
        _ = m.request(.tap(tab: "home"), id: 1)
        let drop = TransportClose(code: 1006, reason: "", wasOpen: true)
        let lost = m.closed(drop, generation: 1, jitter: 0.5)
        #expect(lost == [.reply(1, .failure(.connectionLost)), .publish(.disconnected(drop)),
                         .publish(.reconnecting(attempt: 1, delay: .milliseconds(50))), .scheduleReconnect(generation: 2, after: .milliseconds(50))])
        #expect(m.connection == .reconnecting(attempt: 1))
        // Issued while down: waits for the next welcome.
        #expect(m.request(.select(tab: "profile"), id: 2).isEmpty)
        #expect(m.reconnectDue(generation: 1).isEmpty, "a stale timer does nothing")
        let reopen = m.reconnectDue(generation: 2)
        #expect(reopen.first == .open(url: "ws://127.0.0.1:9/ws?room=kiosk&resume=4&epoch=e1", authorization: nil, generation: 3))
        let resumed = m.received(Self.welcome(resumed: true), generation: 3)
        #expect(resumed.first == .publish(.connected(m.session, resumed: true)))
        #expect(!resumed.contains(.publish(.snapshot(Self.origin))), "a resume keeps the state")
        // The catch-up ping first, then the command that waited.
        #expect(Self.sent(resumed).map { $0["type"] } == [.string("ping"), .string("select")])
        // The missed batches come before the ping's pong: with it, the client has caught up.
        let catchUp = try #require(Self.sent(resumed).first?["ref"]?.stringValue)
        #expect(m.received(Array(#"{"type":"pong","ref":"\#(catchUp)"}"#.utf8), generation: 3) == [.publish(.caughtUp)])
        // Failing again: the delay doubles, and is capped.
        _ = m.closed(drop, generation: 3, jitter: 1)
        _ = m.reconnectDue(generation: 4)
        let again = m.closed(TransportClose(code: nil, reason: "refused", wasOpen: false), generation: 5, jitter: 1)
        #expect(again.contains(.scheduleReconnect(generation: 6, after: .milliseconds(200))))
        #expect(m.backoff(10) == .seconds(1))
    }

    @Test func aReconnectThatCannotHelpClosesForGood() throws {
        for close in [TransportClose(code: 4404, reason: "room deleted", wasOpen: true),
                      TransportClose(code: 4001, reason: "token expired", wasOpen: true),
                      TransportClose(code: nil, reason: "", wasOpen: false, httpStatus: 403)] {
            var m = try Self.welcomed()
            _ = m.request(.tap(tab: "home"), id: 1)
            let actions = m.closed(close, generation: 1, jitter: 1)
            let error = Machine.error(for: close)
            #expect(actions.last == .finished(error), "\(close)")
            #expect(!actions.contains { if case .scheduleReconnect = $0 { true } else { false } })
            #expect(m.request(.ping, id: 2) == [.reply(2, .failure(error))], "later commands fail at once")
        }
        var once = try Self.machine(reconnects: false)
        _ = once.start()
        _ = once.received(Self.welcome(), generation: 1)
        #expect(once.closed(TransportClose(code: 1006, reason: "", wasOpen: true), generation: 1, jitter: 1).last
            == .finished(.closed(code: 1006, reason: "closed with 1006")))
    }

    @Test func theFirstConnectionFailingEndsConnect() throws {
        var m = try Self.machine()
        _ = m.start()
        let timedOut = m.welcomeTimedOut(generation: 1, jitter: 1)
        #expect(timedOut.first == .closeConnection(code: 1000))
        #expect(timedOut.suffix(2) == [.finished(.timedOut), .firstWelcome(.timedOut)])
        var refused = try Self.machine()
        _ = refused.start()
        let close = TransportClose(code: nil, reason: "", wasOpen: false, httpStatus: 401)
        #expect(refused.closed(close, generation: 1, jitter: 1).last == .firstWelcome(.connectFailed(status: 401, reason: "")))
        var welcomed = try Self.welcomed()
        #expect(welcomed.welcomeTimedOut(generation: 1, jitter: 1).isEmpty, "a welcomed connection has no deadline")
    }

    @Test func aProtocolViolationDropsTheConnectionAndTheNextStartsOver() throws {
        var m = try Self.welcomed()
        let violation = m.received(Array(#"{"type":"ack","ref":"9","seq":5}"#.utf8), generation: 1, jitter: 1)
        #expect(violation.first == .closeConnection(code: 1002), "an answer to no command")
        let reopen = m.reconnectDue(generation: 2)
        #expect(reopen.first == .open(url: "ws://127.0.0.1:9/ws?room=kiosk", authorization: nil, generation: 3), "no resume: the state may be wrong")
        // A frame type this client does not know is ignored; an unreadable one is a violation.
        _ = m.received(Self.welcome(), generation: 3)
        #expect(m.received(Array(#"{"type":"presenceCounted","count":3}"#.utf8), generation: 3).isEmpty)
        #expect(m.received(Array("{".utf8), generation: 3, jitter: 1).first == .closeConnection(code: 1002))
    }

    @Test func aNewEpochReplacesTheState() throws {
        var m = try Self.welcomed()
        _ = m.received(Self.events(5), generation: 1)
        _ = m.closed(TransportClose(code: 1001, reason: "", wasOpen: true), generation: 1, jitter: 1)
        _ = m.reconnectDue(generation: 2)
        let fresh = m.received(Self.welcome(epoch: "e2"), generation: 3)
        #expect(fresh.contains(.publish(.snapshot(Self.origin))))
        #expect(m.state == Self.origin && m.session.epoch == "e2")
        // A resumed welcome for another history is a violation.
        _ = m.closed(TransportClose(code: 1001, reason: "", wasOpen: true), generation: 3, jitter: 1)
        _ = m.reconnectDue(generation: 4)
        #expect(m.received(Self.welcome(epoch: "e3", resumed: true), generation: 5, jitter: 1).first == .closeConnection(code: 1002))
    }

    @Test func closingSendsACloseAndEndsOnceItIsAnswered() throws {
        var m = try Self.welcomed()
        _ = m.request(.tap(tab: "home"), id: 1)
        #expect(m.closeRequested() == [.closeConnection(code: 1000), .scheduleCloseTimeout])
        #expect(m.closeRequested().isEmpty, "a second close waits for the first")
        #expect(m.hasConnection)
        let ended = m.closed(TransportClose(code: 1000, reason: "", wasOpen: true), generation: 1, jitter: 1)
        #expect(ended == [.reply(1, .failure(Machine.closedByClient)), .publish(.closed(Machine.closedByClient)), .finished(Machine.closedByClient)])
        #expect(!m.hasConnection && m.isClosed)
        #expect(m.closeTimedOut().isEmpty && m.finish(Machine.closedByClient).isEmpty, "closed once")
        // tabd never answers the close: the timeout ends it.
        var silent = try Self.welcomed()
        _ = silent.closeRequested()
        #expect(silent.closeTimedOut().last == .finished(Machine.closedByClient))
    }
}
