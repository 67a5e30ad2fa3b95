import CTLS
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import WebSocketEngine

/// The files a TLS server reads its certificate chain and private key from (PEM; the
/// certificate file may hold the chain after the server's certificate).
public struct TLSFiles: Sendable, Equatable {
    public var certificateFile: String
    public var keyFile: String

    public init(certificateFile: String, keyFile: String) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }
}

/// The certificate a TLS server gives new connections: who it names and until when.
public struct TLSCertificateInfo: Sendable, Equatable, CustomStringConvertible {
    /// Subject, issuer, expiry date and the length of the chain, for the log.
    public let summary: String
    /// Seconds until it expires when it was read (negative: expired).
    public let secondsLeft: Int64
    /// When it expires: seconds since 1970 (when it was read, plus ``secondsLeft``).
    public var notAfter: Double = 0
    /// The certificate's DNS names (subjectAltName), `*.` wildcards as written.
    public var dnsNames: [String] = []

    public var description: String { summary }
}

/// Why a certificate and key could not be used; the message names the file.
public struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// The certificate and key new TLS connections are given: read from `files` at start and
/// again on `reload()`. A pair is checked whole (both files read, both PEM, the key the
/// certificate's) before it replaces the one in use, so a bad new pair changes nothing.
/// Connections already open keep the pair their handshake used.
///
/// Thread-safe: the C store swaps under its own lock; reloads are serialized here.
final class TLSStore: @unchecked Sendable {
    // @unchecked Sendable: `store` is only handed to C functions that lock; `current` is Locked.
    let files: TLSFiles
    let store: OpaquePointer
    private let current: Locked<TLSCertificateInfo>

    /// The certificate in use.
    var certificate: TLSCertificateInfo { current.withLock { $0 } }

    init(files: TLSFiles) throws(TLSError) {
        let (pair, summary) = try Self.load(files)
        guard let store = tabd_tls_store_new(pair) else {
            tabd_tls_pair_free(pair)
            throw TLSError("out of memory for the TLS certificate")
        }
        self.files = files
        self.store = store
        self.current = Locked(summary)
    }

    deinit { tabd_tls_store_free(store) }

    /// Reads both files again and, if they make a good pair, gives it to every handshake
    /// from now on. Returns the new certificate.
    func reload() throws(TLSError) -> TLSCertificateInfo {
        let result = current.withLock { summary -> Result<TLSCertificateInfo, TLSError> in
            do throws(TLSError) {
                let (pair, newSummary) = try Self.load(files)
                tabd_tls_store_replace(store, pair)
                summary = newSummary
                return .success(newSummary)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Gives a server SSL_CTX of libwebsockets' the store's pair at every handshake, and
    /// TLS 1.2 as the oldest version.
    func configure(serverContext: UnsafeMutableRawPointer?) -> Bool {
        tabd_tls_server_configure(serverContext, store) == 0
    }

    /// Both files read and parsed, the key checked against the certificate.
    static func load(_ files: TLSFiles) throws(TLSError) -> (OpaquePointer, TLSCertificateInfo) {
        let certificate = try read(files.certificateFile, what: "TLS certificate")
        let key = try read(files.keyFile, what: "TLS key")
        var pair: OpaquePointer?
        var reason = [CChar](repeating: 0, count: 256)
        let problem = certificate.withUnsafeBytes { cert in
            key.withUnsafeBytes { key in
                tabd_tls_pair_parse(cert.baseAddress, cert.count, key.baseAddress, key.count, &pair, &reason, reason.count)
            }
        }
        let why = String(nulTerminated: reason)
        switch problem {
        case Int32(TABD_TLS_PAIR_OK.rawValue):
            guard let pair else { throw TLSError("the TLS certificate \(files.certificateFile) cannot be used") }
            var text = [CChar](repeating: 0, count: 768)
            tabd_tls_pair_describe(pair, &text, text.count)
            let summary = String(nulTerminated: text)
            var names = [CChar](repeating: 0, count: 16_384)
            let named = certificate.withUnsafeBytes { tabd_tls_certificate_dns_names($0.baseAddress, $0.count, &names, names.count) }
            let dnsNames = named > 0 ? String(nulTerminated: names).split(separator: "\n").map(String.init) : []
            return (pair, TLSCertificateInfo(summary: summary, secondsLeft: tabd_tls_pair_seconds_left(pair), notAfter: Date().timeIntervalSince1970 + Double(tabd_tls_pair_seconds_left(pair)), dnsNames: dnsNames))
        case Int32(TABD_TLS_PAIR_BAD_CERTIFICATE.rawValue):
            throw TLSError("the TLS certificate \(files.certificateFile) cannot be read as PEM: \(why)")
        case Int32(TABD_TLS_PAIR_BAD_KEY.rawValue):
            throw TLSError("the TLS key \(files.keyFile) cannot be read as PEM: \(why)")
        default:
            throw TLSError("the TLS key \(files.keyFile) does not belong to the certificate \(files.certificateFile)")
        }
    }

    /// A whole file (at most 1 MB: certificates and keys are a few kB), or why not.
    static func read(_ path: String, what: String) throws(TLSError) -> [UInt8] {
        switch SmallFile.read(path, limit: 1 << 20) {
        case let .success(bytes): return bytes
        case let .failure(.unreadable(reason)): throw TLSError("cannot read the \(what) \(path): \(reason)")
        case .failure(.tooLarge): throw TLSError("the \(what) \(path) is larger than 1 MB")
        case .failure(.empty): throw TLSError("the \(what) \(path) is empty")
        }
    }
}
