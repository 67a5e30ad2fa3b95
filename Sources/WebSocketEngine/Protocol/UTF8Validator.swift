/// Checks that a byte stream is UTF-8, piece by piece: a message may arrive in fragments
/// and chunks that split a character anywhere.
///
/// Refuses what RFC 3629 refuses: stray continuation bytes, overlong forms, surrogates
/// (U+D800–U+DFFF), code points above U+10FFFF, and the bytes C0, C1, F5–FF. Linear, no
/// allocation; ASCII runs are checked eight bytes at a time.
package struct UTF8Validator: Sendable {
    /// Continuation bytes the current character still needs.
    private var needed: UInt8 = 0
    /// The range allowed for the next continuation byte (narrower after E0, ED, F0, F4).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    package init() {}

    /// Whether every byte so far can start valid UTF-8 (false once it cannot, for good).
    package mutating func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let count = bytes.count
        var i = 0
        while i < count {
            if needed == 0 {
                // Eight ASCII bytes at a time.
                while i + 8 <= count, base.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                    i += 8
                }
                guard i < count else { break }
                let byte = base.load(fromByteOffset: i, as: UInt8.self)
                i += 1
                if byte < 0x80 { continue }
                switch byte {
                case 0xC2...0xDF: (needed, lower, upper) = (1, 0x80, 0xBF)
                case 0xE0: (needed, lower, upper) = (2, 0xA0, 0xBF)
                case 0xE1...0xEC, 0xEE, 0xEF: (needed, lower, upper) = (2, 0x80, 0xBF)
                case 0xED: (needed, lower, upper) = (2, 0x80, 0x9F)
                case 0xF0: (needed, lower, upper) = (3, 0x90, 0xBF)
                case 0xF1...0xF3: (needed, lower, upper) = (3, 0x80, 0xBF)
                case 0xF4: (needed, lower, upper) = (3, 0x80, 0x8F)
                default: return false
                }
            } else {
                let byte = base.load(fromByteOffset: i, as: UInt8.self)
                i += 1
                guard byte >= lower && byte <= upper else { return false }
                (needed, lower, upper) = (needed - 1, 0x80, 0xBF)
            }
        }
        return true
    }

    /// Whether the bytes so far end on a character boundary (a message must).
    package var isAtBoundary: Bool { needed == 0 }

    /// Starts over, for the next message.
    package mutating func reset() {
        (needed, lower, upper) = (0, 0x80, 0xBF)
    }

    /// Whether `bytes` are UTF-8 as a whole.
    package static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var validator = UTF8Validator()
        return validator.feed(bytes) && validator.isAtBoundary
    }
}
