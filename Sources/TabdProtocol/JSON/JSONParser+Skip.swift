extension JSONParser {
    /// Moves past the value at `i`, checking it as strictly as building it would (the
    /// same errors at the same bytes), but building nothing: no allocation, whatever
    /// its shape.
    mutating func skipValue(depth: Int) throws(JSONParseError) {
        guard depth < Self.maxDepth else { throw fail("nesting deeper than \(Self.maxDepth)") }
        guard i < input.count else { throw fail("unexpected end of input") }
        switch input[i] {
        case UInt8(ascii: "{"):
            i += 1
            skipWhitespace()
            if i < input.count, input[i] == UInt8(ascii: "}") { i += 1; return }
            while true {
                skipWhitespace()
                guard i < input.count, input[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
                try skipString()
                try colon()
                try skipValue(depth: depth + 1)
                skipWhitespace()
                guard i < input.count else { throw fail("unexpected end of input") }
                if input[i] == UInt8(ascii: ",") { i += 1; continue }
                if input[i] == UInt8(ascii: "}") { i += 1; return }
                throw fail("expected ',' or '}'")
            }
        case UInt8(ascii: "["):
            i += 1
            skipWhitespace()
            if i < input.count, input[i] == UInt8(ascii: "]") { i += 1; return }
            while true {
                skipWhitespace()
                try skipValue(depth: depth + 1)
                skipWhitespace()
                guard i < input.count else { throw fail("unexpected end of input") }
                if input[i] == UInt8(ascii: ",") { i += 1; continue }
                if input[i] == UInt8(ascii: "]") { i += 1; return }
                throw fail("expected ',' or ']'")
            }
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
        default: throw fail("unexpected character")
        }
    }

    /// Moves past the string at `i`: escapes, surrogates and UTF-8 checked as
    /// ``string(size:)`` checks them.
    mutating func skipString() throws(JSONParseError) {
        i += 1
        // Like the building parser, bad UTF-8 is reported once the whole string is read
        // (after any bad escape or control character in it), at the byte after its end.
        var validUTF8 = true
        while true {
            guard i < input.count else { throw fail("unterminated string") }
            let b = input[i]
            if b == UInt8(ascii: "\"") {
                i += 1
                guard validUTF8 else { throw fail("invalid UTF-8 in string") }
                return
            }
            if b < 0x20 { throw fail("control character in string") }
            if b == UInt8(ascii: "\\") { _ = try escape(); continue }
            if b < 0x80 { i += 1; continue }
            if let length = Self.utf8SequenceLength(input, at: i) { i += length } else { validUTF8 = false; i += 1 }
        }
    }

    /// The length of the well-formed UTF-8 sequence starting at `k` (its lead byte is
    /// not ASCII), or nil: no overlong forms, no surrogates, nothing above U+10FFFF.
    static func utf8SequenceLength(_ bytes: [UInt8], at k: Int) -> Int? {
        let b0 = bytes[k]
        func cont(_ n: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
            k + n < bytes.count && range.contains(bytes[k + n])
        }
        switch b0 {
        case 0xC2...0xDF: return cont(1) ? 2 : nil
        case 0xE0: return cont(1, 0xA0...0xBF) && cont(2) ? 3 : nil
        case 0xE1...0xEC, 0xEE...0xEF: return cont(1) && cont(2) ? 3 : nil
        case 0xED: return cont(1, 0x80...0x9F) && cont(2) ? 3 : nil
        case 0xF0: return cont(1, 0x90...0xBF) && cont(2) && cont(3) ? 4 : nil
        case 0xF1...0xF3: return cont(1) && cont(2) && cont(3) ? 4 : nil
        case 0xF4: return cont(1, 0x80...0x8F) && cont(2) && cont(3) ? 4 : nil
        default: return nil
        }
    }
}
