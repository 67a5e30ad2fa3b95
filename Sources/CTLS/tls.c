#include "tabd_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tabd_tls_pair {
	X509 *cert;
	STACK_OF(X509) *chain;
	EVP_PKEY *key;
};

struct tabd_tls_store {
	pthread_mutex_t lock;
	tabd_tls_pair *pair;
};

struct tabd_tls_client {
	SSL_CTX *ctx;
	SSL *ssl;
};

/// OpenSSL's last queued error as text, or `fallback` when the queue is empty; clears it.
static void last_error(char *reason, size_t reason_len, const char *fallback) {
	unsigned long code = ERR_peek_last_error();
	if (!reason || !reason_len)
		return;
	if (code) {
		const char *text = ERR_reason_error_string(code);
		snprintf(reason, reason_len, "%s", text ? text : fallback);
	} else {
		snprintf(reason, reason_len, "%s", fallback);
	}
	ERR_clear_error();
}

void tabd_tls_pair_free(tabd_tls_pair *pair) {
	if (!pair)
		return;
	X509_free(pair->cert);
	sk_X509_pop_free(pair->chain, X509_free);
	EVP_PKEY_free(pair->key);
	free(pair);
}

int tabd_tls_pair_parse(const void *cert_pem, size_t cert_len, const void *key_pem, size_t key_len,
			tabd_tls_pair **out, char *reason, size_t reason_len) {
	tabd_tls_pair *pair = calloc(1, sizeof *pair);
	BIO *bio;
	X509 *extra;
	int problem = TABD_TLS_PAIR_OK;

	*out = NULL;
	if (!pair) {
		snprintf(reason, reason_len, "out of memory");
		return TABD_TLS_PAIR_BAD_CERTIFICATE;
	}
	ERR_clear_error();
	bio = BIO_new_mem_buf(cert_pem, (int)cert_len);
	pair->cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	if (!pair->cert) {
		last_error(reason, reason_len, "no PEM certificate in it");
		problem = TABD_TLS_PAIR_BAD_CERTIFICATE;
		goto done;
	}
	pair->chain = sk_X509_new_null();
	while ((extra = PEM_read_bio_X509(bio, NULL, NULL, NULL)))
		sk_X509_push(pair->chain, extra);
	/* The end of the file is the expected way out of that loop; anything else is a bad PEM. */
	{
		unsigned long code = ERR_peek_last_error();
		if (code && !(ERR_GET_LIB(code) == ERR_LIB_PEM && ERR_GET_REASON(code) == PEM_R_NO_START_LINE)) {
			last_error(reason, reason_len, "a certificate of the chain cannot be read");
			problem = TABD_TLS_PAIR_BAD_CERTIFICATE;
			goto done;
		}
		ERR_clear_error();
	}
	BIO_free(bio);
	bio = BIO_new_mem_buf(key_pem, (int)key_len);
	pair->key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
	if (!pair->key) {
		last_error(reason, reason_len, "no PEM private key in it (an encrypted key is not supported)");
		problem = TABD_TLS_PAIR_BAD_KEY;
		goto done;
	}
	if (X509_check_private_key(pair->cert, pair->key) != 1) {
		ERR_clear_error();
		snprintf(reason, reason_len, "the key does not belong to the certificate");
		problem = TABD_TLS_PAIR_MISMATCH;
		goto done;
	}
done:
	BIO_free(bio);
	if (problem != TABD_TLS_PAIR_OK) {
		tabd_tls_pair_free(pair);
		return problem;
	}
	*out = pair;
	return TABD_TLS_PAIR_OK;
}

void tabd_tls_pair_describe(const tabd_tls_pair *pair, char *buffer, size_t length) {
	char subject[256] = "", issuer[256] = "", until[64] = "";
	BIO *bio;
	X509_NAME_oneline(X509_get_subject_name(pair->cert), subject, sizeof subject);
	X509_NAME_oneline(X509_get_issuer_name(pair->cert), issuer, sizeof issuer);
	bio = BIO_new(BIO_s_mem());
	if (bio && ASN1_TIME_print(bio, X509_get0_notAfter(pair->cert))) {
		int n = BIO_read(bio, until, sizeof until - 1);
		until[n > 0 ? n : 0] = 0;
	}
	BIO_free(bio);
	snprintf(buffer, length, "subject %s, issuer %s, valid until %s, %d more in the chain", subject, issuer, until,
		 sk_X509_num(pair->chain));
}

