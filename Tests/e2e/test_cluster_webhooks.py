"""Webhooks on a cluster: the engine's history is the outbox. Each shard's events go to a
webhook from the one node that holds that shard's delivery lease (sealed, in the engine),
from the cursor the lease records; when that node dies another takes the shard over from
the cursor. What the tests break: the delivering node killed with -9 under load (nothing
lost, nothing out of order per room, duplicates only with the same id and body), records
and room messages forged by a peer that holds the engine's credentials but is no node
(neither moves the cursor nor reaches the receiver), and each room's events checked
against the history its own clients saw.

Three NATS JetStream servers (Tests/support/natscluster.py), nodes started by the tests.
"""
import asyncio
import json
import os
import random
import re
import signal
import sys
import uuid

import pytest

from conftest import ROOT, WAIT, Client
from sse import wait_until
from test_schema import validator
from webhook_receiver import SteeredReceiver

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import NatsCluster  # noqa: E402
from natsproto import Nats  # noqa: E402

EVENTS = "roomCreated,roomDeleted,clientJoined,clientLeft,batch"
SHARDS = 32


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with NatsCluster(3, base_dir=str(tmp_path_factory.mktemp("nats"))) as c:
        yield c


def metric(d, name, label=None):
    status, body = d.get("/metrics")
    assert status == 200
    m = re.search(rf"^{re.escape(name)}{re.escape('{' + label + '}') if label else ''} (\d+)$", body, re.M)
    return int(m.group(1)) if m else 0


def held(d):
    """Shards whose events node `d` delivers to webhook 1."""
    try:
        return metric(d, "tabd_webhook_shards", 'webhook="1"')
    except Exception:  # noqa: BLE001 (a node killed)
        return 0


def start_nodes(make_daemon, engine, receiver, names):
    ds = [make_daemon("--cluster", engine.url_arg, "--node-name", name, "--rate-limit", "0",
                      "--webhook", receiver.url, "--webhook-events", EVENTS) for name in names]
    # A webhook new to the cluster delivers from the shards' ends when their leases are
    # taken: every shard has a node before the rooms begin.
    wait_until(lambda: sum(held(d) for d in ds) == SHARDS, timeout=60, what="every shard delivered by a node")
    return ds


def arrivals(receiver):
    """What the receiver got, in arrival order: (webhook-id, event); a duplicate has the
    same id and the same body as the first."""
    first, out = {}, []
    for headers, body in receiver.received():
        msg_id = headers["webhook-id"]
        if msg_id in first:
            assert first[msg_id] == body, f"{msg_id} came again with another body"
        first[msg_id] = body
        out.append((msg_id, json.loads(body)))
    return out


def per_room(receiver):
    """Each room's events in the order they first arrived, and how many came again."""
    seen, rooms, again = set(), {}, 0
    for msg_id, e in arrivals(receiver):
        if msg_id in seen:
            again += 1
            continue
        seen.add(msg_id)
        assert msg_id == f"{e['outbox']}-{e['position']}-{e['part']}", "the id is the event's place in the engine's history"
        rooms.setdefault(e["room"], []).append(e)
    return rooms, again


def check_room(events, room):
    """One room's events as delivered: in the engine's order, its batches its whole history."""
    places = [(e["position"], e["part"]) for e in events]
    assert places == sorted(places), f"room {room}'s events out of order: {places}"
    assert events[0]["type"] == "roomCreated", f"room {room}: {events[0]}"
    seqs = [ev["seq"] for e in events if e["type"] == "batch" for ev in e["events"]]
    assert seqs == list(range(1, len(seqs) + 1)), f"room {room}: its batches are not its whole history, once: {seqs}"
    shape = validator("outbox-event.json")
    for e in events:
        errors = list(shape.iter_errors(e))
        assert not errors, f"{errors[0].message} in {e}"


