import Foundation
import Testing
@testable import TabdClient

/// The scripted sessions of `Tests/sessions/` (frames from tabd in, what the client does
/// out), run against the Swift client's ``ClientMachine``. `Tests/web/sessions.test.mjs`
/// runs the same files against the JavaScript client (`web/tabd.js`): where the two
/// clients would differ, one of them fails.
///
/// A session's steps: `do` (`connect`, `command` with an `id`, `drop` with a close `code`,
/// `answerOwn`: tabd answers the frames the client sent on its own, a `sync` with the
/// step's `snapshot`, a `ping` with a pong; `refuseOwn`: tabd refuses them before parsing,
/// an error of the step's `code` without a ref), `tabd` (a frame; a string `"@id"` stands for
/// the ref the client gave command `id`) and `expect`: `opened` (a new connection since the
/// last such check or drop, with `resume` at that seq or none; a reconnect that is due is
/// let happen), `sent` (the
/// frames of the program's commands since the last such check, without their refs),
/// `answers` (`{"ack": seq}`, `{"refused": code}`, `{"failed": true}` or `"pending"`),
/// `connections` (how many were opened in all), `state` (`seq`, `selected`), `ownPending`
/// (how many frames the client sent on its own are not answered yet; a `sync` it will ask
/// for again is let happen first) and `finished`
/// (the close `code` that ended the client).
///
/// Tokens and cancelling: a session with `"tokenProvider": true` has a client whose app
/// gives tokens; `giveToken` answers the oldest ask with the step's `token` (null: none to
/// give), `failToken` fails it, `refreshToken` is the app asking for a refresh now,
/// `answerRefresh` acks the `refresh` frames the client sent (or refuses them with the
/// step's `code`); `tokenAsked` expects the oldest unanswered ask's reason (`connect`,
/// `refresh`; a reconnect that is due is let happen), `opened.token` the token the
/// connection went with, `refreshSent` the token of the last `refresh` frame sent.
/// `cancel` cancels the task of command `id`; its answer is then `{"cancelled": true}`.
@Suite struct SharedSessionTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("sessions")
    static let files: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [])
        .filter { $0.hasSuffix(".json") }.sorted()

    @Test func thereAreSessions() { #expect(Self.files.count >= 5, "Tests/sessions/ holds \(Self.files.count) sessions") }

    @Test(arguments: files) func session(_ file: String) throws {
        let json = try JSONParser.parse(Array(try Data(contentsOf: Self.folder.appendingPathComponent(file))))
        var run = try SessionRun(tokenProvider: json["tokenProvider"]?.boolValue ?? false)
        for (n, step) in (json["steps"]?.arrayValue ?? []).enumerated() {
            try run.step(step, at: "\(file) step \(n + 1)")
        }
    }
}

/// One session against one ``ClientMachine``, performing its actions as the actor would.
private struct SessionRun {
    var machine: ClientMachine
    var generation = 0
    var opened: [String] = []
    var connections = 0
    var reconnectDue: Int?
    /// A resync the client will ask for again (tabd refused its `sync`), let happen when a
    /// check of `ownPending` comes.
    var resyncDue: Int?
    /// The ids of the program's commands not sent yet, in order, and the ref of each sent.
    var unsent: [String] = []
    var refs: [String: String] = [:]
    var requestIDs: [ClientMachine.RequestID: String] = [:]
    /// Frames of the program's commands since the last `sent` check, without refs.
    var sent: [JSONValue] = []
    /// Frames the client sent on its own (a `sync` after a gap), not answered yet.
    var own: [JSONValue] = []
    var answers: [String: JSONValue] = [:]
    var finished: Int??
    /// The provider's asks not answered yet: (generation, reason).
    var tokenAsks: [(Int, String)] = []
    /// The token of each connection opened since the last `opened` check.
    var openedTokens: [String?] = []
    var refreshSent: String?

    init(tokenProvider: Bool) throws {
        var settings = ClientMachine.Settings(reconnects: true)
        settings.tokenProvider = tokenProvider
        machine = ClientMachine(endpoint: try Endpoint(url: "http://127.0.0.1:8080/", room: nil, name: "t", token: nil), settings: settings)
    }

