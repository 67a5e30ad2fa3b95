#include "tabd_web_content.h"

#include <openssl/evp.h>
#include <zlib.h>

void tabd_sha256(const void *bytes, size_t length, unsigned char out[32]) {
    unsigned int written = 0;
    // EVP_Digest fails only without SHA-256 in libcrypto: a broken install, not input.
    if (EVP_Digest(bytes, length, out, &written, EVP_sha256(), NULL) != 1 || written != 32) {
        for (int i = 0; i < 32; i++) out[i] = 0;
    }
}

size_t tabd_gzip_bound(size_t length) {
    // deflateBound's own figure plus the gzip header and trailer.
    return compressBound((uLong)length) + 32;
}

long tabd_gzip(const void *bytes, size_t length, void *out, size_t capacity) {
    z_stream z = {0};
    // windowBits 15 + 16: a gzip wrapper rather than zlib's.
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    z.next_in = (Bytef *)bytes;
    z.avail_in = (uInt)length;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)capacity;
    int status = deflate(&z, Z_FINISH);
    long written = status == Z_STREAM_END ? (long)z.total_out : -1;
    deflateEnd(&z);
    return written;
}
