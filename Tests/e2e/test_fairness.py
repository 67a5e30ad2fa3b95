"""Fairness: frames that are legal but costly to parse, sent by a few connections as fast
as they can, must not hold up another client. Parsing is linear in the input and happens
as each frame arrives, connection by connection, so a `ping` round trip stays short.

The flood lasts until the other client has timed PINGS pings, every one of them sent while
the flood's frames were still being sent (a fixed number of frames is parsed in a fraction
of a second, and pings after it would measure an idle tabd)."""
import json
import os
import threading
import time

import pytest

import rawws
from conftest import ROOT, Client

# Its bound is on latency: it runs alone, not beside the other tests (make test-e2e).
pytestmark = pytest.mark.serial

# The bound is the product's, so the test runs the release build (make test-e2e builds it):
# a debug build parses several times slower.
RELEASE = os.environ.get("TABD_RELEASE_BIN", os.path.join(ROOT, ".build", "release", "tabd"))

FRAME = 60 * 1024
SENDERS = 4
PINGS = 200  # timed while the flood runs
FLOOD_MAX_S = 60  # the flood stops then even if fewer pings came back (and the test fails)


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

    stop = threading.Event()  # set once the pings are timed: the senders stop sending
    errors = []
    sent = [0] * SENDERS
    answered = [0] * SENDERS

    def flood(k):
        try:
            while not stop.is_set():
                rawws.send_text(senders[k], payload)
                sent[k] += 1
            rawws.send_text(senders[k], json.dumps({"type": "ping", "ref": "last"}).encode())
        except Exception as e:  # reported below
            errors.append(e)

    def answers(k):
        # Answers come in the order of the frames: the pong of "last" follows all of them.
        try:
            while True:
                opcode, data = rawws.recv_frame(senders[k])
                f = json.loads(data) if opcode == 1 else {}
                if f.get("type") == "pong" and f.get("ref") == "last":
                    return
                if f.get("type") in ("ack", "error"):
                    answered[k] += 1
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=f, args=(k,)) for k in range(SENDERS) for f in (flood, answers)]
    for t in threads:
        t.start()
    rtts = []
    try:
        deadline = time.monotonic() + FLOOD_MAX_S
        while len(rtts) < PINGS and time.monotonic() < deadline and not errors:
            start = time.perf_counter()
            _, reply = await pinger.command("ping")
            rtts.append(time.perf_counter() - start)
            assert reply["type"] == "pong"
        during = list(sent)  # frames sent so far: the flood was running all along
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    # Every frame was read and answered: the flood really happened.
    assert answered == sent, f"answers {answered} to the frames {sent}"
    assert all(n > 0 for n in during), f"every sender was flooding while the pings were timed: {during}"
    assert len(rtts) == PINGS, f"only {len(rtts)} pings in {FLOOD_MAX_S} s"
    for s in senders:
        s.close()
    rtts.sort()
    p99 = rtts[int(len(rtts) * 0.99) - 1]
    print(f"{shape}: {len(rtts)} pings during {sum(sent)} frames, p50 {rtts[len(rtts) // 2] * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {rtts[-1] * 1000:.1f} ms")
    assert p99 < 0.050, f"p99 ping round trip {p99 * 1000:.1f} ms while {SENDERS} connections sent {shape} frames"
