#include "tabd_tls_names.h"

#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <string.h>

int tabd_tls_certificate_dns_names(const void *cert_pem, size_t cert_len, char *buffer, size_t length) {
	if (length == 0) return -1;
	buffer[0] = 0;
	BIO *bio = BIO_new_mem_buf(cert_pem, (int)cert_len);
	if (!bio) return -1;
	X509 *cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	BIO_free(bio);
	if (!cert) return -1;
	GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	int count = 0;
	size_t used = 0;
	for (int i = 0; names && i < sk_GENERAL_NAME_num(names); i++) {
		const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
		if (name->type != GEN_DNS) continue;
		const unsigned char *bytes = ASN1_STRING_get0_data(name->d.dNSName);
		int n = ASN1_STRING_length(name->d.dNSName);
		if (n <= 0) continue;
		int printable = 1;
		for (int j = 0; j < n; j++) {
			if (bytes[j] <= 0x20 || bytes[j] >= 0x7F) { printable = 0; break; }
		}
		size_t need = (size_t)n + (count > 0 ? 1 : 0);
		if (!printable || used + need + 1 > length) continue;
		if (count > 0) buffer[used++] = '\n';
		memcpy(buffer + used, bytes, (size_t)n);
		used += (size_t)n;
		buffer[used] = 0;
		count++;
	}
	GENERAL_NAMES_free(names);
	X509_free(cert);
	return count;
}
