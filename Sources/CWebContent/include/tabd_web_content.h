#ifndef TABD_WEB_CONTENT_H
#define TABD_WEB_CONTENT_H

// What the web root's files need to be served as a CDN would: a content hash for their
// validators (SHA-256, OpenSSL's libcrypto) and gzip for clients that accept it (zlib).
#include <stddef.h>

// SHA-256 of `length` bytes into `out` (32 bytes).
void tabd_sha256(const void *bytes, size_t length, unsigned char out[32]);

// The most bytes tabd_gzip may write for `length` bytes of input.
size_t tabd_gzip_bound(size_t length);

// `length` bytes as a gzip member (RFC 1952), at zlib's default level, into `out` (of
// `capacity` bytes, at least tabd_gzip_bound(length)). Returns the bytes written, or -1.
long tabd_gzip(const void *bytes, size_t length, void *out, size_t capacity);

#endif
