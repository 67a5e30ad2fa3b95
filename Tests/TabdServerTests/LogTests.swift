import Coordinator
import Foundation
import Testing
@testable import TabdServer

/// A log line is one line, whatever a peer put in the text it quotes.
@Suite struct LogTests {
    @Test func controlCharactersAreWrittenOut() {
        #expect(Log.oneLine("plain text, ünïcode") == "plain text, ünïcode")
        #expect(Log.oneLine("room 'a\n2026-12-02 INFO forged'") == "room 'a\\x0A2026-12-02 INFO forged'")
        #expect(Log.oneLine("\r\t\u{1B}[31m\u{7F}") == "\\x0D\\x09\\x1B[31m\\x7F")
    }

    /// Every scalar that can end a line or steer a terminal, class by class, is written out:
    /// C0 (U+0000–U+001F), DEL, C1 (U+0080–U+009F: NEL U+0085 ends a line for some readers,
    /// CSI U+009B starts a terminal escape), and the line and paragraph separators.
    @Test func everyControlCharacterAndTheUnicodeSeparatorsAreEscaped() {
        for value in UInt32(0)...0xBF {
            let scalar = Unicode.Scalar(value)!
            let escaped = Log.oneLine("a\(Character(scalar))b")
            let control = value < 0x20 || (0x7F...0x9F).contains(value)
            if control {
                let hex = String(value, radix: 16, uppercase: true)
                #expect(escaped == "a\\x\(hex.count == 1 ? "0" : "")\(hex)b", "U+\(hex)")
            } else {
                #expect(escaped == "a\(Character(scalar))b")
            }
        }
        #expect(Log.oneLine("a\u{2028}b\u{2029}c") == "a\\u2028b\\u2029c")
        #expect(Log.oneLine("name '\u{9B}31m\u{85}2026-12-02 INFO forged'") == "name '\\x9B31m\\x852026-12-02 INFO forged'")
        // Neighbours that are not controls stay as they are.
        #expect(Log.oneLine("\u{A0}\u{2027}\u{202A}ü→😀") == "\u{A0}\u{2027}\u{202A}ü→😀")
    }

    /// JSON lines: the writer escapes C0; DEL, C1 and the separators, legal raw inside a JSON
    /// string, are written as `\uXXXX` too, and the line is still the same JSON.
    @Test func aJSONLineHoldsNoRawControlOrSeparator() throws {
        let message = "x\u{7F}\u{9B}\u{85}\u{2028}\u{2029}\n\r\u{1B}\\y"
        let line = Log.escapingRaw(JSONValue.object([("message", .string(message))]).compactString, json: true)
        #expect(!line.unicodeScalars.contains { Log.mustEscape($0) })
        #expect(line.contains("\\u007F\\u009B\\u0085\\u2028\\u2029"))
        let parsed = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String]
        #expect(parsed?["message"] == message)
    }

    @Test func aRefusedRoomIdIsQuotedPrintably() {
        let refusal = Admission.decide(grant: .success(nil), origin: nil, host: nil, room: "a\nINFO forged", context: .init(),
                                       roomRefusal: { nil })
        #expect(refusal?.status == 400)
        #expect(refusal?.why == "'a?INFO forged' is not a room id")
    }
}
