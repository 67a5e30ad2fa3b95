"""A node's consumer inboxes are engine input too.

Each node follows each shard (and each room with a stream of its own) through a consumer
whose inbox is a plain subject: anyone holding the engine's account learns it
(`$JS.API.CONSUMER.LIST` names it) and can publish into it, as if the engine had delivered.
Three NATS servers without permissions, three nodes, clients of rooms on every node (rooms
of one shard, whose follower on each node is one consumer), and a bare NATS
connection (no tabd credential) that puts into every inbox it finds what a hostile peer
would: a sealed message without a stream position, flow-control requests and heartbeats
that name subjects to publish on, messages at a stream position of 0 or far ahead, copies
of real messages at places they do not hold, and copies of batches that lost their
compare-and-set at the place they expected; and appends those copies to the rooms later.
After each round: every node still runs and answers, no node published on a subject a
message named, no stream was purged, and no client was acknowledged a command the stream
does not hold.

And a room's lives: a batch of a room deleted and created again is not taken in the new
room, nor is its record of the earlier life loaded, and a room whose messages were sealed
without its life (by a tabd before seals bound it, or in phase one of the move) keeps its
history when its nodes move to life-bound seals.

Tests run in shards (the default) and, where the layout before shards differs, in rooms
with streams of their own (`--cluster-rooms streams`).
"""
import asyncio
import json
import sys
import os
import time

import pytest

from conftest import ROOT, Client
from test_engine_trust import (engine, node, trio, room_name, room_on, probe, rejected, stream_messages,  # noqa: F401
                               stream_message, command_storm, PLACEMENTS, both_placements, rooms_in_one_shard, place_of,
                               room_messages, append, without, life_of, the_key, sealed_as_a_node, check_sealing,
                               directory_record, serves_alike, wait_rejected, log_so_far)
from test_cluster import sync_everyone
from test_rooms import call

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natsproto import Nats, NatsError  # noqa: E402


def inboxes(nc, stream):
    """Every consumer of `stream` (a shard's, or a room's own): (name, its inbox)."""
    got = nc.js(f"CONSUMER.LIST.{stream}")
    return [(c["name"], c["config"]["deliver_subject"]) for c in got.get("consumers", []) if c["config"].get("deliver_subject")]


