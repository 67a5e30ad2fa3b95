"""The engine is not trusted: holding the engine's credentials is not enough to act as a node.

Three NATS JetStream servers, three tabd nodes sharing a cluster secret, clients of one room
on every node, and a peer that is not a node: a bare NATS connection (the text protocol over
a socket, Tests/support/natsproto.py) with no tabd credential of any kind. It publishes
forged forwards, deletion notices and heartbeats, answers and publish acknowledgements,
altered, moved and replayed stream batches, and reply subjects aimed at the JetStream API
and at other nodes. After each, the nodes have counted it (`tabd_engine_rejected_total`) and
a probe command shows that no client saw anything but the probe; the rooms keep loading on
nodes that join later. Key rotation and the two-phase move of an unsealed cluster run on a
live room.
"""
import asyncio
import base64
import json
import os
import random
import re
import select
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
from natsproto import Nats  # noqa: E402
from clusterseal import Key  # noqa: E402

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


def stream_message(nc, room, seq=None):
    """A message of a room's stream as the JetStream API gives it, the one at `seq` (the
    last when None): (its seq, headers, data)."""
    ask = {"seq": seq} if seq is not None else {"last_by_subj": f"tabd.room.{room}"}
    got = nc.js(f"STREAM.MSG.GET.TABD_ROOM_{room}", ask)["message"]
    headers = {}
    if got.get("hdrs"):
        for line in base64.b64decode(got["hdrs"]).decode().split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip()] = v.strip()
    return got["seq"], headers, base64.b64decode(got.get("data") or "")


def last_stream_message(nc, room):
    """The last message of a room's stream: (headers, data)."""
    return stream_message(nc, room)[1:]


async def command_storm(clients, n, seed):
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
            f = await c.recv(timeout=60)
            if f["type"] == "events" and f.get("ref") in sent and f["by"] == c.welcome["client"]:
                caused[(k, f["ref"])] = f
            elif f["type"] in ("ack", "error") and f.get("ref") in sent:
                assert (k, f["ref"]) not in answers, "two answers to one command"
                answers[(k, f["ref"])] = f
                got += 1

    await asyncio.gather(*(storm(k, c) for k, c in enumerate(clients)))
    return answers, caused


def log_so_far(d):
    """Everything node `d` has written to its stderr so far (read without waiting)."""
    fd = d.proc.stderr.fileno()
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        d._log += chunk
    return d._log.decode(errors="replace")


def stream_messages(nc, room):
    return nc.js(f"STREAM.INFO.TABD_ROOM_{room}")["state"]["messages"]


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
        # Unsealed; aimed at the JetStream API (a purge of the room's stream) and at another
        # node's answers; and with a seal of a key the nodes do not hold.
        nc.pub("tabd.fwd.n0", json.dumps(forged))
        nc.pub("tabd.fwd.n0", json.dumps(dict(forged, id="ghost-2", reply=f"$JS.API.STREAM.PURGE.TABD_ROOM_{room}")))
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


async def test_forged_and_replayed_deletion_notices_close_nothing(make_daemon, engine):
    ds = trio(make_daemon, engine)
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
    ds = trio(make_daemon, engine)
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
    await joins_alike(make_daemon, engine, room, clients[0], name="late")
    for c in clients + others:
        await c.close()


async def test_a_forged_snapshot_is_not_loaded(make_daemon, engine):
    # A room long enough for its writer to store a snapshot (every 1,000 stream messages).
    ds = trio(make_daemon, engine)
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
    late = node(make_daemon, engine, "snap-late")
    c = await Client.connect(late.ws, room=room, name="late-client")
    assert "ghost" not in json.dumps(c.welcome["snapshot"]), "a forged snapshot was loaded"
    assert rejected(late, "snapshot") >= 1
    await c.close()
    await joins_alike(make_daemon, engine, room, clients[0], name="snap-later")
    for x in clients:
        await x.close()


async def joins_alike(make_daemon, engine, room, reference, *extra, name="fresh"):
    """A node that has never seen `room` serves it as `reference`'s node does."""
    late = node(make_daemon, engine, name, *extra)
    c = await Client.connect(late.ws, room=room, name="late-client")
    await reference.until_seq(c.last_seq())
    _, mine = await c.command("sync")
    _, theirs = await reference.command("sync")
    assert comparable(mine["snapshot"]) == comparable(theirs["snapshot"])
    assert mine["snapshot"]["seq"] == theirs["snapshot"]["seq"]
    await c.close()


