"""Webhooks and the outbox against a real tabd: every event delivered, in order per room,
through a receiver that is down, then slow, then failing, and a kill -9 of tabd in the
middle, under load; signatures checked as receivers are told to; an outbox past its bound
tells of the gap; a receiver that never answers slows no room; GET /api/events resumed is
exactly the outbox's order; the Python and Node receivers of contrib/webhooks."""
import asyncio
import base64
import hashlib
import hmac
import json
import os
import random
import re
import signal
import subprocess
import time
import urllib.request

import sys

import pytest
import websockets

from conftest import ROOT, WAIT, Client, Daemon
from sse import EventStream, wait_until
from test_rooms import call
from test_schema import validator
from webhook_receiver import SteeredReceiver, contrib, free_port

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from tlscerts import Certificates  # noqa: E402


def metric(d, name, label=None):
    status, body = d.get("/metrics")
    assert status == 200
    pattern = rf"^{re.escape(name)}{re.escape('{' + label + '}') if label else ''} (\d+)$"
    return int(re.search(pattern, body, re.M).group(1))


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "webhook.secret"
    path.write_text("whsec_" + base64.b64encode(os.urandom(32)).decode() + "\n")
    os.chmod(path, 0o600)
    return str(path)


def outbox(d, until):
    """Every event the outbox holds, from /api/events?after=0, up to position `until`."""
    s = EventStream(d.http, "/api/events?after=0")
    events = []
    try:
        while not events or int(events[-1]["id"]) < until:
            events.append(s.next_event())
    finally:
        s.close()
    return events


def delivered(receiver):
    """{webhook-id: body} of what the receiver got, and the ids that came more than once."""
    first, again = {}, []
    for headers, body in receiver.received():
        msg_id = headers["webhook-id"]
        if msg_id in first:
            assert first[msg_id] == body, f"{msg_id} came again with another body"
            again.append(msg_id)
        else:
            first[msg_id] = body
    return first, again


class Load:
    """Clients that come to one of `rooms` rooms, send five commands 0.2 s apart and leave,
    `workers` at a time (about 5 x `workers` commands a second), against whichever tabd
    `self.daemon` is; a client that loses its tabd (a kill -9) starts over on the next."""

    def __init__(self, daemon, rooms=100, workers=20):
        self.daemon = daemon
        self.rooms = [f"room{n}" for n in range(rooms)]
        self.workers = workers
        self.stop = asyncio.Event()
        self.welcomed = []  # (room, client id, the tabd that welcomed it)
        self.acked = []     # (room, seq)
        self.commands = 0

    async def worker(self, n):
        rng = random.Random(n)
        while not self.stop.is_set():
            room = rng.choice(self.rooms)
            daemon = self.daemon
            try:
                c = await Client.connect(daemon.ws, room=room, name=f"w{n}")
            except Exception:  # noqa: BLE001 (tabd is being killed or restarted)
                await asyncio.sleep(0.1)
                continue
            self.welcomed.append((room, c.welcome["client"], daemon))
            tab = c.welcome["snapshot"]["tabs"][rng.randrange(len(c.welcome["snapshot"]["tabs"]))]["id"]
            try:
                for k in range(5):
                    if self.stop.is_set():
                        break
                    _, reply = await c.command("scroll", tab=tab, offset=rng.randrange(1000))
                    self.commands += 1
                    if reply["type"] == "ack":
                        self.acked.append((room, reply["seq"]))
                    await asyncio.sleep(0.2)
            except Exception:  # noqa: BLE001 (its tabd was killed)
                pass
            finally:
                try:
                    await c.close()
                except Exception:  # noqa: BLE001
                    pass

    async def run(self):
        await asyncio.gather(*(self.worker(n) for n in range(self.workers)))


