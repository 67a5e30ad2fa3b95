/// A JSON value that round-trips exactly.
///
/// Numbers keep the literal text they arrived with (`1.50` stays `1.50`, `10` never
/// becomes `10.0`), objects keep their key order, so a value stored with `set` comes
/// back byte for byte in its compact form. Build one with ``JSONParser`` or by hand.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// A number, as its JSON literal (validated by the parser or built from a Swift number).
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in their original order; keys are unique (the parser keeps the last duplicate).
    case object([(String, JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    public static func int(_ value: Int) -> JSONValue { .number(String(value)) }

    /// A finite double in its shortest round-tripping form.
    public static func double(_ value: Double) -> JSONValue {
        precondition(value.isFinite, "JSON has no infinities or NaN")
        if value == value.rounded(), abs(value) < 1e15 { return .number(String(Int(value))) }
        return .number(String(value))
    }

    public static func string(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }

    /// The member `key` of an object, or nil (also for non-objects).
    public subscript(key: String) -> JSONValue? {
        guard case let .object(members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }

    public var stringValue: String? { if case let .string(s) = self { return s }; return nil }
    public var boolValue: Bool? { if case let .bool(b) = self { return b }; return nil }
    public var arrayValue: [JSONValue]? { if case let .array(a) = self { return a }; return nil }
    public var objectValue: [(String, JSONValue)]? { if case let .object(o) = self { return o }; return nil }
    public var isNull: Bool { if case .null = self { return true }; return false }

    /// The number as a Double (nil for non-numbers; may be infinite for huge literals).
    public var doubleValue: Double? { if case let .number(n) = self { return Double(n) }; return nil }

    /// The number as an Int, only when the literal is an exact integer (`3`, `3.0`, `3e0`).
    public var intValue: Int? {
        guard case let .number(n) = self else { return nil }
        if let i = Int(n) { return i }
        guard let d = Double(n), d.isFinite, d == d.rounded(), abs(d) < 9.0e15 else { return nil }
        return Int(d)
    }

    /// Compact UTF-8 JSON text.
    public var compactBytes: [UInt8] {
        var w = JSONWriter()
        w.write(self)
        return w.bytes
    }

    public var compactString: String { String(decoding: compactBytes, as: UTF8.self) }

    /// The size of ``compactBytes`` when it is at most `limit`; otherwise some size above
    /// `limit`, found without measuring the rest: the cost is bounded by `limit` (and the
    /// nesting), not by the value, so checking a peer's value against a limit is cheap
    /// however large the value is.
    public func compactSize(limit: Int) -> Int {
        var size = 0
        return Self.measure(self, into: &size, limit: limit) ? size : limit + 1
    }

    /// Adds the compact size of `value` to `size`; false as soon as it passes `limit`.
    private static func measure(_ value: JSONValue, into size: inout Int, limit: Int) -> Bool {
        switch value {
        case .null: size += 4
        case let .bool(b): size += b ? 4 : 5
        case let .number(n): size += n.utf8.count
        case let .string(s): return measure(string: s, into: &size, limit: limit)
        case let .array(items):
            size += 1 + max(items.count, 1) // brackets and commas
            for item in items where size <= limit {
                guard measure(item, into: &size, limit: limit) else { return false }
            }
        case let .object(members):
            size += members.isEmpty ? 2 : 1 + members.count * 2 // braces, colons and commas
            for (key, item) in members where size <= limit {
                guard measure(string: key, into: &size, limit: limit), measure(item, into: &size, limit: limit) else { return false }
            }
        }
        return size <= limit
    }

    /// A string as ``JSONWriter`` writes it: every byte takes at least one.
    private static func measure(string s: String, into size: inout Int, limit: Int) -> Bool {
        size += 2
        guard size + s.utf8.count <= limit else { return false }
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09, 0x08, 0x0C: size += 2
            case 0..<0x20: size += 6
            default: size += 1
            }
        }
        return size <= limit
    }
}

// MARK: Literals

/// `["cart": [1, "two"], "open": true]` builds the value it reads as (objects keep the
/// order written). `null` has no literal of its own: write `.null`.
extension JSONValue: ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public typealias Key = String
    public typealias Value = JSONValue

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var members: [(String, JSONValue)] = []
        for (key, value) in elements {
            // Keys are unique: a repeated key keeps its last value, in the first one's place.
            if let i = members.firstIndex(where: { $0.0 == key }) { members[i].1 = value } else { members.append((key, value)) }
        }
        self = .object(members)
    }
}

// MARK: Codable

/// A `JSONValue` goes through any `Encoder` and `Decoder` (Foundation's `JSONEncoder`, a
/// property list, …) as the JSON it is: an app can keep it in its own `Codable` models.
/// An object's members go to the encoder in their order (Foundation's `JSONEncoder` may
/// write them in another; ``compactString`` keeps it); a number is encoded as an `Int`
/// when its literal is a whole number that fits, else as a `Double`. Decoding reads whatever the
/// decoder has (an object's order is then the decoder's, which a keyed container does
/// not promise).
extension JSONValue: Codable {
    private struct MemberKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case let .bool(b):
            var c = encoder.singleValueContainer()
            try c.encode(b)
        case let .number(n):
            var c = encoder.singleValueContainer()
            if let i = Int(n) { try c.encode(i) } else if let d = Double(n), d.isFinite { try c.encode(d) } else {
                throw EncodingError.invalidValue(self, .init(codingPath: encoder.codingPath, debugDescription: "the number \(n) is not finite"))
            }
        case let .string(s):
            var c = encoder.singleValueContainer()
            try c.encode(s)
        case let .array(items):
            var c = encoder.unkeyedContainer()
            for item in items { try c.encode(item) }
        case let .object(members):
            var c = encoder.container(keyedBy: MemberKey.self)
            for (key, value) in members { try c.encode(value, forKey: MemberKey(stringValue: key)) }
        }
    }

    public init(from decoder: any Decoder) throws {
        if let object = try? decoder.container(keyedBy: MemberKey.self) {
            var members: [(String, JSONValue)] = []
            for key in object.allKeys { members.append((key.stringValue, try object.decode(JSONValue.self, forKey: key))) }
            self = .object(members)
            return
        }
        if var array = try? decoder.unkeyedContainer() {
            var items: [JSONValue] = []
            while !array.isAtEnd { items.append(try array.decode(JSONValue.self)) }
            self = .array(items)
            return
        }
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null } else if let b = try? c.decode(Bool.self) { self = .bool(b) } else if let i = try? c.decode(Int.self) {
            self = .int(i)
        } else if let d = try? c.decode(Double.self) { self = .double(d) } else if let s = try? c.decode(String.self) { self = .string(s) } else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a JSON value")
        }
    }
}