async def test_forged_publish_acknowledgements_change_nothing_a_client_sees(make_daemon, engine):
    # Nodes that all append (no forwarding), so that their publishes conflict; the peer
    # answers every publish it sees on the room's subject with a forged "stored" at the place
    # the publish expects, racing the engine's own answer.
    ds = trio(make_daemon, engine, "--cluster-forwarding", "off")
    room = room_name()
    clients = [await Client.connect(ds[k % 3].ws, room=room, name=f"c{k}") for k in range(6)]
    stop = False

    def forge():
        with Nats(engine.urls[0]) as nc:
            nc.sub(f"tabd.room.{room}")
            while not stop:
                m = nc.next(timeout=0.2)
                if m is None or not m.reply:
                    continue
                expected = int(m.headers.get("Nats-Expected-Last-Sequence", "0"))
                nc.pub(m.reply, json.dumps({"stream": f"TABD_ROOM_{room}", "seq": expected + 1}))
                nc.pub(m.reply, json.dumps({"stream": f"TABD_ROOM_{room}", "seq": expected + 5}))

    loop = asyncio.get_running_loop()
    forger = loop.run_in_executor(None, forge)
    try:
        answers, caused = await command_storm(clients, 40, seed=7)
    finally:
        stop = True
        await forger
    last = (await sync_everyone(clients))["seq"]
    first = max(c.welcome["snapshot"]["seq"] for c in clients)
    streams = [[b for b in c.batches if first < b["events"][0]["seq"] <= last] for c in clients]
    assert all(s == streams[0] for s in streams), "clients on different nodes saw different streams"
    by_end = {b["events"][-1]["seq"]: b for b in clients[0].batches}
    for ref, f in answers.items():
        if f["type"] == "ack" and ref in caused and f["seq"] > first:
            assert by_end.get(f["seq"]) == caused[ref], f"the ack of {ref} names a batch that is not its own"
    assert any(f["type"] == "ack" for f in answers.values())
    acks = sum(rejected(d, "ack") for d in ds)
    print(f"forged acks the nodes noticed: {acks}")
    for c in clients:
        await c.close()


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


async def test_keys_rotate_on_a_running_cluster_and_a_node_of_another_key_is_not_one_of_it(make_daemon, engine, tmp_path):
    a, b = "a" * 64, "b" * 64
    only_a, a_then_b, b_then_a, only_b = (secret(tmp_path, *k, name=n) for k, n in
                                          [((a,), "a"), ((a, b), "ab"), ((b, a), "ba"), ((b,), "b")])
    room = room_name()
    ds = [node(make_daemon, engine, f"k{i}", "--cluster-secret-file", only_a) for i in range(3)]
    clients = await room_on(ds, room)

    async def restart(i, path):
        nonlocal clients
        ds[i].stop()
        ds[i] = node(make_daemon, engine, f"k{i}", "--cluster-secret-file", path)
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
    room = room_name()
    keys = secret(tmp_path, "m" * 64)
    # Phase one: nodes that seal and accept unsealed messages, beside a node of a tabd that
    # does not seal (its messages written here as it writes them: unsealed, its own headers).
    ds = [node(make_daemon, engine, f"p{i}", "--cluster-secret-file", keys, "--cluster-unsigned", "accept") for i in range(3)]
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
        ds[2] = node(make_daemon, engine, "p2", "--cluster-secret-file", keys, "--cluster-unsigned", "accept")
        await clients[2].close()
        clients[2] = await Client.connect(ds[2].ws, room=room, name="c2")
        for c in clients:
            await c.until_seq(clients[2].last_seq())
        await probe(clients, clients[2])
        # Phase two, once no node writes unsealed: each node restarted requiring seals. The
        # first one to load the room marks it sealed; its history stays as it was.
        for i in range(3):
            ds[i].stop()
            ds[i] = node(make_daemon, engine, f"p{i}", "--cluster-secret-file", keys)
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
    await joins_alike(make_daemon, engine, room, clients[0], "--cluster-secret-file", keys, name="p-late")
    for c in clients:
        await c.close()
