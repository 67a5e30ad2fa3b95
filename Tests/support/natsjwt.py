"""NATS's decentralized authentication for tests, without `nsc`: NKeys, JWTs and a credentials
file, made with the standard library and the `openssl` command (its Ed25519).

    auth = OperatorAuth(directory)             # an operator, its system account, account "tabd"
    NatsCluster(3, extra=auth.server_config())  # every server trusts the operator
    auth.user_creds("node")                     # a credentials file of a user of "tabd"

An NKey is an Ed25519 key, written in base32 with a prefix byte saying what it is (O operator,
A account, U user) and a CRC-16 (XMODEM) at the end; its seed starts with S and the same kind.
A JWT is signed with the issuer's key (algorithm "ed25519-nkey"): the operator signs accounts,
an account signs its users. The servers know the accounts from `resolver_preload`; JetStream
is on for an account whose limits give it storage.
"""
import base64
import hashlib
import json
import os
import subprocess
import time

_PREFIX = {"O": 14 << 3, "A": 0, "U": 20 << 3}
_SEED = 18 << 3
_UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1, "leaf": -1}


def _crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _base32(data):
    return base64.b32encode(data).decode().rstrip("=")


def _encode(raw):
    return _base32(raw + _crc16(raw).to_bytes(2, "little"))


def _b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _openssl(*args):
    return subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30).stdout


class NKey:
    """An Ed25519 key pair of `kind` (O, A or U) kept as `name`.pem in `directory`."""

    def __init__(self, kind, directory, name):
        self.pem = os.path.join(directory, f"{name}.pem")
        _openssl("genpkey", "-algorithm", "ed25519", "-out", self.pem)
        # The DER forms end with the raw 32-byte seed and public key.
        seed = _openssl("pkey", "-in", self.pem, "-outform", "DER")[-32:]
        public = _openssl("pkey", "-in", self.pem, "-pubout", "-outform", "DER")[-32:]
        prefix = _PREFIX[kind]
        self.public = _encode(bytes([prefix]) + public)
        self.seed = _encode(bytes([_SEED | (prefix >> 5), (prefix & 31) << 3]) + seed)

    def sign(self, data):
        # Ed25519 signs in one shot, which openssl only does from a file.
        message = self.pem + ".msg"
        with open(message, "wb") as f:
            f.write(data)
        try:
            return _openssl("pkeyutl", "-sign", "-inkey", self.pem, "-rawin", "-in", message)
        finally:
            os.remove(message)


def jwt(issuer, subject, name, nats):
    """A JWT about `subject` signed by `issuer` (NKeys); `nats` holds its type and settings."""
    claims = {"iat": int(time.time()), "iss": issuer.public, "name": name, "sub": subject.public,
              "nats": {**nats, "version": 2}}
    claims["jti"] = _base32(hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest())
    signed = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode()) + "." + _b64url(json.dumps(claims).encode())
    return signed + "." + _b64url(issuer.sign(signed.encode()))


class OperatorAuth:
    """An operator, its system account and one account (`account`) with JetStream, in `directory`."""

    def __init__(self, directory, account="tabd"):
        self.dir = str(directory)
        self.operator = NKey("O", self.dir, "operator")
        self.system = NKey("A", self.dir, "system-account")
        self.account = NKey("A", self.dir, "account")
        self.operator_jwt = jwt(self.operator, self.operator, "tabd-test",
                                {"type": "operator", "system_account": self.system.public})
        self.system_jwt = jwt(self.operator, self.system, "SYS", {"type": "account", "limits": _UNLIMITED})
        jetstream = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
        self.account_jwt = jwt(self.operator, self.account, account,
                               {"type": "account", "limits": {**_UNLIMITED, **jetstream}})
        self.operator_file = os.path.join(self.dir, "operator.jwt")
        with open(self.operator_file, "w") as f:
            f.write(self.operator_jwt)

    def server_config(self):
        """The lines that make a server trust the operator and know both accounts."""
        return (f'operator: "{self.operator_file}"\nsystem_account: {self.system.public}\nresolver: MEMORY\n'
                f'resolver_preload: {{\n  {self.system.public}: "{self.system_jwt}"\n'
                f'  {self.account.public}: "{self.account_jwt}"\n}}')

    def user_creds(self, name, account=None):
        """The path of a new credentials file (mode 600) for user `name` of the account, or of
        `account` (an NKey the servers do not know, for a refusal)."""
        user = NKey("U", self.dir, f"user-{name}")
        token = jwt(account or self.account, user, name,
                    {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1})
        path = os.path.join(self.dir, f"{name}.creds")
        with open(path, "w") as f:
            f.write(f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
                    "************************* IMPORTANT *************************\n"
                    "NKEY Seed printed below can be used to sign and prove identity.\n\n"
                    f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n")
        os.chmod(path, 0o600)
        return path