@pytest.mark.time_limit(240)
async def test_every_event_reaches_a_receiver_that_is_down_slow_and_failing_across_a_kill_9(make_daemon, tmp_path, secret_file):
    secrets = contrib.load_secrets(secret_file)
    receiver = SteeredReceiver(secrets=secrets)  # down: not listening yet
    state = str(tmp_path / "state.db")
    args = ("--state", state, "--webhook", receiver.url, "--webhook-secret-file", secret_file,
            "--webhook-events", "roomCreated,roomDeleted,clientJoined,clientLeft,batch")
    first = make_daemon(*args)
    load = Load(first)
    running = asyncio.create_task(load.run())
    try:
        await asyncio.sleep(10)          # down for 10 s
        receiver.up()
        receiver.mode = "slow"           # then 1 s per request
        await asyncio.sleep(5)
        receiver.mode = "fail"           # then 500 for a while
        await asyncio.sleep(2.5)
        first.proc.send_signal(signal.SIGKILL)  # kill -9 in the middle
        first.proc.wait(WAIT)
        second = make_daemon(*args)
        load.daemon = second
        await asyncio.sleep(2.5)
        receiver.mode = "ok"
        await asyncio.sleep(3)
    finally:
        load.stop.set()
        await running
    # The last events are the leaves of the second tabd's clients (a leave is written a
    # moment after its socket closed): once the receiver has each of them, nothing more comes.
    on_second = {(room, client) for room, client, daemon in load.welcomed if daemon is second}

    def left():
        return {(e["room"], e["client"]["id"]) for e in (json.loads(b) for _, b in receiver.received()) if e["type"] == "clientLeft"}
    wait_until(lambda: on_second <= left(), timeout=90, what="every leave of the second tabd's clients")
    last = metric(second, "tabd_outbox_position")
    wait_until(lambda: metric(second, "tabd_webhook_pending", 'webhook="1"') == 0, timeout=90, what="the delivery of every event")
    assert metric(second, "tabd_outbox_position") == last
    assert metric(second, "tabd_outbox_dropped_total") == 0

    held = outbox(second, last)
    assert [int(e["id"]) for e in held] == list(range(1, last + 1)), "the outbox holds every position, none twice"
    got, again = delivered(receiver)
    bodies = {json.loads(b)["position"]: json.loads(b) for b in got.values()}
    assert sorted(bodies) == list(range(1, last + 1)), "every event delivered"
    shape = validator("outbox-event.json")
    for e in held:
        assert bodies[int(e["id"])] == e["data"], "delivered exactly as the outbox holds it"
        errors = list(shape.iter_errors(e["data"]))
        assert not errors, f"{errors[0].message} in {e['data']}"
    # In order per room: each room's events arrived (the first time) in position order.
    order = {}
    for headers, body in receiver.received():
        event = json.loads(body)
        order.setdefault(event["room"], [])
        if event["position"] not in order[event["room"]]:
            order[event["room"]].append(event["position"])
    for room, positions in order.items():
        assert positions == sorted(positions), f"room {room}'s events out of order"
    # Nothing acknowledged is lost across the kill: each welcome's join and each ack's batch.
    joins = {(e["room"], e["client"]["id"]) for e in bodies.values() if e["type"] == "clientJoined"}
    batches = {(e["room"], e["seq"]) for e in bodies.values() if e["type"] == "batch"}
    assert {(room, client) for room, client, _ in load.welcomed} <= joins
    assert set(load.acked) <= batches
    assert load.commands > 1000 and len(load.welcomed) > 200
    # Duplicates only as documented: the same webhook-id and body (checked in `delivered`).
    assert not receiver.refused, receiver.refused
    assert receiver.tries > len(receiver.got), "the receiver's failures were retried"
    failed = metric(second, "tabd_webhook_failed_total", 'webhook="1"')
    print(f"webhooks: {last} events, {len(load.welcomed)} clients, {load.commands} commands, "
          f"{receiver.tries} requests, {len(again)} duplicates, {failed} failed tries on the second tabd")

    # The documented check refuses what tabd did not sign, or signed long ago.
    headers, body = receiver.received()[0]
    assert contrib.refusal(headers, body, secrets) is None
    assert contrib.refusal(headers, body + b" ", secrets) == "no signature matches"
    forged = dict(headers, **{"webhook-signature": "v1," + base64.b64encode(hmac.new(os.urandom(32), body, hashlib.sha256).digest()).decode()})
    assert contrib.refusal(forged, body, secrets) == "no signature matches"
    stale_time = int(time.time()) - 600
    content = f"{headers['webhook-id']}.{stale_time}.".encode() + body
    stale = dict(headers, **{"webhook-timestamp": str(stale_time),
                              "webhook-signature": "v1," + base64.b64encode(hmac.new(secrets[0], content, hashlib.sha256).digest()).decode()})
    assert contrib.refusal(stale, body, secrets) == "webhook-timestamp is too far from now"
    receiver.close()