long long tabd_tls_pair_seconds_left(const tabd_tls_pair *pair) {
	int days = 0, seconds = 0;
	if (!ASN1_TIME_diff(&days, &seconds, NULL, X509_get0_notAfter(pair->cert)))
		return 0;
	return (long long)days * 86400 + seconds;
}

tabd_tls_store *tabd_tls_store_new(tabd_tls_pair *initial) {
	tabd_tls_store *store = calloc(1, sizeof *store);
	if (!store)
		return NULL;
	pthread_mutex_init(&store->lock, NULL);
	store->pair = initial;
	return store;
}

void tabd_tls_store_replace(tabd_tls_store *store, tabd_tls_pair *pair) {
	tabd_tls_pair *old;
	pthread_mutex_lock(&store->lock);
	old = store->pair;
	store->pair = pair;
	pthread_mutex_unlock(&store->lock);
	/* No handshake holds it: they copy what they use under the lock. */
	tabd_tls_pair_free(old);
}

void tabd_tls_store_free(tabd_tls_store *store) {
	if (!store)
		return;
	tabd_tls_pair_free(store->pair);
	pthread_mutex_destroy(&store->lock);
	free(store);
}

/// At each handshake, before the certificate is sent: the store's current pair.
/// SSL_use_cert_and_key takes its own references, so a later replacement frees nothing
/// that a connection uses.
static int use_current_pair(SSL *ssl, void *arg) {
	tabd_tls_store *store = arg;
	int ok;
	pthread_mutex_lock(&store->lock);
	ok = store->pair && SSL_use_cert_and_key(ssl, store->pair->cert, store->pair->key, store->pair->chain, 1) == 1;
	pthread_mutex_unlock(&store->lock);
	return ok ? 1 : 0;
}

/* TLS 1.2's suites: forward-secret (ECDHE) and AEAD (AES-GCM, ChaCha20-Poly1305) only, as
 * Mozilla's "intermediate" configuration has them (without its finite-field DHE suites).
 * No RSA key exchange, no CBC, no SHA-1 MACs. TLS 1.3's suites are OpenSSL's own (all AEAD,
 * all forward-secret). */
static const char tls12_suites[] =
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

/* Server and client alike: TLS 1.2 and later, the suites above, no renegotiation, no compression. */
static int modern(SSL_CTX *ctx) {
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
		return -1;
	if (SSL_CTX_set_cipher_list(ctx, tls12_suites) != 1)
		return -1;
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	return 0;
}

int tabd_tls_server_configure(void *ssl_ctx, tabd_tls_store *store) {
	SSL_CTX *ctx = ssl_ctx;
	if (!ctx || !store || modern(ctx))
		return -1;
	SSL_CTX_set_cert_cb(ctx, use_current_pair, store);
	return 0;
}

/* OpenSSL's own verdict for each certificate of the chain, untouched. */
static int keep_verdict(int ok, X509_STORE_CTX *store) {
	(void)store;
	return ok;
}

/* The chain of a client connection, verified without libwebsockets' per-certificate callback.
 * That callback finds its connection through an SSL ex_data index libwebsockets keeps for the
 * whole process and takes anew each time a context is created: a client created while another
 * one's handshake is under way made that handshake fail ("can't get wsi from ssl privdata").
 * tabd needs nothing from it: the verdict is read with SSL_get_verify_result, and the host
 * name is checked by OpenSSL from the connection's verify parameters, as before. */
static int verify_chain(X509_STORE_CTX *store, void *arg) {
	(void)arg;
	X509_STORE_CTX_set_verify_cb(store, keep_verdict);
	return X509_verify_cert(store);
}

