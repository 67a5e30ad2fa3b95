"""Bad input gets the contract's answer, loses nothing and leaves other clients untouched."""
import asyncio
import json

import pytest
import websockets

from conftest import Client, kinds

LONG = "x" * 200

BAD_COMMANDS = [
    # (raw frame, code, ref echoed)
    ("not json", "bad_json", None),
    ("[1,2,3]", "bad_json", None),
    ('"a string"', "bad_json", None),
    ('{"type": "select", "tab": "home"', "bad_json", None),
    ('{"ref": "r1"}', "bad_command", "r1"),
    ('{"type": "launch", "ref": "r2"}', "bad_command", "r2"),
    ('{"type": 5, "ref": "r3"}', "bad_command", "r3"),
    ('{"type": "select", "ref": "r4"}', "bad_command", "r4"),
    ('{"type": "select", "tab": 3, "ref": "r5"}', "bad_command", "r5"),
    ('{"type": "scroll", "offset": "10", "ref": "r6"}', "bad_command", "r6"),
    ('{"type": "set", "key": "k", "ref": "r7"}', "bad_command", "r7"),
    ('{"type": "moveTab", "tab": "home", "index": 1.5, "ref": "r8"}', "bad_command", "r8"),
    ('{"type": "ping", "ref": 5}', "bad_command", None),
    ('{"type": "select", "tab": "settings", "ref": "r9"}', "unknown_tab", "r9"),
    ('{"type": "push", "tab": "settings", "route": "", "ref": "r10"}', "unknown_tab", "r10"),
    ('{"type": "removeTab", "tab": "settings", "ref": "r11"}', "unknown_tab", "r11"),
    ('{"type": "push", "route": "", "ref": "r12"}', "invalid", "r12"),
    (json.dumps({"type": "push", "route": LONG, "ref": "r13"}), "invalid", "r13"),
    ('{"type": "scroll", "offset": -1, "ref": "r14"}', "invalid", "r14"),
    ('{"type": "scroll", "offset": 1e999, "ref": "r15"}', "invalid", "r15"),
    (json.dumps({"type": "set", "key": "k", "value": "v" * 5000, "ref": "r16"}), "invalid", "r16"),
    ('{"type": "addTab", "tab": {"id": "home", "title": "H", "icon": "house", "color": "#000000"}, "ref": "r17"}', "invalid", "r17"),
    ('{"type": "addTab", "tab": {"id": "x", "title": "X", "icon": "star", "color": "blue"}, "ref": "r18"}', "invalid", "r18"),
    ('{"type": "moveTab", "tab": "home", "index": 7, "ref": "r19"}', "invalid", "r19"),
    ('{"type": "updateTab", "tab": {"id": "home", "badge": "123456789"}, "ref": "r20"}', "invalid", "r20"),
    (json.dumps({"type": "ping", "ref": "r" * 65}), "invalid", None),
]


@pytest.mark.parametrize("raw,code,ref", BAD_COMMANDS)
async def test_bad_command_gets_its_error_and_the_connection_stays_usable(daemon, raw, code, ref):
    c = await Client.connect(daemon.ws)
    before = (await c.command("sync"))[1]["snapshot"]
    await c.ws.send(raw)
    reply = await c.recv()
    assert reply["type"] == "error" and reply["code"] == code and reply["ref"] == ref, reply
    assert isinstance(reply["message"], str) and reply["message"]
    after = (await c.command("sync"))[1]["snapshot"]
    assert after == before, "a refused command changed nothing"
    _, pong = await c.command("ping")
    assert pong["type"] == "pong"


async def expect_close(ws, code):
    with pytest.raises(websockets.exceptions.ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == code, (ws.close_code, ws.close_reason)


async def test_binary_frame_closes_with_1003(daemon):
    c = await Client.connect(daemon.ws)
    await c.ws.send(b'{"type":"ping"}')
    await expect_close(c.ws, 1003)


async def test_invalid_utf8_closes_with_1007(daemon):
    c = await Client.connect(daemon.ws)
    await c.ws.send(b'{"type":"ping","ref":"\xff\xfe"}', text=True)
    await expect_close(c.ws, 1007)


async def test_message_over_64_kib_closes_with_1009(daemon):
    c = await Client.connect(daemon.ws)
    await c.ws.send(json.dumps({"type": "ping", "pad": "x" * 70_000}))
    await expect_close(c.ws, 1009)


async def test_fragmented_message_over_64_kib_closes_with_1009(daemon):
    c = await Client.connect(daemon.ws)
    try:
        await c.ws.send(iter(['{"type":"ping","pad":"', "x" * 40_000, "x" * 40_000, '"}']))
    except websockets.exceptions.ConnectionClosed:
        pass  # the server may close while the last fragments are still on their way
    await expect_close(c.ws, 1009)


async def test_fragmented_message_is_reassembled(daemon):
    c = await Client.connect(daemon.ws)
    await c.ws.send(iter(['{"type":"pu', 'sh","route":"frag', 'mented","ref":"f1"}']))
    events = await c.recv()
    ack = await c.recv()
    assert kinds(events) == ["pushed", "disappear", "firstAppear", "appear"]
    assert events["events"][0]["route"] == "fragmented"
    assert ack == {"type": "ack", "ref": "f1", "seq": events["events"][-1]["seq"]}


async def test_message_of_exactly_64_kib_is_accepted(daemon):
    c = await Client.connect(daemon.ws)
    head, tail = '{"type":"ping","ref":"big","pad":"', '"}'
    await c.ws.send(head + "x" * (65_536 - len(head) - len(tail)) + tail)
    assert (await c.recv()) == {"type": "pong", "ref": "big"}


async def test_rate_limit_answers_rate_limited_and_recovers(make_daemon):
    d = make_daemon("--rate-limit", "5")
    c = await Client.connect(d.ws)
    for i in range(30):
        await c.send("ping", ref=f"p{i}")
    replies = [await c.recv() for _ in range(30)]
    limited = [r for r in replies if r["type"] == "error"]
    assert limited and all(r["code"] == "rate_limited" and r["ref"] is None for r in limited)
    assert [r["ref"] for r in replies if r["type"] == "pong"] == [f"p{i}" for i in range(10)], "a burst of 2N passes, in order"


async def test_a_barrage_of_bad_input_leaves_other_clients_untouched(daemon):
    watcher = await Client.connect(daemon.ws, name="watcher")
    start = (await watcher.command("sync"))[1]["snapshot"]
    attacker = await Client.connect(daemon.ws, name="attacker")
    for raw, _, _ in BAD_COMMANDS:
        await attacker.ws.send(raw)
    for _ in BAD_COMMANDS:
        assert (await attacker.recv())["type"] == "error"
    await attacker.ws.send(b"\x00binary")
    await expect_close(attacker.ws, 1003)
    for closer in [b'{"x":"\xff"}']:
        c = await Client.connect(daemon.ws)
        await c.ws.send(closer, text=True)
        await expect_close(c.ws, 1007)
    # The watcher's stream holds presence only, and its state is what it was.
    _, reply = await watcher.command("sync")
    now = reply["snapshot"]
    for s in (start, now):
        s.pop("seq"), s.pop("clients"), s.pop("clientCount")
    assert now == start
    assert all(set(kinds(b)) <= {"clientJoined", "clientLeft"} for b in watcher.batches)
    _, ack = await watcher.command("push", route="still-works")
    assert ack["type"] == "ack"