def hpub(nc, subject, first_line="NATS/1.0", headers=None, data=b"", reply=None):
    """A message with headers and, for a status message, its status line (HPUB as a server sends it)."""
    head = (first_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n").encode()
    r = f" {reply}" if reply else ""
    nc._send(f"HPUB {subject}{r} {len(head)} {len(head) + len(data)}\r\n".encode() + head + data + b"\r\n")


def alive(ds):
    for d in ds:
        assert d.proc.poll() is None, f"a node exited ({d.proc.returncode}): {d._log.decode(errors='replace')[-2000:]}"


def rooms_for(engine, placement, n=2):
    """The rooms of a test: `n` of one shard, or one with a stream of its own."""
    if placement == "shards":
        return rooms_in_one_shard(engine.urls[0], n)[1]
    return [room_name()]


@both_placements
async def test_what_a_peer_puts_into_every_consumer_inbox_stops_no_node_and_is_obeyed_in_nothing(make_daemon, engine, placement):
    # Faults it stands for: a node that answers a flow-control request or a heartbeat's
    # subject, publishes on a message's reply subject, or delivers a message the consumer's
    # count does not place (it stopped, or published where the peer said).
    ds = trio(make_daemon, engine, *PLACEMENTS[placement])
    rooms = rooms_for(engine, placement, 3)
    room = rooms[0]
    clients = {r: await room_on(ds, r) for r in rooms}
    with Nats(engine.urls[0]) as nc, Nats(engine.urls[1]) as spy:
        where = place_of(nc, room)
        # Whatever a node might be made to publish: on the peer's own subjects, on the
        # JetStream API (a purge or a deletion of the room's stream, its shard's).
        spy.sub("attacker.>")
        spy.sub("$JS.API.STREAM.PURGE.>")
        spy.sub("$JS.API.STREAM.DELETE.>")
        consumers = inboxes(nc, where.stream)
        assert len(consumers) >= 3, consumers
        for _, inbox in consumers:
            nc.sub(inbox)
        before = {r: stream_messages(nc, r) for r in rooms}
        await probe(clients[room], clients[room][0])
        # What reaches an inbox keeps its stream subject; the reply subject names the consumer.
        delivered = [m for m in nc.drain() if m.reply and m.reply.startswith(f"$JS.ACK.{where.stream}.")]
        assert delivered, "the peer saw nothing delivered into the inboxes it subscribed to"
        assert where.subject in {m.subject for m in delivered}, {m.subject for m in delivered}
        last_seq, headers, data = stream_message(nc, room)
        assert "Tabd-Seal" in headers, headers
        copies = [(without(headers), data)]
        for r in rooms[1:]:   # the other rooms of the shard, whose messages the same consumers carry
            _, h, d = stream_message(nc, r)
            copies.append((without(h), d))
        kept = copies[0][0]
        purge = f"$JS.API.STREAM.PURGE.{where.stream}"
        frame = json.dumps({"type": "events", "by": "ghost", "events": [
            {"seq": 10_000, "type": "valueSet", "tab": "home", "key": "ghost", "value": 1}]}).encode()
        for i, (name, inbox) in enumerate(consumers):
            # A sealed message with no reply subject, so no stream position at all (it
            # stopped every node it reached), and copies of the rooms' last real messages
            # with a reply subject of the peer's own and with none.
            hpub(nc, inbox, headers={"Tabd-Seal": "v1." + "0" * 16 + "." + "ab" * 32, "Tabd-Node": "n1"}, data=b"x")
            for h, d in copies:
                hpub(nc, inbox, headers=h, data=d, reply=f"attacker.reply.{i}")
                hpub(nc, inbox, headers=h, data=d)
            # Flow control asking for an answer on the peer's subject, and heartbeats naming
            # a subject to publish on (libnats' push subscriptions obeyed both).
            hpub(nc, inbox, "NATS/1.0 100 FlowControl Request", reply=f"attacker.fc.{i}")
            hpub(nc, inbox, "NATS/1.0 100 Idle Heartbeat", headers={"Nats-Consumer-Stalled": f"attacker.stalled.{i}"})
            hpub(nc, inbox, "NATS/1.0 100 Idle Heartbeat", headers={"Nats-Consumer-Stalled": purge})
            # An unsealed batch with a reply subject that is not a consumer's.
            hpub(nc, inbox, headers={"Tabd-Node": "n1"}, data=frame, reply=purge)
        # The place a delivery is at is in its reply subject (`$JS.ACK.…`): the engine's
        # servers refuse that from a client. If a server ever took it, the nodes still hold
        # (the read-back of ClusterRoomMachine), but the boundary the docs describe moved.
        with Nats(engine.urls[2]) as forger:
            name, inbox = consumers[0]
            hpub(forger, inbox, headers=kept, data=data, reply=f"$JS.ACK.{where.stream}.{name}.1.{last_seq + 1}.99.0.0")
            with pytest.raises(Exception, match="Permissions Violation"):
                forger.flush()
        nc.flush()
        # Every node keeps serving: a probe on each node is all any client sees, in every room.
        alive(ds)
        for r in rooms:
            for k in range(3):
                await probe(clients[r], clients[r][k])
        alive(ds)
        spy.flush()
        obeyed = [m.subject for m in spy.pending]
        assert obeyed == [], f"a node published where a message said: {obeyed}"
        for r in rooms:
            assert stream_messages(nc, r) >= before[r] + (4 if r == room else 3), f"room {r} lost messages"
            snapshot = await sync_everyone(clients[r])
            assert snapshot["seq"] >= clients[r][0].last_seq()
    for cs in clients.values():
        for c in cs:
            await c.close()


def stored_batches(nc, room):
    """The room's batches the engine keeps, by their last seq; and the message ids it keeps."""
    stored, ids = {}, set()
    for _, headers, data in room_messages(nc, room):
        ids.add(headers.get("Nats-Msg-Id"))
        for line in data.split(b"\n"):
            try:
                frame = json.loads(line)
            except ValueError:
                continue
            if isinstance(frame, dict) and frame.get("type") == "events":
                stored[frame["events"][-1]["seq"]] = frame
    return stored, ids


@both_placements
async def test_copies_of_batches_that_lost_their_place_put_into_the_inboxes_are_never_acknowledged(make_daemon, engine, placement):
    # Every node appends (no forwarding), so that batches race for places and lose; the peer
    # sees every publish on the rooms' subjects, a refused one too, and puts copies of each
    # into every consumer's inbox: with the publish's own reply subject and with none (the
    # engine refuses a consumer's `$JS.ACK.` reply subject from a client, see above). No
    # node stops, and no client is acknowledged a command the stream does not hold (fault:
    # a delivery believed on the inbox's word). Then the peer appends to the rooms the
    # copies of the batches that lost their place, as their nodes sealed them (their ids
    # were never stored, so the engine takes them): every node passes them over (fault: a
    # batch believed at a place other than the one it was sealed for), and nothing of them
    # reaches a client, whose commands in them were decided again.
    ds = trio(make_daemon, engine, "--cluster-forwarding", "off", *PLACEMENTS[placement])
    rooms = rooms_for(engine, placement)
    clients = {r: [await Client.connect(ds[k % 3].ws, room=r, name=f"c{k}") for k in range(6)] for r in rooms}
    for cs in clients.values():
        for c in cs:
            await c.until_seq(max(x.last_seq() for x in cs))
    with Nats(engine.urls[0]) as nc:
        where = place_of(nc, rooms[0])
        assert len(inboxes(nc, where.stream)) >= 3
    subject = f"tabd.r.{where.shard}.*" if where.shard is not None else where.subject
    stop = False
    injected = [0]
    seen = []

    def forge():
        with Nats(engine.urls[0]) as nc:
            consumers = [inbox for _, inbox in inboxes(nc, where.stream)]
            nc.sub(subject)
            while not stop:
                m = nc.next(timeout=0.2)
                if m is None or not m.reply or "Tabd-Seal" not in m.headers:
                    continue
                headers = without(m.headers)
                seen.append((m.subject, headers, m.data))
                for inbox in consumers:
                    hpub(nc, inbox, headers=headers, data=m.data, reply=m.reply)
                    hpub(nc, inbox, headers=headers, data=m.data)
                    injected[0] += 2

    loop = asyncio.get_running_loop()
    forger = loop.run_in_executor(None, forge)
    try:
        results = await asyncio.gather(*(command_storm(clients[r], 30 // len(rooms), seed=11 + i) for i, r in enumerate(rooms)))
    finally:
        stop = True
        await forger
    alive(ds)
    assert injected[0] > 0, "the peer put nothing into the inboxes"
    # The stream itself, read from the engine: every acknowledged command's batch is there,
    # at the seq its ack names, as the client that sent it saw it.
    kept_ids = set()
    with Nats(engine.urls[2]) as nc:
        for r, (answers, caused) in zip(rooms, results):
            stored, ids = stored_batches(nc, r)
            kept_ids |= ids
            acked = [(ref, f) for ref, f in answers.items() if f["type"] == "ack"]
            assert acked, "no command was acknowledged"
            for ref, f in acked:
                assert ref in caused, f"acknowledged {ref} without its events"
                batch = stored.get(f["seq"])
                assert batch is not None and batch["by"] == caused[ref]["by"] and batch.get("ref") == caused[ref].get("ref"), \
                    f"the ack of {ref} names seq {f['seq']}, where the stream holds {batch and (batch['by'], batch.get('ref'))}"
    # Every node still serves the rooms: one order for all, and a probe is all anyone sees.
    for cs in clients.values():
        await sync_everyone(cs)
        await probe(cs, cs[1])
    # The batches that lost their place, appended now.
    lost = {h["Nats-Msg-Id"]: (s, h, d) for s, h, d in seen if h.get("Nats-Msg-Id") not in kept_ids}
    print(f"copies put into the inboxes: {injected[0]}; batches that lost their place: {len(lost)}")
    assert lost, "no batch lost its place: nothing to append"
    with Nats(engine.urls[0]) as nc:
        bases = [rejected(d, "batch") for d in ds]
        for s, h, d in lost.values():
            append(nc, s, d, h)
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base + len(lost) - 1)
    for cs in clients.values():
        await probe(cs, cs[2])
        for c in cs:
            ends = [b["events"][-1]["seq"] for b in c.batches]
            starts = [b["events"][0]["seq"] for b in c.batches]
            assert all(s == e + 1 for e, s in zip(ends, starts[1:])), "a client saw a batch twice or out of order"
    for cs in clients.values():
        for c in cs:
            await c.close()


# --- a room's lives ---------------------------------------------------------------------------

def values_of(snapshot):
    return {k: v for t in snapshot["tabs"] for k, v in (t.get("values") or {}).items()}


async def test_a_batch_of_a_rooms_earlier_life_is_not_taken_in_its_new_life_in_its_own_stream(make_daemon, engine):
    """A room with a stream of its own (`--cluster-rooms streams`): a batch of the room
    deleted and created again, appended to the new stream at the very place its seal names,
    is of another life (fault: a seal not bound to the room's life). Every node passes it
    over."""
    # Its stream: the first message, the first pages' appearing, the batch.
    ds = trio(make_daemon, engine, *PLACEMENTS["streams"])
    room = room_name()
    assert call(ds[0], "PUT", f"/api/rooms/{room}")[0] == 201
    status, ack, _ = call(ds[0], "POST", f"/api/rooms/{room}/commands", {"type": "set", "key": "old-life", "value": 1})
    assert status == 200 and ack["type"] == "ack", ack
    with Nats(engine.urls[0]) as nc:
        _, headers, data = stream_message(nc, room, 3)
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
        kept = without(headers)
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


def two_lives(ds, nc, room):
    """Room `room` of a shard created through the first node with a batch (`old-life`),
    deleted through the second (which has not seen it since it started) and created again
    through the third; the shard holds both lives. Returns the first life, the second, the
    first life's batch (headers, data) and its directory record (headers, body)."""
    assert call(ds[0], "PUT", f"/api/rooms/{room}")[0] == 201
    status, ack, _ = call(ds[0], "POST", f"/api/rooms/{room}/commands", {"type": "set", "key": "old-life", "value": 1})
    assert status == 200 and ack["type"] == "ack", ack
    where = place_of(nc, room)
    assert where.shard is not None
    first_life = life_of(nc, room)
    _, headers, data = next(m for m in room_messages(nc, room) if b"old-life" in m[2])
    check_sealing(the_key(), where.subject, first_life, headers, data)
    record = directory_record(nc, room)
    assert json.loads(record[1])["epoch"] == first_life
    status, body, _ = call(ds[1], "DELETE", f"/api/rooms/{room}")
    assert status == 204, body
    status, created, _ = call(ds[2], "PUT", f"/api/rooms/{room}")
    assert status == 201, created
    # The new life's first pages' appearing follows its first message (bounded wait).
    deadline = time.monotonic() + 30
    while not (m := room_messages(nc, room)) or m[-1][1].get("Tabd-Kind") == "genesis":
        assert time.monotonic() < deadline, "the new life's first pages did not appear"
        time.sleep(0.02)
    assert life_of(nc, room) == created["epoch"] != first_life
    return first_life, created["epoch"], (headers, data), record


def replayed(nc, room, life, headers, data, follows, name):
    """Appends to the room, right after its last message, a message of the room's life
    `life` with these headers and body (another id), sealed as a node seals it for the place
    after `follows`; its stream seq."""
    where = place_of(nc, room)
    again = dict(without(headers), **{"Nats-Msg-Id": f"{name}-{room}"})
    return append(nc, where.subject, data, sealed_as_a_node(the_key(), where.subject, life, again, follows, data),
                  after=stream_message(nc, room)[0])


async def test_a_batch_of_a_rooms_earlier_life_is_not_taken_in_its_new_life_in_its_shard(make_daemon, engine):
    """A room of a shard deleted (its tombstone) and created again on its subject, whose
    messages of both lives the shard holds. After the new life's last message: the earlier
    life's batch sealed for that place (only its life differs from a batch the room would
    take there; fault: a seal not bound to the room's life), and sealed as a node sealed
    it, for its place in the earlier life (as it would be replayed once the engine's
    duplicate window is over; faults: the life, or Tabd-Follows not compared). The nodes,
    loading the room after them, pass both over."""
    ds = trio(make_daemon, engine)
    room = room_name()
    with Nats(engine.urls[0]) as nc:
        first_life, life, (headers, data), _ = two_lives(ds, nc, room)
        bases = [rejected(d, "batch") for d in ds]
        replayed(nc, room, first_life, headers, data, stream_message(nc, room)[0], "again-1")
        replayed(nc, room, first_life, headers, data, int(headers["Tabd-Follows"]), "again-2")
        for d in ds:
            status, got, _ = call(d, "GET", f"/api/rooms/{room}")
            assert status == 200 and got["epoch"] == life, got
        clients = [await Client.connect(d.ws, room=room, name=f"c{i}") for i, d in enumerate(ds)]
        for c in clients:
            await c.until_seq(max(x.last_seq() for x in clients))
            assert "old-life" not in values_of(c.welcome["snapshot"]), "a batch of the room's earlier life was taken"
        await probe(clients, clients[0])
        # The first node to load the room passed both over (and stored its record after them,
        # from which the others loaded it).
        deadline = time.monotonic() + 10
        while sum(rejected(d, "batch") for d in ds) < sum(bases) + 2:
            assert time.monotonic() < deadline, "the nodes did not pass over both batches of the earlier life"
            time.sleep(0.02)
        # And the nodes that have the room loaded, the same once more.
        bases = [rejected(d, "batch") for d in ds]
        replayed(nc, room, first_life, headers, data, stream_message(nc, room)[0], "again-3")
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base)
        await probe(clients, clients[1])
        for c in clients:
            assert "old-life" not in values_of((await c.command("sync"))[1]["snapshot"])
            await c.close()


async def test_the_record_of_a_rooms_earlier_life_is_not_loaded(make_daemon, engine):
    """A room of a shard deleted and created again; its first life's directory record put
    back as a node sealed it, and a batch of the first life replayed as a node sealed it
    (after the engine's duplicate window, or one that lost its place), the room's last
    message. A node that loads the room now loads its current life (fault: a record
    loaded for a life that is over: its seal opens, it names the shard and the shard's
    creation, and the room's last message opens for its life)."""
    ds = trio(make_daemon, engine)
    room = room_name()
    with Nats(engine.urls[0]) as nc:
        first_life, life, (headers, data), (record_headers, record) = two_lives(ds, nc, room)
        clients = await room_on(ds, room)
        append(nc, f"tabd.dir.{room}", record, {"Tabd-Seal": record_headers["Tabd-Seal"]})
        replayed(nc, room, first_life, headers, data, int(headers["Tabd-Follows"]), "again")
    try:
        late = node(make_daemon, engine, "life-late")
        status, got, _ = call(late, "GET", f"/api/rooms/{room}")
        assert status == 200 and got["epoch"] == life, \
            f"a node loading the room now answers {status} {got}, not life {life} (the first was {first_life}): {log_so_far(late)[-2000:]}"
        welcome = await serves_alike(late, room, clients[1])
        assert "old-life" not in values_of(welcome["snapshot"])
    finally:
        for c in clients:
            await c.close()


async def test_a_first_message_of_a_rooms_earlier_life_ends_nothing_on_nodes_it_has_not_reached(make_daemon, engine):
    """A room of a shard deleted and created again, clients on every node. The peer
    deletes the shard's consumers (the nodes follow it again after a silence of three
    heartbeats), appends the room's first message of its earlier life as a node sealed it
    (replayed once the engine's duplicate window is over), and replays the deletion's
    notice within its lifetime: each node asks the engine whether the room it has is still
    the room, while that message has not reached it. No client is closed (fault: a first
    message of another life taken as the room created again by its seal alone, not its
    place); once the nodes follow the shard again they pass it over."""
    ds = trio(make_daemon, engine)
    room = room_name()
    with Nats(engine.urls[0]) as nc:
        nc.sub(f"tabd.deleted.{room}")
        where = place_of(nc, room)
        assert call(ds[0], "PUT", f"/api/rooms/{room}")[0] == 201
        _, first, first_body = room_messages(nc, room)[0]
        assert first.get("Tabd-Kind") == "genesis", first
        status, body, _ = call(ds[1], "DELETE", f"/api/rooms/{room}")
        assert status == 204, body
        notice = nc.until(lambda m: m.subject == f"tabd.deleted.{room}")
        assert call(ds[2], "PUT", f"/api/rooms/{room}")[0] == 201
        clients = await room_on(ds, room)
        try:
            bases = [rejected(d, "batch") for d in ds]
            for consumer, _ in inboxes(nc, where.stream):
                try:
                    nc.js(f"CONSUMER.DELETE.{where.stream}.{consumer}")
                except NatsError as e:
                    # Gone between the listing and the delete (a node made its consumer
                    # again meanwhile): what the test wants, no consumer of the node's.
                    if "10014" not in str(e):
                        raise
            replayed(nc, room, json.loads(first_body)["epoch"], first, first_body, int(first["Tabd-Follows"]), "first-again")
            nc.pub(notice.subject, notice.data)
            nc.flush()
            # Until every node passed the message over (its follower made again), no client closed.
            deadline = time.monotonic() + 15
            while any(rejected(d, "batch") <= base for d, base in zip(ds, bases)):
                closed = [(c.ws.close_code, c.ws.close_reason) for c in clients if c.ws.close_code is not None]
                assert not closed, f"clients of the room closed: {closed}"
                assert time.monotonic() < deadline, "the nodes did not pass over the first message of the earlier life"
                await asyncio.sleep(0.02)
            await probe(clients, clients[1])
        finally:
            for c in clients:
                await c.close()


async def test_a_room_sealed_without_lives_moves_to_life_bound_seals_keeping_its_history(make_daemon, engine):
    # Nodes of phase one (`--cluster-unsigned accept`) seal as the tabd before room lives
    # were bound did (`v1`): a room written so is such a tabd's room, with a stream of its
    # own (`--cluster-rooms streams`). Then every node restarted without it: the room keeps
    # its history, gets a life mark, and a message sealed without the room's life after that
    # mark is passed over by every node (fault: a `v1` seal believed after the life mark).
    from conftest import cluster_secret_file
    from clusterseal import Key
    room = room_name()
    streams = PLACEMENTS["streams"]
    # Every node appends its own clients' commands (no forwarding): a node of phase one
    # writes to the room after another marked it.
    ds = trio(make_daemon, engine, "--cluster-unsigned", "accept", "--cluster-forwarding", "off", *streams, prefix="q")
    clients = await room_on(ds, room)
    await clients[1].command("set", key="phase-one", value=1)
    with Nats(engine.urls[0]) as nc:
        seals = set()
        for _, headers, _ in room_messages(nc, room):
            seals.add(headers.get("Tabd-Seal", "")[:3])
        assert seals == {"v1."}, f"phase one sealed {seals}"
        for i in range(3):
            ds[i].stop()
            ds[i] = node(make_daemon, engine, f"q{i}", "--cluster-forwarding", "off", *streams)
            await clients[i].close()
            clients[i] = await Client.connect(ds[i].ws, room=room, name=f"c{i}")
            for c in clients:
                await c.until_seq(max(x.last_seq() for x in clients))
            # Nodes of either phase write to the room, before and after its life mark.
            for k in range(3):
                await probe(clients, clients[k])
        marks = []
        for seq, headers, _ in room_messages(nc, room):
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
        for d, base in zip(ds, bases):
            wait_rejected(d, "batch", base, timeout=30)
        await probe(clients, clients[2])
        _, sync = await clients[1].command("sync")
        assert "unbound" not in values_of(sync["snapshot"])
    for c in clients:
        await c.close()