int tabd_tls_client_trust(void *ssl_ctx, const char *system_dir, const void *ca_pem, size_t ca_len,
			  char *reason, size_t reason_len) {
	SSL_CTX *ctx = ssl_ctx;
	X509_STORE *trusted;
	if (!ctx || modern(ctx)) {
		snprintf(reason, reason_len, "cannot set up TLS");
		return -1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_cert_verify_callback(ctx, verify_chain, NULL);
	ERR_clear_error();
	/* The hashed directory, not the bundle file: parsing the bundle (about 140 certificates)
	 * takes 30 ms for every context, the directory is read only for the chain verified. */
	if (system_dir ? SSL_CTX_load_verify_locations(ctx, NULL, system_dir) != 1
		       : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		/* A machine without a trust store can still trust the extra CA. */
		ERR_clear_error();
	}
	if (!ca_pem)
		return 0;
	trusted = SSL_CTX_get_cert_store(ctx);
	{
		BIO *bio = BIO_new_mem_buf(ca_pem, (int)ca_len);
		X509 *cert;
		int added = 0;
		while (bio && (cert = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
			if (X509_STORE_add_cert(trusted, cert) == 1)
				added++;
			X509_free(cert);
		}
		BIO_free(bio);
		ERR_clear_error();
		if (!added) {
			snprintf(reason, reason_len, "no PEM certificate in it");
			return -1;
		}
	}
	return 0;
}

tabd_tls_client *tabd_tls_client_connect(int fd, const char *host, const char *system_dir,
					 const void *ca_pem, size_t ca_len, char *reason, size_t reason_len) {
	tabd_tls_client *client = calloc(1, sizeof *client);
	unsigned char address[16];
	int is_ip;
	long verified;

	if (!client) {
		snprintf(reason, reason_len, "out of memory");
		return NULL;
	}
	client->ctx = SSL_CTX_new(TLS_client_method());
	if (!client->ctx || tabd_tls_client_trust(client->ctx, system_dir, ca_pem, ca_len, reason, reason_len))
		goto fail;
	client->ssl = SSL_new(client->ctx);
	if (!client->ssl || SSL_set_fd(client->ssl, fd) != 1) {
		last_error(reason, reason_len, "cannot set up TLS");
		goto fail;
	}
	is_ip = inet_pton(AF_INET, host, address) == 1 || inet_pton(AF_INET6, host, address) == 1;
	if (is_ip) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(client->ssl), host);
	} else {
		SSL_set_tlsext_host_name(client->ssl, host);
		SSL_set1_host(client->ssl, host);
	}
	ERR_clear_error();
	if (SSL_connect(client->ssl) != 1) {
		verified = SSL_get_verify_result(client->ssl);
		if (verified != X509_V_OK)
			snprintf(reason, reason_len, "certificate verify failed: %s", X509_verify_cert_error_string(verified));
		else
			last_error(reason, reason_len, "TLS handshake failed (is it a TLS port?)");
		goto fail;
	}
	return client;
fail:
	tabd_tls_client_free(client);
	return NULL;
}

long tabd_tls_client_write(tabd_tls_client *client, const void *bytes, size_t length, char *reason, size_t reason_len) {
	int n;
	ERR_clear_error();
	n = SSL_write(client->ssl, bytes, (int)length);
	if (n > 0)
		return n;
	last_error(reason, reason_len, "TLS write failed");
	return -1;
}

long tabd_tls_client_read(tabd_tls_client *client, void *bytes, size_t length, char *reason, size_t reason_len) {
	int n;
	ERR_clear_error();
	n = SSL_read(client->ssl, bytes, (int)length);
	if (n > 0)
		return n;
	switch (SSL_get_error(client->ssl, n)) {
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		/* The peer closed without close_notify: the end, for a Connection: close answer. */
		if (ERR_peek_error() == 0)
			return 0;
		/* fallthrough */
	default:
		last_error(reason, reason_len, "TLS read failed");
		return -1;
	}
}

void tabd_tls_client_free(tabd_tls_client *client) {
	if (!client)
		return;
	if (client->ssl) {
		SSL_shutdown(client->ssl);
		SSL_free(client->ssl);
	}
	SSL_CTX_free(client->ctx);
	free(client);
	ERR_clear_error();
}

const char *tabd_tls_verify_error(const void *ssl) {
	long result;
	if (!ssl)
		return NULL;
	result = SSL_get_verify_result((const SSL *)ssl);
	/* OpenSSL 3 starts every connection at X509_V_ERR_UNSPECIFIED: a handshake that failed
	 * before the server's certificate was checked (the connection closed or reset) is no
	 * refusal of the certificate, and lws' own message says what happened. */
	return result == X509_V_OK || result == X509_V_ERR_UNSPECIFIED ? NULL : X509_verify_cert_error_string(result);
}

void tabd_tls_clear_errors(void) {
	ERR_clear_error();
}

void tabd_tls_close_notify(void *ssl) {
	if (!ssl)
		return;
	SSL_shutdown((SSL *)ssl);
	ERR_clear_error();
}

int tabd_tls_count_certificates(const void *pem, size_t length) {
	BIO *bio = BIO_new_mem_buf(pem, (int)length);
	X509 *cert;
	int count = 0;
	while (bio && (cert = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
		count++;
		X509_free(cert);
	}
	BIO_free(bio);
	ERR_clear_error();
	return count;
}
