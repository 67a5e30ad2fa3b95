"""What one peer can cost: connections that ask for snapshots and never read them.

A room holds ~1 MB of values (250 values of 4 KB); a raw socket with a small receive buffer
upgrades, sends `sync` after `sync` and never reads. Each `sync` is ~30 bytes in and a ~1 MB
snapshot out: without a bound in bytes on what tabd queues for a connection, 150 of them grew
tabd by ~150 MB. tabd must close such a connection (1008 `too slow`) with its memory grown by a
bounded amount, keep answering the room's other clients, and keep the sum over many such
connections under its total bound. The release build, as the fairness test."""
import asyncio
import base64
import json
import os
import re
import resource
import socket
import time

import pytest

from conftest import WAIT, Client
from test_closing import frame
from test_fairness import RELEASE

MIB = 1 << 20
VALUE = "v" * 4000           # one value: ~4 KB as compact JSON
VALUES = 250                 # ~1 MB of values in the room


def status_kib(daemon, field):
    with open(f"/proc/{daemon.proc.pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for tabd")


def metric(daemon, name):
    """A counter of /metrics (0 when it has no sample yet, as a labelled one may not)."""
    status, body = daemon.get("/metrics")
    assert status == 200
    m = re.search(rf"^{re.escape(name)} (\d+)$", body, re.M)
    return int(m.group(1)) if m else 0


