"""A node's consumer inboxes are engine input too.

Each node follows a room's stream through a consumer whose inbox is a plain subject: anyone
holding the engine's account learns it (`$JS.API.CONSUMER.LIST` names it) and can publish
into it, as if the engine had delivered. Three NATS servers without permissions, three nodes,
clients of a room on every node, and a bare NATS connection (no tabd credential) that puts
into every inbox it finds what a hostile peer would: a sealed message without a stream
position, flow-control requests and heartbeats that name subjects to publish on, messages at
a stream position of 0 or far ahead, copies of real messages at places they do not hold, and
copies of batches that lost their compare-and-set at the place they expected. After each
round: every node still runs and answers, no node published on a subject a message named, no
stream was purged, and no client was acknowledged a command the stream does not hold.

And a room's lives: a batch of a room deleted and created again is not taken in the new
room, and a room whose messages were sealed without its life (by a tabd before seals bound
it, or in phase one of the move) keeps its history when its nodes move to life-bound seals.
"""
import asyncio
import json
import sys
import os
import time

import pytest

from conftest import ROOT, Client
from test_engine_trust import (engine, node, trio, room_name, room_on, probe, rejected, stream_messages,  # noqa: F401
                               stream_message, command_storm)
from test_cluster import sync_everyone

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natsproto import Nats  # noqa: E402


def inboxes(nc, room):
    """Every consumer of the room's stream: (name, its inbox)."""
    got = nc.js(f"CONSUMER.LIST.TABD_ROOM_{room}")
    return [(c["name"], c["config"]["deliver_subject"]) for c in got.get("consumers", []) if c["config"].get("deliver_subject")]


