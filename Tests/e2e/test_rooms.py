"""Rooms against a real tabd: isolation under concurrency, unloading and reloading, restarts,
kill -9, the upgrade of a single-room state file, creation modes, limits, deletion, and
every endpoint of the HTTP API with its errors."""
import asyncio
import json
import os
import random
import re
import shutil
import signal
import time
import urllib.request

import pytest
import websockets

from conftest import ROOT, WAIT, Client, kinds, strip_seq
from replay import frames_after, replay_all

FIXTURE = os.path.join(ROOT, "Tests", "fixtures", "v1-state.sqlite")
FIXTURE_EPOCH = "53ba5d13eec1b364"


def call(d, method, path, body=None, headers=None, raw=None):
    """(status, parsed JSON body or None, headers) of an HTTP request to the daemon."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(d.http + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else None), r.headers
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, (json.loads(text) if text else None), e.headers


def metric(d, name):
    status, body = d.get("/metrics")
    assert status == 200
    m = re.search(rf"^{name} (\d+)$", body, re.M)
    return int(m.group(1))


async def wait_for(predicate, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def comparable(snapshot):
    s = dict(snapshot)
    for k in ("seq", "clients", "clientCount"):
        s.pop(k)
    return s


RANDOM_COMMANDS = [
    lambda r: ("select", {"tab": r.choice(["home", "favorites", "profile"])}),
    lambda r: ("tap", {"tab": r.choice(["home", "favorites", "profile"])}),
    lambda r: ("push", {"route": r.choice(["a", "b", "c"])}),
    lambda r: ("pop", {}),
    lambda r: ("scroll", {"offset": r.randint(0, 500)}),
    lambda r: ("set", {"key": r.choice(["x", "y"]), "value": r.randint(0, 9)}),
]


# MARK: Isolation

async def test_fifty_rooms_of_four_clients_stay_isolated_under_concurrent_commands(make_daemon):
    d = make_daemon("--rate-limit", "0")
    rooms = [f"room-{i}" for i in range(50)]
    clients = {}
    for room in rooms:
        clients[room] = [await Client.connect(d.ws, room=room, name=f"{room}-{k}") for k in range(4)]
        for c in clients[room]:
            assert c.welcome["room"] == room and c.welcome["role"] == "control"

    async def fire(c, seed):
        rng = random.Random(seed)
        for _ in range(15):
            type_, fields = rng.choice(RANDOM_COMMANDS)(rng)
            await c.command(type_, **fields)

    await asyncio.gather(*(fire(c, hash((room, k))) for room in rooms for k, c in enumerate(clients[room])))
    for room in rooms:
        cs = clients[room]
        _, sync = await cs[0].command("sync")
        final = sync["snapshot"]["seq"]
        for c in cs:
            await c.until_seq(final)
        # Each client's stream, from the first batch every one of them saw, is identical.
        first = max(c.welcome["snapshot"]["seq"] for c in cs)
        streams = [[b for b in c.batches if b["events"][0]["seq"] > first] for c in cs]
        assert all(s == streams[0] for s in streams), f"{room}: clients saw different streams"
        # Each client's welcome snapshot with the frames after it folds (gap-free, every
        # event fitting) to the snapshot `sync` gave, presence and seq included.
        folded = replay_all([(frames_after(c.welcome["snapshot"], c.batches), c.welcome["snapshot"]) for c in cs], label=room)
        for state in folded:
            assert state == sync["snapshot"], f"{room}: replay differs from sync"
        for c in cs:
            # Every client id in the stream belongs to this room's own clients.
            own = {x["client"] for x in (y.welcome for y in cs)} | {"tabd"}
            assert all(b["by"] in own for b in c.batches), f"{room}: a frame of another room arrived"
    seqs = {room: clients[room][0].last_seq() for room in rooms}
    assert len(set(seqs.values())) > 1 or all(v > 0 for v in seqs.values())
    for room in rooms:
        for c in clients[room]:
            await c.close()


async def test_a_rooms_seq_moves_only_with_its_own_events(daemon):
    a = await Client.connect(daemon.ws, room="alpha")
    b = await Client.connect(daemon.ws, room="beta")
    before = b.last_seq()
    for _ in range(5):
        await a.command("scroll", offset=3)
    _, pong = await b.command("ping")
    assert pong["type"] == "pong"
    _, sync = await b.command("sync")
    assert sync["snapshot"]["seq"] == before and b.batches == []
    assert a.welcome["epoch"] != b.welcome["epoch"]


async def test_a_client_that_names_no_room_is_in_main(daemon):
    plain = await Client.connect(daemon.ws)
    named = await Client.connect(daemon.ws, room="main")
    assert plain.welcome["room"] == "main"
    await plain.until_seq(named.welcome["snapshot"]["seq"])
    assert kinds(plain.batches[-1]) == ["clientJoined"]


@pytest.mark.parametrize("bad", ["a%20b", "x" * 65, "caf%C3%A9", "a/b", "a.b", ""])
async def test_a_bad_room_id_is_refused_at_the_upgrade_with_400(daemon, bad):
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        await websockets.connect(f"{daemon.ws}?room={bad}")
    assert e.value.response.status_code == 400


# MARK: Unloading

async def test_an_idle_room_unloads_and_reloads_with_resume_and_no_second_first_appear(make_daemon, tmp_path):
    d = make_daemon("--state", str(tmp_path / "s.sqlite"), "--room-idle", "1")
    assert metric(d, "tabd_rooms_loaded") == 0
    for round_ in range(3):
        c = await Client.connect(d.ws, room="kiosk", name=f"k{round_}")
        if round_ == 0:
            epoch = c.welcome["epoch"]
            await c.command("select", tab="favorites")
            await c.command("push", route="detail")
            await c.command("select", tab="home")
        else:
            assert c.welcome["epoch"] == epoch, "the epoch is kept across the unload"
            select, _ = await c.command("select", tab="favorites")
            assert "firstAppear" not in kinds(select), "favorites' pages appeared before the unload"
            await c.command("select", tab="home")
        seen = c.last_seq()
        await c.close()
        await wait_for(lambda: metric(d, "tabd_rooms_loaded") == 0, "the room to unload")
        assert metric(d, "tabd_rooms_stored") == 1
        # A client that saw `seen` resumes across the unload and misses nothing.
        r = await Client.connect(d.ws, room="kiosk", resume=seen, epoch=epoch)
        assert r.welcome["resumed"] is True
        await r.until_seq(seen + 2)
        assert [kinds(b) for b in r.batches] == [["clientLeft"], ["clientJoined"]]
        await r.close()
        await wait_for(lambda: metric(d, "tabd_rooms_loaded") == 0, "the room to unload again")


async def test_a_put_of_a_room_that_exists_leaves_it_free_to_unload(make_daemon, tmp_path):
    # The 409 once kept the call's hold on the room: it never unloaded on that node.
    d = make_daemon("--state", str(tmp_path / "s.sqlite"), "--room-idle", "1")
    assert call(d, "PUT", "/api/rooms/twice")[0] == 201
    assert call(d, "PUT", "/api/rooms/twice")[0] == 409
    await wait_for(lambda: metric(d, "tabd_rooms_loaded") == 0, "the room to unload after a PUT answered 409")


async def test_rooms_churn_through_unloads_without_losing_an_event(make_daemon, tmp_path):
    d = make_daemon("--state", str(tmp_path / "s.sqlite"), "--room-idle", "1", "--rate-limit", "0")
    rng = random.Random(7)
    last = {}
    for step in range(24):
        room = f"churn-{rng.randrange(4)}"
        params = {"room": room}
        if room in last:
            params.update(resume=last[room][0], epoch=last[room][1])
        c = await Client.connect(d.ws, **params)
        if room in last:
            assert c.welcome["resumed"] is True and c.welcome["epoch"] == last[room][1]
        for _ in range(rng.randrange(1, 5)):
            type_, fields = rng.choice(RANDOM_COMMANDS)(rng)
            await c.command(type_, **fields)
        last[room] = (c.last_seq(), c.welcome["epoch"])
        await c.close()
        if step % 6 == 5:
            await wait_for(lambda: metric(d, "tabd_rooms_loaded") == 0, "every room to unload")


# MARK: Restarts

async def test_a_restart_with_two_hundred_rooms_keeps_every_snapshot(make_daemon, tmp_path):
    state = str(tmp_path / "s.sqlite")
    d = make_daemon("--state", state, "--rate-limit", "0")
    before = {}
    for i in range(200):
        room = f"r{i:03d}"
        for cmd in ({"type": "select", "tab": "favorites"}, {"type": "push", "route": f"p{i}"},
                    {"type": "set", "key": "n", "value": i}):
            status, body, _ = call(d, "POST", f"/api/rooms/{room}/commands", cmd)
            assert status == 200 and body["type"] == "ack", body
        status, body, _ = call(d, "GET", f"/api/rooms/{room}")
        before[room] = body
    assert d.stop() == 0
    d2 = make_daemon("--state", state)
    assert metric(d2, "tabd_rooms_stored") == 200 and metric(d2, "tabd_rooms_loaded") == 0
    for room, old in before.items():
        status, new, _ = call(d2, "GET", f"/api/rooms/{room}")
        assert status == 200 and new["epoch"] == old["epoch"]
        assert comparable(new["snapshot"]) == comparable(old["snapshot"]), room


async def test_kill_9_during_a_multi_room_storm_loses_no_acknowledged_event(make_daemon, tmp_path):
    state = str(tmp_path / "s.sqlite")
    d = make_daemon("--state", state, "--rate-limit", "0")
    rooms = [f"storm-{i}" for i in range(10)]
    clients = {room: await Client.connect(d.ws, room=room) for room in rooms}
    acked = {room: 0 for room in rooms}
    stop = asyncio.Event()

    async def storm(room):
        c = clients[room]
        n = 0
        try:
            while not stop.is_set():
                n += 1
                _, reply = await c.command("scroll", offset=n)
                if reply["type"] == "ack":
                    acked[room] = max(acked[room], reply["seq"])
        except (websockets.exceptions.ConnectionClosed, asyncio.TimeoutError):
            pass

    tasks = [asyncio.create_task(storm(room)) for room in rooms]
    await wait_for(lambda: all(v > 20 for v in acked.values()), "every room to take commands")
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    stop.set()
    await asyncio.gather(*tasks)
    d2 = make_daemon("--state", state)
    for room in rooms:
        r = await Client.connect(d2.ws, room=room)
        assert r.welcome["epoch"] == clients[room].welcome["epoch"]
        assert r.welcome["snapshot"]["seq"] >= acked[room], f"{room}: an acknowledged event was lost"


async def test_a_single_room_state_file_opens_as_room_main_and_old_clients_resume(make_daemon, tmp_path):
    state = str(tmp_path / "old.sqlite")
    shutil.copy(FIXTURE, state)
    d = make_daemon("--state", state)
    # A client of the old version, which names no room, resumes where it was.
    c = await Client.connect(d.ws, resume=12, epoch=FIXTURE_EPOCH)
    assert c.welcome["resumed"] is True and c.welcome["room"] == "main"
    await c.until_seq(19)
    assert c.batches[0]["events"][0]["seq"] == 13
    _, sync = await c.command("sync")
    fav = next(t for t in sync["snapshot"]["tabs"] if t["id"] == "favorites")
    assert fav["values"] == {"greeting": "Tapped"} and [p["route"] for p in fav["stack"]] == ["root", "detail"]
    push, _ = await c.command("push", route="next")
    assert push["events"][0]["page"] == "p6", "page ids continue after the upgrade"
    status, listing, _ = call(d, "GET", "/api/rooms")
    assert [r["id"] for r in listing["rooms"]] == ["main"]


async def test_a_state_file_of_a_newer_version_is_refused_untouched(tmp_path):
    import sqlite3
    import subprocess
    from conftest import TABD
    state = str(tmp_path / "new.sqlite")
    shutil.copy(FIXTURE, state)
    db = sqlite3.connect(state)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with open(state, "rb") as f:
        before = f.read()
    p = subprocess.run([TABD, "--port", "0", "--state", state], capture_output=True, text=True, timeout=WAIT)
    assert p.returncode != 0 and "newer tabd" in p.stderr
    with open(state, "rb") as f:
        assert f.read() == before


# MARK: Creation, limits, deletion

async def test_rooms_api_mode_creates_rooms_only_through_the_api(make_daemon):
    d = make_daemon("--rooms", "api")
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        await websockets.connect(f"{d.ws}?room=lobby")
    assert e.value.response.status_code == 404
    status, body, _ = call(d, "POST", "/api/rooms/lobby/commands", {"type": "ping"})
    assert status == 404 and body["code"] == "unknown_room"
    status, body, _ = call(d, "PUT", "/api/rooms/lobby")
    assert status == 201 and body["room"] == "lobby"
    c = await Client.connect(d.ws, room="lobby")
    assert c.welcome["epoch"] == body["epoch"]


async def test_max_rooms_bounds_how_many_rooms_exist(make_daemon, tmp_path):
    d = make_daemon("--state", str(tmp_path / "s.sqlite"), "--max-rooms", "2", "--room-idle", "1")
    a = await Client.connect(d.ws, room="one")
    await a.close()
    status, _, _ = call(d, "PUT", "/api/rooms/two")
    assert status == 201
    await wait_for(lambda: metric(d, "tabd_rooms_loaded") == 0, "the rooms to unload")
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        await websockets.connect(f"{d.ws}?room=three")
    assert e.value.response.status_code == 503, "unloaded rooms still count: they are stored"
    status, body, _ = call(d, "PUT", "/api/rooms/three")
    assert status == 503 and body["code"] == "unavailable"
    status, body, _ = call(d, "POST", "/api/rooms/three/commands", {"type": "ping"})
    assert status == 503 and body["code"] == "unavailable"
    assert call(d, "DELETE", "/api/rooms/one")[0] == 204
    c = await Client.connect(d.ws, room="three")
    assert c.welcome["room"] == "three"


async def test_deleting_a_room_closes_its_clients_with_4404_and_removes_its_state(make_daemon, tmp_path):
    d = make_daemon("--state", str(tmp_path / "s.sqlite"))
    a = await Client.connect(d.ws, room="doomed")
    b = await Client.connect(d.ws, room="doomed")
    other = await Client.connect(d.ws, room="safe")
    await a.command("push", route="x")
    epoch = a.welcome["epoch"]
    status, body, _ = call(d, "DELETE", "/api/rooms/doomed")
    assert status == 204 and body is None
    for c in (a, b):
        with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
            while True:
                await c.recv()
        assert e.value.rcvd.code == 4404 and e.value.rcvd.reason == "room deleted"
    assert call(d, "GET", "/api/rooms/doomed")[0] == 404
    assert call(d, "DELETE", "/api/rooms/doomed")[0] == 404
    _, pong = await other.command("ping")
    assert pong["type"] == "pong", "the other room is untouched"
    again = await Client.connect(d.ws, room="doomed")
    assert again.welcome["epoch"] != epoch, "a room created later under the same id is a new history"
    assert again.welcome["snapshot"]["tabs"][0]["stack"] == [{"id": "p1", "route": "root", "appeared": True, "appearCount": 1}]


# MARK: The HTTP API

async def test_listing_rooms_pages_in_id_order(daemon):
    for room in ["c", "a", "b", "e", "d"]:
        assert call(daemon, "PUT", f"/api/rooms/{room}")[0] == 201
    c = await Client.connect(daemon.ws, room="b")
    status, page, headers = call(daemon, "GET", "/api/rooms?limit=2")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert [r["id"] for r in page["rooms"]] == ["a", "b"] and page["next"] == "b"
    b = page["rooms"][1]
    assert b["clients"] == 1 and b["loaded"] is True and b["seq"] == c.welcome["snapshot"]["seq"]
    status, page, _ = call(daemon, "GET", "/api/rooms?limit=2&after=b")
    assert [r["id"] for r in page["rooms"]] == ["c", "d"] and page["next"] == "d"
    status, page, _ = call(daemon, "GET", "/api/rooms?after=d")
    assert [r["id"] for r in page["rooms"]] == ["e"] and page["next"] is None
    for bad in ("limit=0", "limit=1001", "limit=x", "after=no%20way"):
        status, body, _ = call(daemon, "GET", f"/api/rooms?{bad}")
        assert status == 400 and body["code"] == "invalid", bad


async def test_reading_a_room_gives_its_epoch_and_snapshot(daemon):
    c = await Client.connect(daemon.ws, room="shown")
    await c.command("push", route="detail")
    status, body, _ = call(daemon, "GET", "/api/rooms/shown")
    assert status == 200 and body["room"] == "shown" and body["epoch"] == c.welcome["epoch"]
    _, sync = await c.command("sync")
    assert body["snapshot"] == sync["snapshot"]
    status, body, _ = call(daemon, "GET", "/api/rooms/nowhere")
    assert status == 404 and body == {"type": "error", "code": "unknown_room", "message": body["message"]}


async def test_creating_a_room_with_a_template(daemon):
    tabs = [{"id": "inbox", "title": "Inbox", "icon": "tray", "color": "#112233"},
            {"id": "sent", "title": "Sent", "icon": "paperplane", "color": "#445566", "badge": "3"}]
    status, body, _ = call(daemon, "PUT", "/api/rooms/mail", {"tabs": tabs})
    assert status == 201 and body["room"] == "mail" and body["seq"] == 2 and len(body["epoch"]) == 16
    c = await Client.connect(daemon.ws, room="mail")
    assert [t["id"] for t in c.welcome["snapshot"]["tabs"]] == ["inbox", "sent"]
    assert c.welcome["snapshot"]["tabs"][1]["badge"] == "3"
    status, body, _ = call(daemon, "PUT", "/api/rooms/mail")
    assert status == 409 and body["code"] == "room_exists"
    status, body, _ = call(daemon, "PUT", "/api/rooms/broken", raw=b"{nope")
    assert status == 400 and body["code"] == "bad_json"
    for bad in ({"tabs": []}, {"tabs": [{"id": "BAD ID", "title": "x", "icon": "x", "color": "#000000"}]},
                {"tabs": [tabs[0], tabs[0]]}, {"tabz": tabs}, [1]):
        status, body, _ = call(daemon, "PUT", "/api/rooms/broken", bad)
        assert status == 400 and body["code"] == "invalid", bad
    assert call(daemon, "GET", "/api/rooms/broken")[0] == 404, "a refused creation creates nothing"


async def test_posting_commands_answers_like_the_websocket_and_broadcasts_by_api(daemon):
    c = await Client.connect(daemon.ws, room="driven")
    status, ack, _ = call(daemon, "POST", "/api/rooms/driven/commands", {"type": "select", "tab": "profile", "ref": "x1"})
    assert status == 200 and ack["type"] == "ack" and ack["ref"] == "x1"
    await c.until_seq(ack["seq"])
    assert c.batches[-1]["by"] == "api" and c.batches[-1]["ref"] == "x1"
    assert kinds(c.batches[-1]) == ["selected", "disappear", "firstAppear", "appear"]
    status, snap, _ = call(daemon, "POST", "/api/rooms/driven/commands", {"type": "sync"})
    assert status == 200 and snap["type"] == "snapshot" and snap["snapshot"]["selected"] == "profile"
    status, pong, _ = call(daemon, "POST", "/api/rooms/driven/commands", {"type": "ping", "ref": "p"})
    assert status == 200 and pong == {"type": "pong", "ref": "p"}
    cases = [(b"{", 400, "bad_json"), (b'{"type":"fly"}', 400, "bad_command"),
             (b'{"type":"select","tab":"nope"}', 404, "unknown_tab"),
             (b'{"type":"scroll","offset":-1}', 400, "invalid")]
    for raw, code, name in cases:
        status, body, _ = call(daemon, "POST", "/api/rooms/driven/commands", raw=raw)
        assert (status, body["type"], body["code"]) == (code, "error", name), raw
    # An auto room is created by its first API command.
    status, ack, _ = call(daemon, "POST", "/api/rooms/fresh/commands", {"type": "push", "route": "x"})
    assert status == 200 and ack["type"] == "ack"


async def test_api_commands_are_rate_limited_per_room(make_daemon):
    d = make_daemon("--rate-limit", "2")
    statuses = [call(d, "POST", "/api/rooms/busy/commands", {"type": "ping"})[0] for _ in range(12)]
    assert 429 in statuses and statuses[0] == 200
    status, body, _ = call(d, "POST", "/api/rooms/busy/commands", {"type": "ping"})
    if status == 429:
        assert body["code"] == "rate_limited"


async def test_an_api_command_over_the_rate_limit_is_refused_before_its_body_is_read(make_daemon):
    # The precedence of a connection's frames: rate_limited before bad_json and bad_command,
    # and a refusal that did not read the body names no ref.
    d = make_daemon("--rate-limit", "2")
    assert call(d, "POST", "/api/rooms/strict/commands", {"type": "ping"})[0] == 200
    answers = [call(d, "POST", "/api/rooms/strict/commands", raw=b'{"type":"fly","ref":"r"}') for _ in range(12)]
    assert 429 in [status for status, _, _ in answers], [body for _, body, _ in answers]
    for status, body, _ in answers:
        if status == 429:
            assert body["code"] == "rate_limited" and body.get("ref") is None, body
        else:
            assert (status, body["code"], body["ref"]) == (400, "bad_command", "r"), body
    # A room that does not exist is not created by a body that does not parse.
    assert call(d, "POST", "/api/rooms/never/commands", raw=b'{"type":"fly"}')[0] == 400
    assert call(d, "GET", "/api/rooms/never")[0] == 404


async def test_api_limits_methods_and_bad_ids(daemon):
    status, body, _ = call(daemon, "POST", "/api/rooms/big/commands", raw=b'{"type":"ping","x":"' + b"a" * 70000 + b'"}')
    assert status == 413
    for method, path in [("POST", "/api/rooms"), ("DELETE", "/api/rooms"), ("POST", "/api/rooms/x"),
                         ("GET", "/api/rooms/x/commands"), ("PUT", "/api/rooms/x/commands")]:
        status, body, headers = call(daemon, method, path, raw=b"" if method != "GET" else None)
        assert status == 405 and "Allow" in headers, (method, path)
    for path in ["/api/rooms/a%20b", "/api/rooms/" + "x" * 65, "/api/rooms/a.b/commands"]:
        status, body, _ = call(daemon, "GET" if "commands" not in path else "POST", path, raw=None if "commands" not in path else b"{}")
        assert status == 400 and body["code"] == "invalid", path


async def test_the_api_needs_the_token_when_one_is_set(make_daemon):
    d = make_daemon("--token", "s3cret")
    assert call(d, "GET", "/api/rooms")[0] == 401
    assert call(d, "GET", "/api/rooms?token=wrong")[0] == 401
    assert call(d, "GET", "/api/rooms", headers={"Authorization": "Bearer s3cret"})[0] == 200
    assert call(d, "PUT", "/api/rooms/t?token=s3cret")[0] == 201


async def test_metrics_count_rooms(daemon):
    assert metric(daemon, "tabd_rooms_stored") == 0
    await Client.connect(daemon.ws, room="m1")
    await Client.connect(daemon.ws, room="m2")
    assert metric(daemon, "tabd_rooms_stored") == 2 and metric(daemon, "tabd_rooms_loaded") == 2


# MARK: Independence

def flood(host, frames_each, connections, ready, result):
    """In a process of its own (so that the test's ping loop never waits for this one's
    threads): `connections` sockets of room `flood` send `frames_each` commands as fast as
    the socket takes them, and read until every one is acknowledged."""
    import threading
    import rawws
    sockets = []
    for _ in range(connections):
        s = rawws.connect(host, path="/ws?room=flood")
        opcode, welcome = rawws.recv_frame(s)
        assert json.loads(welcome)["room"] == "flood"
        sockets.append(s)
    ready.set()
    acks = [0] * connections

    errors = []

    def send(s):
        try:
            s.sendall(b"".join(rawws.frame_bytes(b'{"type":"scroll","offset":%d}' % i) for i in range(frames_each)))
        except Exception as e:
            errors.append(e)

    def read(i, s):
        try:
            while acks[i] < frames_each:
                opcode, data = rawws.recv_frame(s)
                if opcode == 8:
                    raise ConnectionError(f"closed: {data[:2].hex()} {data[2:]!r}")
                if opcode == 1 and data.startswith(b'{"type":"ack"'):
                    acks[i] += 1
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=send, args=(s,)) for s in sockets]
    threads += [threading.Thread(target=read, args=(i, s)) for i, s in enumerate(sockets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        print("flood:", e)
    result.value = sum(acks)


@pytest.mark.serial  # a latency bound: run alone (make test-e2e)
async def test_a_flooded_room_does_not_slow_a_quiet_rooms_answers(make_daemon, tmp_path):
    """Four connections of one room send commands as fast as the socket takes them (each
    one a durable batch broadcast to the room), while a client of another room pings."""
    import multiprocessing
    from test_fairness import RELEASE
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    d = make_daemon("--state", str(tmp_path / "s.sqlite"), "--rate-limit", "0", "--log-level", "warn", binary=RELEASE)
    # Each flood connection also receives every batch of the room: 4 × 2,000 commands stay
    # under the default --queue-limit (10,000 frames), so nobody is closed as too slow.
    frames_each, connections = 2000, 4
    quiet = await Client.connect(d.ws, room="quiet")
    ctx = multiprocessing.get_context("fork")
    ready, result = ctx.Event(), ctx.Value("i", 0)
    flooder = ctx.Process(target=flood, args=(d.host, frames_each, connections, ready, result))
    flooder.start()
    assert await asyncio.get_running_loop().run_in_executor(None, ready.wait, WAIT), "the flood connected"
    rtts = []
    deadline = time.monotonic() + 60
    while flooder.is_alive() and time.monotonic() < deadline:
        start = time.perf_counter()
        _, reply = await quiet.command("ping")
        rtts.append(time.perf_counter() - start)
        assert reply["type"] == "pong"
    flooder.join(timeout=WAIT)
    assert result.value == frames_each * connections, "the flood was answered in full"
    assert len(rtts) >= 100, f"only {len(rtts)} pings during the flood"
    rtts.sort()
    p99 = rtts[int(len(rtts) * 0.99) - 1]
    print(f"quiet room: {len(rtts)} pings during the flood, p50 {rtts[len(rtts) // 2] * 1000:.2f} ms, "
          f"p99 {p99 * 1000:.2f} ms, max {rtts[-1] * 1000:.2f} ms")
    assert p99 < 0.020, f"p99 ping round trip in the quiet room {p99 * 1000:.1f} ms while another room was flooded"
    assert quiet.batches == [], "nothing of the flooded room reached the quiet one"
