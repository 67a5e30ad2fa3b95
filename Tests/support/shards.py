"""Where a cluster of tabd keeps a room: the subject `tabd.r.SHARD.ROOM` of the shard stream
`TABD_SHARD_SHARD`, the shard being the keyed hash (HMAC-SHA256 with the key of the layout
the cluster's first node recorded in `TABD_CLUSTER`) of the room's id, modulo the shards.
Tests read the layout from the engine as a node does (the first record on its subject)."""
import hashlib
import hmac
import json

from natsproto import Nats

LAYOUT_STREAM = "TABD_CLUSTER"
LAYOUT_SUBJECT = "tabd.cluster.layout"


def layout(url):
    """(shards, key bytes) of the cluster whose engine is at `url`."""
    with Nats(url) as nc:
        m = nc.request(f"$JS.API.DIRECT.GET.{LAYOUT_STREAM}", json.dumps({"seq": 1, "next_by_subj": LAYOUT_SUBJECT}).encode())
        body = json.loads(m.data)
    return body["shards"], bytes.fromhex(body["key"])


def shard_of(lay, room):
    shards, key = lay
    digest = hmac.new(key, room.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") % shards


def stream_of(url, room):
    """The shard stream room `room` lives in."""
    return f"TABD_SHARD_{shard_of(layout(url), room)}"


def subject_of(url, room):
    lay = layout(url)
    return f"tabd.r.{shard_of(lay, room)}.{room}"
