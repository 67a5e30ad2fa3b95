/// A request target (`/path?query`) decoded: the path percent-decoded with its dot segments
/// and repeated slashes removed (it never climbs above `/`), the query split at `&` and
/// `;` into names and values, percent-decoded, `+` read as a space.
package struct RequestTarget: Equatable, Sendable {
    package var path: String
    /// A repeated name keeps its last value; a name without `=` has the value "".
    package var query: [String: String]

    /// Decodes the origin form of a target (RFC 9112 §3.2.1); `*` and absolute URLs are refused,
    /// as are bad percent escapes, a NUL and bytes that are not UTF-8.
    package init(_ target: String) throws(HTTPError) {
        let bytes = Array(target.utf8)
        guard bytes.first == UInt8(ascii: "/") else { throw HTTPError(400, "the request target must start with /") }
        let queryStart = bytes.firstIndex(of: UInt8(ascii: "?"))
        var rawPath = Array(bytes[..<(queryStart ?? bytes.count)])
        if let hash = rawPath.firstIndex(of: UInt8(ascii: "#")) { rawPath.removeSubrange(hash...) }
        let decoded = try Self.percentDecoded(rawPath, plusIsSpace: false)
        path = Self.normalized(decoded)
        guard let queryStart else {
            query = [:]
            return
        }
        var rawQuery = Array(bytes[(queryStart + 1)...])
        if let hash = rawQuery.firstIndex(of: UInt8(ascii: "#")) { rawQuery.removeSubrange(hash...) }
        query = try Self.query(rawQuery)
    }

    /// A query string (after the `?`, before any `#`) as names and values: split at `&`
    /// and `;`, each part at its first `=`, percent-decoded with `+` as a space. A repeated
    /// name keeps its last value; a name without `=` has the value "". Refuses what
    /// ``percentDecoded(_:plusIsSpace:)`` refuses.
    package static func query(_ bytes: [UInt8]) throws(HTTPError) -> [String: String] {
        var query: [String: String] = [:]
        for part in bytes.split(whereSeparator: { $0 == UInt8(ascii: "&") || $0 == UInt8(ascii: ";") }) {
            let name: [UInt8], value: [UInt8]
            if let equals = part.firstIndex(of: UInt8(ascii: "=")) {
                (name, value) = (Array(part[..<equals]), Array(part[(equals + 1)...]))
            } else {
                (name, value) = (Array(part), [])
            }
            query[try percentDecoded(name, plusIsSpace: true)] = try percentDecoded(value, plusIsSpace: true)
        }
        return query
    }

    package static func percentDecoded(_ bytes: [UInt8], plusIsSpace: Bool) throws(HTTPError) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let high = hex(bytes[i + 1]), let low = hex(bytes[i + 2]) else {
                    throw HTTPError(400, "a bad percent escape in the request target")
                }
                out.append(high << 4 | low)
                i += 3
            } else {
                out.append(plusIsSpace && c == UInt8(ascii: "+") ? 0x20 : c)
                i += 1
            }
        }
        guard !out.contains(0) else { throw HTTPError(400, "a NUL in the request target") }
        guard let text = String(validating: out, as: UTF8.self) else { throw HTTPError(400, "the request target is not UTF-8") }
        return text
    }

    /// Removes `.` and `..` segments and empty ones (`//`), keeping a final `/`.
    static func normalized(_ path: String) -> String {
        var segments: [Substring] = []
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        for part in parts {
            switch part {
            case "", ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(part)
            }
        }
        let trailing = path.count > 1 && (path.hasSuffix("/") || path.hasSuffix("/.") || path.hasSuffix("/.."))
        var result = "/" + segments.joined(separator: "/")
        if trailing && !segments.isEmpty { result += "/" }
        return result
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x41...0x46: return c - 0x41 + 10
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }
}
