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
/// ``JSONParseError``. Parsing is linear in the input whatever its shape (many keys,
/// escapes, nesting, long numbers). ``parseCommand(_:keep:nested:valueLimit:)``
/// validates a whole frame the same way but builds only what a command reads.
public struct JSONParser {
    public static let maxDepth = 128
    /// Up to this many members, duplicate keys are found by a linear search (cheaper
    /// than hashing for the few keys of a command).
    static let smallObject = 16

    let input: [UInt8]
    var i = 0
    /// Objects keep a repeated key as sent instead of resolving it (command values).
    var keepRepeatedKeys = false

    init(_ input: [UInt8]) { self.input = input }

    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        var p = JSONParser(bytes)
        p.skipWhitespace()
        var size = 0
        let value = try p.value(depth: 0, budget: .max, size: &size)
        try p.end()
        return value
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    func fail(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: i) }

    mutating func end() throws(JSONParseError) {
        skipWhitespace()
        guard i == input.count else { throw fail("unexpected text after the value") }
    }

    mutating func skipWhitespace() {
        while i < input.count, input[i] == 0x20 || input[i] == 0x0A || input[i] == 0x0D || input[i] == 0x09 { i += 1 }
    }

    /// Builds the value at `i`. `size` grows by the value's compact size (as
    /// ``JSONWriter`` writes it) — of the part built, when a container stops building
    /// once it passes `budget` bytes; the rest of it is still validated.
    mutating func value(depth: Int, budget: Int, size: inout Int) throws(JSONParseError) -> JSONValue {
        guard depth < Self.maxDepth else { throw fail("nesting deeper than \(Self.maxDepth)") }
        guard i < input.count else { throw fail("unexpected end of input") }
        switch input[i] {
        case UInt8(ascii: "{"): return try object(depth: depth, budget: budget, size: &size)
        case UInt8(ascii: "["): return try array(depth: depth, budget: budget, size: &size)
        case UInt8(ascii: "\""): return .string(try string(size: &size))
        case UInt8(ascii: "t"): try literal("true"); size += 4; return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); size += 5; return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); size += 4; return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let start = i
            try number()
            size += i - start
            return .number(String(decoding: input[start..<i], as: UTF8.self))
        default: throw fail("unexpected character")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        guard i + count <= input.count else { throw fail("unexpected end of input") }
        let expected = UnsafeBufferPointer(start: word.utf8Start, count: count)
        for k in 0..<count where input[i + k] != expected[k] { throw fail("invalid literal") }
        i += count
    }

    /// Adds a member, keeping the last value of a duplicate key at its last place.
    /// Linear however many keys: past ``smallObject`` members, keys are found through
    /// `index`, and earlier places of a duplicate are marked in `superseded` and dropped
    /// by ``finish(_:superseded:)``.
    static func add(_ key: String, _ item: JSONValue, to members: inout [(String, JSONValue)],
                    index: inout [String: Int], superseded: inout [Int]) {
        if members.count < smallObject {
            if let existing = members.firstIndex(where: { $0.0 == key }) { members.remove(at: existing) }
        } else {
            if index.isEmpty {
                for (k, member) in members.enumerated() { index[member.0] = k }
            }
            if let existing = index[key] { superseded.append(existing) }
            index[key] = members.count
        }
        members.append((key, item))
    }

    static func finish(_ members: [(String, JSONValue)], superseded: [Int]) -> JSONValue {
        guard !superseded.isEmpty else { return .object(members) }
        var dropped = [Bool](repeating: false, count: members.count)
        for k in superseded { dropped[k] = true }
        var kept: [(String, JSONValue)] = []
        kept.reserveCapacity(members.count - superseded.count)
        for (k, member) in members.enumerated() where !dropped[k] { kept.append(member) }
        return .object(kept)
    }

    private mutating func object(depth: Int, budget: Int, size: inout Int) throws(JSONParseError) -> JSONValue {
        i += 1
        var members: [(String, JSONValue)] = []
        var index: [String: Int] = [:]
        var superseded: [Int] = []
        var used = 1
        skipWhitespace()
        if i < input.count, input[i] == UInt8(ascii: "}") { i += 1; size += 2; return .object(members) }
        while true {
            skipWhitespace()
            guard i < input.count, input[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            if used > budget {
                // Past the budget: validate the rest, build nothing more.
                try skipString()
                try colon()
                try skipValue(depth: depth + 1)
            } else {
                let key = try string(size: &used)
                try colon()
                let item = try value(depth: depth + 1, budget: budget - used, size: &used)
                used += 2 // ':' and ',' (or '}')
                if keepRepeatedKeys {
                    members.append((key, item))
                } else {
                    Self.add(key, item, to: &members, index: &index, superseded: &superseded)
                }
            }
            skipWhitespace()
            guard i < input.count else { throw fail("unexpected end of input") }
            if input[i] == UInt8(ascii: ",") { i += 1; continue }
            if input[i] == UInt8(ascii: "}") { i += 1; size += used; return Self.finish(members, superseded: superseded) }
            throw fail("expected ',' or '}'")
        }
    }

    mutating func colon() throws(JSONParseError) {
        skipWhitespace()
        guard i < input.count, input[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
        i += 1
        skipWhitespace()
    }

    private mutating func array(depth: Int, budget: Int, size: inout Int) throws(JSONParseError) -> JSONValue {
        i += 1
        var items: [JSONValue] = []
        var used = 1
        skipWhitespace()
        if i < input.count, input[i] == UInt8(ascii: "]") { i += 1; size += 2; return .array(items) }
        while true {
            skipWhitespace()
            if used > budget {
                try skipValue(depth: depth + 1)
            } else {
                items.append(try value(depth: depth + 1, budget: budget - used, size: &used))
                used += 1 // ',' (or ']')
            }
            skipWhitespace()
            guard i < input.count else { throw fail("unexpected end of input") }
            if input[i] == UInt8(ascii: ",") { i += 1; continue }
            if input[i] == UInt8(ascii: "]") { i += 1; size += used; return .array(items) }
            throw fail("expected ',' or ']'")
        }
    }

    /// Moves past a number, checking its grammar.
    mutating func number() throws(JSONParseError) {
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
    }

    func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    /// Decodes the string at `i`; `size` grows by its compact size as ``JSONWriter``
    /// writes it (the quotes, and the escapes the writer uses).
    mutating func string(size: inout Int) throws(JSONParseError) -> String {
        i += 1
        // The common case: no escape. The text is the input's bytes, no copy to build.
        var k = i
        var ascii = true
        while k < input.count {
            let b = input[k]
            if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") || b < 0x20 { break }
            if b >= 0x80 { ascii = false }
            k += 1
        }
        if k < input.count, input[k] == UInt8(ascii: "\"") {
            let text = input[i..<k]
            let s: String
            if ascii { s = String(decoding: text, as: UTF8.self) } else {
                guard let valid = String(validating: text, as: UTF8.self) else { i = k + 1; throw fail("invalid UTF-8 in string") }
                s = valid
            }
            size += text.count + 2
            i = k + 1
            return s
        }
        var out: [UInt8] = []
        var runStart = i
        var escaped = 0 // bytes the writer adds for escapes
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
                let scalar = try escape()
                switch scalar {
                case 0x22, 0x5C, 0x0A, 0x0D, 0x09, 0x08, 0x0C: escaped += 1
                case 0..<0x20: escaped += 5
                default: break
                }
                appendUTF8(scalar, to: &out)
                runStart = i
                continue
            }
            i += 1
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in string") }
        size += out.count + 2 + escaped
        return s
    }

    /// Reads the escape at `i` (the backslash) and returns the scalar it stands for;
    /// a surrogate pair is one scalar, a lone surrogate an error.
    mutating func escape() throws(JSONParseError) -> UInt32 {
        i += 1
        guard i < input.count else { throw fail("unterminated escape") }
        let e = input[i]
        i += 1
        switch e {
        case UInt8(ascii: "\""): return 0x22
        case UInt8(ascii: "\\"): return 0x5C
        case UInt8(ascii: "/"): return 0x2F
        case UInt8(ascii: "b"): return 0x08
        case UInt8(ascii: "f"): return 0x0C
        case UInt8(ascii: "n"): return 0x0A
        case UInt8(ascii: "r"): return 0x0D
        case UInt8(ascii: "t"): return 0x09
        case UInt8(ascii: "u"):
            let scalar = try hex4()
            if (0xD800...0xDBFF).contains(scalar) {
                guard i + 1 < input.count, input[i] == UInt8(ascii: "\\"), input[i + 1] == UInt8(ascii: "u") else {
                    throw fail("lone surrogate")
                }
                i += 2
                let low = try hex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate") }
                return 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            guard !(0xDC00...0xDFFF).contains(scalar) else { throw fail("lone surrogate") }
            return scalar
        default: throw fail("invalid escape")
        }
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
