/// Reads one request's body as its bytes arrive: `content-length` bytes, or a chunked body
/// (RFC 9112 §7.1) decoded. Pure: the caller hands it the bytes after the head and gets back
/// how many it took.
///
/// A chunked body refuses (400) a size that is not hex or has more than 8 digits, a size or
/// trailer line over 4 KiB, trailers over 16 KiB in all, chunk data not followed by its line
/// end; chunk extensions and trailer fields are read and ignored.
package struct BodyReader: Sendable {
    private enum Chunked: Sendable {
        case size(value: Int, digits: Int)
        case sizeExtension
        case sizeLineEnd
        case data(remaining: Int)
        case dataEnd
        case dataLineEnd
        case trailerLine(length: Int)
        case trailerLineEnd(length: Int)
        case done
    }

    private enum Kind: Sendable {
        case length(remaining: Int)
        case chunked(Chunked)
    }

    static let maxLine = 4_096
    static let maxTrailers = 16_384

    private var kind: Kind
    /// Body bytes read so far (decoded, for a chunked body).
    package private(set) var bodyBytes = 0
    private var lineBytes = 0
    private var trailerBytes = 0

    /// Reads a body framed as `framing` (`.none` reads nothing and is done at once).
    package init(_ framing: BodyFraming) {
        switch framing {
        case .none: kind = .length(remaining: 0)
        case let .length(n): kind = .length(remaining: n)
        case .chunked: kind = .chunked(.size(value: 0, digits: 0))
        }
    }

    /// Whether the whole body has been read.
    package var isDone: Bool {
        switch kind {
        case let .length(remaining): return remaining == 0
        case .chunked(.done): return true
        case .chunked: return false
        }
    }

    /// For a `content-length` body: the bytes still to come.
    package var remainingLength: Int? {
        if case let .length(remaining) = kind { return remaining }
        return nil
    }

    /// Takes body bytes from the start of `bytes` and passes the body's data to `sink`;
    /// returns how many bytes of `bytes` it took (it stops at the body's end).
    package mutating func read(_ bytes: UnsafeRawBufferPointer, _ sink: (UnsafeRawBufferPointer) -> Void) throws(HTTPError) -> Int {
        switch kind {
        case let .length(remaining):
            let take = min(remaining, bytes.count)
            if take > 0 { sink(UnsafeRawBufferPointer(rebasing: bytes[..<take])) }
            kind = .length(remaining: remaining - take)
            bodyBytes += take
            return take
        case var .chunked(state):
            defer { kind = .chunked(state) }
            var i = 0
            while i < bytes.count {
                let c = bytes[i]
                switch state {
                case .done:
                    return i
                case let .data(remaining):
                    let take = min(remaining, bytes.count - i)
                    sink(UnsafeRawBufferPointer(rebasing: bytes[i..<i + take]))
                    bodyBytes += take
                    i += take
                    state = remaining == take ? .dataEnd : .data(remaining: remaining - take)
                    continue
                case let .size(value, digits):
                    try countLine()
                    if let digit = Self.hexValue(c) {
                        guard digits < 8 else { throw HTTPError(400, "chunk size of more than 8 hex digits") }
                        state = .size(value: value << 4 | digit, digits: digits + 1)
                    } else if digits > 0 && (c == 0x3B || c == 0x20 || c == 0x09) {
                        pendingSize = value
                        state = .sizeExtension
                    } else if digits > 0 && (c == 0x0D || c == 0x0A) {
                        pendingSize = value
                        state = c == 0x0D ? .sizeLineEnd : try chunkStart(value)
                    } else {
                        throw HTTPError(400, "malformed chunk size")
                    }
                case .sizeExtension:
                    try countLine()
                    if c == 0x0D {
                        state = .sizeLineEnd
                    } else if c == 0x0A {
                        state = try chunkStart(pendingSize)
                    } else if c < 0x20 && c != 0x09 || c == 0x7F {
                        throw HTTPError(400, "control character in a chunk extension")
                    }
                case .sizeLineEnd:
                    guard c == 0x0A else { throw HTTPError(400, "a CR not followed by LF in a chunk size line") }
                    state = try chunkStart(pendingSize)
                case .dataEnd:
                    if c == 0x0D {
                        state = .dataLineEnd
                    } else if c == 0x0A {
                        state = .size(value: 0, digits: 0)
                        lineBytes = 0
                    } else {
                        throw HTTPError(400, "chunk data not followed by CRLF")
                    }
                case .dataLineEnd:
                    guard c == 0x0A else { throw HTTPError(400, "chunk data not followed by CRLF") }
                    state = .size(value: 0, digits: 0)
                    lineBytes = 0
                case let .trailerLine(length):
                    trailerBytes += 1
                    guard trailerBytes <= Self.maxTrailers, length < Self.maxLine else {
                        throw HTTPError(431, "chunked trailers too long")
                    }
                    if c == 0x0D {
                        state = .trailerLineEnd(length: length)
                    } else if c == 0x0A {
                        if length == 0 { state = .done; i += 1; return i }
                        state = .trailerLine(length: 0)
                    } else if c == 0x00 {
                        throw HTTPError(400, "a NUL in a chunked trailer")
                    } else {
                        state = .trailerLine(length: length + 1)
                    }
                case let .trailerLineEnd(length):
                    guard c == 0x0A else { throw HTTPError(400, "a CR not followed by LF in a chunked trailer") }
                    if length == 0 { state = .done; i += 1; return i }
                    state = .trailerLine(length: 0)
                }
                i += 1
            }
            return i
        }
    }

    // The size being read; kept beside the state so the extension states need not carry it.
    private var pendingSize = 0

    private mutating func countLine() throws(HTTPError) {
        lineBytes += 1
        guard lineBytes <= Self.maxLine else { throw HTTPError(400, "chunk size line longer than 4 KiB") }
    }

    /// The size line ended: the chunk's data follows, or (size 0) the trailers.
    private mutating func chunkStart(_ size: Int) throws(HTTPError) -> Chunked {
        lineBytes = 0
        return size == 0 ? .trailerLine(length: 0) : .data(remaining: size)
    }

    private static func hexValue(_ c: UInt8) -> Int? {
        switch c {
        case 0x30...0x39: return Int(c - 0x30)
        case 0x41...0x46: return Int(c - 0x41 + 10)
        case 0x61...0x66: return Int(c - 0x61 + 10)
        default: return nil
        }
    }
}
