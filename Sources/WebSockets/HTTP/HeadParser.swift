/// Finds and checks one request head at the start of a connection's unread bytes, which
/// arrive in pieces: each call looks only at the bytes it has not seen before, so a head
/// sent a byte at a time costs what it costs at once.
///
/// Limits, checked as bytes arrive (so nothing larger is ever held): the request line at
/// most `maxRequestLine` bytes (414), the whole head at most `maxHead` (431), at most
/// `maxFields` header lines (431). Bytes a head may never hold (RFC 9112 §2–5): a NUL or
/// another control character, a CR not followed by LF, whitespace before a header's colon,
/// an obsolete line folding, a line without a colon, a malformed request line (400), an
/// HTTP version other than 1.0 and 1.1 (505). Lines may end with CRLF or a bare LF; empty
/// lines before the request line are skipped (RFC 9112 §2.2).
package struct HeadParser: Sendable {
    package struct Limits: Sendable {
        package var maxRequestLine = 8_192
        package var maxHead = 16_384
        package var maxFields = 100

        package init() {}
    }

    package let limits: Limits
    /// Bytes looked at so far (from the start of the head).
    private var scanned = 0
    /// Where the current line starts.
    private var lineStart = 0
    /// The lines seen so far, without their line ends (the request line first).
    private var lines: [Range<Int>] = []

    package init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Whether any byte of a request has arrived (empty lines before it do not count).
    package var hasStarted: Bool { !lines.isEmpty || scanned > lineStart }

    /// The head at the start of `bytes` and how many bytes it takes, or nil while it is not
    /// whole. `bytes` must start where the previous calls' did and hold at least what they
    /// held. Call `reset()` before the next request.
    package mutating func parse(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) -> (head: RequestHead, length: Int)? {
        let count = bytes.count
        var i = scanned
        while i < count {
            guard bytes[i] == 0x0A else {
                i += 1
                continue
            }
            var end = i
            if end > lineStart && bytes[end - 1] == 0x0D { end -= 1 }
            if end == lineStart {
                if lines.isEmpty {
                    // An empty line before the request line.
                    lineStart = i + 1
                    i += 1
                    continue
                }
                scanned = i + 1
                let head = try Self.head(bytes, lines)
                return (head, i + 1)
            }
            if lines.isEmpty && end - lineStart > limits.maxRequestLine {
                throw HTTPError(414, "request line longer than \(limits.maxRequestLine) bytes")
            }
            lines.append(lineStart..<end)
            if lines.count > limits.maxFields + 1 { throw HTTPError(431, "more than \(limits.maxFields) header lines") }
            lineStart = i + 1
            i += 1
            if i - (lines.first?.lowerBound ?? 0) > limits.maxHead { throw HTTPError(431, "request head longer than \(limits.maxHead) bytes") }
        }
        scanned = count
        if lines.isEmpty && count - lineStart > limits.maxRequestLine {
            throw HTTPError(414, "request line longer than \(limits.maxRequestLine) bytes")
        }
        if count - (lines.first?.lowerBound ?? lineStart) > limits.maxHead {
            throw HTTPError(431, "request head longer than \(limits.maxHead) bytes")
        }
        if lineStart > limits.maxHead { throw HTTPError(400, "too many empty lines before the request") }
        return nil
    }

    /// Forgets the head parsed last, for the next request.
    package mutating func reset() {
        scanned = 0
        lineStart = 0
        lines.removeAll(keepingCapacity: true)
    }

    // MARK: Checking a whole head

    private static func head(_ bytes: UnsafeRawBufferPointer, _ lines: [Range<Int>]) throws(HTTPError) -> RequestHead {
        var head = try requestLine(UnsafeRawBufferPointer(rebasing: bytes[lines[0]]))
        head.fields.reserveCapacity(lines.count - 1)
        for range in lines.dropFirst() {
            head.fields.append(try field(UnsafeRawBufferPointer(rebasing: bytes[range])))
        }
        return head
    }

    private static func requestLine(_ line: UnsafeRawBufferPointer) throws(HTTPError) -> RequestHead {
        try checkNoBareCRorNUL(line)
        let parts = line.split(separator: 0x20, maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else {
            throw HTTPError(400, "malformed request line")
        }
        guard parts[0].allSatisfy(isTokenByte) else { throw HTTPError(400, "malformed method") }
        guard parts[1].allSatisfy({ (0x21...0x7E).contains($0) }) else { throw HTTPError(400, "malformed request target") }
        let version = Array(parts[2])
        let prefix = Array("HTTP/".utf8)
        guard version.count == 8, version.starts(with: prefix), isDigit(version[5]), version[6] == 0x2E, isDigit(version[7]) else {
            throw HTTPError(400, "malformed HTTP version")
        }
        guard version[5] == 0x31, version[7] == 0x30 || version[7] == 0x31 else {
            throw HTTPError(505, "HTTP version not supported (only 1.0 and 1.1)")
        }
        return RequestHead(
            method: String(decoding: parts[0], as: UTF8.self), target: String(decoding: parts[1], as: UTF8.self),
            minorVersion: Int(version[7] - 0x30))
    }

    private static func field(_ line: UnsafeRawBufferPointer) throws(HTTPError) -> RequestHead.Field {
        try checkNoBareCRorNUL(line)
        if line[0] == 0x20 || line[0] == 0x09 { throw HTTPError(400, "obsolete line folding in the head") }
        guard let colon = line.firstIndex(of: 0x3A) else { throw HTTPError(400, "a header line without a colon") }
        let name = line[..<colon]
        guard !name.isEmpty, name.allSatisfy(isTokenByte) else { throw HTTPError(400, "malformed header name") }
        var start = colon + 1
        var end = line.count
        while start < end && (line[start] == 0x20 || line[start] == 0x09) { start += 1 }
        while end > start && (line[end - 1] == 0x20 || line[end - 1] == 0x09) { end -= 1 }
        let value = line[start..<end]
        guard value.allSatisfy({ $0 == 0x09 || $0 >= 0x20 && $0 != 0x7F }) else {
            throw HTTPError(400, "control character in a header value")
        }
        // Token bytes are ASCII: lowercased byte by byte, not through Unicode.
        return RequestHead.Field(
            name: String(decoding: name.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self),
            value: String(decoding: value, as: UTF8.self))
    }

    private static func checkNoBareCRorNUL(_ line: UnsafeRawBufferPointer) throws(HTTPError) {
        // The line's own end was taken off, so any CR left is bare.
        if line.contains(0x0D) { throw HTTPError(400, "a CR not followed by LF in the head") }
        if line.contains(0x00) { throw HTTPError(400, "a NUL in the head") }
    }

    private static func isDigit(_ c: UInt8) -> Bool { (0x30...0x39).contains(c) }

    /// RFC 9110 §5.6.2 tchar.
    static func isTokenByte(_ c: UInt8) -> Bool {
        switch c {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default: return false
        }
    }
}