def hpub(nc, subject, first_line="NATS/1.0", headers=None, data=b"", reply=None):
    """A message with headers and, for a status message, its status line (HPUB as a server sends it)."""
    head = (first_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n").encode()
    r = f" {reply}" if reply else ""
    nc._send(f"HPUB {subject}{r} {len(head)} {len(head) + len(data)}\r\n".encode() + head + data + b"\r\n")


def alive(ds):
    for d in ds:
        assert d.proc.poll() is None, f"a node exited ({d.proc.returncode}): {d._log.decode(errors='replace')[-2000:]}"


async def test_what_a_peer_puts_into_every_consumer_inbox_stops_no_node_and_is_obeyed_in_nothing(make_daemon, engine):
    ds = trio(make_daemon, engine)
    room = room_name()
    clients = await room_on(ds, room)
    with Nats(engine.urls[0]) as nc, Nats(engine.urls[1]) as spy:
        # Whatever a node might be made to publish: on the peer's own subjects, on the
        # JetStream API (a purge or a deletion of the room's stream).
        spy.sub("attacker.>")
        spy.sub("$JS.API.STREAM.PURGE.>")
        spy.sub("$JS.API.STREAM.DELETE.>")
        consumers = inboxes(nc, room)
        assert len(consumers) >= 3, consumers
        for _, inbox in consumers:
            nc.sub(inbox)
        before = stream_messages(nc, room)
        await probe(clients, clients[0])
        # What reaches an inbox keeps its stream subject; the reply subject names the consumer.
        delivered = [m for m in nc.drain() if m.reply and m.reply.startswith(f"$JS.ACK.TABD_ROOM_{room}.")]
        assert delivered, "the peer saw nothing delivered into the inboxes it subscribed to"
        last_seq, headers, data = stream_message(nc, room)
        assert "Tabd-Seal" in headers, headers
        kept = {k: v for k, v in headers.items() if not k.startswith("Nats-Expected")}
        frame = json.dumps({"type": "events", "by": "ghost", "events": [
            {"seq": 10_000, "type": "valueSet", "tab": "home", "key": "ghost", "value": 1}]}).encode()
        for i, (name, inbox) in enumerate(consumers):
            # A sealed message with no reply subject, so no stream position at all (it
            # stopped every node it reached), and a copy of the last real message with a
            # reply subject of the peer's own.
            hpub(nc, inbox, headers={"Tabd-Seal": "v1." + "0" * 16 + "." + "ab" * 32, "Tabd-Node": "n1"}, data=b"x")
            hpub(nc, inbox, headers=kept, data=data, reply=f"attacker.reply.{i}")
            hpub(nc, inbox, headers=kept, data=data)
            # Flow control asking for an answer on the peer's subject, and heartbeats naming
            # a subject to publish on (libnats' push subscriptions obeyed both).
            hpub(nc, inbox, "NATS/1.0 100 FlowControl Request", reply=f"attacker.fc.{i}")
            hpub(nc, inbox, "NATS/1.0 100 Idle Heartbeat", headers={"Nats-Consumer-Stalled": f"attacker.stalled.{i}"})
            hpub(nc, inbox, "NATS/1.0 100 Idle Heartbeat", headers={"Nats-Consumer-Stalled": f"$JS.API.STREAM.PURGE.TABD_ROOM_{room}"})
            # An unsealed batch with a reply subject that is not a consumer's.
            hpub(nc, inbox, headers={"Tabd-Node": "n1"}, data=frame, reply=f"$JS.API.STREAM.PURGE.TABD_ROOM_{room}")
        # The place a delivery is at is in its reply subject (`$JS.ACK.…`): the engine's
        # servers refuse that from a client. If a server ever took it, the nodes still hold
        # (the read-back of ClusterRoomMachine), but the boundary the docs describe moved.
        with Nats(engine.urls[2]) as forger:
            name, inbox = consumers[0]
            hpub(forger, inbox, headers=kept, data=data, reply=f"$JS.ACK.TABD_ROOM_{room}.{name}.1.{last_seq + 1}.99.0.0")
            with pytest.raises(Exception, match="Permissions Violation"):
                forger.flush()
        nc.flush()
        # Every node keeps serving: a probe on each node is all any client sees.
        alive(ds)
        for k in range(3):
            await probe(clients, clients[k])
        alive(ds)
        spy.flush()
        obeyed = [m.subject for m in spy.pending]
        assert obeyed == [], f"a node published where a message said: {obeyed}"
        assert stream_messages(nc, room) >= before + 4, "the room's stream lost messages"
        snapshot = await sync_everyone(clients)
        assert snapshot["seq"] >= clients[0].last_seq()
    for c in clients:
        await c.close()


async def test_copies_of_batches_that_lost_their_place_put_into_the_inboxes_are_never_acknowledged(make_daemon, engine):
    # Every node appends (no forwarding), so that batches race for places and lose; the peer
    # sees every publish on the room's subject, a refused one too, and puts copies of each
    # into every consumer's inbox: with the publish's own reply subject and with none (the
    # engine refuses a consumer's `$JS.ACK.` reply subject from a client, see above). No
    # node stops, and no client is acknowledged a command the stream does not hold.
    ds = trio(make_daemon, engine, "--cluster-forwarding", "off")
    room = room_name()
    clients = [await Client.connect(ds[k % 3].ws, room=room, name=f"c{k}") for k in range(6)]
    for c in clients:
        await c.until_seq(max(x.last_seq() for x in clients))
    stream = f"TABD_ROOM_{room}"
    with Nats(engine.urls[0]) as nc:
        assert len(inboxes(nc, room)) >= 3
    stop = False
    injected = [0]

    def forge():
        with Nats(engine.urls[0]) as nc:
            consumers = [inbox for _, inbox in inboxes(nc, room)]
            nc.sub(f"tabd.room.{room}")
            while not stop:
                m = nc.next(timeout=0.2)
                if m is None or not m.reply or "Tabd-Seal" not in m.headers:
                    continue
                headers = {k: v for k, v in m.headers.items() if not k.startswith("Nats-Expected")}
                for inbox in consumers:
                    hpub(nc, inbox, headers=headers, data=m.data, reply=m.reply)
                    hpub(nc, inbox, headers=headers, data=m.data)
                    injected[0] += 2

    loop = asyncio.get_running_loop()
    forger = loop.run_in_executor(None, forge)
    try:
        answers, caused = await command_storm(clients, 30, seed=11)
    finally:
        stop = True
        await forger
    alive(ds)
    assert injected[0] > 0, "the peer put nothing into the inboxes"
    # The stream itself, read from the engine: every acknowledged command's batch is there,
    # at the seq its ack names, as the client that sent it saw it.
    with Nats(engine.urls[2]) as nc:
        info = nc.js(f"STREAM.INFO.{stream}")["state"]
        stored = {}
        for seq in range(info["first_seq"], info["last_seq"] + 1):
            for line in message_at(nc, room, seq)[1].split(b"\n"):
                try:
                    frame = json.loads(line)
                except ValueError:
                    continue
                if frame.get("type") == "events":
                    stored[frame["events"][-1]["seq"]] = frame
    acked = [(ref, f) for ref, f in answers.items() if f["type"] == "ack"]
    assert acked, "no command was acknowledged"
    for ref, f in acked:
        assert ref in caused, f"acknowledged {ref} without its events"
        batch = stored.get(f["seq"])
        assert batch is not None and batch["by"] == caused[ref]["by"] and batch.get("ref") == caused[ref].get("ref"), \
            f"the ack of {ref} names seq {f['seq']}, where the stream holds {batch and (batch['by'], batch.get('ref'))}"
    # Every node still serves the room: one order for all, and a probe is all anyone sees.
    await sync_everyone(clients)
    await probe(clients, clients[1])
    print(f"copies put into the inboxes: {injected[0]}")
    for c in clients:
        await c.close()


# --- a room's lives ---------------------------------------------------------------------------

def message_at(nc, room, seq):
    return stream_message(nc, room, seq)[1:]


def values_of(snapshot):
    return {k: v for t in snapshot["tabs"] for k, v in (t.get("values") or {}).items()}


async def test_a_batch_of_a_rooms_earlier_life_is_not_taken_in_its_new_life(make_daemon, engine):
    # A room and a batch of it (its stream: the first message, the first pages' appearing,
    # the batch), the room deleted and created again under the same id: the old batch,
    # appended to the new stream at the very place its seal names, is of another life.
    # Every node passes it over.
    from test_rooms import call
    ds = trio(make_daemon, engine)
    room = room_name()
    assert call(ds[0], "PUT", f"/api/rooms/{room}")[0] == 201
    status, ack, _ = call(ds[0], "POST", f"/api/rooms/{room}/commands", {"type": "set", "key": "old-life", "value": 1})
    assert status == 200 and ack["type"] == "ack", ack
    with Nats(engine.urls[0]) as nc:
        headers, data = message_at(nc, room, 3)
        assert b"old-life" in data and headers.get("Tabd-Seal", "").startswith("v2."), (headers, data)
        # Deleted through a node that has not seen the room since it started.
        status, body, _ = call(ds[1], "DELETE", f"/api/rooms/{room}")
        assert status == 204, body
        status, created, _ = call(ds[2], "PUT", f"/api/rooms/{room}")
        assert status == 201, created
        deadline = time.monotonic() + 30
        while nc.js(f"STREAM.INFO.TABD_ROOM_{room}")["state"]["last_seq"] < 2:
            assert time.monotonic() < deadline, "the new life's first pages did not appear"
            time.sleep(0.02)
        kept = {k: v for k, v in headers.items() if not k.startswith("Nats-Expected")}
        stored = nc.publish(f"tabd.room.{room}", data, headers=dict(kept, **{"Nats-Expected-Last-Sequence": "2"}))
        assert stored.get("seq") == 3, stored
        bases = [rejected(d, "batch") for d in ds]
        for d in ds:
            status, got, _ = call(d, "GET", f"/api/rooms/{room}")
            assert status == 200 and got["epoch"] == created["epoch"], got
        clients = [await Client.connect(d.ws, room=room, name=f"c{i}") for i, d in enumerate(ds)]
        for c in clients:
            await c.until_seq(max(x.last_seq() for x in clients))
            assert "old-life" not in values_of(c.welcome["snapshot"]), "a batch of the room's earlier life was taken"
        await probe(clients, clients[0])
        assert sum(rejected(d, "batch") for d in ds) > sum(bases), "no node counted the batch of another life"
        for c in clients:
            assert "old-life" not in values_of((await c.command("sync"))[1]["snapshot"])
            await c.close()


async def test_a_room_sealed_without_lives_moves_to_life_bound_seals_keeping_its_history(make_daemon, engine):
    # Nodes of phase one (`--cluster-unsigned accept`) seal as the tabd before room lives
    # were bound did (`v1`): a room written so is such a tabd's room. Then every node
    # restarted without it: the room keeps its history, gets a life mark, and a message
    # sealed without the room's life after that mark is passed over by every node.
    from conftest import cluster_secret_file
    from clusterseal import Key
    room = room_name()
    # Every node appends its own clients' commands (no forwarding): a node of phase one
    # writes to the room after another marked it.
    ds = trio(make_daemon, engine, "--cluster-unsigned", "accept", "--cluster-forwarding", "off", prefix="q")
    clients = await room_on(ds, room)
    await clients[1].command("set", key="phase-one", value=1)
    with Nats(engine.urls[0]) as nc:
        seals = set()
        last = nc.js(f"STREAM.INFO.TABD_ROOM_{room}")["state"]["last_seq"]
        for seq in range(1, last + 1):
            headers, _ = message_at(nc, room, seq)
            seals.add(headers.get("Tabd-Seal", "")[:3])
        assert seals == {"v1."}, f"phase one sealed {seals}"
        for i in range(3):
            ds[i].stop()
            ds[i] = node(make_daemon, engine, f"q{i}", "--cluster-forwarding", "off")
            await clients[i].close()
            clients[i] = await Client.connect(ds[i].ws, room=room, name=f"c{i}")
            for c in clients:
                await c.until_seq(max(x.last_seq() for x in clients))
            # Nodes of either phase write to the room, before and after its life mark.
            for k in range(3):
                await probe(clients, clients[k])
        marks = []
        last = nc.js(f"STREAM.INFO.TABD_ROOM_{room}")["state"]["last_seq"]
        for seq in range(1, last + 1):
            headers, _ = message_at(nc, room, seq)
            if headers.get("Tabd-Mark") == "2":
                marks.append((seq, headers["Tabd-Seal"][:3]))
        assert marks and all(v == "v2." for _, v in marks), f"no life mark sealed bound to the room's life: {marks}"
        _, sync = await clients[0].command("sync")
        assert values_of(sync["snapshot"]).get("phase-one") == 1, "the room's history of phase one is kept"
        # A batch sealed with the real key, as phase one seals, at the room's next place.
        key = Key(open(cluster_secret_file()).read().strip())
        end = nc.js(f"STREAM.INFO.TABD_ROOM_{room}")["state"]["last_seq"]
        seq = max(c.last_seq() for c in clients) + 1
        frame = json.dumps({"type": "events", "by": "old", "ref": None, "events": [
            {"seq": seq, "kind": "valueSet", "tab": "home", "key": "unbound", "value": 1}]}, separators=(",", ":")).encode()
        old = {"Tabd-Node": "q0", "Tabd-Incarnation": "0123456789abcdef", "Nats-Msg-Id": f"unbound-{room}"}
        old["Tabd-Seal"] = key.seal_stream(f"tabd.room.{room}", old, end, frame)
        bases = [rejected(d, "batch") for d in ds]
        stored = nc.publish(f"tabd.room.{room}", frame, headers=dict(old, **{"Nats-Expected-Last-Sequence": str(end)}))
        assert stored.get("seq") == end + 1, stored
        deadline = time.monotonic() + 30
        while any(rejected(d, "batch") <= b for d, b in zip(ds, bases)):
            assert time.monotonic() < deadline, "a node did not pass over the batch sealed without the room's life"
            time.sleep(0.02)
        await probe(clients, clients[2])
        _, sync = await clients[1].command("sync")
        assert "unbound" not in values_of(sync["snapshot"])
    for c in clients:
        await c.close()
