import Testing
@testable import Coordinator

/// The parser's results do not depend on how it finds duplicate keys or decodes escapes.
@Suite struct JSONParserShapeTests {
    @Test(arguments: [3, JSONParser.smallObject - 1, JSONParser.smallObject, JSONParser.smallObject + 1, 3_000])
    func aDuplicateKeyKeepsItsLastValueAtItsLastPlace(keys: Int) throws {
        // k0…k(n-1), then k0 again and k1 again: the repeated keys move to the end with their last values.
        var text = "{" + (0..<keys).map { "\"k\($0)\":\($0)" }.joined(separator: ",")
        text += ",\"k0\":\"last\",\"k1\":[1]}"
        let parsed = try JSONParser.parse(text)
        var expected: [(String, JSONValue)] = (2..<keys).map { ("k\($0)", .int($0)) }
        expected += [("k0", .string("last")), ("k1", .array([.int(1)]))]
        #expect(parsed == .object(expected))
    }

    @Test func escapesDecodeToTheirScalarsInEveryUTF8Length() throws {
        let parsed = try JSONParser.parse(#""\u0041\u00e9\u20ac\ud83d\ude00\u0000""#)
        #expect(parsed == .string("Aé€😀\u{0}"))
        let long = try JSONParser.parse("\"" + String(repeating: #"\u00e9"#, count: 10_000) + "\"")
        #expect(long == .string(String(repeating: "é", count: 10_000)))
    }
}
