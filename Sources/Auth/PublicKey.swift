import CCrypto

/// An asymmetric key of signed tokens, loaded from PEM by OpenSSL's libcrypto: an ES256
/// key (ECDSA on P-256) or an RS256 key (RSA, at least 2,048 bits). A public key only
/// verifies; a private key (for `tabd token --private-key`) also signs.
///
/// The key is never changed after it is loaded, and OpenSSL allows concurrent use of one
/// `EVP_PKEY` from many threads for signing and verifying (each call has its own context).
public final class AsymmetricKey: @unchecked Sendable {
    public enum Kind: String, Sendable {
        /// ECDSA over P-256 with SHA-256 (JWS `ES256`).
        case ecP256
        /// RSASSA-PKCS1-v1_5 with SHA-256 (JWS `RS256`).
        case rsa
    }

    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// RFC 7518 §3.3: RSA keys of 2,048 bits or more.
    public static let minimumRSABits = 2048

    public let kind: Kind
    public let isPrivate: Bool
    private let key: OpaquePointer

    private init(key: OpaquePointer, isPrivate: Bool, source: String) throws(Error) {
        self.key = key
        self.isPrivate = isPrivate
        switch EVP_PKEY_get_base_id(key) {
        case tabd_evp_pkey_ec():
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(key, &name, name.count, &length) == 1,
                  String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) == "prime256v1" else {
                EVP_PKEY_free(key)
                throw Error(description: "\(source) is an EC key on another curve than P-256 (ES256 needs P-256)")
            }
            kind = .ecP256
        case tabd_evp_pkey_rsa():
            let bits = Int(EVP_PKEY_get_bits(key))
            guard bits >= Self.minimumRSABits else {
                EVP_PKEY_free(key)
                throw Error(description: "\(source) is an RSA key of \(bits) bits; RS256 needs at least \(Self.minimumRSABits)")
            }
            kind = .rsa
        default:
            EVP_PKEY_free(key)
            throw Error(description: "\(source) is neither an EC P-256 key (ES256) nor an RSA key (RS256)")
        }
    }

    deinit { EVP_PKEY_free(key) }

    /// The public key in `pem`: a `PUBLIC KEY` (SubjectPublicKeyInfo), or a `CERTIFICATE`
    /// whose key is taken (its dates and issuer are not checked: the key is what is trusted).
    public static func publicKey(pem: [UInt8], source: String) throws(Error) -> AsymmetricKey {
        if let key = read(pem, { PEM_read_bio_PUBKEY($0, nil, nil, nil) }) {
            return try AsymmetricKey(key: key, isPrivate: false, source: source)
        }
        if let certificate = read(pem, { PEM_read_bio_X509($0, nil, nil, nil) }) {
            defer { X509_free(certificate) }
            if let key = X509_get_pubkey(certificate) { return try AsymmetricKey(key: key, isPrivate: false, source: source) }
        }
        throw Error(description: "\(source) holds no PEM public key or certificate")
    }

    /// The private key in `pem` (PKCS#8 `PRIVATE KEY`, or the traditional `EC PRIVATE KEY`
    /// and `RSA PRIVATE KEY`), unencrypted.
    public static func privateKey(pem: [UInt8], source: String) throws(Error) -> AsymmetricKey {
        guard let key = read(pem, { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
            throw Error(description: "\(source) holds no unencrypted PEM private key")
        }
        return try AsymmetricKey(key: key, isPrivate: true, source: source)
    }

    private static func read(_ pem: [UInt8], _ body: (OpaquePointer) -> OpaquePointer?) -> OpaquePointer? {
        defer { ERR_clear_error() }
        return pem.withUnsafeBytes { raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }

    /// The JWS algorithm this key signs with.
    public var algorithm: TokenAlgorithm { kind == .ecP256 ? .es256 : .rs256 }

    /// Whether `signature` (JWS form: `r‖s`, 64 bytes, for ES256; the PKCS#1 signature for
    /// RS256) signs `message` under this key.
    func verify(_ signature: [UInt8], of message: [UInt8]) -> Bool {
        defer { ERR_clear_error() }
        var der = signature
        if kind == .ecP256 {
            guard signature.count == 64, let converted = Self.derSignature(rs: signature) else { return false }
            der = converted
        }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        return der.withUnsafeBufferPointer { s in
            message.withUnsafeBufferPointer { m in
                EVP_DigestVerify(context, s.baseAddress, s.count, m.baseAddress ?? UnsafePointer(bitPattern: 1), m.count) == 1
            }
        }
    }

    /// The JWS signature of `message` (ES256: `r‖s`). Only for a private key.
    func sign(_ message: [UInt8]) throws(Error) -> [UInt8] {
        defer { ERR_clear_error() }
        precondition(isPrivate, "a public key cannot sign")
        guard let context = EVP_MD_CTX_new() else { throw Error(description: "libcrypto is out of memory") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else { throw Error(description: "libcrypto cannot sign with this key") }
        var length = 0
        let signed = message.withUnsafeBufferPointer { m -> [UInt8]? in
            let base = m.baseAddress ?? UnsafePointer(bitPattern: 1)
            guard EVP_DigestSign(context, nil, &length, base, m.count) == 1 else { return nil }
            var out = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &out, &length, base, m.count) == 1 else { return nil }
            return Array(out.prefix(length))
        }
        guard let signed else { throw Error(description: "libcrypto could not sign") }
        if kind == .rsa { return signed }
        guard let rs = Self.rsSignature(der: signed) else { throw Error(description: "libcrypto gave an ECDSA signature it cannot read") }
        return rs
    }

    /// `r‖s` (two 32-byte big-endian numbers) as the DER `ECDSA-Sig-Value` libcrypto verifies.
    static func derSignature(rs: [UInt8]) -> [UInt8]? {
        guard rs.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = rs.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = rs.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s else { BN_free(r); BN_free(s); return nil }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else { BN_free(r); BN_free(s); return nil }
        var out: UnsafeMutablePointer<UInt8>?
        let length = i2d_ECDSA_SIG(signature, &out)
        guard length > 0, let out else { return nil }
        defer { CRYPTO_free(out, #fileID, #line) }
        return Array(UnsafeBufferPointer(start: out, count: Int(length)))
    }

    /// A DER `ECDSA-Sig-Value` as JWS's `r‖s`.
    static func rsSignature(der: [UInt8]) -> [UInt8]? {
        der.withUnsafeBufferPointer { buffer -> [UInt8]? in
            var start: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let signature = d2i_ECDSA_SIG(nil, &start, buffer.count) else { return nil }
            defer { ECDSA_SIG_free(signature) }
            guard let r = ECDSA_SIG_get0_r(signature), let s = ECDSA_SIG_get0_s(signature) else { return nil }
            var out = [UInt8](repeating: 0, count: 64)
            let done = out.withUnsafeMutableBufferPointer { o in
                BN_bn2binpad(r, o.baseAddress, 32) == 32 && BN_bn2binpad(s, o.baseAddress! + 32, 32) == 32
            }
            return done ? out : nil
        }
    }
}
