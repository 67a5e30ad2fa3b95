import Foundation
import TabdProtocol
import Testing

/// `JSONValue` as an app writes it: literals that build the value they read as (objects in
/// the order written), and `Codable` through Foundation's JSON coders, exactly.
@Suite struct JSONValueConformanceTests {
    @Test func literalsBuildTheValueTheyReadAs() throws {
        let value: JSONValue = ["cart": [1, "two", 2.5, true], "open": false, "note": .null]
        #expect(value == .object([("cart", .array([.int(1), .string("two"), .double(2.5), .bool(true)])),
                                  ("open", .bool(false)), ("note", .null)]))
        #expect(value.compactString == #"{"cart":[1,"two",2.5,true],"open":false,"note":null}"#, "the order written")
        let repeated: JSONValue = ["a": 1, "b": 2, "a": 3]
        #expect(repeated.compactString == #"{"a":3,"b":2}"#, "a repeated key keeps its last value in the first one's place")
    }

    @Test func itGoesThroughFoundationsJSONCodersExactly() throws {
        let value: JSONValue = ["n": 12, "x": 0.25, "s": "é\"\n", "list": [[], [:], .null, false], "big": 9_007_199_254_740_993]
        let data = try JSONEncoder().encode(value)
        // What the encoder wrote is the value (member order is the encoder's to choose).
        let written = try JSONParser.parse(Array(data))
        for key in ["n", "x", "s", "list", "big"] { #expect(written[key] == value[key], "\(key) as written") }
        let back = try JSONDecoder().decode(JSONValue.self, from: data)
        // A decoder's keyed container does not promise an order: compare member by member.
        for key in ["n", "x", "s", "list", "big"] { #expect(back[key] == value[key], "\(key)") }
        struct Model: Codable, Equatable { var id: Int; var extra: JSONValue }
        let model = Model(id: 7, extra: ["tags": ["a", "b"]])
        #expect(try JSONDecoder().decode(Model.self, from: JSONEncoder().encode(model)) == model)
    }

    @Test func aValueParsedFromTheWireEncodesAsItWasRead() throws {
        let wire = Array(#"[1,2.5,"x",{"c":null}]"#.utf8)
        let parsed = try JSONParser.parse(wire)
        #expect(Array(try JSONEncoder().encode(parsed)) == wire)
    }
}