async def test_an_outbox_past_its_bound_drops_the_oldest_and_tells_the_receiver(make_daemon, secret_file):
    receiver = SteeredReceiver(secrets=contrib.load_secrets(secret_file))  # down
    d = make_daemon("--webhook", receiver.url, "--webhook-secret-file", secret_file, "--webhook-events", "batch",
                    "--webhook-outbox-bytes", "65536", "--rate-limit", "0")
    c = await Client.connect(d.ws)
    tab = c.welcome["snapshot"]["tabs"][0]["id"]
    while metric(d, "tabd_outbox_dropped_total") < 50:
        _, reply = await c.command("set", tab=tab, key="k", value="v" * 500)
        assert reply["type"] == "ack"
    assert metric(d, "tabd_outbox_bytes") <= 65536, "the outbox stays within its bound"
    first_kept = metric(d, "tabd_outbox_position") - metric(d, "tabd_outbox_events") + 1
    last = metric(d, "tabd_outbox_position")
    receiver.up()
    wait_until(lambda: metric(d, "tabd_webhook_pending", 'webhook="1"') == 0, what="the delivery of what was kept")
    events = [json.loads(b) for _, b in receiver.received()]
    gaps = [e for e in events if e["type"] == "gap"]
    for e in events:
        assert not list(validator("outbox-event.json").iter_errors(e)), e
    # Each names what the receiver missed (a gap told while the receiver was down is tried
    # again like any event, and the next drops make another); with what it did get (the
    # first event, which a delivery thread held, trying it again), every position.
    assert gaps and all(g["dropped"] == g["through"] - g["from"] + 1 for g in gaps)
    assert max(g["through"] for g in gaps) >= first_kept - 1 and sum(g["dropped"] for g in gaps) >= 45
    told = [p for g in gaps for p in range(g["from"], g["through"] + 1)]
    positions = [e["position"] for e in events if e["type"] == "batch"]
    assert sorted(positions + told) == list(range(1, last + 1)), "every position delivered or told, once"
    assert metric(d, "tabd_webhook_gaps_total", 'webhook="1"') == len(gaps)
    # /api/events tells a reader the same way.
    s = EventStream(d.http, "/api/events?after=0")
    e = s.next_event()
    assert e["data"]["type"] == "gap" and e["data"]["from"] == 1 and int(e["id"]) == e["data"]["through"]
    assert s.next_event()["data"]["position"] == e["data"]["through"] + 1
    s.close()
    await c.close()
    receiver.close()


async def test_a_receiver_that_never_answers_costs_no_room_any_time(make_daemon):
    hanging = SteeredReceiver()
    hanging.up()
    hanging.mode = "hang"
    d = make_daemon("--webhook", hanging.url, "--webhook-events", "batch", "--webhook-outbox-bytes", "262144", "--rate-limit", "0")
    c = await Client.connect(d.ws)
    tab = c.welcome["snapshot"]["tabs"][0]["id"]
    started = time.monotonic()
    for n in range(300):
        _, reply = await c.command("scroll", tab=tab, offset=n)
        assert reply["type"] == "ack"
    took = time.monotonic() - started
    # Generous: only a room that waits for its webhook (8 requests, each held 15 s) breaks it.
    assert took < 10, f"300 commands took {took:.1f} s while the receiver never answered"
    assert metric(d, "tabd_webhook_delivered_total", 'webhook="1"') == 0
    assert metric(d, "tabd_webhook_pending", 'webhook="1"') >= 300
    assert metric(d, "tabd_outbox_bytes") <= 262144
    await c.close()
    hanging.close()


