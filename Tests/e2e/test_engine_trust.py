"""The engine is not trusted: holding the engine's credentials is not enough to act as a node.

Three NATS JetStream servers, three tabd nodes sharing a cluster secret, clients of one room
on every node, and a peer that is not a node: a bare NATS connection (the text protocol over
a socket, Tests/support/natsproto.py) with no tabd credential of any kind. It publishes
forged forwards, deletion notices and heartbeats, answers and publish acknowledgements,
altered, moved and replayed room messages, tombstones, directory records and shard layouts,
and reply subjects aimed at the JetStream API and at other nodes. After each, the nodes have
counted it (`tabd_engine_rejected_total`) and a probe command shows that no client saw
anything but the probe; the rooms keep loading on nodes that join later. Key rotation and
the two-phase move of an unsealed cluster run on a live room.

Rooms live where nodes put them by default, as subjects of shard streams (`TABD_SHARD_N`,
Tests/support/shards.py); tests of what concerns both layouts run them in streams of their
own too (`--cluster-rooms streams`, `TABD_ROOM_ID`), and tests of the layout before shards
(seal marks, phase one, `v1` seals, `TABD_SNAPSHOTS`) run there only. Several rooms share a
shard where that matters (names chosen with the cluster's layout so that they collide).

A shard stream drops a message whose `Nats-Msg-Id` it stored within two minutes (its
duplicate window), so a copy of a room's message made to land now carries another id: the
tests seal such copies with the cluster's key as a node seals its messages (a node's
message that lost its place, whose id the engine never stored, or one replayed after the
window), checked first against a seal a node made.
"""
import asyncio
import base64
import json
import os
import random
import re
import sys
import time
import uuid

import pytest

from conftest import ROOT, TABD, WAIT, Client, cluster_secret_file
from test_install import environment, refused
from test_cluster import sync_everyone
from test_rooms import call, comparable

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import NatsCluster  # noqa: E402
from natsproto import Nats, NatsError  # noqa: E402
from clusterseal import Key  # noqa: E402
import shards  # noqa: E402

HEARTBEAT_TIMEOUT = 5.0   # tabd's liveness bound (seconds)
CLOCK_SKEW = 2.0          # the clock-skew bound a sealed message's time is judged with


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with NatsCluster(3, base_dir=str(tmp_path_factory.mktemp("nats"))) as c:
        yield c


def room_name():
    return "t" + uuid.uuid4().hex[:10]


def secret(tmp_path, *keys, name="secret"):
    """A cluster secret file of `keys` (the first seals), mode 600."""
    path = tmp_path / name
    path.write_text("".join(k + "\n" for k in keys))
    path.chmod(0o600)
    return str(path)


def node(make_daemon, engine, name, *extra):
    return make_daemon("--cluster", engine.url_arg, "--node-name", name, "--rate-limit", "0", *extra)


def trio(make_daemon, engine, *extra, prefix="n"):
    return [node(make_daemon, engine, f"{prefix}{i}", *extra) for i in range(3)]


def rejected(d, kind):
    status, body = d.get("/metrics")
    assert status == 200
    m = re.search(r'^tabd_engine_rejected_total\{kind="%s"\} (\d+)$' % kind, body, re.M)
    assert m, f"no rejection count of {kind} in /metrics"
    return int(m.group(1))


def wait_rejected(d, kind, above, timeout=WAIT):
    """Waits (bounded) until node `d` has rejected more than `above` messages of `kind`."""
    deadline = time.monotonic() + timeout
    while (n := rejected(d, kind)) <= above:
        assert time.monotonic() < deadline, f"node did not reject the {kind} message(s) within {timeout} s ({n} ≤ {above})"
        time.sleep(0.02)
    return n


async def probe(clients, by, timeout=WAIT * 3):
    """A command of `by`; then every client's frames since the last it had read hold exactly
    that command's events: nothing else happened to the room meanwhile."""
    marks = [len(c.batches) for c in clients]
    ref = await by.send("set", key="probe", value=uuid.uuid4().hex)
    events = ack = None
    while ack is None:
        f = await by.recv(timeout=timeout)
        if f["type"] == "events" and f.get("ref") == ref:
            events = f
        elif f.get("ref") == ref:
            ack = f
    assert ack["type"] == "ack", ack
    for c in clients:
        while c.last_seq() < ack["seq"]:
            await c.recv(timeout=timeout)
    for i, (c, mark) in enumerate(zip(clients, marks)):
        seen = c.batches[mark:]
        assert seen == [events], f"client {i} saw {len(seen)} batches where the probe alone was due: {seen[:3]}"
    return ack


async def room_on(ds, room):
    """A client of `room` on every node (the first node creates it and writes it), and a
    probe: the room's writer is the first node."""
    clients = [await Client.connect(d.ws, room=room, name=f"c{i}") for i, d in enumerate(ds)]
    for c in clients:
        await c.until_seq(max(x.last_seq() for x in clients))
    await probe(clients, clients[0])
    return clients


# --- where a room's messages are ---------------------------------------------------------------

# Where nodes create rooms: subjects of shard streams (the default), or streams of their own
# as tabd before shards did.
PLACEMENTS = {"shards": (), "streams": ("--cluster-rooms", "streams")}
both_placements = pytest.mark.parametrize("placement", list(PLACEMENTS))


def the_key():
    """The cluster secret every node of the tests shares, as a key that seals like a node."""
    return Key(open(cluster_secret_file()).read().strip())


def cluster_layout(url):
    """The shard layout of the nodes of the tests' shared secret (the first record sealed
    with it: nodes of other tests' secrets record their own in the same engine)."""
    return shards.layout(url, key=the_key())


def rooms_in_one_shard(url, n, shard=None):
    """`n` new room names that the cluster's layout puts into one shard (`shard`, else the
    first name's): (their shard, the names)."""
    lay = cluster_layout(url)
    names = []
    while len(names) < n:
        name = room_name()
        if shard is None:
            shard = shards.shard_of(lay, name)
        if shards.shard_of(lay, name) == shard:
            names.append(name)
    return shard, names


def room_in_another_shard(url, shard):
    lay = cluster_layout(url)
    while shards.shard_of(lay, name := room_name()) == shard:
        pass
    return name


def stream_exists(nc, stream):
    try:
        nc.js(f"STREAM.INFO.{stream}")
        return True
    except NatsError as e:
        if "10059" in str(e):   # stream not found
            return False
        raise


