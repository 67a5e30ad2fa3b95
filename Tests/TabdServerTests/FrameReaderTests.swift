import Auth
import Coordinator
import Testing
@testable import TabdServer

/// A welcomed connection's frame: its refusals in the order of error precedence.
@Suite struct FrameReaderTests {
    let limits = FrameReader.Limits(commandsPerSecond: 100, bytesPerSecond: 1 << 20)

    func code(_ frame: String, role: Role = .control, allowed: Bool = true, stopping: Bool = false) -> String {
        switch FrameReader.read(Array(frame.utf8), role: role, allowed: allowed, stopping: stopping, limits: limits) {
        case let .command(envelope): "command \(envelope.command.type)"
        case let .refused(.error(_, e), _): e.code.rawValue
        case .refused: "another frame"
        case let .refresh(ref, token): "refresh \(ref ?? "-") \(token)"
        }
    }

    @Test func aRefreshIsReadByEveryRoleAndItsFaultsAreTheCommandsOnes() {
        #expect(code(#"{"type":"refresh","token":"abc","ref":"r1"}"#) == "refresh r1 abc")
        #expect(code(#"{"type":"refresh","token":"abc"}"#, role: .view) == "refresh - abc")
        #expect(code(#"{"type":"refresh"}"#) == "bad_command")
        #expect(code(#"{"type":"refresh","token":""}"#) == "bad_command")
        #expect(code(#"{"type":"refresh","token":7}"#) == "bad_command")
        #expect(code(#"{"type":"refresh","token":"abc","ref":7}"#) == "bad_command")
        #expect(code(#"{"type":"refresh","token":"abc","ref":"\#(String(repeating: "r", count: 65))"}"#) == "invalid")
        #expect(code(#"{"type":"refresh","token":"abc"}"#, allowed: false) == "rate_limited")
        #expect(code(#"{"type":"refresh","token":"abc"}"#, stopping: true) == "unavailable")
    }

    @Test func theFirstBrokenRuleIsTheOneAnswered() {
        // Everything wrong: the rate limit is said first, without reading the frame.
        #expect(code("{not json", role: .view, allowed: false, stopping: true) == "rate_limited")
        #expect(code("{not json", role: .view, stopping: true) == "bad_json")
        #expect(code(#"{"type":"fly"}"#, role: .view, stopping: true) == "bad_command")
        #expect(code(#"{"type":"tap","tab":"home"}"#, role: .view, stopping: true) == "forbidden")
        #expect(code(#"{"type":"tap","tab":"home"}"#, stopping: true) == "unavailable")
        #expect(code(#"{"type":"tap","tab":"home"}"#) == "command tap")
        // Checks of the rules (unknown tab, invalid) are not the reader's.
        #expect(code(#"{"type":"tap","tab":"nope"}"#) == "command tap")
    }

    @Test func viewersMaySyncAndPingOnly() {
        #expect(code(#"{"type":"sync"}"#, role: .view) == "command sync")
        #expect(code(#"{"type":"ping"}"#, role: .view) == "command ping")
        #expect(code(#"{"type":"select","tab":"home"}"#, role: .view) == "forbidden")
    }

    @Test func refusalsKeepTheRefAndSayWhatParsed() {
        let read = FrameReader.read(Array(#"{"type":"push","route":"x","ref":"r7"}"#.utf8), role: .view, allowed: true,
                                    stopping: false, limits: limits)
        guard case let .refused(.error(ref, e), parsed) = read else { Issue.record("not refused: \(read)"); return }
        #expect(ref == "r7")
        #expect(e.code == .forbidden)
        #expect(parsed == "push", "a parsed command is counted even when refused")
        guard case let .refused(.error(_, limited), nothing) = FrameReader.read([], role: .control, allowed: false, stopping: false, limits: limits)
        else { Issue.record("not refused"); return }
        #expect(limited.message == "more than 100 commands or 1048576 bytes per second")
        #expect(nothing == nil)
    }
}
