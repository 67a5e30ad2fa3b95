#ifndef TABD_CCRYPTO_SHIM_H
#define TABD_CCRYPTO_SHIM_H

// OpenSSL's libcrypto (Debian libssl-dev): HMAC, constant-time comparison and public-key
// signatures (ES256, RS256) behind signed tokens. Seen only by the Auth module.
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

// Macros Swift cannot import.
static inline int tabd_evp_pkey_ec(void) { return EVP_PKEY_EC; }
static inline int tabd_evp_pkey_rsa(void) { return EVP_PKEY_RSA; }

#endif