class Place:
    """Where a room keeps its messages: the subject `tabd.r.SHARD.ROOM` of its shard's stream,
    or (created by a node with `--cluster-rooms streams`) the subject `tabd.room.ROOM` of a
    stream of its own."""

    def __init__(self, nc, url, room):
        self.room = room
        if stream_exists(nc, f"TABD_ROOM_{room}"):
            self.shard, self.stream, self.subject = None, f"TABD_ROOM_{room}", f"tabd.room.{room}"
        else:
            self.shard = shards.shard_of(cluster_layout(url), room)
            self.stream, self.subject = f"TABD_SHARD_{self.shard}", f"tabd.r.{self.shard}.{room}"


def place_of(nc, room, url=None):
    return Place(nc, url or nc.url, room)


def get_message(nc, stream, ask):
    """A message of `stream` as the JetStream API gives it ((seq, subject, headers, data)),
    None when there is none."""
    try:
        got = nc.js(f"STREAM.MSG.GET.{stream}", ask)["message"]
    except NatsError as e:
        if "10037" in str(e):   # no message found
            return None
        raise
    headers = {}
    if got.get("hdrs"):
        for line in base64.b64decode(got["hdrs"]).decode().split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip()] = v.strip()
    return got["seq"], got["subject"], headers, base64.b64decode(got.get("data") or "")


def stream_message(nc, room, seq=None):
    """A message of a room as the JetStream API gives it, the one at stream seq `seq` (the
    room's last when None): (its seq, headers, data); None when the room has none there."""
    where = place_of(nc, room)
    ask = {"seq": seq} if seq is not None else {"last_by_subj": where.subject}
    got = get_message(nc, where.stream, ask)
    if got is None or got[1] != where.subject:
        return None
    return got[0], got[2], got[3]


def last_stream_message(nc, room):
    """The last message of a room: (headers, data)."""
    return stream_message(nc, room)[1:]


def room_messages(nc, room):
    """Every message of a room the engine keeps, in order: [(seq, headers, data)]."""
    where = place_of(nc, room)
    out, seq = [], 1
    while (got := get_message(nc, where.stream, {"seq": seq, "next_by_subj": where.subject})) is not None:
        out.append((got[0], got[2], got[3]))
        seq = got[0] + 1
    return out


def stream_messages(nc, room):
    """How many messages of the room the engine keeps."""
    where = place_of(nc, room)
    state = nc.js(f"STREAM.INFO.{where.stream}", {"subjects_filter": where.subject})["state"]
    return (state.get("subjects") or {}).get(where.subject, 0)


def append(nc, subject, data, headers, after=None):
    """Stores a message on `subject` (right after stream seq `after` of that subject when
    given: it lands exactly there) and returns its stream seq."""
    if after is not None:
        headers = dict(headers, **{"Nats-Expected-Last-Subject-Sequence": str(after)})
    ack = nc.publish(subject, data, headers=headers)
    assert "seq" in ack and not ack.get("duplicate"), f"the engine did not store the message: {ack}"
    return ack["seq"]


def without(headers, *names):
    """`headers` without the named ones nor the engine's compare-and-set headers."""
    return {k: v for k, v in headers.items() if k not in names and not k.startswith("Nats-Expected")}


def life_of(nc, room):
    """The room's life (its epoch): the body of its last first message (`genesis`)."""
    for _, headers, data in reversed(room_messages(nc, room)):
        if headers.get("Tabd-Kind") == "genesis":
            return json.loads(data)["epoch"]
    raise AssertionError(f"room {room} has no first message")


def sealed_as_a_node(key, subject, life, headers, follows, data):
    """`headers` with `Tabd-Follows` and a seal of the cluster's key for that place and life,
    as a node seals a message of a room in a shard."""
    headers = without(headers, "Tabd-Seal", "Tabd-Follows")
    return dict(headers, **{"Tabd-Follows": str(follows),
                            "Tabd-Seal": key.seal_stream_v2(subject, life, headers, follows, data)})


def check_sealing(key, subject, life, headers, data):
    """The tests seal as a node does: a node's message sealed again here has its own seal."""
    again = sealed_as_a_node(key, subject, life, headers, int(headers["Tabd-Follows"]), data)
    assert again["Tabd-Seal"] == headers["Tabd-Seal"], "the tests do not seal a room's message as a node does"


async def command_storm(clients, n, seed, timeout=60):
    """Each client sends `n` random `set`s at once and reads until every one is answered.
    Returns the answers and the batches each command caused, by (client index, ref)."""
    rng = random.Random(seed)
    answers, caused = {}, {}

    async def storm(k, c):
        sent = set()
        for _ in range(n):
            sent.add(await c.send("set", key=rng.choice("xyz"), value=rng.randint(0, 99)))
        got = 0
        while got < n:
            try:
                f = await c.recv(timeout=timeout)
            except (asyncio.TimeoutError, TimeoutError):
                missing = sorted(sent - {ref for (j, ref) in answers if j == k})
                raise AssertionError(f"client {k}: no answer within {timeout} s to {len(missing)} of its commands: {missing[:5]}") from None
            if f["type"] == "events" and f.get("ref") in sent and f["by"] == c.welcome["client"]:
                caused[(k, f["ref"])] = f
            elif f["type"] in ("ack", "error") and f.get("ref") in sent:
                assert (k, f["ref"]) not in answers, "two answers to one command"
                answers[(k, f["ref"])] = f
                got += 1

    await asyncio.gather(*(storm(k, c) for k, c in enumerate(clients)))
    return answers, caused


def log_so_far(d):
    """Everything node `d` has written to its stderr so far."""
    return d.log_so_far()


# --- forged, replayed and re-aimed core messages ---------------------------------------------

async def test_forged_forwards_are_neither_applied_nor_answered_and_no_reply_subject_is_obeyed(make_daemon, engine):
    ds = trio(make_daemon, engine)
    room = room_name()
    clients = await room_on(ds, room)
    with Nats(engine.urls[0]) as nc:
        nc.sub("_INBOX.attacker.>")
        before = stream_messages(nc, room)
        base = rejected(ds[0], "forward")
        forged = {"id": "ghost-1", "room": room, "client": "ghost", "session": "s-ghost", "order": 0,
                  "command": {"type": "set", "key": "ghost", "value": 1, "ref": "g1"}, "reply": "_INBOX.attacker.1"}
        # Unsealed; aimed at the JetStream API (a purge of the room's shard) and at another
        # node's answers; and with a seal of a key the nodes do not hold.
        nc.pub("tabd.fwd.n0", json.dumps(forged))
        nc.pub("tabd.fwd.n0", json.dumps(dict(forged, id="ghost-2", reply=f"$JS.API.STREAM.PURGE.{place_of(nc, room).stream}")))
        nc.pub("tabd.fwd.n0", json.dumps(dict(forged, id="ghost-3", reply="tabd.fwdr.n2.0123456789abcdef")))
        now = int(time.time() * 1000)
        nc.pub("tabd.fwd.n0", f"v1.{'0' * 16}.{'ab' * 32} {now} n1 x y\n" + json.dumps(dict(forged, id="ghost-4")))
        wait_rejected(ds[0], "forward", base + 3)
        await probe(clients, clients[1])
        nc.flush()
        assert [m.subject for m in nc.pending if m.subject.startswith("_INBOX.attacker")] == [], "a forged forward was answered"
        assert stream_messages(nc, room) >= before + 1, "the room's stream lost messages"
    # The room still loads on a node that has never seen it.
    await joins_alike(make_daemon, engine, room, clients[0])
    for c in clients:
        await c.close()