async def test_each_rooms_events_reach_the_webhook_once_in_order_whatever_node_its_clients_use(make_daemon, engine):
    receiver = SteeredReceiver()
    receiver.up()
    ds = start_nodes(make_daemon, engine, receiver, ["h0", "h1"])
    rooms = ["w" + uuid.uuid4().hex[:8] for _ in range(6)]
    seen = {}
    for n, room in enumerate(rooms):
        a = await Client.connect(ds[n % 2].ws, room=room, name="a")
        b = await Client.connect(ds[(n + 1) % 2].ws, room=room, name="b")
        tab = a.welcome["snapshot"]["tabs"][0]["id"]
        for k in range(10):
            await (a if k % 2 else b).command("scroll", tab=tab, offset=k)
        await b.close()
        while not any(e["kind"] == "clientLeft" for e in (await a.recv()).get("events", [])):
            pass
        seen[room] = (a.welcome["client"], b.welcome["client"])
        await a.close()
    status, _ = ds[0].get("/metrics")
    assert status == 200

    def complete():
        got, _ = per_room(receiver)
        return all(sum(1 for e in got.get(r, []) if e["type"] == "clientLeft") == 2 for r in rooms)
    wait_until(complete, timeout=60, what="every room's events, up to its last leave")
    got, again = per_room(receiver)
    for room in rooms:
        events = got[room]
        check_room(events, room)
        joined = [e["client"]["id"] for e in events if e["type"] == "clientJoined"]
        assert sorted(joined) == sorted(seen[room]), f"room {room}: {joined}"
        assert sum(1 for e in events if e["type"] == "batch" and any(ev["kind"] == "scrolled" for ev in e["events"])) == 10
        # The same event, whatever node read it: one shard stream, one place.
        assert len({e["outbox"] for e in events}) == 1
    assert again == 0, "no node failed: no duplicate"
    receiver.close()


@pytest.mark.time_limit(240)
@pytest.mark.parametrize("fault", ["kill", "pause"])
async def test_the_delivering_node_killed_or_paused_under_load_loses_nothing_and_reorders_nothing(make_daemon, engine, fault):
    receiver = SteeredReceiver()
    receiver.up()
    receiver.mode = "slow"      # events pile up behind a slow receiver: the kill leaves some unsent
    receiver.delay = 0.05
    ds = start_nodes(make_daemon, engine, receiver, ["k0", "k1", "k2"])
    rooms = ["k" + uuid.uuid4().hex[:8] for _ in range(24)]
    acked, welcomed = [], []
    stop = asyncio.Event()
    alive = list(ds)

    async def worker(n):
        rng = random.Random(n)
        while not stop.is_set():
            room, d = rng.choice(rooms), rng.choice(alive)
            try:
                c = await Client.connect(d.ws, room=room, name=f"w{n}")
            except Exception:  # noqa: BLE001 (its node was killed)
                await asyncio.sleep(0.1)
                continue
            welcomed.append((room, c.welcome["client"]))
            tab = c.welcome["snapshot"]["tabs"][0]["id"]
            try:
                for _ in range(5):
                    _, reply = await c.command("scroll", tab=tab, offset=rng.randrange(1000))
                    if reply["type"] == "ack":
                        acked.append((room, reply["seq"]))
            except Exception:  # noqa: BLE001
                pass
            finally:
                try:
                    await c.close()
                except Exception:  # noqa: BLE001
                    pass

    running = asyncio.gather(*(worker(n) for n in range(12)))
    try:
        await asyncio.sleep(4)
        victim = max(ds, key=held)
        shards_held = held(victim)
        alive.remove(victim)
        victim.proc.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        if fault == "kill":
            victim.proc.wait(WAIT)
        # The others take its shards over once its heartbeats have stopped.
        wait_until(lambda: sum(held(d) for d in alive) == SHARDS, timeout=60, what="the gone node's shards taken over")
        await asyncio.sleep(3)
        if fault == "pause":
            # Back: it learns its shards are another's and posts nothing more of them.
            victim.proc.send_signal(signal.SIGCONT)
            wait_until(lambda: held(victim) == 0, timeout=30, what="the paused node letting its shards go")
            alive.append(victim)
            await asyncio.sleep(2)
    finally:
        stop.set()
        await running
    receiver.mode = "ok"

    def has_everything():
        got, _ = per_room(receiver)
        delivered = {(r, ev["seq"]) for r, es in got.items() for e in es if e["type"] == "batch" for ev in e["events"]}
        joins = {(r, e["client"]["id"]) for r, es in got.items() for e in es if e["type"] == "clientJoined"}
        return set(acked) <= delivered and set(welcomed) <= joins
    wait_until(has_everything, timeout=120, what="every acknowledged batch and every welcome's join delivered")
    got, again = per_room(receiver)
    for room in rooms:
        if room in got:
            check_room(got[room], room)
    assert len(acked) > 200, len(acked)
    print(f"cluster webhooks: node holding {shards_held} shards {'killed' if fault == 'kill' else 'paused'}; {len(acked)} acks, {len(welcomed)} clients, "
          f"{sum(len(v) for v in got.values())} events, {again} duplicates")
    receiver.close()


