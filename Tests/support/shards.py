"""Where a cluster of tabd keeps a room: the subject `tabd.r.SHARD.ROOM` of the shard stream
`TABD_SHARD_SHARD`, the shard being the keyed hash (HMAC-SHA256 with the key of the layout
the cluster's first node recorded in `TABD_CLUSTER`) of the room's id, modulo the shards.
Tests read the layout from the engine: the first record on its subject, or, given the
cluster's key, the first record sealed with it, as a node takes it (a record anyone else
put there, before or after, is passed over)."""
import hashlib
import hmac
import json

from natsproto import Nats

LAYOUT_STREAM = "TABD_CLUSTER"
LAYOUT_SUBJECT = "tabd.cluster.layout"


def layout_records(nc):
    """Every record on the layout's subject, in order: (seq, headers, body bytes)."""
    out, seq = [], 1
    while True:
        m = nc.request(f"$JS.API.DIRECT.GET.{LAYOUT_STREAM}", json.dumps({"seq": seq, "next_by_subj": LAYOUT_SUBJECT}).encode())
        if m.status:   # 404: no more
            return out
        found = int(m.headers["Nats-Sequence"])
        out.append((found, m.headers, m.data))
        seq = found + 1


def layout(url, key=None):
    """(shards, key bytes) of the cluster whose engine is at `url`: the first layout record,
    or with `key` (a clusterseal.Key of the cluster's secret) the first one sealed with it."""
    with Nats(url) as nc:
        records = layout_records(nc)
    for _, headers, body in records:
        if key is None or headers.get("Tabd-Seal") == key.seal("layout", [LAYOUT_SUBJECT], body):
            got = json.loads(body)
            return got["shards"], bytes.fromhex(got["key"])
    raise LookupError(f"no shard layout record{' sealed with that key' if key else ''} in {LAYOUT_STREAM}")


def shard_of(lay, room):
    shards, key = lay
    digest = hmac.new(key, room.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") % shards


def stream_of(url, room, key=None):
    """The shard stream room `room` lives in."""
    return f"TABD_SHARD_{shard_of(layout(url, key), room)}"


def subject_of(url, room, key=None):
    lay = layout(url, key)
    return f"tabd.r.{shard_of(lay, room)}.{room}"
