import Testing
@testable import Coordinator
@testable import TabdProtocol
import Conformance

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

@Suite struct CompactSizeTests {
    @Test(arguments: [
        #"null"#, #"true"#, #"false"#, #"-1.50e3"#, #""""#, #""a\"b\\c\n\u0001é😀""#, #"[]"#, #"{}"#, #"[1,[2,[]],{}]"#,
        #"{"a":{"b":[true,null,"x"]},"c":{}}"#, #"[{"k":"\t"},{"":0}]"#,
    ])
    func theSizeIsTheCompactEncodingsUnderTheLimit(text: String) throws {
        let value = try JSONParser.parse(text)
        #expect(value.compactSize(limit: 4096) == value.compactBytes.count)
        // Right at the limit it is still exact; one byte less and it is over.
        let exact = value.compactBytes.count
        #expect(value.compactSize(limit: exact) == exact)
        #expect(value.compactSize(limit: exact - 1) > exact - 1)
    }

    @Test func aHugeValueIsOverTheLimitWithoutBeingMeasuredWhole() throws {
        let big = JSONValue.array(Array(repeating: .string(String(repeating: "x", count: 1000)), count: 100_000))
        #expect(big.compactSize(limit: 4096) > 4096)
        #expect(throws: CommandError.self) { try Limits.validateValue(big) }
    }
}

/// `parseCommand` checks a frame exactly as `parse` does, but builds only what a command reads.
@Suite struct CommandProjectionTests {
    static let keep: Set<String> = ["type", "tab", "value"]

    static func project(_ text: String, limit: Int = 4096) throws(JSONParseError) -> JSONValue {
        try JSONParser.parseCommand(Array(text.utf8), keep: keep, nested: ["tab": ["id"]], valueLimit: limit)
    }

    @Test func onlyTheNamedMembersAreBuiltAndARepeatedMemberKeepsItsLastValue() throws {
        let v = try Self.project(#"{"type":"a","junk":{"x":[1,2,{"y":null}]},"tab":{"id":"t","other":[true]},"type":"b"}"#)
        #expect(v == .object([("tab", .object([("id", .string("t"))])), ("type", .string("b"))]))
    }

    @Test func aValueOverTheLimitIsBuiltOnlyInPartAndIsStillOverIt() throws {
        let big = "[" + (0..<2_000).map { "[\($0)]" }.joined(separator: ",") + "]"
        let v = try #require(try Self.project(#"{"type":"set","value":"# + big + "}", limit: 100)["value"])
        #expect(v.compactSize(limit: 100) > 100)
        #expect(v.compactBytes.count < 200, "built up to the limit, not the whole value")
        #expect(throws: CommandError.self) { try Limits.validateValue(try #require(try Self.project(#"{"value":"# + big + "}", limit: 4096)["value"])) }
    }

    @Test func aRepeatedKeyInsideAValueIsKeptAndRefused() throws {
        let v = try #require(try Self.project(#"{"value":{"a":1,"b":{"c":1,"c":2},"a":3}}"#)["value"])
        #expect(v == .object([("a", .int(1)), ("b", .object([("c", .int(1)), ("c", .int(2))])), ("a", .int(3))]))
        #expect(v.firstRepeatedKey == "c")
        #expect(throws: CommandError.invalid("value repeats the key 'c' in one object: it would not round-trip exactly")) {
            try Limits.validateValue(v)
        }
    }

    /// Random frames, and every one of them cut and corrupted at random places: both
    /// parsers accept exactly the same texts and refuse the others at the same byte.
    @Test(arguments: [UInt64(1), 2, 3, 4])
    func bothParsersAgreeOnEveryTextAndEveryError(seed: UInt64) throws {
        var rng = SeededRandom(seed: seed)
        let pieces = [#"{"type":"set","#, #""value":"#, #"[1,2.5e3,-0]"#, #"{"k":"v\u00e9\ud83d\ude00"}"#, #""\n\t\/""#, "null", "true",
                      #""junk":[[[]]]"#, ",", "}", "]", ":", #""é""#, "\u{7F}", "\\u12", #""\ud800""#, "01", "1.", " ", "\"\u{1}\"",
                      #""tab":{"id":"x","id":"y"}"#, #""é\x""#, #""ab\u00e9\"c""#]
        for _ in 0..<3_000 {
            var text = Array((0..<Int.random(in: 1...8, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined().utf8)
            if Bool.random(using: &rng), !text.isEmpty { text[Int.random(in: 0..<text.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng) }
            let full = Result { () throws(JSONParseError) in try JSONParser.parse(text) }
            let projected = Result { () throws(JSONParseError) in
                try JSONParser.parseCommand(text, keep: Self.keep, nested: ["tab": ["id"]], valueLimit: 4096)
            }
            switch (full, projected) {
            case (.success, .success): break
            case let (.failure(a), .failure(b)):
                #expect(a == b, "\(String(decoding: text, as: UTF8.self))")
            default:
                Issue.record("they disagree on \(String(decoding: text, as: UTF8.self)): \(full) vs \(projected)")
            }
        }
    }
}
