"""Fairness: frames that are legal but costly to parse, sent by a few connections as fast
as they can, must not hold up another client. Parsing is linear in the input and happens
as each frame arrives, connection by connection, so a `ping` round trip stays short."""
import json
import os
import threading
import time

import pytest

import rawws
from conftest import ROOT, Client

# The bound is the product's, so the test runs the release build (make test-e2e builds it):
# a debug build parses several times slower.
RELEASE = os.environ.get("TABD_RELEASE_BIN", os.path.join(ROOT, ".build", "release", "tabd"))

FRAME = 60 * 1024
SENDERS = 4
FRAMES_EACH = 60


def many_keys():
    members, i = [], 0
    while sum(len(m) + 1 for m in members) < FRAME - 64:
        members.append(f'"k{i}":{i}')
        i += 1
    return ('{"type":"set","key":"big","value":{' + ",".join(members) + "}}").encode()


def escapes():
    return ('{"type":"set","key":"big","value":"' + "\\u00e9" * ((FRAME - 64) // 6) + '"}').encode()


def deep_nesting():
    # Side by side, arrays nested to just under the parser's depth limit (128).
    deep = "[" * 120 + "]" * 120
    return ('{"type":"set","key":"big","value":[' + ",".join([deep] * ((FRAME - 64) // 241)) + "]}").encode()


SHAPES = {"many_keys": many_keys, "escapes": escapes, "deep_nesting": deep_nesting}


@pytest.mark.parametrize("shape", SHAPES)
async def test_costly_frames_from_four_connections_do_not_hold_up_another_clients_ping(make_daemon, shape):
    payload = SHAPES[shape]()
    assert FRAME - 1024 < len(payload) <= FRAME
    # No rate limit: the parser itself must be fair, not the limiter.
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    d = make_daemon("--rate-limit", "0", "--log-level", "warn", binary=RELEASE)
    senders = []
    for _ in range(SENDERS):
        s = rawws.connect(d.host)
        opcode, welcome = rawws.recv_frame(s)  # frames before the welcome are not read
        assert opcode == 1 and json.loads(welcome)["type"] == "welcome"
        senders.append(s)
    pinger = await Client.connect(d.ws, name="pinger")

    done = threading.Event()
    errors = []

    def flood(s):
        try:
            for _ in range(FRAMES_EACH):
                rawws.send_text(s, payload)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=flood, args=(s,)) for s in senders]
    for t in threads:
        t.start()
    watcher = threading.Thread(target=lambda: ([t.join() for t in threads], done.set()))
    watcher.start()

    rtts = []
    deadline = time.monotonic() + 60
    while (not done.is_set() or len(rtts) < 100) and time.monotonic() < deadline:
        start = time.perf_counter()
        _, reply = await pinger.command("ping")
        rtts.append(time.perf_counter() - start)
        assert reply["type"] == "pong"
    watcher.join()
    assert not errors, errors
    # The senders' frames were all read and answered: the flood really happened.
    for s in senders:
        answered = 0
        while answered < FRAMES_EACH:
            opcode, data = rawws.recv_frame(s)
            if opcode == 1 and json.loads(data)["type"] in ("ack", "error"):
                answered += 1
        s.close()
    rtts.sort()
    p99 = rtts[int(len(rtts) * 0.99) - 1]
    print(f"{shape}: {len(rtts)} pings, p50 {rtts[len(rtts) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {rtts[-1] * 1000:.1f} ms")
    assert p99 < 0.050, f"p99 ping round trip {p99 * 1000:.1f} ms while {SENDERS} connections sent {shape} frames"
