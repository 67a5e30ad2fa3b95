#ifndef TABD_CCRYPTO_SHIM_H
#define TABD_CCRYPTO_SHIM_H

// OpenSSL's libcrypto (Debian libssl-dev): the HMAC and the constant-time comparison
// behind signed tokens. Seen only by the Auth module.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#endif