async def test_real_forwards_replayed_moved_or_re_aimed_change_nothing(make_daemon, engine):
    ds = trio(make_daemon, engine)
    room = room_name()
    clients = await room_on(ds, room)
    with Nats(engine.urls[1]) as nc:
        nc.sub("tabd.fwd.>")
        nc.sub("tabd.fwdr.>")
        await probe(clients, clients[1])   # forwarded by n1 to the room's writer, n0
        real = nc.until(lambda m: m.subject.startswith("tabd.fwd.") and room.encode() in m.data)
        assert real.data.startswith(b"v1."), "a forward goes sealed"
        writer = real.subject.rsplit(".", 1)[1]
        other = next(d for i, d in enumerate(ds) if f"n{i}" != writer)
        other_name = f"n{ds.index(other)}"
        base_other = rejected(other, "forward")
        base_writer = rejected(ds[int(writer[1:])], "forward")
        nc.pub(real.subject, real.data)                                  # replayed as it was
        nc.pub(f"tabd.fwd.{other_name}", real.data)                      # moved to another node
        nc.pub(real.subject, real.data.replace(b"tabd.fwdr.", b"tabd.fwdr.x"))  # its reply re-aimed
        wait_rejected(other, "forward", base_other)
        wait_rejected(ds[int(writer[1:])], "forward", base_writer)
        # An answer of the writer, replayed to the forwarder, and a forged one.
        answer = nc.until(lambda m: m.subject.startswith("tabd.fwdr."))
        base_answer = rejected(ds[1], "answer")
        nc.pub(answer.subject, answer.data)
        nc.pub(answer.subject, json.dumps({"id": "x", "room": room, "frame": {"type": "ack", "ref": "x", "seq": 1}}))
        wait_rejected(ds[1], "answer", base_answer)
        await probe(clients, clients[1])
    for c in clients:
        await c.close()


@both_placements
async def test_forged_and_replayed_deletion_notices_close_nothing(make_daemon, engine, placement):
    # A node closes a room's clients on a notice only once the engine says the room is gone
    # or another life of it: a room of a shard by its subject's last message, a room of its
    # own stream by that stream's creation time.
    ds = trio(make_daemon, engine, *PLACEMENTS[placement])
    room, victim = room_name(), room_name()
    clients = await room_on(ds, room)
    with Nats(engine.urls[2]) as nc:
        nc.sub("tabd.deleted.>")
        bases = [rejected(d, "deletion") for d in ds]
        nc.pub(f"tabd.deleted.{room}", b"")
        nc.pub(f"tabd.deleted.{room}", f"v1.{'1' * 16}.{'cd' * 32} {int(time.time() * 1000)} 1\n")
        for d, base in zip(ds, bases):
            wait_rejected(d, "deletion", base + 1)
        await probe(clients, clients[2])
        # A real notice, replayed once the room was created again: the nodes ask the engine.
        first = await Client.connect(ds[0].ws, room=victim)
        await first.close()
        assert call(ds[0], "DELETE", f"/api/rooms/{victim}")[0] == 204
        notice = nc.until(lambda m: m.subject == f"tabd.deleted.{victim}")
        again = [await Client.connect(d.ws, room=victim, name=f"v{i}") for i, d in enumerate(ds)]
        for c in again:
            await c.until_seq(max(x.last_seq() for x in again))
        nc.pub(notice.subject, notice.data)
        nc.flush()
        await probe(again, again[0])
        for c in again:
            assert c.ws.close_code is None, "a replayed deletion notice closed a client"
            await c.close()
    for c in clients:
        await c.close()


async def test_forged_and_replayed_heartbeats_are_not_believed(make_daemon, engine):
    ds = trio(make_daemon, engine)
    room = room_name()
    clients = await room_on(ds, room)
    with Nats(engine.urls[0]) as nc:
        nc.sub("tabd.node.n1")
        real = nc.until(lambda m: m.subject == "tabd.node.n1")
        assert real.data.startswith(b"v1.")
        base = rejected(ds[0], "heartbeat")
        # For longer than two of the nodes' sweeps (one a second): a ghost node, n1 in another
        # life (unsealed, and under a key nobody holds), and n1's own beat replayed.
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            nc.pub("tabd.node.ghost", b"0123456789abcdef")
            nc.pub("tabd.node.n1", b"fedcba9876543210")
            nc.pub("tabd.node.n1", f"v1.{'2' * 16}.{'ef' * 32} {int(time.time() * 1000)} fedcba9876543210\n")
            nc.pub("tabd.node.n1", real.data)
            await asyncio.sleep(0.1)
        wait_rejected(ds[0], "heartbeat", base + 20)
        await probe(clients, clients[0])   # n1's client is still in the room: no clientLeft
        # Logged at a bounded rate: one line per kind per 10 s, not one per message.
        lines = log_so_far(ds[0]).count("rejected an engine message (heartbeat)")
        assert 1 <= lines <= 2, f"{lines} log lines for {rejected(ds[0], 'heartbeat') - base} rejected heartbeats"
        # n1 dies; its last beat, replayed without end, does not keep it alive.
        ds[1].proc.kill()
        ds[1].proc.wait()
        deadline = time.monotonic() + HEARTBEAT_TIMEOUT + CLOCK_SKEW + 15
        left = False
        while not left:
            assert time.monotonic() < deadline, "a dead node was kept alive by its replayed heartbeats"
            nc.pub("tabd.node.n1", real.data)
            try:
                f = await clients[0].recv(timeout=0.2)
            except (asyncio.TimeoutError, TimeoutError):
                continue
            left = f["type"] == "events" and any(e["kind"] == "clientLeft" and e.get("client") == clients[1].welcome["client"]
                                                 for e in f["events"])
    for c in (clients[0], clients[2]):
        await c.close()


