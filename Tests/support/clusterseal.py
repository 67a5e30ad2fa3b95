"""The cluster's seals (Sources/Auth/ClusterSecret.swift) in Python, for tests that must make
or check a seal the way a node does: a message sealed with the real key but moved, a
replay, a heartbeat with a chosen time.

A key's per-purpose key is HKDF-SHA256 (the label as salt, one block of expand with the
purpose as info); a seal is `v1.KEYID.MAC`, MAC = HMAC-SHA256 under the purpose's key of the
label, the purpose, the number of fields, each field and the body, each length-prefixed
(8 bytes, big-endian).
"""
import hashlib
import hmac
import struct

LABEL = b"tabd cluster seal v1"


def _h(key, msg):
    return hmac.new(key, msg, hashlib.sha256).digest()


class Key:
    def __init__(self, secret):
        secret = secret.encode() if isinstance(secret, str) else secret
        prk = _h(LABEL, secret)
        self.expand = lambda info: _h(prk, info.encode() + b"\x01")
        self.id = self.expand("key id")[:8].hex()

    def seal(self, purpose, fields, body):
        msg = LABEL + struct.pack(">Q", len(purpose)) + purpose.encode() + struct.pack(">Q", len(fields))
        for f in fields:
            f = f.encode()
            msg += struct.pack(">Q", len(f)) + f
        msg += struct.pack(">Q", len(body)) + body
        return f"v1.{self.id}.{_h(self.expand(purpose), msg).hex()}"

    def seal_core(self, purpose, subject, time_ms, args, payload=b""):
        """A heartbeat's, forward's, answer's or deletion notice's body, as a node writes it."""
        seal = self.seal(purpose, [subject, str(time_ms), *args], payload)
        return (" ".join([seal, str(time_ms), *args])).encode() + b"\n" + payload

    def seal_stream(self, subject, headers, follows, body):
        """The seal of a stream message with these headers at the place after `follows`."""
        fields = [subject, headers.get("Tabd-Kind", ""), str(follows), headers.get("Tabd-Node", ""),
                  headers.get("Tabd-Incarnation", ""), headers.get("Nats-Msg-Id", ""), headers.get("Tabd-Forwards", ""),
                  headers.get("Tabd-Mark", "")]
        return self.seal("batch", fields, body)