async def test_api_events_resumed_after_a_disconnect_is_exactly_the_outbox_order(make_daemon):
    d = make_daemon("--webhook-events", "roomCreated,clientJoined,clientLeft,batch", "--rate-limit", "0")
    clients = [await Client.connect(d.ws, room=f"r{n % 3}", name=f"c{n}") for n in range(6)]
    for n, c in enumerate(clients):
        tab = c.welcome["snapshot"]["tabs"][0]["id"]
        for k in range(5):
            await c.command("scroll", tab=tab, offset=k + n)
    for c in clients[:3]:
        await c.close()
    last = metric(d, "tabd_outbox_position")
    whole = outbox(d, last)
    # Read a part, leave, resume with Last-Event-ID, a few times.
    parts, position = [], 0
    while position < last:
        s = EventStream(d.http, "/api/events", {"Last-Event-ID": str(position)})
        for _ in range(random.randint(1, 9)):
            e = s.next_event()
            parts.append(e)
            position = int(e["id"])
            if position == last:
                break
        s.close()
    assert [(e["id"], e["data"]) for e in parts] == [(e["id"], e["data"]) for e in whole]
    types = {e["data"]["type"] for e in whole}
    assert types == {"roomCreated", "clientJoined", "clientLeft", "batch"}
    # Without a position, a reader starts with what is written next.
    s = EventStream(d.http, "/api/events")
    await clients[3].command("ping")  # no event
    await clients[3].close()
    e = s.next_event()
    assert e["data"]["type"] == "clientLeft" and int(e["id"]) > last
    s.close()
    for c in clients[4:]:
        await c.close()
    assert EventStream(d.http, "/api/events?after=x").status == 400


def test_the_outbox_of_a_tabd_in_memory_says_so(make_daemon):
    d = make_daemon("--webhook-events", "roomCreated")
    d.wait_for_log("in memory (a restart loses its events)")


def test_without_webhooks_tabd_keeps_no_outbox(make_daemon, tmp_path):
    d = make_daemon("--state", str(tmp_path / "s.db"))
    assert call(d, "PUT", "/api/rooms/r")[0] == 201
    s = EventStream(d.http, "/api/events?after=0")
    assert s.status == 404 and s.error()["code"] == "not_found"
    s.close()
    assert "outbox" not in d.log_so_far()
    assert "tabd_outbox" not in d.get("/metrics")[1]


