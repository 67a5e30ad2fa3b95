#ifndef TABD_TLS_NAMES_H
#define TABD_TLS_NAMES_H

#include <stddef.h>

/// The DNS names (subjectAltName dNSName entries, `*.` wildcards as written) of the first
/// certificate in `cert_pem`, written into `buffer` separated by '\n' and NUL-terminated.
/// Names that do not fit, or are not printable ASCII, are left out. Returns how many were
/// written; -1 when the PEM holds no certificate.
int tabd_tls_certificate_dns_names(const void *cert_pem, size_t cert_len, char *buffer, size_t length);

#endif