async def test_messages_sealed_with_the_real_key_are_not_believed_out_of_their_time(make_daemon, engine):
    # What a peer could do with a node's key for one moment: seal messages with times of its
    # choosing. Older than the liveness bound plus the clock-skew bound, or further ahead than
    # the skew: not believed.
    ds = trio(make_daemon, engine)
    room = room_name()
    clients = await room_on(ds, room)
    key = Key(open(cluster_secret_file()).read().strip())
    now = int(time.time() * 1000)
    stale = now - int((HEARTBEAT_TIMEOUT + CLOCK_SKEW + 1) * 1000)
    ahead = now + int((CLOCK_SKEW + 1) * 1000)
    with Nats(engine.urls[0]) as nc:
        base_hb, base_fwd, base_del = rejected(ds[0], "heartbeat"), rejected(ds[0], "forward"), rejected(ds[0], "deletion")
        for t in (stale, ahead):
            nc.pub("tabd.node.n1", key.seal_core("heartbeat", "tabd.node.n1", t, ["0123456789abcdef"]))
            forged = {"id": f"late-{t}", "room": room, "client": "ghost", "session": f"s-{t}", "order": 0,
                      "command": {"type": "set", "key": "ghost", "value": 1, "ref": "g"}, "reply": "tabd.fwdr.n1.0123456789abcdef"}
            nc.pub("tabd.fwd.n0", key.seal_core("forward", "tabd.fwd.n0", t, ["n1", "0123456789abcdef", "x"], json.dumps(forged).encode()))
            nc.pub(f"tabd.deleted.{room}", key.seal_core("deletion", f"tabd.deleted.{room}", t, ["1"]))
        wait_rejected(ds[0], "heartbeat", base_hb + 1)
        wait_rejected(ds[0], "forward", base_fwd + 1)
        wait_rejected(ds[0], "deletion", base_del + 1)
        # Sealed and recent, but for a stream that is not the room's: the node asks the engine,
        # which still has the room.
        nc.pub(f"tabd.deleted.{room}", key.seal_core("deletion", f"tabd.deleted.{room}", now, ["1"]))
        nc.flush()
        await probe(clients, clients[0])
    for c in clients:
        await c.close()


# --- the room's stream ------------------------------------------------------------------------

async def test_altered_moved_replayed_and_unsealed_batches_are_passed_over_and_the_room_still_loads(make_daemon, engine):
    """Rooms with streams of their own (the layout before shards), whose place is the
    stream's sequence: a message altered, replayed at a later place, moved into another
    room's stream or unsealed is passed over (faults: a seal not checked, or not covering
    the body, the place or the room)."""
    ds = trio(make_daemon, engine, *PLACEMENTS["streams"])
    room, other = room_name(), room_name()
    clients = await room_on(ds, room)
    others = [await Client.connect(d.ws, room=other, name=f"o{i}") for i, d in enumerate(ds)]
    for c in others:
        await c.until_seq(max(x.last_seq() for x in others))
    with Nats(engine.urls[0]) as nc:
        headers, data = last_stream_message(nc, room)
        assert "Tabd-Seal" in headers, headers
        kept = {k: v for k, v in headers.items() if not k.startswith("Nats-Expected")}
        bases = [rejected(d, "batch") for d in ds]
        altered = data.replace(b'"key":"probe"', b'"key":"ghost"')
        assert altered != data
        # Altered (a new id, else the engine drops it as a duplicate); replayed at a later place
        # (without its id); moved into another room's stream; unsealed.
        nc.publish(f"tabd.room.{room}", altered, headers=dict(kept, **{"Nats-Msg-Id": "ghost-1"}))
        nc.publish(f"tabd.room.{room}", data, headers={k: v for k, v in kept.items() if k != "Nats-Msg-Id"})
        nc.publish(f"tabd.room.{other}", data, headers=dict(kept, **{"Nats-Msg-Id": "ghost-2"}))
        nc.publish(f"tabd.room.{room}", data, headers={k: v for k, v in kept.items() if k not in ("Tabd-Seal", "Nats-Msg-Id")})
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base + 3)
        await probe(clients, clients[1])
        await probe(others, others[2])
    # A node that loads the room now reads those messages too, and passes them over.
    await joins_alike(make_daemon, engine, room, clients[0], *PLACEMENTS["streams"], name="late")
    for c in clients + others:
        await c.close()


async def test_a_forged_snapshot_is_not_loaded(make_daemon, engine):
    """A room with a stream of its own keeps its snapshot in TABD_SNAPSHOTS: one altered,
    unsealed or sealed with a key no node holds, is not loaded (fault: a snapshot's seal not
    checked). Rooms of shards keep theirs in the directory (see the directory test)."""
    # A room long enough for its writer to store a snapshot (every 1,000 stream messages).
    ds = trio(make_daemon, engine, *PLACEMENTS["streams"])
    room = room_name()
    clients = await room_on(ds, room)
    writer = clients[0]
    sent = 0
    with Nats(engine.urls[0]) as nc:
        nc.sub(f"tabd.snap.{room}")
        snapshot = None
        while snapshot is None:
            # One at a time: each command its own engine message.
            await writer.command("scroll", offset=sent % 500)
            sent += 1
            if sent >= 990 and sent % 10 == 0:
                snapshot = nc.next(timeout=0.01)
            assert sent < 1500, "no snapshot stored after 1,500 engine messages"
        while not (snapshot.data and "Tabd-Seal" in snapshot.headers):
            snapshot = nc.until(lambda m: m.subject == f"tabd.snap.{room}")
        record = json.loads(snapshot.data)
        # The same record with another state: unsealed, and sealed with a key no node holds.
        record["snapshot"]["tabs"][0]["values"] = {"ghost": "forged"}
        forged = json.dumps(record, separators=(",", ":")).encode()
        nc.publish(f"tabd.snap.{room}", forged)
        nc.publish(f"tabd.snap.{room}", forged, headers={"Tabd-Seal": Key("x" * 64).seal("snapshot", [f"tabd.snap.{room}"], forged)})
    for x in clients:
        await x.until_seq(writer.last_seq())
    await probe(clients, clients[1])
    # Nodes of the old layout's phase one: one of phase two would move the room into its shard.
    late = node(make_daemon, engine, "snap-late", *PLACEMENTS["streams"])
    c = await Client.connect(late.ws, room=room, name="late-client")
    assert "ghost" not in json.dumps(c.welcome["snapshot"]), "a forged snapshot was loaded"
    assert rejected(late, "snapshot") >= 1
    await c.close()
    await joins_alike(make_daemon, engine, room, clients[0], *PLACEMENTS["streams"], name="snap-later")
    for x in clients:
        await x.close()


