/// Control frames as a server writes them (RFC 6455 §5.5: unmasked, at most 125 bytes).
package enum ControlFrame {
    /// A close frame: the code and the reason, the reason cut to fit (at a character boundary,
    /// so it stays UTF-8); with no code, an empty close.
    package static func close(_ code: UInt16?, reason: String) -> [UInt8] {
        guard let code else { return [0x88, 0x00] }
        var text = Array(reason.utf8)
        if text.count > 123 {
            var end = 123
            while end > 0 && text[end] & 0xC0 == 0x80 { end -= 1 }
            text.removeSubrange(end...)
        }
        return [0x88, UInt8(2 + text.count), UInt8(code >> 8), UInt8(code & 0xFF)] + text
    }

    /// A pong echoing `payload` (a ping's payload is at most 125 bytes, checked when read).
    package static func pong(_ payload: [UInt8]) -> [UInt8] {
        [0x8A, UInt8(min(payload.count, 125))] + payload.prefix(125)
    }

    /// A server's control frame as a client sends it: masked with `key` (RFC 6455 §5.3).
    package static func masked(_ frame: [UInt8], key: UInt32) -> [UInt8] {
        let mask = [UInt8(key >> 24), UInt8(key >> 16 & 0xFF), UInt8(key >> 8 & 0xFF), UInt8(key & 0xFF)]
        let payload = frame.dropFirst(2)
        return [frame[0], 0x80 | frame[1]] + mask + payload.enumerated().map { $0.element ^ mask[$0.offset & 3] }
    }

    /// A ping with a small payload.
    package static func ping(_ payload: [UInt8] = []) -> [UInt8] {
        [0x89, UInt8(min(payload.count, 125))] + payload.prefix(125)
    }
}

/// The opening handshake's key exchange (RFC 6455 §4.2.2): the server proves it read the
/// client's `Sec-WebSocket-Key` by answering SHA-1(key + GUID) in base64.
package enum HandshakeKey {
    static let guid = Array("258EAFA5-E914-47DA-95CA-C5AB0DC85B11".utf8)

    /// The `Sec-WebSocket-Accept` value for a client's key.
    package static func accept(for key: some StringProtocol) -> String {
        base64(SHA1.digest(Array(key.utf8) + guid))
    }

    /// Whether `key` is what a client must send: 16 bytes in base64 (24 characters, `==` at the end).
    package static func isValidKey(_ key: some StringProtocol) -> Bool {
        let bytes = Array(key.utf8)
        guard bytes.count == 24, bytes[22] == UInt8(ascii: "="), bytes[23] == UInt8(ascii: "=") else { return false }
        // The last character before the padding carries 2 bits of data and 4 zero bits.
        guard let last = base64Value(bytes[21]), last & 0x0F == 0 else { return false }
        return bytes[0..<21].allSatisfy { base64Value($0) != nil }
    }

    private static func base64Value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return c - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return c - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): return 62
        case UInt8(ascii: "/"): return 63
        default: return nil
        }
    }

    static func base64(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let n = min(3, bytes.count - i)
            let b0 = UInt32(bytes[i]), b1 = n > 1 ? UInt32(bytes[i + 1]) : 0, b2 = n > 2 ? UInt32(bytes[i + 2]) : 0
            let v = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(v >> 18 & 63)])
            out.append(alphabet[Int(v >> 12 & 63)])
            out.append(n > 1 ? alphabet[Int(v >> 6 & 63)] : UInt8(ascii: "="))
            out.append(n > 2 ? alphabet[Int(v & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// SHA-1 (FIPS 180-4), for the handshake only: not used for anything secret.
package enum SHA1 {
    package static func digest(_ message: [UInt8]) -> [UInt8] {
        var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        var data = message
        let bitLength = UInt64(message.count) * 8
        data.append(0x80)
        while data.count % 64 != 56 { data.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) { data.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift))) }
        var w = [UInt32](repeating: 0, count: 80)
        for chunk in stride(from: 0, to: data.count, by: 64) {
            for t in 0..<16 {
                let j = chunk + 4 * t
                w[t] = UInt32(data[j]) << 24 | UInt32(data[j + 1]) << 16 | UInt32(data[j + 2]) << 8 | UInt32(data[j + 3])
            }
            for t in 16..<80 {
                let x = w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]
                w[t] = x << 1 | x >> 31
            }
            var (a, b, c, d, e) = h
            for t in 0..<80 {
                let f: UInt32, k: UInt32
                switch t {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5A82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ED9_EBA1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
                default: (f, k) = (b ^ c ^ d, 0xCA62_C1D6)
                }
                let temp = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[t]
                (e, d, c, b, a) = (d, c, b << 30 | b >> 2, a, temp)
            }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
        var out: [UInt8] = []
        for word in [h.0, h.1, h.2, h.3, h.4] {
            out += [UInt8(word >> 24), UInt8(word >> 16 & 0xFF), UInt8(word >> 8 & 0xFF), UInt8(word & 0xFF)]
        }
        return out
    }
}
