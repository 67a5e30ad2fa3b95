"""The cluster's seals (Sources/Auth/ClusterSecret.swift) in Python, for tests that must make
or check a seal the way a node does: a message sealed with the real key but moved, a
replay, a heartbeat with a chosen time.

A key's per-purpose key is HKDF-SHA256 (the v1 label as salt, one block of expand with the
purpose as info); a seal is `VERSION.KEYID.MAC`, MAC = HMAC-SHA256 under the purpose's key of
the version's label, the purpose, the number of fields, each field and the body, each
length-prefixed (8 bytes, big-endian). A room's stream messages are sealed `v2` (bound to
the room's life, absent headers told from empty ones) by nodes that require seals.
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

    def seal(self, purpose, fields, body, version="v1"):
        label = b"tabd cluster seal " + version.encode()
        msg = label + struct.pack(">Q", len(purpose)) + purpose.encode() + struct.pack(">Q", len(fields))
        for f in fields:
            f = f.encode()
            msg += struct.pack(">Q", len(f)) + f
        msg += struct.pack(">Q", len(body)) + body
        return f"{version}.{self.id}.{_h(self.expand(purpose), msg).hex()}"

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

    def seal_stream_v2(self, subject, life, headers, follows, body):
        """The life-bound seal of a stream message of the room's life `life` (its epoch) at
        the place after `follows` (None: any place, a life mark)."""
        def opt(name):
            return "-" if name not in headers else "+" + headers[name]
        fields = [subject, life, opt("Tabd-Kind"), "*" if follows is None else str(follows), opt("Tabd-Node"),
                  opt("Tabd-Incarnation"), opt("Nats-Msg-Id"), opt("Tabd-Forwards"), opt("Tabd-Mark")]
        return self.seal("batch", fields, body, version="v2")
