import Testing
@testable import TabdServer

/// A log line is one line, whatever a peer put in the text it quotes.
@Suite struct LogTests {
    @Test func controlCharactersAreWrittenOut() {
        #expect(Log.oneLine("plain text, ünïcode") == "plain text, ünïcode")
        #expect(Log.oneLine("room 'a\n2026-12-02 INFO forged'") == "room 'a\\x0A2026-12-02 INFO forged'")
        #expect(Log.oneLine("\r\t\u{1B}[31m\u{7F}") == "\\x0D\\x09\\x1B[31m\\x7F")
    }

    @Test func aRefusedRoomIdIsQuotedPrintably() {
        let refusal = Admission.decide(grant: .success(nil), origin: nil, host: nil, room: "a\nINFO forged", context: .init(),
                                       roomRefusal: { nil })
        #expect(refusal?.status == 400)
        #expect(refusal?.why == "'a?INFO forged' is not a room id")
    }
}
