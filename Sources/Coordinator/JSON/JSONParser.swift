/// Why a text is not JSON: what was wrong and at which byte.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public let offset: Int
    public var description: String { "\(message) at byte \(offset)" }
}

/// A strict RFC 8259 parser producing ``JSONValue``.
///
/// Peer input goes through here, so it never traps: every malformed input, lone
/// surrogate, invalid UTF-8 sequence or nesting deeper than ``maxDepth`` is a
/// ``JSONParseError``.
public struct JSONParser {
    public static let maxDepth = 128
    /// Up to this many members, duplicate keys are found by a linear search (cheaper
    /// than hashing for the few keys of a command).
    static let smallObject = 16

    private let input: [UInt8]
    private var i = 0

    private init(_ input: [UInt8]) { self.input = input }

    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        var p = JSONParser(bytes)
        p.skipWhitespace()
        let value = try p.value(depth: 0)
        p.skipWhitespace()
        guard p.i == p.input.count else { throw p.fail("unexpected text after the value") }
        return value
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    private func fail(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: i) }

    private mutating func skipWhitespace() {
        while i < input.count, input[i] == 0x20 || input[i] == 0x0A || input[i] == 0x0D || input[i] == 0x09 { i += 1 }
    }

    private mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < Self.maxDepth else { throw fail("nesting deeper than \(Self.maxDepth)") }
        guard i < input.count else { throw fail("unexpected end of input") }
        switch input[i] {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw fail("unexpected character")
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        guard i + count <= input.count else { throw fail("unexpected end of input") }
        let expected = UnsafeBufferPointer(start: word.utf8Start, count: count)
        for k in 0..<count where input[i + k] != expected[k] { throw fail("invalid literal") }
        i += count
    }

    private mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
        i += 1
        var members: [(String, JSONValue)] = []
        // Where each key sits in `members`, once the object is big enough for a linear
        // search per key to matter: parsing stays linear in the input however many keys.
        var index: [String: Int] = [:]
        // A duplicate key keeps its last value at its last place; earlier places are
        // marked here and dropped once the object is complete.
        var superseded: [Int] = []
        skipWhitespace()
        if i < input.count, input[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
        func finish() -> JSONValue {
            guard !superseded.isEmpty else { return .object(members) }
            var dropped = [Bool](repeating: false, count: members.count)
            for k in superseded { dropped[k] = true }
            var kept: [(String, JSONValue)] = []
            kept.reserveCapacity(members.count - superseded.count)
            for (k, member) in members.enumerated() where !dropped[k] { kept.append(member) }
            return .object(kept)
        }
        while true {
            skipWhitespace()
            guard i < input.count, input[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try string()
            skipWhitespace()
            guard i < input.count, input[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            i += 1
            skipWhitespace()
            let item = try value(depth: depth + 1)
            if members.count < Self.smallObject {
                if let existing = members.firstIndex(where: { $0.0 == key }) { members.remove(at: existing) }
            } else {
                if index.isEmpty {
                    for (k, member) in members.enumerated() { index[member.0] = k }
                }
                if let existing = index[key] { superseded.append(existing) }
                index[key] = members.count
            }
            members.append((key, item))
            skipWhitespace()
            guard i < input.count else { throw fail("unexpected end of input") }
            if input[i] == UInt8(ascii: ",") { i += 1; continue }
            if input[i] == UInt8(ascii: "}") { i += 1; return finish() }
            throw fail("expected ',' or '}'")
        }
    }

    private mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
        i += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if i < input.count, input[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
        while true {
            skipWhitespace()
            items.append(try value(depth: depth + 1))
            skipWhitespace()
            guard i < input.count else { throw fail("unexpected end of input") }
            if input[i] == UInt8(ascii: ",") { i += 1; continue }
            if input[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            throw fail("expected ',' or ']'")
        }
    }

    private mutating func number() throws(JSONParseError) -> String {
        let start = i
        if input[i] == UInt8(ascii: "-") { i += 1 }
        guard i < input.count, isDigit(input[i]) else { throw fail("invalid number") }
        if input[i] == UInt8(ascii: "0") { i += 1 } else { while i < input.count, isDigit(input[i]) { i += 1 } }
        if i < input.count, input[i] == UInt8(ascii: ".") {
            i += 1
            guard i < input.count, isDigit(input[i]) else { throw fail("invalid number") }
            while i < input.count, isDigit(input[i]) { i += 1 }
        }
        if i < input.count, input[i] == UInt8(ascii: "e") || input[i] == UInt8(ascii: "E") {
            i += 1
            if i < input.count, input[i] == UInt8(ascii: "+") || input[i] == UInt8(ascii: "-") { i += 1 }
            guard i < input.count, isDigit(input[i]) else { throw fail("invalid number") }
            while i < input.count, isDigit(input[i]) { i += 1 }
        }
        return String(decoding: input[start..<i], as: UTF8.self)
    }

    private func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    private mutating func string() throws(JSONParseError) -> String {
        i += 1
        var out: [UInt8] = []
        var runStart = i
        while true {
            guard i < input.count else { throw fail("unterminated string") }
            let b = input[i]
            if b == UInt8(ascii: "\"") {
                out.append(contentsOf: input[runStart..<i])
                i += 1
                break
            }
            if b < 0x20 { throw fail("control character in string") }
            if b == UInt8(ascii: "\\") {
                out.append(contentsOf: input[runStart..<i])
                i += 1
                guard i < input.count else { throw fail("unterminated escape") }
                let e = input[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard i + 1 < input.count, input[i] == UInt8(ascii: "\\"), input[i + 1] == UInt8(ascii: "u") else {
                            throw fail("lone surrogate")
                        }
                        i += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("lone surrogate")
                    }
                    appendUTF8(scalar, to: &out)
                default: throw fail("invalid escape")
                }
                runStart = i
                continue
            }
            i += 1
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in string") }
        return s
    }

    /// Appends a scalar value (never a surrogate, at most 0x10FFFF) as UTF-8.
    private func appendUTF8(_ v: UInt32, to out: inout [UInt8]) {
        switch v {
        case 0..<0x80:
            out.append(UInt8(v))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | v >> 6)); out.append(UInt8(0x80 | v & 0x3F))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | v >> 12)); out.append(UInt8(0x80 | v >> 6 & 0x3F)); out.append(UInt8(0x80 | v & 0x3F))
        default:
            out.append(UInt8(0xF0 | v >> 18)); out.append(UInt8(0x80 | v >> 12 & 0x3F))
            out.append(UInt8(0x80 | v >> 6 & 0x3F)); out.append(UInt8(0x80 | v & 0x3F))
        }
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard i + 4 <= input.count else { throw fail("invalid \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = input[i]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }
}
