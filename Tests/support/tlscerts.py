"""Certificates for the TLS tests, made with the `openssl` command: a private CA, two
server certificates it signed (for localhost and 127.0.0.1, each with its own key), a
certificate for another host name, and a key that belongs to none of them."""
import os
import subprocess


def _run(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _server(directory, name, subject_alt_name):
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", "/CN=" + subject_alt_name.split(",")[0].split(":")[1], cwd=directory)
    with open(os.path.join(directory, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={subject_alt_name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)


class Certificates:
    """Paths: `ca` (the CA's certificate), `a`/`a_key` and `b`/`b_key` (localhost and
    127.0.0.1), `other_host`/`other_host_key` (example.org only), `stray_key`."""

    def __init__(self, directory):
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)
        _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=tabd test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=self.dir)
        _server(self.dir, "a", "DNS:localhost,IP:127.0.0.1")
        _server(self.dir, "b", "DNS:localhost,IP:127.0.0.1")
        _server(self.dir, "other", "DNS:example.org")
        _run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "stray.key", cwd=self.dir)
        p = lambda name: os.path.join(self.dir, name)  # noqa: E731
        self.ca = p("ca.pem")
        self.a, self.a_key = p("a.pem"), p("a.key")
        self.b, self.b_key = p("b.pem"), p("b.key")
        self.other_host, self.other_host_key = p("other.pem"), p("other.key")
        self.stray_key = p("stray.key")

    def spki_sha256(self, cert):
        """The base64 SHA-256 of the certificate's public key (what Chromium's
        --ignore-certificate-errors-spki-list takes)."""
        key = subprocess.run(["openssl", "x509", "-in", cert, "-pubkey", "-noout"], check=True, capture_output=True).stdout
        der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=key, check=True, capture_output=True).stdout
        import base64
        import hashlib
        return base64.b64encode(hashlib.sha256(der).digest()).decode()

    def serial(self, cert):
        """The certificate's serial number, as `openssl x509 -serial` prints it (hex)."""
        out = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-serial"], check=True,
                             capture_output=True, text=True).stdout
        return out.strip().split("=", 1)[1].upper()
