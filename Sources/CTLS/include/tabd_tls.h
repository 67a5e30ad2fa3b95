#ifndef TABD_TLS_H
#define TABD_TLS_H

#include <stddef.h>

/// TLS for tabd, over Debian's OpenSSL 3: the server's certificate store (one pair of
/// certificate chain and key, replaced whole on SIGHUP while connections keep theirs), the
/// settings every TLS context of tabd gets (TLS 1.2 and later; TLS 1.2 with forward-secret
/// AEAD suites only: ECDHE with AES-GCM or ChaCha20-Poly1305), and the trust of a client
/// (the system's store plus an extra CA). The SSL_CTX pointers are libwebsockets' (given to
/// its OPENSSL_LOAD_EXTRA callbacks) or the blocking HTTP client's own, passed as void *
/// so that Swift sees no OpenSSL types.

/// A certificate chain and its private key, parsed from PEM and checked to belong together.
typedef struct tabd_tls_pair tabd_tls_pair;

/// What `tabd_tls_pair_parse` found wrong.
enum tabd_tls_pair_problem {
	TABD_TLS_PAIR_OK = 0,
	TABD_TLS_PAIR_BAD_CERTIFICATE = 1,
	TABD_TLS_PAIR_BAD_KEY = 2,
	TABD_TLS_PAIR_MISMATCH = 3,
};

/// Parses a PEM certificate (the first is the server's, any others its chain) and a PEM
/// private key. On success returns TABD_TLS_PAIR_OK and stores the pair in *out; otherwise
/// writes OpenSSL's reason (NUL-terminated) into `reason`.
int tabd_tls_pair_parse(const void *cert_pem, size_t cert_len, const void *key_pem, size_t key_len,
			tabd_tls_pair **out, char *reason, size_t reason_len);
void tabd_tls_pair_free(tabd_tls_pair *pair);
/// "subject CN=…, issuer …, valid until <date>" for the log.
void tabd_tls_pair_describe(const tabd_tls_pair *pair, char *buffer, size_t length);
/// Seconds until the certificate expires (negative once it has).
long long tabd_tls_pair_seconds_left(const tabd_tls_pair *pair);

/// The pair new TLS connections of a server get; replaced whole, under a lock.
typedef struct tabd_tls_store tabd_tls_store;
/// Takes ownership of `initial`.
tabd_tls_store *tabd_tls_store_new(tabd_tls_pair *initial);
/// Takes ownership of `pair`; connections already open keep the pair they were given.
void tabd_tls_store_replace(tabd_tls_store *store, tabd_tls_pair *pair);
void tabd_tls_store_free(tabd_tls_store *store);

/// A server context: TLS 1.2 (ECDHE + AEAD suites) and later, and every handshake takes the store's current pair.
/// Returns 0 on success.
int tabd_tls_server_configure(void *ssl_ctx, tabd_tls_store *store);

/// A client context: TLS 1.2 (ECDHE + AEAD suites) and later, verification on, trusting the system's store
/// (`system_dir`, a directory of hashed certificate links, looked up only when a chain is
/// verified; NULL: OpenSSL's default paths) and, when `ca_pem` is not NULL, the
/// certificates in it as well. The chain is verified by OpenSSL alone, never through
/// libwebsockets' certificate callback (see tls.c). Returns 0, or -1 with the reason in `reason`.
int tabd_tls_client_trust(void *ssl_ctx, const char *system_dir, const void *ca_pem, size_t ca_len,
			  char *reason, size_t reason_len);

/// How many PEM certificates `pem` holds (0: none, or not PEM).
int tabd_tls_count_certificates(const void *pem, size_t length);

/// A blocking TLS connection over a connected socket, for one HTTP exchange.
typedef struct tabd_tls_client tabd_tls_client;
/// Handshakes on `fd` (blocking, its timeouts set by the caller), verifying the server's
/// chain against the trust above and its name against `host` (a DNS name or an IP literal).
/// Returns NULL with the reason (e.g. "certificate verify failed: self-signed certificate
/// in certificate chain", "Hostname mismatch") in `reason`.
tabd_tls_client *tabd_tls_client_connect(int fd, const char *host, const char *system_dir,
					 const void *ca_pem, size_t ca_len, char *reason, size_t reason_len);
/// Like send(2)/recv(2): the count, 0 at the end of the stream, -1 on error (reason set).
long tabd_tls_client_write(tabd_tls_client *client, const void *bytes, size_t length, char *reason, size_t reason_len);
long tabd_tls_client_read(tabd_tls_client *client, void *bytes, size_t length, char *reason, size_t reason_len);
/// Sends close_notify (best effort) and frees; does not close the fd.
void tabd_tls_client_free(tabd_tls_client *client);

/// The verification result of an SSL (void *: lws_get_ssl's) as text, or NULL when it
/// verified; for errors that say why a certificate was refused.
const char *tabd_tls_verify_error(const void *ssl);

/// Empties this thread's OpenSSL error queue. A failed handshake can leave errors there;
/// on a thread that serves many connections, the next connection's SSL_get_error() would
/// read them as its own failure.
void tabd_tls_clear_errors(void);

/// Sends a close_notify on a server connection (void *: lws_get_ssl's) before its sending
/// side is shut, so the peer reads a clean end; best effort.
void tabd_tls_close_notify(void *ssl);

#endif
