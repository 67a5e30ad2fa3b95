"""A room's stream over plain HTTP (`GET /api/rooms/ID/events`, server-sent events) against a
real tabd: a reader resumed ten times under load gets exactly the room's history; a reader is
no client (no join, no leave); one that does not read is closed at --queue-bytes while the
room goes on; resumes across epochs and windows; credentials; a deleted room ends its
streams."""
import asyncio
import random
import re
import threading

import pytest

from conftest import WAIT, Client
from sse import EventStream, StreamClosed, wait_until
from test_auth import claims, key_file, sign  # noqa: F401 (key_file is a fixture)
from test_rooms import call
from test_schema import validator


def metric(d, name):
    status, body = d.get("/metrics")
    assert status == 200
    return int(re.search(rf"^{name} (\d+)$", body, re.M).group(1))


def flat(batches):
    return [e for b in batches for e in b["events"]]


async def load(client, stop, tabs):
    """About 60 commands a second (under the room's rate limit) until `stop` is set:
    selections, pushes, scrolls and values, each acked."""
    n = 0
    while not stop.is_set():
        await asyncio.sleep(0.015)
        n += 1
        tab = tabs[n % len(tabs)]
        kind = n % 4
        if kind == 0:
            _, reply = await client.command("select", tab=tab)
        elif kind == 1:
            _, reply = await client.command("push", tab=tab, route=f"r{n}")
        elif kind == 2:
            _, reply = await client.command("scroll", tab=tab, offset=n % 500)
        else:
            _, reply = await client.command("set", tab=tab, key="k", value=n)
        assert reply["type"] == "ack", reply
    return n


async def test_a_reader_resumed_ten_times_under_load_gets_exactly_the_rooms_history(daemon):
    assert call(daemon, "PUT", "/api/rooms/r")[0] == 201
    observer = await Client.connect(daemon.ws, room="r", name="observer")
    worker = await Client.connect(daemon.ws, room="r", name="worker")
    tabs = [t["id"] for t in worker.welcome["snapshot"]["tabs"]]
    stop = asyncio.Event()
    loading = asyncio.create_task(load(worker, stop, tabs))
    got = []          # every batch the reader got, in order
    snapshots = []    # the snapshot events it got
    rng = random.Random(7)

    def read(last, n):
        """One connection of the reader: resumes after `last`, reads `n` events, leaves."""
        headers = {"Last-Event-ID": str(last)} if last is not None else {}
        s = EventStream(daemon.http, "/api/rooms/r/events", headers)
        assert s.status == 200 and s.headers["content-type"].startswith("text/event-stream"), s.head_bytes
        try:
            for _ in range(n):
                e = s.next_event()
                assert re.fullmatch(r"\d+", e["id"]), e["id"]
                assert not list(validator("room-stream-event.json").iter_errors(e["data"])), e["data"]
                if e["data"]["type"] == "snapshot":
                    snapshots.append(e["data"])
                    assert int(e["id"]) == e["data"]["snapshot"]["seq"]
                else:
                    assert e["data"]["type"] == "events"
                    assert int(e["id"]) == e["data"]["events"][-1]["seq"]
                    got.append(e["data"])
                last = int(e["id"])
        finally:
            s.close()
        return last

    def follow():
        last = None
        for _ in range(11):  # the first connection and ten resumes
            last = read(last, rng.randint(3, 40))
        return last

    last = await asyncio.get_running_loop().run_in_executor(None, follow)
    stop.set()
    await loading
    final = worker.last_seq()
    await observer.until_seq(final)
    # The rest, on one more resume.
    while last < final:
        last = await asyncio.get_running_loop().run_in_executor(None, read, last, 1)

    assert len(snapshots) == 1, "every resume was within the window: only the first connection got a snapshot"
    start = snapshots[0]["snapshot"]["seq"]
    seen = flat(got)
    assert [e["seq"] for e in seen] == list(range(start + 1, final + 1)), "no gap, no duplicate"
    expected = [e for e in flat(observer.batches) if start < e["seq"] <= final]
    assert seen == expected, "exactly the room's history, as a connection saw it"
    # The reader came and went eleven times, and is no client: the only joins are the worker's.
    joined = [e for e in flat(observer.batches) if e["kind"] == "clientJoined"]
    assert [e["client"]["name"] for e in joined] == ["worker"]
    assert not [e for e in flat(observer.batches) if e["kind"] == "clientLeft"]
    await observer.close()
    await worker.close()