async def serves_alike(late, room, reference):
    """Node `late` serves `room` as `reference`'s node does (a client of it and `reference`
    compare their snapshots); the late client's welcome."""
    c = await Client.connect(late.ws, room=room, name="late-client")
    await reference.until_seq(c.last_seq())
    _, mine = await c.command("sync")
    _, theirs = await reference.command("sync")
    assert comparable(mine["snapshot"]) == comparable(theirs["snapshot"])
    assert mine["snapshot"]["seq"] == theirs["snapshot"]["seq"]
    await c.close()
    return c.welcome


async def joins_alike(make_daemon, engine, room, reference, *extra, name="fresh"):
    """A node that has never seen `room` serves it as `reference`'s node does."""
    late = node(make_daemon, engine, name, *extra)
    await serves_alike(late, room, reference)
    return late


async def test_messages_altered_forged_moved_or_replayed_in_a_shard_are_passed_over_and_the_rooms_still_load(make_daemon, engine):
    """Rooms of shards: two rooms of one shard and one of another, clients on every node.
    Into the room's subject, each right after its last message: its last message with
    another body (fault: the seal not covering the body), unsealed (fault: an unsealed
    message believed in a room of a shard), sealed with a key no node holds (fault: a
    seal's key not checked), and sealed as a node sealed it, for the place it holds, put at
    a later place (fault: Tabd-Follows not compared with the room's previous message). Into
    the other room of the shard, a message sealed for this room's subject and right in
    every other field for that room's next message (fault: the subject not sealed); into
    the room of the other shard, the message as it is and one sealed likewise (the same
    fault); on this room's id in a third shard's stream, the message as it is (no room
    lives there). Every node passes each over, clients see nothing of them, and a node that
    loads the three rooms later serves them as the others do. The control: a batch sealed
    as a node seals it at the room's place is taken."""
    ds = trio(make_daemon, engine)
    url = engine.urls[0]
    shard, (room, other) = rooms_in_one_shard(url, 2)
    far = room_in_another_shard(url, shard)
    clients = {r: await room_on(ds, r) for r in (room, other, far)}
    key = the_key()
    with Nats(url) as nc:
        here, there, afar = (place_of(nc, r) for r in (room, other, far))
        assert here.shard == there.shard == shard != afar.shard
        lives = {r: life_of(nc, r) for r in (room, other, far)}
        # The room's last message: its probe's batch.
        _, headers, data = stream_message(nc, room)
        assert b'"key":"probe"' in data and "Tabd-Seal" in headers, (headers, data)
        check_sealing(key, here.subject, lives[room], headers, data)
        ends = {r: stream_message(nc, r)[0] for r in (room, other, far)}
        frame = json.loads(data)
        frame["events"][0].update(seq=clients[room][0].last_seq() + 1, key="ghost")
        ghost = json.dumps(frame, separators=(",", ":")).encode()   # a batch that would fold at the room's next seq

        def fresh():
            return dict(without(headers), **{"Nats-Msg-Id": f"ghost-{uuid.uuid4().hex}"})

        def put(r, subject, body, h):
            ends[r] = append(nc, subject, body, h, after=ends[r])

        bases = [rejected(d, "batch") for d in ds]
        sealed = sealed_as_a_node(key, here.subject, lives[room], fresh(), ends[room], data)
        put(room, here.subject, ghost, sealed)                                                         # altered
        put(room, here.subject, ghost, dict(without(fresh(), "Tabd-Seal"), **{"Tabd-Follows": str(ends[room])}))  # unsealed
        put(room, here.subject, ghost, sealed_as_a_node(Key("x" * 64), here.subject, lives[room], fresh(), ends[room], ghost))
        put(room, here.subject, data, sealed_as_a_node(key, here.subject, lives[room], fresh(), int(headers["Tabd-Follows"]), data))
        put(other, there.subject, data, sealed_as_a_node(key, here.subject, lives[other], fresh(), ends[other], data))
        put(far, afar.subject, data, without(headers))                                                 # as it is
        put(far, afar.subject, data, sealed_as_a_node(key, here.subject, lives[far], fresh(), ends[far], data))
        elsewhere = next(n for n in range(cluster_layout(url)[0]) if n not in (shard, afar.shard))
        append(nc, f"tabd.r.{elsewhere}.{room}", data, without(headers))
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base + 6)   # 4 in the room, 1 in the other room of its shard, 2 in the far room
        for k, cs in enumerate(clients.values()):
            await probe(cs, cs[k])
        # The control: a batch sealed as a node seals it, right after the room's last message,
        # is taken (so what was passed over differed from it in what each says, no more).
        ends[room] = stream_message(nc, room)[0]
        frame["events"][0].update(seq=clients[room][0].last_seq() + 1, key="control")
        control = json.dumps(frame, separators=(",", ":")).encode()
        put(room, here.subject, control, sealed_as_a_node(key, here.subject, lives[room], fresh(), ends[room], control))
        for c in clients[room]:
            await c.until_seq(frame["events"][0]["seq"])
            assert c.batches[-1]["events"] == frame["events"], c.batches[-1]
    # A node that loads the rooms now reads those messages too, and passes them over.
    late = node(make_daemon, engine, "late")
    for r, cs in clients.items():
        await serves_alike(late, r, cs[0])
    assert rejected(late, "batch") >= 6
    for cs in clients.values():
        for c in cs:
            await c.close()


