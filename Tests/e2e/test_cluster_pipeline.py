"""A cluster with its pipelines full: every node has many commands of one room in flight at
once. The room's writer gets the other nodes' commands forwarded, its engine messages carry
several batches (group commit), one message of a room in flight at a time. The streams
stay one, gap-free and
identical everywhere; every acknowledged command is in the stream at the seqs it was
acknowledged with; nothing acknowledged is lost when the stream's leader, a node (the
room's writer), or every node and engine server at once is killed with SIGKILL in the
middle of it.
"""
import asyncio
import random
import re
import signal

import websockets.exceptions

from conftest import Client
from test_cluster import COMMANDS, NatsCluster, assert_one_order, engine, nodes, room_name, sync_everyone  # noqa: F401 (engine: the fixture)
from test_rooms import wait_for
import shards  # noqa: E402

IN_FLIGHT = 64   # commands each node's client keeps in flight
ROUNDS = 4       # bursts of IN_FLIGHT commands per client
REPLY_WAIT = 60  # seconds a reply may take (an engine election stalls a room for ~5-9 s)


async def burst(c, rng, n, acked, sent_refs):
    """Sends `n` random commands at once, then reads until each has its answer. Records
    every ack's events (the batch the command caused) in `acked` by (client, ref)."""
    refs = {}
    for _ in range(n):
        type_, fields = rng.choice(COMMANDS)(rng)
        refs[await c.send(type_, **fields)] = type_
    sent_refs.update(refs)
    caused, answered = {}, {}
    while len(answered) < len(refs):
        f = await c.recv(timeout=REPLY_WAIT)
        ref = f.get("ref")
        if f["type"] == "events" and f["by"] == c.welcome["client"] and ref in refs:
            assert ref not in caused, f"command {ref} applied twice: {caused[ref]} and {f['events']}"
            caused[ref] = f["events"]
        elif f["type"] in ("ack", "error") and ref in refs:
            assert ref not in answered, f"two answers for {ref}"
            answered[ref] = f
    for ref, reply in answered.items():
        if reply["type"] == "ack":
            if ref in caused:
                assert caused[ref][-1]["seq"] == reply["seq"], f"ack {reply} is not the seq of its events {caused[ref]}"
                acked[(c.welcome["client"], ref)] = caused[ref]
        else:
            # A command may be refused (popping a root page is fine: `invalid`), never lost.
            assert reply["code"] != "unavailable", reply


async def storm(clients, acked, seed, rounds=ROUNDS):
    sent = {}

    async def one(k, c):
        rng = random.Random(seed * 100 + k)
        for _ in range(rounds):
            await burst(c, rng, IN_FLIGHT, acked, sent)

    await asyncio.gather(*(one(k, c) for k, c in enumerate(clients)))
    return sent


def assert_acks_in_history(acked, history):
    for (client, ref), events in acked.items():
        for e in events:
            assert history.get(e["seq"]) == e, f"acknowledged event {e} of {client} {ref} lost or its seq reused"


async def full_history(ws, room, epoch, at_least=0):
    """The room's history from seq 1 through at least seq `at_least`, read from `ws`."""
    reader = await Client.connect(ws, room=room, resume=0, epoch=epoch)
    assert reader.welcome["resumed"] is True, "the whole history is within the resume window"
    await sync_everyone([reader], at_least)
    seqs = [e["seq"] for b in reader.batches for e in b["events"]]
    assert seqs == list(range(1, seqs[-1] + 1)), "the room's history is gap-free, no seq twice"
    history = {e["seq"]: e for b in reader.batches for e in b["events"]}
    await reader.close()
    return history


async def assert_one_stream_with_every_ack(clients, acked, reader_ws, room):
    """After a storm: every client caught up with `sync` saw one order, and the room's
    whole history (read from `reader_ws`) holds every acknowledged command's events.
    Closes the clients."""
    assert_one_order(clients, await sync_everyone(clients))
    newest = max((events[-1]["seq"] for events in acked.values()), default=0)
    assert_acks_in_history(acked, await full_history(reader_ws, room, clients[0].welcome["epoch"], newest))
    for c in clients:
        await c.close()


def batches_per_message(daemon):
    """From a node's /metrics: batches published over messages published."""
    _, body = daemon.get("/metrics")
    batches = int(re.search(r"^tabd_engine_batches_published_total (\d+)$", body, re.M).group(1))
    messages = int(re.search(r"^tabd_engine_publish_seconds_count (\d+)$", body, re.M).group(1))
    return batches, messages


async def storm_on_every_node(ds, seed):
    """A client on each node of `ds` (the first creates the room), a storm, and the closing
    check. Returns the commands acknowledged."""
    room = room_name()
    clients = [await Client.connect(ds[k].ws, room=room, name=f"c{k}") for k in range(len(ds))]
    acked = {}
    await storm(clients, acked, seed=seed)
    assert len(acked) > IN_FLIGHT, "most commands were acknowledged"
    await assert_one_stream_with_every_ack(clients, acked, ds[-1].ws, room)
    return acked


