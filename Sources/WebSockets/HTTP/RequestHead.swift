import FoundationEssentials
import Glibc
import Dispatch

/// A refusal of a request, as the status and a short text the client is answered with
/// (the connection is then closed: after a malformed head, where the next request starts
/// cannot be known).
package struct HTTPError: Error, Equatable, Sendable {
    package let status: Int
    package let message: String

    package init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}

/// One request's head (RFC 9112 §2–5), checked byte by byte; header names lowercased.
package struct RequestHead: Equatable, Sendable {
    package struct Field: Equatable, Sendable {
        package let name: String
        package let value: String
    }

    /// The method token as sent (methods are case-sensitive: `get` is not `GET`).
    package var method: String
    /// The request target as sent: the path and the query, still percent-encoded.
    package var target: String
    /// HTTP/1.`minorVersion` (0 or 1).
    package var minorVersion: Int
    package var fields: [Field]

    package init(method: String, target: String, minorVersion: Int = 1, fields: [Field] = []) {
        self.method = method
        self.target = target
        self.minorVersion = minorVersion
        self.fields = fields
    }

    /// Every value of a header, in order.
    package func values(_ name: String) -> [String] {
        fields.compactMap { $0.name == name ? $0.value : nil }
    }

    /// The header's value; several are joined with `, ` (RFC 9110 §5.3).
    package func value(_ name: String) -> String? {
        let all = values(name)
        return all.isEmpty ? nil : all.joined(separator: ", ")
    }

    /// The comma-separated elements of a header's values, trimmed and lowercased (ASCII).
    package func tokens(_ name: String) -> [String] {
        var out: [String] = []
        for field in fields where field.name == name {
            for element in field.value.utf8.split(separator: UInt8(ascii: ",")) {
                var bytes = element.drop { $0 == 0x20 || $0 == 0x09 }
                while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
                guard !bytes.isEmpty else { continue }
                out.append(String(decoding: bytes.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self))
            }
        }
        return out
    }
}

/// How a request's body is delimited (RFC 9112 §6.3).
package enum BodyFraming: Equatable, Sendable {
    /// No body at all (no `content-length`, no `transfer-encoding`).
    case none
    /// Exactly this many bytes.
    case length(Int)
    /// `transfer-encoding: chunked`.
    case chunked
}

extension RequestHead {
    /// The body's framing, or why there is none that can be trusted: `content-length`
    /// values must all be the same number; `transfer-encoding` must be `chunked` alone and
    /// come without `content-length` (either way round is how requests are smuggled).
    package func bodyFraming() throws(HTTPError) -> BodyFraming {
        let transferCodings = tokens("transfer-encoding")
        let lengths = values("content-length")
        if !values("transfer-encoding").isEmpty {
            guard minorVersion == 1 else { throw HTTPError(400, "transfer-encoding in an HTTP/1.0 request") }
            guard lengths.isEmpty else { throw HTTPError(400, "both transfer-encoding and content-length") }
            guard transferCodings == ["chunked"] else {
                throw HTTPError(501, "transfer-encoding \(transferCodings.joined(separator: ", ")) is not supported (only chunked)")
            }
            return .chunked
        }
        guard !lengths.isEmpty else { return .none }
        var length: Int?
        for element in lengths.flatMap({ $0.split(separator: ",", omittingEmptySubsequences: false) }) {
            let digits = element.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed()
            guard !digits.isEmpty, digits.count <= 15, digits.allSatisfy({ (0x30...0x39).contains($0) }),
                let n = Int(String(decoding: digits, as: UTF8.self))
            else { throw HTTPError(400, "content-length is not a number of at most 15 digits") }
            guard length == nil || length == n else { throw HTTPError(400, "content-length given twice, with different values") }
            length = n
        }
        return .length(length!)
    }

    /// Whether the connection may carry another request after this one: HTTP/1.1 unless
    /// it says `close`; HTTP/1.0 only when it asks for `keep-alive`.
    package var keepsAlive: Bool {
        let options = tokens("connection")
        if options.contains("close") { return false }
        return minorVersion == 1 || options.contains("keep-alive")
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request has exactly one `Host`.
    package func checkHost() throws(HTTPError) {
        let hosts = values("host")
        if hosts.count > 1 { throw HTTPError(400, "more than one host header") }
        if minorVersion == 1 && hosts.isEmpty { throw HTTPError(400, "no host header") }
    }
}
