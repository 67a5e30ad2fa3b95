import CTLS
import Glibc
import WebSocketEngine

/// Whom a client trusts when it connects over TLS (`wss://`, `https://`): the system's
/// store, and optionally more CAs (a private or self-signed one). The server's certificate
/// must chain to one of them and name the host connected to; a connection that does not
/// verify fails with the reason, never falls back to plain text. TLS 1.2 and later.
public struct TLSTrust: Sendable, Equatable {
    /// The system's CAs (Debian's `ca-certificates`), as the directory of hashed links
    /// that `update-ca-certificates` keeps; when it is missing, OpenSSL's default paths.
    public static let systemCertificates = "/etc/ssl/certs"

    /// PEM certificates trusted besides the system's store.
    public var extraCertificates: [UInt8]?

    /// The system's store only.
    public static let system = TLSTrust()

    public init() {}

    /// The system's store and the CA certificates in `pem` (PEM text, one or more).
    public init(extraCertificates pem: [UInt8]) throws(TLSTrustError) {
        let count = pem.withUnsafeBytes { tabd_tls_count_certificates($0.baseAddress, $0.count) }
        guard count > 0 else { throw TLSTrustError("no PEM certificate in the CA given") }
        extraCertificates = pem
    }

    /// The system's store and the CA certificates in the file at `path` (`--ca-file`).
    public init(caFile path: String) throws(TLSTrustError) {
        let bytes: [UInt8]
        switch SmallFile.read(path, limit: 16 << 20) {
        case let .success(read): bytes = read
        case let .failure(.unreadable(reason)): throw TLSTrustError("cannot read the CA file \(path): \(reason)")
        case .failure(.tooLarge): throw TLSTrustError("the CA file \(path) is larger than 16 MB")
        case .failure(.empty): throw TLSTrustError("the CA file \(path) is empty")
        }
        do { try self.init(extraCertificates: bytes) } catch { throw TLSTrustError("no PEM certificate in the CA file \(path)") }
    }

    /// The system's directory, when it exists (else nil: OpenSSL's default paths).
    package var bundle: String? { access(Self.systemCertificates, R_OK | X_OK) == 0 ? Self.systemCertificates : nil }

    /// Sets up a client SSL_CTX (libwebsockets' or the HTTP client's): TLS 1.2 and later,
    /// verification on, these CAs trusted. Nil, or why not.
    func configure(_ context: UnsafeMutableRawPointer?) -> String? {
        var reason = [CChar](repeating: 0, count: 256)
        let result = withExtra { pem, count in tabd_tls_client_trust(context, bundle, pem, count, &reason, reason.count) }
        return result == 0 ? nil : String(nulTerminated: reason)
    }

    /// Calls `body` with the extra certificates' bytes (nil and 0 without).
    package func withExtra<R>(_ body: (UnsafeRawPointer?, Int) -> R) -> R {
        guard let extraCertificates else { return body(nil, 0) }
        return extraCertificates.withUnsafeBytes { body($0.baseAddress, $0.count) }
    }
}

/// Why a ``TLSTrust`` could not be made (the message names the file).
public struct TLSTrustError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
