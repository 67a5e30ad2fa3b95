import FoundationEssentials
import Glibc
import Dispatch

/// The base64url encoding of JWTs (RFC 7515 §2: the URL-safe alphabet, no padding),
/// by way of Foundation's base64.
package enum Base64URL {
    package static func encode(_ bytes: [UInt8]) -> String {
        var s = Data(bytes).base64EncodedString()
        while s.last == "=" { s.removeLast() }
        return String(s.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }

    /// The bytes of `text`, or nil when it is not strict base64url: only `A-Z a-z 0-9 - _`,
    /// no padding, no whitespace, a length that base64 can have.
    package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        let utf8 = Array(text)
        guard utf8.count % 4 != 1 else { return nil }
        var standard = [UInt8]()
        standard.reserveCapacity(utf8.count + 3)
        for b in utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.append(b)
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            default: return nil
            }
        }
        while standard.count % 4 != 0 { standard.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(standard)).map { Array($0) }
    }
}
