import CCrypto

/// The two primitives signed tokens need, from OpenSSL's libcrypto: HMAC-SHA256 and a
/// comparison whose time does not depend on where the inputs differ. The only code in
/// tabd that touches the C library.
enum Crypto {
    /// HMAC-SHA256 of `message` under `key` (32 bytes).
    static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let done = key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                // A null message pointer is fine for libcrypto only with length 0; give it a byte.
                HMAC(EVP_sha256(), k.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(key.count),
                     m.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count, &out, &length)
            }
        }
        // HMAC fails only when the digest is unavailable: a broken libcrypto, not bad input.
        precondition(done != nil && length == 32, "libcrypto could not compute HMAC-SHA256")
        return Array(out.prefix(Int(length)))
    }

    /// Whether `a` and `b` hold the same bytes, in time that depends only on their lengths.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
    }
}

/// HMAC-SHA256 for other modules (a cluster's shard map is keyed with it).
public enum KeyedHash {
    public static func sha256(key: [UInt8], message: [UInt8]) -> [UInt8] { Crypto.hmacSHA256(key: key, message: message) }
}
