import FoundationEssentials
import Glibc
import Dispatch

/// The HMAC key of signed tokens, read from `--auth-secret-file` (or `TABD_AUTH_SECRET`).
public struct SigningKey: Sendable {
    /// RFC 7518 §3.2: an HS256 key has at least as many bits as the hash.
    public static let minimumLength = 32

    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    let bytes: [UInt8]

    /// A key of at least ``minimumLength`` bytes.
    public init(bytes: [UInt8], source: String) throws(Error) {
        guard bytes.count >= Self.minimumLength else {
            throw Error(description: "\(source) holds \(bytes.count) bytes; a signing key needs at least \(Self.minimumLength)")
        }
        self.bytes = bytes
    }

    /// The key in `path`. A file of one line of text (printable ASCII) may end with a line break,
    /// which is not part of the key (`openssl rand -hex 32 > FILE` works as it is);
    /// any other file is the key byte for byte.
    public static func load(path: String) throws(Error) -> SigningKey {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw Error(description: "cannot read the secret file '\(path)': \(Self.reason(error))")
        }
        return try SigningKey(bytes: withoutFinalLineBreak(Array(data)), source: "the secret file '\(path)'")
    }

    /// `bytes` without one final `\n` or `\r\n` when everything before it is printable ASCII.
    public static func withoutFinalLineBreak(_ bytes: [UInt8]) -> [UInt8] {
        var body = bytes[...]
        if body.last == 0x0A { body.removeLast(); if body.last == 0x0D { body.removeLast() } } else { return bytes }
        return body.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) ? Array(body) : bytes
    }

    /// Why a file could not be read, in a few words (`no such file`, `permission denied`).
    static func reason(_ error: any Swift.Error) -> String {
        if let posix = error as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
        guard let cocoa = error as? CocoaError else { return "\(error)" }
        switch cocoa.code {
        case .fileReadNoSuchFile: return "no such file"
        case .fileReadNoPermission: return "permission denied"
        case .fileReadInapplicableStringEncoding: return "not UTF-8 text"
        default:
            if let posix = cocoa.userInfo["NSUnderlyingError"] as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
            return "\(cocoa.code)"
        }
    }
}