async def test_records_and_messages_no_node_sealed_move_no_cursor_and_reach_no_receiver(make_daemon, engine):
    receiver = SteeredReceiver()
    receiver.up()
    ds = start_nodes(make_daemon, engine, receiver, ["f0", "f1"])
    webhook = re.search(r"webhook ([0-9a-f]{16}) in the engine", ds[0].log_so_far()).group(1)
    room = "f" + uuid.uuid4().hex[:8]
    a = await Client.connect(ds[0].ws, room=room, name="a")
    tab = a.welcome["snapshot"]["tabs"][0]["id"]
    await a.command("scroll", tab=tab, offset=1)
    wait_until(lambda: any(e["type"] == "batch" for e in per_room(receiver)[0].get(room, [])), what="the first batch delivered")
    before = sum(metric(d, "tabd_engine_rejected_total", 'kind="webhook"') for d in ds)
    with Nats(engine.urls[0]) as nc:
        # Every shard's lease, taken by a node that does not exist, its cursor far ahead.
        for shard in range(SHARDS):
            body = json.dumps({"node": "ghost", "incarnation": "x", "streamCreated": 1, "cursor": 10 ** 9}).encode()
            nc.publish(f"tabd.hook.{webhook}.{shard}", body)
        # A batch in the room that no node sealed (a copy of its last message, altered).
        from test_engine_trust import last_stream_message, place_of
        headers, data = last_stream_message(nc, room)
        where = place_of(nc, room, engine.urls[0])
        forged = data.replace(b'"offset":1', b'"offset":666')
        nc.publish(where.subject, forged, headers={k: v for k, v in headers.items() if not k.startswith("Nats-")})
    # The nodes keep their shards (the forged records are passed over) and go on.
    for k in range(2, 6):
        await a.command("scroll", tab=tab, offset=k)
    await a.close()
    wait_until(lambda: any(e["type"] == "clientLeft" for e in per_room(receiver)[0].get(room, [])), what="the room's last event delivered")
    got, _ = per_room(receiver)
    check_room(got[room], room)
    offsets = [ev["offset"] for e in got[room] if e["type"] == "batch" for ev in e["events"] if ev["kind"] == "scrolled"]
    assert offsets == [1, 2, 3, 4, 5], offsets
    assert sum(held(d) for d in ds) == SHARDS
    assert sum(metric(d, "tabd_engine_rejected_total", 'kind="webhook"') for d in ds) > before
    receiver.close()


async def test_a_receiver_that_never_answers_costs_a_node_a_bounded_read_ahead_and_no_room_anything(make_daemon, engine):
    receiver = SteeredReceiver()
    receiver.up()
    ds = [make_daemon("--cluster", engine.url_arg, "--node-name", "b0", "--rate-limit", "0", "--webhook", receiver.url,
                      "--webhook-events", "batch", "--webhook-outbox-bytes", "65536")]
    wait_until(lambda: held(ds[0]) == SHARDS, timeout=60, what="every shard delivered by the node")
    receiver.mode = "hang"      # accepts each request and never answers
    room = "b" + uuid.uuid4().hex[:8]
    c = await Client.connect(ds[0].ws, room=room)
    tab = c.welcome["snapshot"]["tabs"][0]["id"]
    most = 0
    for k in range(200):        # about 400 KB of events, six times the bound
        _, reply = await c.command("set", tab=tab, key="k", value=f"{k:04d}" + "v" * 2000)
        assert reply["type"] == "ack", reply
        if k % 20 == 19:
            most = max(most, metric(ds[0], "tabd_webhook_pending", 'webhook="1"'))
    # Read ahead: at most half of --webhook-outbox-bytes (about 16 of these events) besides
    # the eight requests on their way; the engine keeps the rest.
    assert 0 < most <= 40, most
    receiver.mode = "ok"
    receiver._hang.set()        # the hanging requests end unanswered: tried again
    await c.close()

    def values():
        got, _ = per_room(receiver)
        return [ev["value"][:4] for e in got.get(room, []) for ev in e["events"] if ev["kind"] == "valueSet"]
    wait_until(lambda: len(values()) == 200, timeout=90, what="every batch delivered once the receiver answers")
    assert values() == [f"{k:04d}" for k in range(200)]
    receiver.close()