async def test_the_python_and_node_receivers_of_contrib_check_and_print_each_event_once(make_daemon, secret_file):
    receivers = {}
    for name, command in (("python", ["python3", os.path.join(ROOT, "contrib", "webhooks", "receiver.py")]),
                          ("node", ["node", os.path.join(ROOT, "contrib", "webhooks", "receiver.mjs")])):
        port = free_port()
        proc = subprocess.Popen([*command, str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, TABD_WEBHOOK_SECRET_FILE=secret_file))
        assert json.loads(proc.stdout.readline()) == {"listening": port}
        receivers[name] = (port, proc)
    try:
        d = make_daemon(*[a for port, _ in receivers.values() for a in ("--webhook", f"http://127.0.0.1:{port}/tabd")],
                        "--webhook-secret-file", secret_file)
        assert call(d, "PUT", "/api/rooms/lobby")[0] == 201
        c = await Client.connect(d.ws, room="lobby", name="kiosk")
        await c.close()
        wait_until(lambda: metric(d, "tabd_webhook_pending", 'webhook="1"') == 0 and metric(d, "tabd_webhook_pending", 'webhook="2"') == 0,
                   what="delivery to both")
        assert call(d, "DELETE", "/api/rooms/lobby")[0] == 204
        wait_until(lambda: metric(d, "tabd_webhook_pending", 'webhook="1"') == 0 and metric(d, "tabd_webhook_pending", 'webhook="2"') == 0,
                   what="delivery to both")
        for name, (port, proc) in receivers.items():
            # A forged request: refused 401, and printed nowhere.
            req = urllib.request.Request(f"http://127.0.0.1:{port}/tabd", data=b'{"type":"roomDeleted"}', method="POST", headers={
                "webhook-id": "forged", "webhook-timestamp": str(int(time.time())), "webhook-signature": "v1,AAAA"})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=WAIT)
            assert refused.value.code == 401, name
        for name, (port, proc) in receivers.items():
            proc.terminate()
            out, err = proc.communicate(timeout=WAIT)
            lines = [json.loads(line) for line in out.splitlines()]
            types = [(line["event"]["type"], line["event"]["room"]) for line in lines]
            assert types == [("roomCreated", "lobby"), ("clientJoined", "lobby"), ("clientLeft", "lobby"), ("roomDeleted", "lobby")], (name, types)
            assert len({line["id"] for line in lines}) == 4
            assert "no signature matches" in err, (name, err)
    finally:
        for _, proc in receivers.values():
            if proc.poll() is None:
                proc.kill()


def new_secret():
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def test_an_https_receiver_gets_events_signed_with_a_secret_rotated_by_sighup(make_daemon, tmp_path):
    certs = Certificates(tmp_path / "certs")
    a, b = new_secret(), new_secret()
    secret_file = tmp_path / "webhook.secret"
    secret_file.write_text(a + "\n")
    os.chmod(secret_file, 0o600)
    key_of = lambda text: contrib.load_secrets_from_text(text)  # noqa: E731
    receiver = SteeredReceiver(secrets=key_of(a), tls=(certs.a, certs.a_key))
    receiver.up()
    d = make_daemon("--webhook", receiver.url, "--webhook-ca-file", certs.ca, "--webhook-secret-file", str(secret_file))

    def created(room, n):
        assert call(d, "PUT", f"/api/rooms/{room}")[0] == 201
        wait_until(lambda: len(receiver.received()) == n, what=f"{room}'s roomCreated over https")
        headers, body = receiver.received()[-1]
        assert json.loads(body)["room"] == room
        return headers["webhook-signature"].split(" ")

    assert len(created("one", 1)) == 1
    # The rotation: both secrets while receivers move to the new one, then the new one alone.
    secret_file.write_text(a + "\n" + b + "\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_for_log("the webhook secret file read again; requests are signed with 2 secrets")
    receiver.secrets = key_of(b)
    assert len(created("two", 2)) == 2
    secret_file.write_text(b + "\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_for_log("requests are signed with 1 secret")
    assert len(created("three", 3)) == 1
    assert not receiver.refused
    # A file that cannot be read keeps the secret in use.
    secret_file.write_text("")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_for_log("the webhook secrets in use stay")
    assert len(created("four", 4)) == 1 and not receiver.refused
    receiver.close()


def test_an_https_receiver_whose_certificate_tabd_does_not_trust_gets_nothing(make_daemon, tmp_path):
    certs = Certificates(tmp_path / "certs")
    receiver = SteeredReceiver(tls=(certs.a, certs.a_key))
    receiver.up()
    d = make_daemon("--webhook", receiver.url)  # no --webhook-ca-file: the test CA is not trusted
    assert call(d, "PUT", "/api/rooms/r")[0] == 201
    wait_until(lambda: metric(d, "tabd_webhook_failed_total", 'webhook="1"') >= 2, what="failed tries")
    assert metric(d, "tabd_webhook_delivered_total", 'webhook="1"') == 0 and not receiver.received()
    d.wait_for_log("not delivered")
    receiver.close()