async def test_forged_and_replayed_tombstones_delete_no_room_of_a_shard(make_daemon, engine):
    """A room of a shard deleted (its tombstone) and created again, clients of it and of a
    room of the same shard on every node, and a node started before the room existed (it
    asks the engine whether the room exists, by its subject's last message). After the
    room's last message: its first life's tombstone as a node sealed it (following the
    first life's last message; fault: a tombstone believed by its seal, not its place), and
    tombstones of its life unsealed, sealed with a key no node holds, and sealed for the
    other room's subject (faults: a tombstone's seal not checked, or not binding its room).
    No node deletes the room: clients keep working, the node that had not seen it answers
    GET 200 with the room's life and does not create it again on PUT, a deletion notice
    sealed now closes nothing, a node that loads it later serves it alike, and a real
    deletion still deletes it."""
    ds = trio(make_daemon, engine)
    bystander = node(make_daemon, engine, "bystander")
    url = engine.urls[0]
    shard, (room, neighbour) = rooms_in_one_shard(url, 2)
    key = the_key()
    assert call(ds[0], "PUT", f"/api/rooms/{room}")[0] == 201
    status, ack, _ = call(ds[0], "POST", f"/api/rooms/{room}/commands", {"type": "set", "key": "first-life", "value": 1})
    assert status == 200 and ack["type"] == "ack", ack
    with Nats(url) as nc:
        here = place_of(nc, room)
        first_life = life_of(nc, room)
        status, body, _ = call(ds[1], "DELETE", f"/api/rooms/{room}")
        assert status == 204, body
        _, tomb, tomb_body = stream_message(nc, room)
        assert tomb.get("Tabd-Kind") == "deleted" and json.loads(tomb_body)["epoch"] == first_life, (tomb, tomb_body)
        check_sealing(key, here.subject, first_life, tomb, tomb_body)
        status, created, _ = call(ds[2], "PUT", f"/api/rooms/{room}")
        assert status == 201 and created["epoch"] != first_life, created
        life = created["epoch"]
        clients = await room_on(ds, room)
        neighbours = await room_on(ds, neighbour)
        end = stream_message(nc, room)[0]
        bases = [rejected(d, "batch") for d in ds]
        end = append(nc, here.subject, tomb_body, sealed_as_a_node(key, here.subject, first_life, dict(without(tomb), **{"Nats-Msg-Id": f"again-{room}"}),
                                                                   int(tomb["Tabd-Follows"]), tomb_body), after=end)
        body = json.dumps({"epoch": life}, separators=(",", ":")).encode()
        forged = {"Tabd-Kind": "deleted", "Tabd-Node": "n1", "Tabd-Incarnation": tomb["Tabd-Incarnation"]}
        end = append(nc, here.subject, body, dict(forged, **{"Nats-Msg-Id": f"ghost-1-{room}", "Tabd-Follows": str(end)}), after=end)
        end = append(nc, here.subject, body, sealed_as_a_node(Key("x" * 64), here.subject, life, dict(forged, **{"Nats-Msg-Id": f"ghost-2-{room}"}), end, body),
                     after=end)
        end = append(nc, here.subject, body, sealed_as_a_node(key, f"tabd.r.{shard}.{neighbour}", life, dict(forged, **{"Nats-Msg-Id": f"ghost-3-{room}"}),
                                                              end, body), after=end)
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base + 3)
        await probe(clients, clients[0])
        await probe(neighbours, neighbours[1])
        # The node that has not seen the room asks the engine: it is there, in its second life.
        status, got, _ = call(bystander, "PUT", f"/api/rooms/{room}")
        assert status != 201, f"room created again over a forged tombstone: {got}"
        status, got, _ = call(bystander, "GET", f"/api/rooms/{room}")
        assert status == 200 and got["epoch"] == life, (status, got)
        # A deletion notice sealed now: every node asks the engine, which still has the room.
        notice = f"tabd.deleted.{room}"
        nc.pub(notice, key.seal_core("deletion", notice, int(time.time() * 1000), ["1"]))
        nc.flush()
        await probe(clients, clients[2])
        assert all(c.ws.close_code is None for c in clients), "a client of the room was closed"
    # A node that loads the room now passes the tombstones over too.
    await joins_alike(make_daemon, engine, room, clients[1], name="tomb-late")
    # The room was never deleted: a deletion now, through the node that had not seen it, ends it.
    status, body, _ = call(bystander, "DELETE", f"/api/rooms/{room}")
    assert status == 204, body
    for c in clients:
        await asyncio.wait_for(c.ws.wait_closed(), WAIT)
    await probe(neighbours, neighbours[2])
    for c in neighbours:
        await c.close()


def directory_record(nc, room):
    """The room's directory record: (its headers, its body)."""
    _, _, headers, body = get_message(nc, "TABD_DIRECTORY", {"last_by_subj": f"tabd.dir.{room}"})
    return headers, body


async def test_forged_directory_records_are_not_loaded_and_the_rooms_load_from_their_shard(make_daemon, engine):
    """A room of a shard has one record in TABD_DIRECTORY (its latest snapshot, a node loads
    it from there). Three rooms of one shard; each record replaced by the same record with
    another state, standing at the room's last message (so a node that believed it would
    read nothing after it): unsealed, sealed with a key no node holds, and with the real
    record's seal (faults: a record's seal not checked, or not covering its body). A node
    that loads the rooms later loads none of them, counts each, loads each room from its
    shard as the others have it, and writes its record again, sealed."""
    ds = trio(make_daemon, engine)
    url = engine.urls[0]
    shard, rooms = rooms_in_one_shard(url, 3)
    clients = {r: await room_on(ds, r) for r in rooms}
    key = the_key()
    with Nats(url) as nc:
        for i, r in enumerate(rooms):
            headers, body = directory_record(nc, r)
            assert headers.get("Tabd-Seal") == key.seal("snapshot", [f"tabd.dir.{r}"], body), "a node's record is sealed"
            record = json.loads(body)
            assert record["shard"] == shard, record
            record["streamSeq"] = stream_message(nc, r)[0]
            record["snapshot"]["tabs"][0]["values"] = {"ghost": "forged"}
            forged = json.dumps(record, separators=(",", ":")).encode()
            seal = [None, Key("x" * 64).seal("snapshot", [f"tabd.dir.{r}"], forged), headers["Tabd-Seal"]][i]
            append(nc, f"tabd.dir.{r}", forged, {"Tabd-Seal": seal} if seal else {})
    late = node(make_daemon, engine, "dir-late")
    for r in rooms:
        welcome = await serves_alike(late, r, clients[r][0])
        assert "ghost" not in json.dumps(welcome["snapshot"]), f"a forged record of room {r} was loaded"
    assert rejected(late, "snapshot") >= 3
    # Loaded from its shard, each room has its record written again by a node (bounded wait).
    deadline = time.monotonic() + WAIT
    with Nats(url) as nc:
        for r in rooms:
            while True:
                headers, body = directory_record(nc, r)
                if headers.get("Tabd-Seal") == key.seal("snapshot", [f"tabd.dir.{r}"], body):
                    break
                assert time.monotonic() < deadline, f"room {r}'s record was not written again"
                time.sleep(0.02)
            assert b"ghost" not in body
    for cs in clients.values():
        for c in cs:
            await c.close()


# --- the shard layout ---------------------------------------------------------------------------

def layout_body(shards_, key_bytes):
    return json.dumps({"shards": shards_, "key": key_bytes.hex()}, separators=(",", ":")).encode()


def room_placed_apart(genuine, forged):
    """A room name the two layouts put into different shards."""
    while shards.shard_of(genuine, name := room_name()) == shards.shard_of(forged, name):
        pass
    return name