async def test_random_commands_with_64_in_flight_on_every_node_give_one_stream_and_keep_every_ack(make_daemon, engine):
    ds = nodes(make_daemon, engine)
    await storm_on_every_node(ds, seed=1)
    # Group commit happened: some message carried more than one batch.
    totals = [batches_per_message(d) for d in ds]
    assert sum(b for b, _ in totals) > sum(m for _, m in totals), f"no message carried two batches: {totals}"


def metric(daemon, name):
    _, body = daemon.get("/metrics")
    return int(re.search(rf"^{name} (\d+)$", body, re.M).group(1))


async def test_the_other_nodes_forward_their_clients_commands_to_the_room_s_writer(make_daemon, engine):
    ds = nodes(make_daemon, engine)
    # The first client creates the room on n0: n0 wrote its first two messages (the room
    # and the join), most of the room's messages, so it is the writer the others forward to.
    await storm_on_every_node(ds, seed=5)
    forwarded = [metric(d, "tabd_forwarded_total") for d in ds]
    received = [metric(d, "tabd_forwards_received_total") for d in ds]
    published = [batches_per_message(d)[0] for d in ds]
    assert forwarded[0] == 0 and forwarded[1] > 0 and forwarded[2] > 0, (forwarded, received)
    assert received == [forwarded[1] + forwarded[2], 0, 0], (forwarded, received)
    # The writer appended nearly every batch (the others only their clients' joins, and
    # whatever raced before the first forward).
    assert published[0] > 4 * (published[1] + published[2]), published
    assert sum(metric(d, "tabd_forwards_decided_here_total") for d in ds) == 0, "no forward went unanswered"


async def test_the_stream_leader_killed_with_every_pipeline_full_loses_no_ack(make_daemon, tmp_path):
    with NatsCluster(3, base_dir=str(tmp_path / "nats")) as engine:
        ds = nodes(make_daemon, engine)
        room = room_name()
        clients = [await Client.connect(ds[k].ws, room=room, name=f"c{k}") for k in range(3)]
        leader = engine.leader_of(shards.stream_of(engine.urls[0], room))
        assert leader is not None, "the room's stream has a leader"
        acked = {}
        task = asyncio.create_task(storm(clients, acked, seed=2, rounds=6))
        await wait_for(lambda: len(acked) >= IN_FLIGHT, "commands acknowledged before the kill")
        engine.kill(leader)
        await task
        await assert_one_stream_with_every_ack(clients, acked, ds[2].ws, room)


async def test_a_node_killed_with_its_pipeline_full_loses_no_ack(make_daemon, engine):
    ds = nodes(make_daemon, engine)
    room = room_name()
    # The victim creates the room and joins first: its node wrote most of the room's
    # messages, and is the writer the others forward their commands to.
    victim = await Client.connect(ds[0].ws, room=room, name="victim")
    others = [await Client.connect(ds[k].ws, room=room, name=f"o{k}") for k in (1, 2)]
    acked = {}

    async def victim_storm():
        rng = random.Random(3)
        try:
            for _ in range(50):
                await burst(victim, rng, IN_FLIGHT, acked, {})
        except (websockets.exceptions.ConnectionClosed, ConnectionError):
            return

    doomed = asyncio.create_task(victim_storm())
    survivors = asyncio.create_task(storm(others, acked, seed=4))
    await wait_for(lambda: sum(1 for (client, _) in acked if client == victim.welcome["client"]) >= IN_FLIGHT,
                   "the victim's commands acknowledged before the kill")
    ds[0].stop(signal.SIGKILL)
    await doomed
    await survivors
    await assert_one_stream_with_every_ack(others, acked, ds[2].ws, room)
    # The others' commands in flight to n0 when it died were decided by the nodes that had
    # forwarded them (each once: `burst` checks).
    assert sum(metric(d, "tabd_forwards_decided_here_total") for d in ds[1:]) > 0


async def test_the_whole_cluster_killed_with_every_pipeline_full_keeps_every_ack(make_daemon, tmp_path):
    store = str(tmp_path / "nats")
    with NatsCluster(3, base_dir=store) as engine:
        ds = nodes(make_daemon, engine)
        room = room_name()
        clients = [await Client.connect(ds[k].ws, room=room, name=f"c{k}") for k in range(3)]
        epoch = clients[0].welcome["epoch"]
        acked = {}
        task = asyncio.create_task(storm(clients, acked, seed=6, rounds=40))
        await wait_for(lambda: len(acked) >= 2 * IN_FLIGHT, "commands acknowledged before the kill")
        # Every tabd node and every engine server with kill -9, commands in flight on all.
        for d in ds:
            d.stop(signal.SIGKILL)
        for i in range(3):
            engine.kill(i, signal.SIGKILL)
        try:
            await task
        except (websockets.exceptions.ConnectionClosed, ConnectionError, TimeoutError):
            pass
        known = dict(acked)
    # The engine's servers start again on the same stores, and new nodes read the room.
    with NatsCluster(3, base_dir=store) as engine:
        again = nodes(make_daemon, engine)
        newest = max(events[-1]["seq"] for events in known.values())
        history = await full_history(again[1].ws, room, epoch, newest)
        assert_acks_in_history(known, history)
        # Whatever node the room is read on, it is the same room (the second reader sees
        # the first one come and go after it).
        other = await full_history(again[2].ws, room, epoch)
        assert {seq: e for seq, e in other.items() if seq <= max(history)} == history
