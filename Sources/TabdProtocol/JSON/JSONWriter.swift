/// Writes compact JSON into a byte buffer.
///
/// Hand-written because encoding happens once per event batch on the hot path
/// (see docs/ARCHITECTURE.md): a `JSONEncoder` run costs more than a whole delivery.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case let .bool(b): raw(b ? "true" : "false")
        case let .number(n): raw(n)
        case let .string(s): string(s)
        case let .array(items):
            bytes.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { bytes.append(UInt8(ascii: ",")) }
                write(item)
            }
            bytes.append(UInt8(ascii: "]"))
        case let .object(members):
            bytes.append(UInt8(ascii: "{"))
            for (i, (key, item)) in members.enumerated() {
                if i > 0 { bytes.append(UInt8(ascii: ",")) }
                string(key)
                bytes.append(UInt8(ascii: ":"))
                write(item)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// Appends text that is already valid JSON (punctuation, literals).
    public mutating func raw(_ text: String) { bytes.append(contentsOf: text.utf8) }

    public mutating func string(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(UInt8(ascii: "\\")); bytes.append(byte)
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\")); bytes.append(byte)
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0x08: raw("\\b")
            case 0x0C: raw("\\f")
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                raw("\\u00")
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func int(_ i: Int) { raw(String(i)) }

    /// Starts an object member: `"key":` preceded by a comma unless it is the first.
    public mutating func key(_ key: String, first: Bool = false) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func optionalString(_ s: String?) {
        if let s { string(s) } else { raw("null") }
    }
}