async def test_a_reader_is_counted_as_a_stream_not_a_client(daemon):
    c = await Client.connect(daemon.ws)
    s = EventStream(daemon.http, "/api/rooms/main/events")
    assert s.next_event()["data"]["type"] == "snapshot"
    assert metric(daemon, "tabd_clients") == 1
    assert metric(daemon, "tabd_event_streams") == 1
    s.close()
    wait_until(lambda: metric(daemon, "tabd_event_streams") == 0, what="the stream's end")
    _, reply = await c.command("ping")
    assert reply["type"] == "pong"
    await c.close()


async def test_a_reader_that_does_not_read_is_closed_and_the_room_goes_on(make_daemon):
    d = make_daemon("--max-room-bytes", "32768", "--queue-bytes", "65536", "--rate-limit", "0", "--rate-limit-bytes", "0")
    worker = await Client.connect(d.ws, name="worker")
    tab = worker.welcome["snapshot"]["tabs"][0]["id"]
    stuck = EventStream(d.http, "/api/rooms/main/events", rcvbuf=4096)
    assert stuck.next_event()["data"]["type"] == "snapshot"
    reader = EventStream(d.http, "/api/rooms/main/events")
    assert reader.next_event()["data"]["type"] == "snapshot"
    assert metric(d, "tabd_event_streams") == 2
    # Big batches until the stuck reader is past its 64 KiB (and the kernel's buffers).
    n = 0
    while metric(d, "tabd_event_streams") == 2:
        n += 1
        assert n < 2000, "a reader that reads nothing was never closed"
        _, reply = await worker.command("set", tab=tab, key="big", value="x" * 4000 + str(n))
        assert reply["type"] == "ack", reply
        while reader.next_event()["data"]["events"][-1]["seq"] < reply["seq"]:
            pass  # the reading reader keeps up with every batch
    final = worker.last_seq()
    # The stuck reader's stream ended before the room's last batch.
    with pytest.raises(StreamClosed):
        while True:
            stuck.next_event()
    stuck.close()
    assert metric(d, "tabd_event_streams") == 1
    _, reply = await worker.command("ping")
    assert reply["type"] == "pong"
    reader.close()
    again = EventStream(d.http, "/api/rooms/main/events")
    first = again.next_event()
    assert first["data"]["type"] == "snapshot" and first["data"]["snapshot"]["seq"] == final
    again.close()
    await worker.close()