    mutating func step(_ step: JSONValue, at place: String) throws {
        if let frame = step["tabd"] {
            perform(machine.received(substituted(frame).compactBytes, generation: generation))
            return
        }
        if let expected = step["expect"] {
            try expect(expected, at: place)
            return
        }
        switch step["do"]?.stringValue {
        case "connect":
            perform(machine.start())
        case "command":
            let id = try #require(step["id"]?.stringValue)
            let command = try CommandEnvelope.parse(try #require(step["command"])).command
            #expect(!command.isQuery, "\(place): a session's own sync or ping would be taken for the client's")
            let request = requestIDs.count + 1
            requestIDs[request] = id
            unsent.append(id)
            perform(machine.request(command, id: request))
        case "drop":
            // The next connection checked is the one after this drop.
            opened = []
            let code = try #require(step["code"]?.intValue)
            perform(machine.closed(TransportClose(code: UInt16(code), reason: "", wasOpen: true), generation: generation, jitter: 1))
        case "answerOwn":
            let frames = own.filter { $0["type"]?.stringValue != "refresh" }
            own.removeAll { $0["type"]?.stringValue != "refresh" }
            for frame in frames {
                let ref = JSONValue.string(frame["ref"]?.stringValue)
                let answer: JSONValue = frame["type"]?.stringValue == "sync"
                    ? .object([("type", .string("snapshot")), ("ref", ref), ("snapshot", try #require(step["snapshot"]))])
                    : .object([("type", .string("pong")), ("ref", ref)])
                perform(machine.received(answer.compactBytes, generation: generation))
            }
        case "giveToken":
            let (g, _) = tokenAsks.removeFirst()
            perform(machine.tokenReady(generation: g, token: step["token"]?.stringValue, now: 0))
        case "failToken":
            let (g, _) = tokenAsks.removeFirst()
            perform(machine.tokenFailed(generation: g, reason: "the session's provider failed", jitter: 1))
        case "refreshToken":
            if let g = machine.currentGeneration { perform(machine.refreshDue(generation: g)) }
        case "cancel":
            let id = try #require(step["id"]?.stringValue)
            let request = try #require(requestIDs.first { $0.value == id }?.key)
            if refs[id] == nil { unsent.removeAll { $0 == id } } // withdrawn: it will not be sent
            perform(machine.cancel(request: request, error: nil))
        case "answerRefresh":
            let refreshes = own.filter { $0["type"]?.stringValue == "refresh" }
            own.removeAll { $0["type"]?.stringValue == "refresh" }
            for frame in refreshes {
                let ref = JSONValue.string(frame["ref"]?.stringValue)
                let answer: JSONValue = if let code = step["code"]?.stringValue {
                    .object([("type", .string("error")), ("ref", ref), ("code", .string(code)), ("message", .string("refused: \(code)"))])
                } else {
                    .object([("type", .string("ack")), ("ref", ref), ("seq", .int(machine.state.seq))])
                }
                perform(machine.received(answer.compactBytes, generation: generation))
            }
        case "refuseOwn":
            let code = try #require(step["code"]?.stringValue)
            let frames = own
            own = []
            for _ in frames {
                let refusal: JSONValue = .object([("type", .string("error")), ("ref", .null), ("code", .string(code)),
                                                  ("message", .string("refused: \(code)"))])
                perform(machine.received(refusal.compactBytes, generation: generation))
            }
        default:
            Issue.record("\(place): a step this runner does not know: \(step.compactString)")
        }
    }

    mutating func expect(_ expected: JSONValue, at place: String) throws {
        if let reason = expected["tokenAsked"]?.stringValue {
            if tokenAsks.isEmpty, let due = reconnectDue {
                reconnectDue = nil
                perform(machine.reconnectDue(generation: due))
            }
            #expect(tokenAsks.first?.1 == reason, "\(place): the provider was asked \(tokenAsks.map(\.1))")
        }
        if let opening = expected["opened"] {
            if opened.isEmpty, let due = reconnectDue {
                reconnectDue = nil
                perform(machine.reconnectDue(generation: due))
            }
            let url = try #require(opened.last, "\(place): no connection opened")
            let resume = URLComponents(string: url)?.queryItems?.first { $0.name == "resume" }?.value.flatMap { Int($0) }
            #expect(resume == opening["resume"]?.intValue, "\(place): opened \(url)")
            if let token = opening["token"] { #expect(openedTokens.last == .some(token.stringValue), "\(place): opened with \(String(describing: openedTokens.last))") }
            opened = []
            openedTokens = []
        }
        if let token = expected["refreshSent"] {
            #expect(refreshSent == token.stringValue, "\(place): refresh sent with \(refreshSent ?? "nothing")")
        }
        if let count = expected["connections"]?.intValue { #expect(connections == count, "\(place): \(connections) connections opened") }
        if let frames = expected["sent"]?.arrayValue {
            #expect(sent.map(Self.canonical) == frames.map(Self.canonical), "\(place): sent \(sent.map(\.compactString))")
            sent = []
        }
        for (id, answer) in expected["answers"]?.objectValue ?? [] {
            if answer.stringValue == "pending" {
                #expect(answers[id] == nil, "\(place): \(id) answered \(answers[id]?.compactString ?? "")")
            } else {
                #expect(answers[id] == answer, "\(place): \(id) answered \(answers[id]?.compactString ?? "nothing")")
            }
        }
        if let state = expected["state"] {
            if let seq = state["seq"]?.intValue { #expect(machine.state.seq == seq, "\(place): state at \(machine.state.seq)") }
            if let selected = state["selected"]?.stringValue { #expect(machine.state.selected == selected, "\(place)") }
        }
        if let pending = expected["ownPending"]?.intValue {
            if let due = resyncDue {
                resyncDue = nil
                perform(machine.resyncDue(generation: due))
            }
            #expect(own.count == pending, "\(place): \(own.count) frames of the client's own unanswered")
        }
        if let end = expected["finished"] {
            #expect(finished == .some(end["code"]?.intValue), "\(place): finished \(String(describing: finished))")
        }
    }

    /// The value with every object's members in name order (frames are compared as JSON).
    static func canonical(_ value: JSONValue) -> JSONValue {
        switch value {
        case let .array(items): .array(items.map(canonical))
        case let .object(members): .object(members.map { ($0.0, canonical($0.1)) }.sorted { $0.0 < $1.0 })
        default: value
        }
    }

    /// `"@id"` → the ref the client gave command `id`.
    func substituted(_ value: JSONValue) -> JSONValue {
        switch value {
        case let .string(s) where s.hasPrefix("@"): return .string(refs[String(s.dropFirst())] ?? s)
        case let .array(items): return .array(items.map(substituted))
        case let .object(members): return .object(members.map { ($0.0, substituted($0.1)) })
        default: return value
        }
    }

    mutating func perform(_ actions: [ClientMachine.Action]) {
        for action in actions {
            switch action {
            case let .open(url, authorization, g):
                generation = g
                opened.append(url)
                openedTokens.append(authorization.map { String($0.dropFirst("Bearer ".count)) })
                connections += 1
            case let .fetchToken(g, reason):
                tokenAsks.append((g, reason.rawValue))
            case let .withdrawn(request):
                if let id = requestIDs[request] { answers[id] = .object([("cancelled", .bool(true))]) }
            case let .send(bytes):
                guard let frame = try? JSONParser.parse(bytes), case let .object(members) = frame else { continue }
                // The client's own frames are the ones no program command is waiting to send.
                let type = frame["type"]?.stringValue
                if type == "refresh" { refreshSent = frame["token"]?.stringValue }
                if type == "sync" || type == "ping" || type == "refresh" || unsent.isEmpty {
                    own.append(frame)
                    continue
                }
                refs[unsent.removeFirst()] = frame["ref"]?.stringValue
                sent.append(.object(members.filter { $0.0 != "ref" }))
            case let .scheduleReconnect(g, _):
                reconnectDue = g
            case let .scheduleResync(g, _):
                resyncDue = g
            case let .reply(request, result):
                guard let id = requestIDs[request] else { continue }
                answers[id] = switch result {
                case let .success(.ack(seq)): .object([("ack", .int(seq))])
                case let .failure(.refused(error)): .object([("refused", .string(error.code.rawValue))])
                case .failure: .object([("failed", .bool(true))])
                case let .success(other): .object([("other", .string("\(other)"))])
                }
            case let .finished(error):
                if case let .closed(code, _) = error { finished = .some(code) } else { finished = .some(nil) }
            default:
                break
            }
        }
    }
}