def wait_metric(daemon, name, at_least, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        value = metric(daemon, name)
        if value >= at_least:
            return value
        assert time.monotonic() < deadline, f"{name} stayed at {value}, below {at_least}, for {timeout} s"
        time.sleep(0.05)


async def fill_room(url, room="main", parts=3):
    """Sets VALUES values of ~4 KB in the room's first tab, from `parts` connections (3: each
    within the default rate limit's burst of 200 commands); returns the seq."""
    seq = 0
    for part in range(parts):
        c = await Client.connect(url + f"?room={room}")
        for i in range(part, VALUES, parts):
            _, reply = await c.command("set", key=f"k{i}", value=VALUE)
            assert reply["type"] == "ack", reply
            seq = reply["seq"]
        await c.close()
    return seq


def non_reader(host, syncs, room="main"):
    """A raw WebSocket that upgrades, sends `syncs` sync frames, and never reads again
    (a 4 KB receive buffer, so little sits in the kernel on its side)."""
    h, port = host.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(WAIT)
    s.connect((h, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws?room={room} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, "closed during the upgrade"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    s.sendall(b"".join(frame(1, json.dumps({"type": "sync", "ref": f"s{i}"}).encode()) for i in range(syncs)))
    return s


async def ping_times(client, count):
    """Round trips of `count` pings, one after the other, in seconds."""
    times = []
    for _ in range(count):
        start = time.monotonic()
        _, reply = await client.command("ping")
        assert reply["type"] == "pong"
        times.append(time.monotonic() - start)
    return times


RATE_LIMITED = 'tabd_errors_total{code="rate_limited"}'


async def test_a_sync_flood_costs_its_snapshots_in_the_byte_budget_with_memory_bounded_and_others_answered(make_daemon):
    """Defaults: each `sync` is charged what its ~1 MB snapshot weighs to the connection's
    byte budget (1 MiB/s, bursts of 2 MiB), so most of the 150 are refused `rate_limited`."""
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    d = make_daemon("--log-level", "warn", binary=RELEASE)
    await fill_room(d.ws)
    other = await Client.connect(d.ws)
    rss_before = status_kib(d, "VmRSS")
    limited_before = metric(d, RATE_LIMITED)
    snapshots_before = metric(d, 'tabd_commands_total{type="sync"}')
    sock = non_reader(d.host, 150)
    try:
        flood_pings = await ping_times(other, 20)
        wait_metric(d, RATE_LIMITED, limited_before + 140)
        flood_pings += await ping_times(other, 5)
        growth_mib = (status_kib(d, "VmHWM") - rss_before) / 1024
        syncs = metric(d, 'tabd_commands_total{type="sync"}') - snapshots_before
        print(f"defaults: {metric(d, RATE_LIMITED) - limited_before} of 150 syncs refused rate_limited; "
              f"peak growth {growth_mib:.1f} MiB; ping max {max(flood_pings) * 1000:.1f} ms")
        assert growth_mib <= 48, f"tabd grew by {growth_mib:.1f} MiB for one connection that does not read"
        assert max(flood_pings) < 1.0, f"another client's ping took {max(flood_pings):.3f} s during the flood"
        assert syncs <= 10, f"{syncs} snapshots built for one connection's flood"
    finally:
        sock.close()
    await other.close()


async def test_a_sync_flood_that_is_never_read_is_closed_with_memory_bounded_and_others_answered(make_daemon):
    """Without a byte budget (`--rate-limit-bytes 0`; 150 frames are within the frame rate's
    burst), the bound on what waits for the connection, `--queue-bytes`, closes it."""
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    d = make_daemon("--log-level", "warn", "--rate-limit-bytes", "0", binary=RELEASE)
    await fill_room(d.ws)
    other = await Client.connect(d.ws)
    before_pings = await ping_times(other, 20)
    rss_before = status_kib(d, "VmRSS")
    closed_before = metric(d, "tabd_slow_clients_closed_total")

    sock = non_reader(d.host, 150)
    try:
        flood_pings = await ping_times(other, 20)
        wait_metric(d, "tabd_slow_clients_closed_total", closed_before + 1)
        flood_pings += await ping_times(other, 5)
        growth_mib = (status_kib(d, "VmHWM") - rss_before) / 1024
        print(f"RSS {rss_before / 1024:.1f} MiB before; peak growth {growth_mib:.1f} MiB; "
              f"ping max {max(before_pings) * 1000:.1f} ms before, {max(flood_pings) * 1000:.1f} ms during")
        assert growth_mib <= 48, f"tabd grew by {growth_mib:.1f} MiB for one connection that does not read"
        # Generous: only a design fault (every snapshot built, held or sent in the room's turn) breaks it.
        assert max(flood_pings) < 1.0, f"another client's ping took {max(flood_pings):.3f} s during the flood"
    finally:
        sock.close()
    # The room is whole and still answers with its ~1 MB snapshot.
    _, snap = await other.command("sync")
    assert len(snap["snapshot"]["tabs"][0]["values"]) == VALUES
    await other.close()


async def test_many_non_readers_together_stay_within_the_total_bound_and_a_reader_keeps_its_stream(make_daemon):
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    total_mib = 40
    d = make_daemon("--log-level", "warn", "--rate-limit-bytes", "0", "--queue-bytes-total", str(total_mib * MIB),
                    binary=RELEASE)
    await fill_room(d.ws)
    reader = await Client.connect(d.ws)
    rss_before = status_kib(d, "VmRSS")
    # Each would be let hold up to 8 MiB (--queue-bytes): 40 of them, 320 MiB, without the total.
    socks = [non_reader(d.host, 6) for _ in range(40)]
    try:
        closed = wait_metric(d, "tabd_slow_clients_closed_total", 1)
        # The reader is served meanwhile, and never closed: its commands' events reach it.
        for i in range(10):
            events, reply = await reader.command("set", key="live", value=i)
            assert reply["type"] == "ack" and events is not None
        growth_mib = (status_kib(d, "VmHWM") - rss_before) / 1024
        print(f"40 non-readers: {closed}+ closed for the total of {total_mib} MiB; peak growth {growth_mib:.1f} MiB")
        # The bound on what is queued, plus what building the snapshots and the allocator cost.
        assert growth_mib <= total_mib + 48, f"tabd grew by {growth_mib:.1f} MiB with a total bound of {total_mib} MiB"
    finally:
        for s in socks:
            s.close()
    await reader.close()


async def test_a_room_refuses_what_would_take_its_state_past_max_room_bytes_and_still_shrinks(make_daemon):
    d = make_daemon("--max-room-bytes", str(64 * 1024), "--queue-bytes", str(128 * 1024))
    c = await Client.connect(d.ws)
    accepted = 0
    while True:
        _, reply = await c.command("set", key=f"k{accepted}", value=VALUE)
        if reply["type"] == "error":
            break
        accepted += 1
        assert accepted < 100, "64 KiB of state took more than 100 values of 4 KB"
    assert reply["code"] == "invalid" and "limit" in reply["message"], reply
    assert 10 <= accepted <= 16, f"{accepted} values of ~4 KB fit in 64 KiB"
    # Pages and tabs count too.
    _, reply = await c.command("push", route="r" * 128)
    pushes = 0
    while reply["type"] == "ack":
        pushes += 1
        _, reply = await c.command("push", route="r" * 128)
    assert reply["code"] == "invalid"
    # Replacing a value with a smaller one, removing one, popping: always allowed.
    for command, fields in [("set", {"key": "k0", "value": "small"}), ("set", {"key": "k1", "value": None}),
                            ("popToRoot", {})]:
        _, reply = await c.command(command, **fields)
        assert reply["type"] == "ack", (command, reply)
    _, reply = await c.command("set", key="again", value=VALUE)
    assert reply["type"] == "ack", "the room shrank below its bound: it may grow again"
    # The snapshot weighs about what was counted.
    _, snap = await c.command("sync")
    size = len(json.dumps(snap["snapshot"], separators=(",", ":")))
    assert size <= 64 * 1024, f"a snapshot of {size} bytes in a room bounded to 64 KiB"
    await c.close()


# ---------------------------------------------------------------------------------------------
# The HTTP API's answers, and what is charged to the byte budget.

def raise_own_file_limit(n):
    """This process and the tabd it starts (which inherits the limit) need `n` descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= n, f"the open-file limit's hard bound is {hard}; this test needs {n}"
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def pipelined_reader(host, path, requests):
    """A raw HTTP/1.1 connection that sends `requests` GETs of `path` in one packet and never
    reads (a 4 KB receive buffer, so little of an answer sits in the kernel on its side)."""
    h, port = host.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(WAIT)
    s.connect((h, int(port)))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() * requests)
    return s


def answer_bytes(daemon, path):
    """The size of `path`'s answer on the wire: status line, headers and body."""
    h, port = daemon.host.rsplit(":", 1)
    with socket.create_connection((h, int(port)), timeout=WAIT) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {daemon.host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(1 << 20):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    # `connection: close` is in this answer only.
    return len(data) - len(b"connection: close\r\n")


async def pings_until(client, done, timeout=120):
    """Ping round trips, one after the other, until `done()` holds (at least one)."""
    times, deadline = [], time.monotonic() + timeout
    while True:
        times += await ping_times(client, 1)
        if done():
            return times
        assert time.monotonic() < deadline, f"the flood was not served within {timeout} s"


@pytest.mark.parametrize("case", ["api, defaults", "api, no rate limits", "a 1 MB file"])
async def test_pipelined_reads_never_read_stay_within_the_total_and_the_room_keeps_answering(make_daemon, tmp_path, case):
    """1,000 connections each send 3 GETs of ~1 MB at once and never read: of the room (a
    ~1 MB snapshot), or of a file of the page. An answer is not read ahead of the one before
    it, one held for a peer that does not take it counts in `--queue-bytes-total` (256 MiB)
    and past it the connections holding the most are closed; at the defaults, the room's API
    byte budget refuses most reads `429` before a snapshot is built. Either way tabd grows by
    at most the total plus 64 MiB, and a WebSocket client of the room keeps its usual round
    trip. (Before: +949 MiB, and the client's ping unanswered for seconds.) The file's
    answers are each read from disk, so each one held is memory of its own."""
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    connections = 1000
    raise_own_file_limit(connections + 512)
    path, args = "/api/rooms/main", ()
    if case == "api, no rate limits":
        args = ("--rate-limit", "0")
    elif case == "a 1 MB file":
        (tmp_path / "index.html").write_text("<!doctype html>")
        (tmp_path / "big.bin").write_bytes(os.urandom(1_000_000))
        path, args = "/big.bin", ("--web-root", str(tmp_path))
    d = make_daemon("--log-level", "warn", *args, binary=RELEASE)
    await fill_room(d.ws)
    other = await Client.connect(d.ws)
    size = answer_bytes(d, path)
    assert size > 1_000_000
    usual = await ping_times(other, 20)
    rss_before = status_kib(d, "VmRSS")
    limited_before = metric(d, RATE_LIMITED)

    def served():
        if case == "api, defaults":
            # Every connection's first read answered: 200 (few) or 429, then its others.
            return metric(d, RATE_LIMITED) - limited_before >= connections - 10
        # Every connection holds its first answer, or was closed for the total.
        held = round(metric(d, "tabd_queued_http_bytes") / size)
        return held + metric(d, "tabd_http_slow_closed_total") >= connections

    socks = []
    try:
        for _ in range(connections):
            socks.append(pipelined_reader(d.host, path, 3))
        flood = await pings_until(other, served)
        flood += await ping_times(other, 5)
        queued = metric(d, "tabd_queued_bytes")
        closed = metric(d, "tabd_http_slow_closed_total")
        growth_mib = (status_kib(d, "VmHWM") - rss_before) / 1024
        print(f"{case}: {connections} x 3 pipelined reads of {size} bytes: peak growth {growth_mib:.1f} MiB, "
              f"tabd_queued_bytes {queued / MIB:.1f} MiB, {closed} closed for the total, "
              f"{metric(d, RATE_LIMITED) - limited_before} refused rate_limited; "
              f"ping max {max(usual) * 1000:.1f} ms before, {max(flood) * 1000:.1f} ms during ({len(flood)} pings)")
        assert queued <= 256 * MIB
        assert growth_mib <= 256 + 64, f"tabd grew by {growth_mib:.1f} MiB for connections that do not read"
        # Generous, as above: only a design fault (every snapshot built in the room's turn, say) breaks it.
        assert max(flood) < 1.0, f"a client of the room waited {max(flood):.3f} s for its pong during the flood"
    finally:
        for s in socks:
            s.close()
    # Nothing stays counted once they are gone.
    deadline = time.monotonic() + WAIT
    while metric(d, "tabd_queued_http_bytes") != 0:
        assert time.monotonic() < deadline, "answers of closed connections still counted"
        await asyncio.sleep(0.05)
    await other.close()


async def flood_in_lockstep(client, type_, seconds, **fields):
    """Sends `type_` again as soon as each answer arrives, for `seconds`. Returns the bytes of
    the answers that were not refused, how many there were, how many were refused
    `rate_limited`, and the seconds it took."""
    start = time.monotonic()
    answered_bytes = answered = refused = 0
    while time.monotonic() - start < seconds:
        await client.send(type_, **fields)
        # One at a time, so the next answer is this one's (a refusal has no ref: it was not parsed).
        reply = await client.recv()
        while reply["type"] in ("events", "presence"):
            reply = await client.recv()
        if reply["type"] == "error":
            assert reply["code"] == "rate_limited", reply
            refused += 1
        else:
            assert reply["type"] == {"sync": "snapshot"}.get(type_, type_), reply
            answered += 1
            answered_bytes += len(json.dumps(reply, separators=(",", ":")))
    client.frames.clear()
    return answered_bytes, answered, refused, time.monotonic() - start


async def test_a_sync_flood_is_charged_every_byte_of_its_snapshots(make_daemon):
    """A `sync` costs what its snapshot weighs, all of it, even past a burst of the byte budget
    (before: one burst at most, so a ~1 MB snapshot cost 256 KiB of a 128 KiB/s budget and a
    client got 3 MB in 4 s)."""
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    rate = 128 * 1024
    d = make_daemon("--log-level", "warn", "--rate-limit-bytes", str(rate), binary=RELEASE)
    await fill_room(d.ws, parts=6)  # 6 connections: each within the burst of 256 KiB
    c = await Client.connect(d.ws)
    got, answered, refused, elapsed = await flood_in_lockstep(c, "sync", 4)
    size = got // max(answered, 1)
    budget = 2 * rate + rate * elapsed
    print(f"sync flood at {rate} B/s for {elapsed:.1f} s: {answered} snapshots of {size} bytes, {refused} refused")
    assert answered >= 1 and refused > 0
    # A burst, the rate, and the one snapshot that goes out however large it is.
    assert got <= budget + size, f"{got} bytes of snapshots in {elapsed:.1f} s at {rate} bytes per second"
    await c.close()


async def test_a_clients_flood_is_charged_what_its_pages_weigh(make_daemon):
    """A `clients` page costs its bytes when it is sent (before: nothing, so a connection could
    have a page of every client sent to it at the frame rate)."""
    rate = 2048
    d = make_daemon("--log-level", "warn", "--rate-limit-bytes", str(rate))
    members = [await Client.connect(d.ws, name=f"m{i:02d}" + "x" * 60) for i in range(90)]
    c = await Client.connect(d.ws)
    got, answered, refused, elapsed = await flood_in_lockstep(c, "clients", 3, limit=1000)
    size = got // max(answered, 1)
    assert size > 90 * 64
    print(f"clients flood at {rate} B/s for {elapsed:.1f} s: {answered} pages of {size} bytes, {refused} refused")
    assert answered >= 1 and refused > 0
    # A burst, the rate, and a page beyond: a page is charged once sent, so the budget's
    # last one may take it into debt.
    assert got <= 2 * rate + rate * elapsed + 2 * size, f"{got} bytes of pages in {elapsed:.1f} s at {rate} bytes per second"
    await c.close()
    # The members read nothing (their presence events fill their queues): dropped, not closed.
    for m in members:
        m.ws.transport.abort()


async def test_frames_held_before_the_welcome_count_toward_the_connection_bound(make_daemon):
    """What a connection sends before its welcome is kept until then, and counts toward its
    `--queue-bytes`: past it, it is closed 1008 `too slow` (before: up to 64 frames of 64 KiB
    were kept outside every bound). 40 other connections upgrade just before it, so the room
    encodes their welcomes (a ~1 MB snapshot each) before its own, long after its frames."""
    queue_bytes = 2_400_000
    d = make_daemon("--log-level", "warn", "--rate-limit", "0", "--max-room-bytes", str(queue_bytes // 2),
                    "--queue-bytes", str(queue_bytes))
    await fill_room(d.ws)
    h, port = d.host.rsplit(":", 1)
    key = base64.b64encode(os.urandom(16)).decode()
    early = [frame(1, json.dumps({"type": "set", "key": f"e{i}", "value": "v" * 60_000}).encode()) for i in range(45)]
    assert sum(map(len, early)) > queue_bytes
    readers = []
    try:
        for _ in range(40):
            r = socket.create_connection((h, int(port)), timeout=WAIT)
            r.sendall((f"GET /ws?room=main HTTP/1.1\r\nHost: {d.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            readers.append(r)
        s = socket.create_connection((h, int(port)), timeout=WAIT)
        s.sendall((f"GET /ws?room=main HTTP/1.1\r\nHost: {d.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode() + b"".join(early))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, "closed during the upgrade"
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        # The first frame it gets: the close, before any welcome.
        while len(rest) < 4:
            chunk = s.recv(4096)
            assert chunk, "closed without a close frame"
            rest += chunk
        assert rest[0] == 0x88, f"a frame of opcode {rest[0] & 0x0F} before the close: {rest[:80]!r}"
        n = rest[1] & 0x7F
        while len(rest) < 2 + n:
            rest += s.recv(4096)
        code = int.from_bytes(rest[2:4], "big")
        assert (code, rest[4:2 + n]) == (1008, b"too slow"), rest[:2 + n]
        s.close()
    finally:
        for r in readers:
            r.close()
    # The room is whole, and the frames of the closed connection were never applied.
    c = await Client.connect(d.ws)
    _, snap = await c.command("sync")
    values = snap["snapshot"]["tabs"][0]["values"]
    assert len(values) == VALUES and "e0" not in values
    await c.close()