async def test_resumes_across_epochs_windows_and_bad_positions(make_daemon):
    d = make_daemon("--resume-window", "8")
    c = await Client.connect(d.ws)
    tab = c.welcome["snapshot"]["tabs"][1]["id"]
    epoch = c.welcome["epoch"]
    s = EventStream(d.http, "/api/rooms/main/events")
    first = s.next_event()
    assert first["data"]["epoch"] == epoch and first["data"]["room"] == "main"
    events, _ = await c.command("select", tab=tab)
    after_select = int(s.next_event()["id"])
    assert after_select == events["events"][-1]["seq"]
    s.close()
    # The same epoch: the batches after the id.
    await c.command("push", tab=tab, route="x")
    r = EventStream(d.http, f"/api/rooms/main/events?epoch={epoch}", {"Last-Event-ID": str(after_select)})
    e = r.next_event()
    assert e["data"]["type"] == "events" and e["data"]["events"][0]["seq"] == after_select + 1
    r.close()
    # `after` as a query does the same; Last-Event-ID wins over it (EventSource sends both).
    r = EventStream(d.http, f"/api/rooms/main/events?after=0", {"Last-Event-ID": str(after_select)})
    assert r.next_event()["data"]["events"][0]["seq"] == after_select + 1
    r.close()
    # Another epoch: a snapshot, never another history's batches.
    r = EventStream(d.http, f"/api/rooms/main/events?epoch=0123456789abcdef&after={after_select}")
    assert r.next_event()["data"]["type"] == "snapshot"
    r.close()
    # Out of the window: a snapshot, never a gap.
    for n in range(12):
        await c.command("scroll", tab=tab, offset=n)
    r = EventStream(d.http, f"/api/rooms/main/events?after={after_select}")
    e = r.next_event()
    assert e["data"]["type"] == "snapshot" and e["data"]["snapshot"]["seq"] == c.last_seq()
    r.close()
    # A position in the future: a snapshot too.
    r = EventStream(d.http, "/api/rooms/main/events?after=999999")
    assert r.next_event()["data"]["type"] == "snapshot"
    r.close()
    for bad in ("-1", "1e3", "x", "99999999999999999999"):
        r = EventStream(d.http, f"/api/rooms/main/events?after={bad}")
        assert r.status == 400 and r.error()["code"] == "invalid", (bad, r.body)
        r.close()
    r = EventStream(d.http, "/api/rooms/nosuch/events")
    assert r.status == 404 and r.error()["code"] == "unknown_room"
    r.close()
    status, body, headers = call(d, "POST", "/api/rooms/main/events", raw=b"")
    assert status == 405 and headers["allow"] == "GET"
    await c.close()


async def test_a_stream_needs_the_apis_credentials(make_daemon, key_file):  # noqa: F811
    d = make_daemon("--auth-secret-file", key_file)
    every = sign(claims(room="*", role="admin"))
    assert call(d, "PUT", "/api/rooms/main", headers={"Authorization": f"Bearer {every}"})[0] == 201
    admin = sign(claims(room="main", role="admin"))
    r = EventStream(d.http, "/api/rooms/main/events")
    assert r.status == 401 and r.error()["code"] == "unauthorized"
    r.close()
    control = sign(claims(room="main", role="control"))
    r = EventStream(d.http, "/api/rooms/main/events", {"Authorization": f"Bearer {control}"})
    assert r.status == 403 and r.error()["code"] == "forbidden"
    r.close()
    r = EventStream(d.http, "/api/rooms/main/events", {"Authorization": f"Bearer {admin}"})
    assert r.status == 200 and r.next_event()["data"]["type"] == "snapshot"
    r.close()


async def test_deleting_a_room_ends_its_streams(daemon):
    assert call(daemon, "PUT", "/api/rooms/gone")[0] == 201
    s = EventStream(daemon.http, "/api/rooms/gone/events")
    assert s.next_event()["data"]["type"] == "snapshot"
    assert call(daemon, "DELETE", "/api/rooms/gone")[0] == 204
    with pytest.raises(StreamClosed):
        s.next_event()
    s.close()
    again = EventStream(daemon.http, "/api/rooms/gone/events")
    assert again.status == 404
    again.close()
    wait_until(lambda: metric(daemon, "tabd_event_streams") == 0, what="the stream's end")


def test_many_readers_come_and_go_while_the_room_runs(make_daemon):
    """Readers that vanish mid-stream (a socket closed without a word) leave nothing behind."""
    daemon = make_daemon("--rate-limit", "0")
    assert call(daemon, "PUT", "/api/rooms/main")[0] == 201
    errors = []

    def reader(k):
        try:
            for _ in range(5):
                s = EventStream(daemon.http, "/api/rooms/main/events")
                assert s.status == 200, s.body
                s.next_event()
                s.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(20)]
    for t in threads:
        t.start()
    for _ in range(50):
        assert call(daemon, "POST", "/api/rooms/main/commands", {"type": "scroll", "tab": "home", "offset": 3})[0] == 200
    for t in threads:
        t.join(WAIT)
    assert not errors, errors
    wait_until(lambda: metric(daemon, "tabd_event_streams") == 0, what="every stream's end")