async def test_layout_records_appended_after_the_clusters_change_no_nodes_layout(make_daemon, engine):
    """The layout is the first record sealed by a node; after it, layouts of 7 shards and
    another key: unsealed, sealed with a key no node holds, and with the real layout's seal
    (fault: a node taking the latest record, or an unsealed one). A node started now maps
    rooms as the others do: a room it creates is in the shard the real layout names, and
    a room created before serves alike."""
    ds = trio(make_daemon, engine)
    url = engine.urls[0]
    genuine = cluster_layout(url)
    forged = (7, os.urandom(32))
    body = layout_body(*forged)
    subject = shards.LAYOUT_SUBJECT
    old = room_name()
    clients = await room_on(ds, old)
    with Nats(url) as nc:
        real = next(h for _, h, b in shards.layout_records(nc) if h.get("Tabd-Seal") == the_key().seal("layout", [subject], b))
        append(nc, subject, body, {})
        append(nc, subject, body, {"Tabd-Seal": Key("x" * 64).seal("layout", [subject], body)})
        append(nc, subject, body, {"Tabd-Seal": real["Tabd-Seal"]})
    late = node(make_daemon, engine, "layout-late")
    await serves_alike(late, old, clients[0])
    room = room_placed_apart(genuine, forged)
    c = await Client.connect(late.ws, room=room, name="on-late")
    with Nats(url) as nc:
        where = place_of(nc, room)
        assert where.shard == shards.shard_of(genuine, room)
        assert stream_message(nc, room) is not None, "the room is not where the cluster's layout puts it"
        wrong = shards.shard_of(forged, room)
        assert get_message(nc, f"TABD_SHARD_{wrong}", {"last_by_subj": f"tabd.r.{wrong}.{room}"}) is None, "the room is where a forged layout puts it"
    others = [await Client.connect(d.ws, room=room, name=f"o{i}") for i, d in enumerate(ds)]
    for o in others + [c]:
        await o.until_seq(max(x.last_seq() for x in others + [c]))
    await probe(others + [c], c)
    for x in clients + others + [c]:
        await x.close()


async def test_layout_records_put_before_the_first_nodes_are_passed_over(make_daemon, tmp_path):
    """An engine of its own, into which a peer put two layouts (of one shard) before any
    node started: unsealed, and sealed with a key no node holds (fault: a node taking the
    first record, or one not sealed by a node). The first node passes them over and records
    the layout; the next one finds it after them and says so; both put a room where that
    layout does."""
    with NatsCluster(1, base_dir=str(tmp_path / "solo")) as solo:
        url = solo.urls[0]
        forged = (1, os.urandom(32))
        body = layout_body(*forged)
        subject = shards.LAYOUT_SUBJECT
        with Nats(url) as nc:
            nc.js("STREAM.CREATE.TABD_CLUSTER", {"name": "TABD_CLUSTER", "subjects": ["tabd.cluster.>"], "storage": "file",
                                                 "num_replicas": 1, "allow_direct": True})
            append(nc, subject, body, {})
            append(nc, subject, body, {"Tabd-Seal": Key("x" * 64).seal("layout", [subject], body)})
        first = node(make_daemon, solo, "first")
        first.wait_for_log("laid the cluster's rooms out in 32 shards")
        second = node(make_daemon, solo, "second")
        second.wait_for_log("the engine holds 2 shard layout records not sealed by a node: passed over")
        genuine = cluster_layout(url)
        assert genuine[0] == 32 and genuine != forged
        room = room_placed_apart(genuine, forged)
        clients = await room_on([first, second], room)
        with Nats(url) as nc:
            assert place_of(nc, room).shard == shards.shard_of(genuine, room)
            assert stream_message(nc, room) is not None, "the room is not where the recorded layout puts it"
        for c in clients:
            await c.close()
        first.stop()
        second.stop()


@pytest.mark.parametrize("placement", [
    "shards",
    "streams"])
