"""tabd as a cluster: three NATS JetStream servers (or one) and several tabd nodes, real
clients spread over the nodes. One order per room whatever node a client uses, nothing
acknowledged lost when a node or an engine server is killed, presence across nodes, and
the whole cluster restarted.

The engine is started by the tests (Tests/support/natscluster.py), never expected to run.
"""
import asyncio
import os
import random
import re
import signal
import sys
import time
import uuid

import pytest
import websockets
import websockets.exceptions

from conftest import ROOT, WAIT, Client, Daemon
from replay import frames_after, replay_all
from test_rooms import call, comparable, wait_for

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import NatsCluster  # noqa: E402
import shards  # noqa: E402

COMMANDS = [
    lambda r: ("select", {"tab": r.choice(["home", "favorites", "profile"])}),
    lambda r: ("tap", {"tab": r.choice(["home", "favorites", "profile"])}),
    lambda r: ("push", {"route": r.choice(["a", "b", "c"])}),
    lambda r: ("pop", {}),
    lambda r: ("scroll", {"offset": r.randint(0, 500)}),
    lambda r: ("set", {"key": r.choice(["x", "y"]), "value": r.randint(0, 9)}),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """Three JetStream servers shared by the tests that do not kill any of them."""
    with NatsCluster(3, base_dir=str(tmp_path_factory.mktemp("nats"))) as c:
        yield c


def room_name():
    return "r" + uuid.uuid4().hex[:10]


def nodes(make_daemon, engine, n=3, *extra):
    return [make_daemon("--cluster", engine.url_arg, "--node-name", f"n{i}", "--rate-limit", "0", *extra) for i in range(n)]


class Storm:
    """Clients that send random commands without waiting, and count what comes back."""

    def __init__(self, client, seed, n, commands=COMMANDS):
        self.c, self.rng, self.n, self.commands = client, random.Random(seed), n, commands
        self.sent = {}      # ref -> command
        self.answers = {}   # ref -> reply frame
        self.caused = {}    # ref -> the events frame the command caused

    async def run(self):
        for i in range(self.n):
            type_, fields = self.rng.choice(self.commands)(self.rng)
            ref = await self.c.send(type_, **fields)
            self.sent[ref] = type_
        while len(self.answers) < self.n:
            f = await self.c.recv()
            if f["type"] == "events" and f["by"] == self.c.welcome["client"] and f.get("ref") in self.sent:
                self.caused[f["ref"]] = f
            if f["type"] in ("ack", "error") and f.get("ref") in self.sent:
                assert f["ref"] not in self.answers, f"two answers for {f['ref']}"
                self.answers[f["ref"]] = f


async def slow_command(c, type_, timeout=60, **fields):
    """Client.command, waiting up to `timeout` for each frame (an engine election stalls)."""
    ref = await c.send(type_, **fields)
    events = None
    while True:
        f = await c.recv(timeout=timeout)
        if f["type"] == "events" and f.get("ref") == ref and f["by"] == c.welcome["client"]:
            events = f
        elif f["type"] in ("ack", "error", "snapshot", "pong") and f.get("ref") == ref:
            return events, f


async def sync_everyone(clients, at_least=0):
    """Brings every client to one `sync` snapshot that covers every batch any of them holds
    (and seq `at_least`), and returns it. A node answers `sync` from its own copy of the
    room, which may trail a batch another node already delivered: the first client first
    reads as far as the others got."""
    async def reach(c, seq, why):
        try:
            await c.until_seq(seq)
        except TimeoutError:
            raise AssertionError(f"client {c.welcome['client']} stopped at seq {c.last_seq()}, short of {seq} ({why})") from None

    await reach(clients[0], max([at_least] + [c.last_seq() for c in clients]), "what another client holds, or an ack")
    _, sync = await clients[0].command("sync")
    for c in clients:
        await reach(c, sync["snapshot"]["seq"], "the sync's snapshot")
    return sync["snapshot"]


def assert_one_order(clients, sync_snapshot):
    """Every client's stream, from the first batch all of them saw up to the snapshot `sync`
    gave, is identical, gap-free, and folds (from its welcome snapshot) to that snapshot.
    A node answers `sync` from its own copy of the room, which may trail a batch another
    node already delivered to its clients: what a client holds past the snapshot is not
    compared."""
    first = max(c.welcome["snapshot"]["seq"] for c in clients)
    last = sync_snapshot["seq"]
    streams = [[b for b in c.batches if first < b["events"][0]["seq"] <= last] for c in clients]
    for i, stream in enumerate(streams):
        if stream != streams[0]:
            at = next((k for k, (x, y) in enumerate(zip(stream, streams[0])) if x != y), min(len(stream), len(streams[0])))
            raise AssertionError(
                f"clients on different nodes saw different streams: client {i} ({len(stream)} batches) and client 0 "
                f"({len(streams[0])}) differ at batch {at} after seq {first}: "
                f"{stream[at] if at < len(stream) else None} against {streams[0][at] if at < len(streams[0]) else None}")
    upto = [[b for b in c.batches if b["events"][0]["seq"] <= last] for c in clients]
    for state in replay_all([(frames_after(c.welcome["snapshot"], batches), c.welcome["snapshot"]) for c, batches in zip(clients, upto)]):
        assert state == sync_snapshot, "replay differs from sync (presence and seq included)"


async def test_clients_of_one_room_on_three_nodes_see_one_order(make_daemon, engine):
    ds = nodes(make_daemon, engine)
    room = room_name()
    clients = [await Client.connect(ds[k % 3].ws, room=room, name=f"c{k}") for k in range(6)]
    assert len({c.welcome["epoch"] for c in clients}) == 1, "one epoch on every node"
    storms = [Storm(c, k, 30) for k, c in enumerate(clients)]
    await asyncio.gather(*(s.run() for s in storms))
    for s in storms:
        assert all(f["type"] == "ack" or f["code"] != "unavailable" for f in s.answers.values())
    assert_one_order(clients, await sync_everyone(clients))
    for i, d in enumerate(ds):
        assert d.get("/healthz") == (200, f"ok node n{i}")
        body = d.get("/metrics")[1]
        assert f'tabd_node_info{{node="n{i}"}} 1' in body and "tabd_engine_connected 1" in body
        assert int(re.search(r"^tabd_engine_publish_seconds_count (\d+)$", body, re.M).group(1)) > 0
    # Every ack of a command that changed something names the end of its own batch, which
    # every client saw, once, after its earlier frames.
    stream = {b["events"][-1]["seq"]: b for b in clients[0].batches}
    for s in storms:
        for ref, f in s.answers.items():
            if f["type"] == "ack" and ref in s.caused:
                assert f["seq"] == s.caused[ref]["events"][-1]["seq"]
                if f["seq"] > clients[0].welcome["snapshot"]["seq"]:
                    assert stream[f["seq"]] == s.caused[ref]
    for c in clients:
        await c.close()


async def test_a_rooms_event_stream_on_one_node_follows_what_every_node_writes(make_daemon, engine):
    """A room's stream (`GET /api/rooms/ID/events`) read on a node where nobody writes: every
    batch the other nodes' clients caused, once, in the room's one order, and resumed."""
    from sse import EventStream
    ds = nodes(make_daemon, engine)
    room = room_name()
    writers = [await Client.connect(ds[k].ws, room=room, name=f"w{k}") for k in range(2)]
    observer = await Client.connect(ds[2].ws, room=room, name="observer")
    reader = EventStream(ds[2].http, f"/api/rooms/{room}/events")
    first = reader.next_event()
    assert first["data"]["type"] == "snapshot"
    storms = [Storm(c, k, 30) for k, c in enumerate(writers)]
    await asyncio.gather(*(s.run() for s in storms))
    final = (await sync_everyone(writers + [observer]))["seq"]
    seqs, got, last = [], [], int(first["id"])
    while last < final:
        e = reader.next_event()
        got.append(e["data"])
        seqs += [x["seq"] for x in e["data"]["events"]]
        last = int(e["id"])
        if len(got) == 10:  # leave, and resume on another node
            reader.close()
            reader = EventStream(ds[1].http, f"/api/rooms/{room}/events?epoch={first['data']['epoch']}", {"Last-Event-ID": str(last)})
    reader.close()
    assert seqs == list(range(int(first["id"]) + 1, final + 1)), "no gap, no duplicate"
    assert got == [b for b in observer.batches if int(first["id"]) < b["events"][-1]["seq"] <= final], "the room's one order"
    for c in writers + [observer]:
        await c.close()


def test_an_outbox_without_a_webhook_is_refused_on_a_node_of_a_cluster(engine):
    # A node's webhooks deliver from the engine's history (test_cluster_webhooks.py); it
    # keeps no outbox of its own for GET /api/events.
    import subprocess
    from conftest import TABD
    out = subprocess.run([TABD, "--cluster", engine.url_arg, "--webhook-events", "batch"], capture_output=True, text=True, timeout=WAIT)
    assert out.returncode == 2 and "a cluster's nodes keep no outbox of their own" in out.stderr, out.stderr


async def test_nodes_appending_at_the_same_instant_never_share_a_seq(make_daemon, engine):
    # Every node appends its clients' commands itself (no forwarding to the room's
    # writer): the nodes race for every seq, as they do when a writer stops answering.
    ds = nodes(make_daemon, engine, 3, "--cluster-forwarding", "off")
    room = room_name()
    clients = [await Client.connect(ds[k % 3].ws, room=room, name=f"c{k}") for k in range(9)]
    # Everyone pushes and pops at once, pipelined: the nodes race for every seq.
    stack = [lambda r: ("push", {"tab": "home", "route": "x"}), lambda r: ("pop", {"tab": "home"})]
    storms = [Storm(c, 100 + k, 40, stack) for k, c in enumerate(clients)]
    await asyncio.gather(*(s.run() for s in storms))
    acked = [f for s in storms for f in s.answers.values() if f["type"] == "ack"]
    errors = [f for s in storms for f in s.answers.values() if f["type"] == "error"]
    assert len(acked) + len(errors) == 9 * 40, "every command answered exactly once"
    assert all(e["code"] == "invalid" for e in errors), errors[:3]  # only a stack that is full
    # Acks of commands that changed something (a pop at the root changes nothing) each
    # name their own batch: no two at one seq.
    changed = [f for s in storms for ref, f in s.answers.items() if f["type"] == "ack" and ref in s.caused]
    assert len(changed) > 100
    assert len({f["seq"] for f in changed}) == len(changed), "two commands acknowledged at one seq"
    conflicts = sum(int(re.search(r"^tabd_engine_conflicts_total (\d+)$", d.get("/metrics")[1], re.M).group(1)) for d in ds)
    assert conflicts > 0, "the nodes never raced: nothing was decided again"
    assert_one_order(clients, await sync_everyone(clients))
    for c in clients:
        await c.close()


async def test_a_room_created_on_one_node_is_served_by_another_and_the_api_works_on_any(make_daemon, engine):
    ds = nodes(make_daemon, engine, 2)
    room = room_name()
    status, body, _ = call(ds[0], "PUT", f"/api/rooms/{room}")
    assert status == 201
    assert call(ds[1], "PUT", f"/api/rooms/{room}")[0] == 409
    status, read, _ = call(ds[1], "GET", f"/api/rooms/{room}")
    assert status == 200 and read["epoch"] == body["epoch"]
    status, ack, _ = call(ds[1], "POST", f"/api/rooms/{room}/commands", body={"type": "select", "tab": "profile"})
    assert status == 200 and ack["type"] == "ack"
    c = await Client.connect(ds[0].ws, room=room)
    assert c.welcome["epoch"] == body["epoch"] and c.welcome["snapshot"]["selected"] == "profile"
    ids = [r["id"] for r in call(ds[1], "GET", "/api/rooms?limit=1000")[1]["rooms"]]
    assert room in ids
    # Deleted through one node: the clients of every node are closed with 4404.
    assert call(ds[1], "DELETE", f"/api/rooms/{room}")[0] == 204
    with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
        while True:
            await c.recv()
    assert closed.value.rcvd.code == 4404
    assert call(ds[0], "GET", f"/api/rooms/{room}")[0] == 404


async def test_a_killed_node_s_clients_resume_on_another_node_and_every_ack_survives(make_daemon, engine):
    ds = nodes(make_daemon, engine)
    room = room_name()
    victims = [await Client.connect(ds[0].ws, room=room, name=f"v{k}") for k in range(2)]
    others = [await Client.connect(ds[1 + k % 2].ws, room=room, name=f"o{k}") for k in range(2)]
    acked = {}

    async def fire(c, seed, n):
        r = random.Random(seed)
        for _ in range(n):
            type_, fields = r.choice(COMMANDS)(r)
            try:
                events, reply = await c.command(type_, **fields)
            except websockets.exceptions.ConnectionClosed:
                return
            if reply["type"] == "ack" and events is not None:
                acked[(c.welcome["client"], reply["ref"])] = events["events"]

    storm = [asyncio.create_task(fire(c, k, 40)) for k, c in enumerate(victims + others)]
    await wait_for(lambda: len(acked) >= 20, "commands acknowledged before the kill")
    ds[0].stop(signal.SIGKILL)
    await asyncio.gather(*storm)
    # Each victim reconnects to another node with resume and gets exactly what it missed.
    for v in victims:
        seen = v.last_seq()
        back = await Client.connect(ds[1].ws, room=room, name=v.welcome["client"], resume=seen, epoch=v.welcome["epoch"])
        assert back.welcome["resumed"] is True
        _, sync = await back.command("sync")
        await back.until_seq(sync["snapshot"]["seq"])
        seqs = [e["seq"] for b in back.batches for e in b["events"]]
        assert seqs == list(range(seen + 1, seqs[-1] + 1)), "gap-free from where it left"
        await back.close()
    # Every acknowledged command's events are in the room's history, at the seqs acknowledged.
    reader = await Client.connect(ds[2].ws, room=room, resume=0, epoch=victims[0].welcome["epoch"])
    assert reader.welcome["resumed"] is True, "the whole history is within the resume window"
    await sync_everyone([reader], at_least=max(events[-1]["seq"] for events in acked.values()))
    history = {e["seq"]: e for b in reader.batches for e in b["events"]}
    for (client, ref), events in acked.items():
        for e in events:
            assert history.get(e["seq"]) == e, f"acknowledged event {e} of {client} {ref} lost"
    # The dead node's clients leave within the documented bound.
    deadline = time.monotonic() + 15
    gone = {v.welcome["client"] for v in victims}
    while gone - {e["client"] for e in history.values() if e["kind"] == "clientLeft"}:
        assert time.monotonic() < deadline, "the dead node's clients never left"
        f = await reader.recv()
        if f["type"] == "events":
            for e in f["events"]:
                history[e["seq"]] = e
    for c in others + [reader]:
        await c.close()


async def test_killing_the_engine_server_that_leads_the_room_loses_no_ack(make_daemon, tmp_path):
    with NatsCluster(3, base_dir=str(tmp_path / "nats")) as engine:
        ds = nodes(make_daemon, engine)
        room = room_name()
        clients = [await Client.connect(ds[k % 3].ws, room=room, name=f"c{k}") for k in range(3)]
        leader = engine.leader_of(shards.stream_of(engine.urls[0], room))
        assert leader is not None, "the room's stream has a leader"
        acked = {}
        stalls = []

        async def fire(c, seed, n):
            r = random.Random(seed)
            last = time.monotonic()
            for _ in range(n):
                type_, fields = r.choice(COMMANDS)(r)
                events, reply = await slow_command(c, type_, **fields)
                now = time.monotonic()
                stalls.append(now - last)
                last = now
                if reply["type"] == "ack":
                    if events is not None:
                        acked[reply["ref"] + c.welcome["client"]] = events["events"]
                else:
                    assert reply["code"] != "unavailable", reply

        storm = [asyncio.create_task(fire(c, k, 60)) for k, c in enumerate(clients)]
        await wait_for(lambda: len(acked) >= 30, "commands acknowledged before the kill")
        engine.kill(leader)
        await asyncio.gather(*storm)
        print(f"\nlongest wait for one command while the stream leader was killed: {max(stalls):.2f} s")
        assert_one_order(clients, await sync_everyone(clients))
        history = {e["seq"]: e for b in clients[0].batches for e in b["events"]}
        for events in acked.values():
            for e in events:
                if e["seq"] > clients[0].welcome["snapshot"]["seq"]:
                    assert history.get(e["seq"]) == e, "an acknowledged event was lost or its seq reused"
        for c in clients:
            await c.close()


async def test_the_whole_cluster_stopped_and_started_again_keeps_every_room(make_daemon, tmp_path):
    store = str(tmp_path / "nats")
    with NatsCluster(3, base_dir=store) as engine:
        ds = nodes(make_daemon, engine, 2)
        rooms = [room_name() for _ in range(3)]
        for k, room in enumerate(rooms):
            c = await Client.connect(ds[k % 2].ws, room=room)
            for i in range(10):
                await c.command("push", route=f"p{i}")
            await c.close()
        before = {room: call(ds[0], "GET", f"/api/rooms/{room}")[1] for room in rooms}
        for d in ds:
            d.stop()
    # Every process gone; the engine's servers start again on the same stores.
    with NatsCluster(3, base_dir=store) as engine:
        again = nodes(make_daemon, engine, 2)
        for room in rooms:
            status, after, _ = call(again[1], "GET", f"/api/rooms/{room}")
            assert status == 200 and after["epoch"] == before[room]["epoch"]
            assert comparable(after["snapshot"]) == comparable(before[room]["snapshot"]), "room state changed across a restart"


async def test_a_single_engine_server_works_for_development(make_daemon, tmp_path):
    with NatsCluster(1, base_dir=str(tmp_path / "nats")) as engine:
        ds = nodes(make_daemon, engine, 2)
        room = room_name()
        a = await Client.connect(ds[0].ws, room=room)
        b = await Client.connect(ds[1].ws, room=room)
        events, ack = await a.command("select", tab="profile")
        assert ack["type"] == "ack"
        await b.until_seq(ack["seq"])
        assert b.batches[-1] == events
        await a.close()
        await b.close()


def test_cluster_and_state_exclude_each_other():
    with pytest.raises(RuntimeError) as e:
        Daemon("--cluster", "nats://127.0.0.1:1", "--state", ":memory:")
    assert "--state and --cluster exclude each other" in str(e.value)