async def test_forged_publish_acknowledgements_change_nothing_a_client_sees(make_daemon, engine, placement):
    """Nodes that all append (no forwarding), so that their publishes conflict; the peer
    answers every publish it sees on the rooms' subjects with forged "stored" answers,
    racing the engine's own: at the place the publish expects (never a place of a
    compare-and-set: refused), and at places after it. In a stream of the room's own, the
    one place after the expected one is the message's if it is stored at all; in a shard,
    any later place may be, so a forged answer there names a place the message is not at,
    or one where another room of the shard (two rooms share it here) has its message.
    Every command is answered once, each ack names its own batch, and clients on every node
    see one order (faults: a publish answer believed without the consumer showing the
    message at that place, or an answer for a place the room never gets a message at
    leaving its command unanswered)."""
    ds = trio(make_daemon, engine, "--cluster-forwarding", "off", *PLACEMENTS[placement])
    if placement == "shards":
        shard, rooms = rooms_in_one_shard(engine.urls[0], 2)
        subject = f"tabd.r.{shard}.*"
    else:
        rooms = [room_name()]
        subject = f"tabd.room.{rooms[0]}"
    clients = {room: [await Client.connect(ds[k % 3].ws, room=room, name=f"c{k}") for k in range(6)] for room in rooms}
    stop = False
    forged = [0]

    def forge():
        rng = random.Random(3)
        with Nats(engine.urls[0]) as nc:
            nc.sub(subject)
            while not stop:
                m = nc.next(timeout=0.2)
                if m is None or not m.reply:
                    continue
                stream = f"TABD_SHARD_{m.subject.split('.')[2]}" if placement == "shards" else f"TABD_ROOM_{rooms[0]}"
                if placement == "shards":
                    expected = int(m.headers.get("Nats-Expected-Last-Subject-Sequence", "0"))
                    places = [expected + rng.choice([0, 1, 2, 3, 50]), expected + 1]
                else:
                    expected = int(m.headers.get("Nats-Expected-Last-Sequence", "0"))
                    places = [expected + 1, expected + 5]
                for seq in places:
                    nc.pub(m.reply, json.dumps({"stream": stream, "seq": seq}))
                    forged[0] += 1

    loop = asyncio.get_running_loop()
    forger = loop.run_in_executor(None, forge)
    try:
        try:
            results = await asyncio.gather(*(command_storm(clients[room], 40 // len(rooms), seed=7 + i, timeout=WAIT)
                                             for i, room in enumerate(rooms)))
        finally:
            stop = True
            await forger
        assert forged[0] > 0, "the peer answered no publish"
        for room, (answers, caused) in zip(rooms, results):
            cs = clients[room]
            last = (await sync_everyone(cs))["seq"]
            first = max(c.welcome["snapshot"]["seq"] for c in cs)
            streams = [[b for b in c.batches if first < b["events"][0]["seq"] <= last] for c in cs]
            assert all(s == streams[0] for s in streams), "clients on different nodes saw different streams"
            by_end = {b["events"][-1]["seq"]: b for b in cs[0].batches}
            for ref, f in answers.items():
                if f["type"] == "ack" and ref in caused and f["seq"] > first:
                    assert by_end.get(f["seq"]) == caused[ref], f"the ack of {ref} names a batch that is not its own"
            assert any(f["type"] == "ack" for f in answers.values())
        acks = sum(rejected(d, "ack") for d in ds)
        print(f"forged answers: {forged[0]}; forged acks the nodes noticed: {acks}")
    finally:
        await asyncio.gather(*(c.close() for cs in clients.values() for c in cs))


# --- keys: required, refused, rotated ----------------------------------------------------------

def test_a_node_does_not_start_without_a_cluster_secret_or_with_a_bad_one(make_daemon, engine, tmp_path):
    base = ("--port", "0", "--cluster", engine.url_arg)
    code, out, err = refused(TABD, ROOT, environment(), *base)
    assert code != 0 and "needs --cluster-secret-file" in err and "openssl rand -hex 32" in err
    short = secret(tmp_path, "too short", name="short")
    code, out, err = refused(TABD, ROOT, environment(), *base, "--cluster-secret-file", short)
    assert code != 0 and "a key needs at least 32" in err
    shared = secret(tmp_path, "k" * 40, name="shared")
    code, out, err = refused(TABD, ROOT, environment(), *base, "--cluster-secret-file", shared, "--auth-secret-file", shared)
    assert code != 0 and "holds the key that signs tokens" in err


@both_placements
async def test_keys_rotate_on_a_running_cluster_and_a_node_of_another_key_is_not_one_of_it(make_daemon, engine, tmp_path, placement):
    # In shards, the layout sealed with the old key is sealed again with the new one (else
    # nodes of the new key alone would not find it); a room's messages and records alike.
    a, b = "a" * 64, "b" * 64
    only_a, a_then_b, b_then_a, only_b = (secret(tmp_path, *k, name=n) for k, n in
                                          [((a,), "a"), ((a, b), "ab"), ((b, a), "ba"), ((b,), "b")])
    room = room_name()
    placed = PLACEMENTS[placement]
    ds = [node(make_daemon, engine, f"k{i}", "--cluster-secret-file", only_a, *placed) for i in range(3)]
    clients = await room_on(ds, room)

    async def restart(i, path):
        nonlocal clients
        ds[i].stop()
        ds[i] = node(make_daemon, engine, f"k{i}", "--cluster-secret-file", path, *placed)
        await clients[i].close()
        clients[i] = await Client.connect(ds[i].ws, room=room, name=f"c{i}")
        for c in clients:
            await c.until_seq(max(x.last_seq() for x in clients))
        await probe(clients, clients[i])

    # Add the new key second everywhere, then make it first everywhere, then drop the old one:
    # one node at a time, the room in use throughout.
    for path in (a_then_b, b_then_a, only_b):
        for i in range(3):
            await restart(i, path)
    # A node whose only key is the old one is not believed: its heartbeats and batches are
    # rejected, and it cannot load a room sealed since by the others.
    stranger = node(make_daemon, engine, "stranger", "--cluster-secret-file", only_a)
    base = rejected(ds[0], "heartbeat")
    wait_rejected(ds[0], "heartbeat", base)
    await probe(clients, clients[0])
    status, _ = stranger.get("/healthz")
    assert status == 200
    for c in clients:
        await c.close()


# --- moving an unsealed cluster to sealed messages ---------------------------------------------

def old_frame(batch, seq, by="old-client", key="old", value=0):
    """An events frame as a node of a tabd that does not seal writes it: `batch` (a frame a
    client received) with one valueSet at `seq`."""
    event = next(e for e in batch["events"] if e["kind"] == "valueSet")
    return json.dumps({"type": "events", "by": by, "ref": None,
                       "events": [dict(event, seq=seq, key=key, value=value)]}, separators=(",", ":")).encode()


async def test_an_unsealed_cluster_moves_to_sealed_messages_in_two_phases_keeping_its_room(make_daemon, engine, tmp_path):
    # A cluster of a tabd that did not seal had rooms with streams of their own: the move
    # runs there (`--cluster-rooms streams`: the nodes create the room as such a tabd did).
    room = room_name()
    keys = secret(tmp_path, "m" * 64)
    streams = PLACEMENTS["streams"]
    # Phase one: nodes that seal and accept unsealed messages, beside a node of a tabd that
    # does not seal (its messages written here as it writes them: unsealed, its own headers).
    ds = [node(make_daemon, engine, f"p{i}", "--cluster-secret-file", keys, "--cluster-unsigned", "accept", *streams) for i in range(3)]
    clients = await room_on(ds, room)
    template = clients[0].batches[-1]

    def old_node_appends(nc, value):
        headers, _ = last_stream_message(nc, room)
        seq = max(c.last_seq() for c in clients) + 1
        frame = old_frame(template, seq, value=value)
        ack = nc.publish(f"tabd.room.{room}", frame, headers={"Tabd-Node": "old", "Nats-Msg-Id": f"old-{uuid.uuid4().hex}"})
        assert "seq" in ack, ack
        return seq

    with Nats(engine.urls[0]) as nc:
        seq = old_node_appends(nc, 1)
        for c in clients:
            await c.until_seq(seq)
            assert c.batches[-1]["by"] == "old-client", "phase one takes the unsealed node's batch"
        await probe(clients, clients[1])
        # A node of phase one restarted: it loads the room with the unsealed batch in it.
        ds[2].stop()
        ds[2] = node(make_daemon, engine, "p2", "--cluster-secret-file", keys, "--cluster-unsigned", "accept", *streams)
        await clients[2].close()
        clients[2] = await Client.connect(ds[2].ws, room=room, name="c2")
        for c in clients:
            await c.until_seq(clients[2].last_seq())
        await probe(clients, clients[2])
        # Phase two, once no node writes unsealed: each node restarted requiring seals. The
        # first one to load the room marks it sealed; its history stays as it was.
        for i in range(3):
            ds[i].stop()
            ds[i] = node(make_daemon, engine, f"p{i}", "--cluster-secret-file", keys, *streams)
            await clients[i].close()
            clients[i] = await Client.connect(ds[i].ws, room=room, name=f"c{i}")
            for c in clients:
                await c.until_seq(max(x.last_seq() for x in clients))
            await probe(clients, clients[i])
            _, sync = await clients[i].command("sync")
            assert any(v == 1 for t in sync["snapshot"]["tabs"] for k, v in (t.get("values") or {}).items() if k == "old"), \
                "the unsealed batch of phase one is still the room's history"
        headers, _ = last_stream_message(nc, room)
        # An unsealed batch now is passed over by every node.
        bases = [rejected(d, "batch") for d in ds]
        old_node_appends(nc, 2)
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base)
        await probe(clients, clients[0])
    await joins_alike(make_daemon, engine, room, clients[0], "--cluster-secret-file", keys, *streams, name="p-late")
    for c in clients:
        await c.close()
