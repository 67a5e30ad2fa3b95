"""The wire protocol against a real tabd: welcome, every command's answer, fan-out, resume, HTTP."""
import asyncio
import json

import pytest
import websockets

from conftest import Client, kinds, strip_seq


async def test_welcome_carries_a_snapshot_that_includes_the_join(daemon):
    c = await Client.connect(daemon.ws, name="kiosk-1")
    w = c.welcome
    assert w["protocol"] == 1 and w["server"].startswith("tabd ")
    assert w["resumed"] is False
    snap = w["snapshot"]
    assert [t["id"] for t in snap["tabs"]] == ["home", "favorites", "profile"]
    assert [(t["icon"], t["color"]) for t in snap["tabs"]] == [("house", "#FF3B30"), ("heart", "#007AFF"), ("person", "#34C759")]
    assert snap["selected"] == "home"
    assert snap["tabs"][0]["stack"] == [{"id": "p1", "route": "root", "appeared": True, "appearCount": 1}]
    assert snap["clients"] == [{"id": w["client"], "name": "kiosk-1"}]
    assert snap["seq"] == 3  # first appear (1, 2), then this join
    await c.close()


async def test_subprotocol_tabd_v1_is_accepted(daemon):
    async with websockets.connect(daemon.ws, subprotocols=["tabd.v1"]) as ws:
        assert ws.subprotocol == "tabd.v1"
        assert json.loads(await ws.recv())["type"] == "welcome"


async def test_every_command_is_answered_and_two_clients_see_identical_frames(daemon):
    a = await Client.connect(daemon.ws, name="a")
    b = await Client.connect(daemon.ws, name="b")
    await a.recv()  # b's clientJoined
    script = [
        ("select", {"tab": "favorites"}, "ack", ["selected", "disappear", "firstAppear", "appear"]),
        ("select", {"tab": "favorites"}, "ack", None),
        ("tap", {"tab": "home"}, "ack", ["selected", "disappear", "appear"]),
        ("push", {"route": "next"}, "ack", ["pushed", "disappear", "firstAppear", "appear"]),
        ("pop", {"tab": "home"}, "ack", ["disappear", "popped", "appear"]),
        ("push", {"tab": "home", "route": "a"}, "ack", ["pushed", "disappear", "firstAppear", "appear"]),
        ("popToRoot", {}, "ack", ["disappear", "popped", "appear"]),
        ("tap", {"tab": "home"}, "ack", ["scrollToTop"]),
        ("scroll", {"tab": "profile", "offset": 12.5}, "ack", ["scrolled"]),
        ("set", {"key": "greeting", "value": {"text": "Tapped", "n": [1, 2.5]}}, "ack", ["valueSet"]),
        ("addTab", {"tab": {"id": "mail", "title": "Mail", "icon": "envelope", "color": "#ff9500"}, "index": 1}, "ack", ["tabAdded"]),
        ("updateTab", {"tab": {"id": "mail", "badge": "3"}}, "ack", ["tabUpdated"]),
        ("moveTab", {"tab": "mail", "index": 3}, "ack", ["tabMoved"]),
        ("removeTab", {"tab": "mail"}, "ack", ["tabRemoved"]),
        ("ping", {}, "pong", None),
        ("sync", {}, "snapshot", None),
        ("select", {"tab": "nope"}, "error", None),
    ]
    for type_, fields, reply_type, expected_kinds in script:
        events, reply = await a.command(type_, **fields)
        assert reply["type"] == reply_type, (type_, reply)
        if expected_kinds is None:
            assert events is None, (type_, events)
        else:
            assert kinds(events) == expected_kinds, type_
            assert reply["seq"] == events["events"][-1]["seq"], "ack names the command's last event"
    await b.until_seq(a.last_seq())
    assert b.batches == a.batches[1:], "b sees exactly the frames a saw after b joined"
    last = a.frames[-1]
    assert last == {"type": "error", "ref": last["ref"], "code": "unknown_tab", "message": "no tab 'nope'"}
    snap = [f for f in a.frames if f["type"] == "snapshot"][0]["snapshot"]
    assert snap["scrollToTop"] == 1
    assert snap["tabs"][0]["values"] == {"greeting": {"text": "Tapped", "n": [1, 2.5]}}
    assert snap["tabs"][2]["scroll"] == 12.5


async def test_events_frame_reaches_the_sender_before_its_ack(daemon):
    a = await Client.connect(daemon.ws)
    ref = await a.send("push", route="x")
    first = await a.recv()
    second = await a.recv()
    assert (first["type"], first["ref"]) == ("events", ref)
    assert (second["type"], second["ref"]) == ("ack", ref)


async def test_resume_after_a_disconnect_gets_exactly_the_missed_batches(daemon):
    a = await Client.connect(daemon.ws, name="a")
    b = await Client.connect(daemon.ws, name="b")
    epoch, seen = b.welcome["epoch"], b.last_seq()
    await b.close()
    await a.command("push", route="while-away")
    await a.command("scroll", offset=10)
    await a.until_seq(a.last_seq())
    back = await Client.connect(daemon.ws, name="b", resume=seen, epoch=epoch)
    assert back.welcome["resumed"] is True and "snapshot" not in back.welcome
    await back.until_seq(a.last_seq() + 1)  # a's frames, then back's own join
    missed = [f for f in a.batches if f["events"][0]["seq"] > seen]
    assert back.batches[:len(missed)] == missed
    assert kinds(back.batches[-1]) == ["clientJoined"]


@pytest.mark.parametrize("resume", ["1", "999", "abc"])
async def test_resume_that_cannot_be_served_gets_a_snapshot(daemon, resume):
    c = await Client.connect(daemon.ws, resume=resume)
    assert c.welcome["resumed"] is False and c.welcome["snapshot"]["seq"] == 3


async def test_resume_from_another_epoch_gets_a_snapshot(daemon):
    c = await Client.connect(daemon.ws, resume="2", epoch="another")
    assert c.welcome["resumed"] is False


async def test_resume_older_than_the_window_gets_a_snapshot(make_daemon):
    d = make_daemon("--resume-window", "5")
    a = await Client.connect(d.ws)
    for i in range(10):
        await a.command("scroll", offset=i)
    c = await Client.connect(d.ws, resume="3", epoch=a.welcome["epoch"])
    assert c.welcome["resumed"] is False


def test_http_health_metrics_static_file_and_404(daemon):
    assert daemon.get("/healthz") == (200, "ok")
    status, body = daemon.get("/metrics")
    assert status == 200
    for name in ["tabd_clients", "tabd_seq", "tabd_scroll_to_top_count", 'tabd_commands_total{type="select"}',
                 "tabd_events_total", 'tabd_errors_total{code="unknown_tab"}', "tabd_slow_clients_closed_total"]:
        assert name in body, name
    status, body = daemon.get("/")
    assert status == 200 and "<html" in body.lower()
    assert daemon.get("/no-such-file")[0] == 404


async def test_metrics_count_commands_errors_and_the_counter(daemon):
    a = await Client.connect(daemon.ws)
    await a.command("tap", tab="home")
    await a.command("select", tab="nope")
    body = daemon.get("/metrics")[1]
    assert "tabd_scroll_to_top_count 1" in body
    assert 'tabd_commands_total{type="tap"} 1' in body
    assert 'tabd_errors_total{code="unknown_tab"} 1' in body
    assert "tabd_clients 1" in body


async def test_upgrade_on_another_path_is_refused(daemon):
    with pytest.raises(websockets.exceptions.InvalidStatus):
        await websockets.connect(daemon.ws.replace("/ws", "/other"))


async def test_browser_origin_must_match_the_host(daemon):
    host = daemon.host
    async with websockets.connect(daemon.ws, origin=f"http://{host}") as ws:
        assert json.loads(await ws.recv())["type"] == "welcome"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        await websockets.connect(daemon.ws, origin="http://evil.example")
    assert refused.value.response.status_code == 403


async def test_allow_origin_admits_another_origin(make_daemon):
    d = make_daemon("--allow-origin", "http://dev.local:3000")
    async with websockets.connect(d.ws, origin="http://dev.local:3000") as ws:
        assert json.loads(await ws.recv())["type"] == "welcome"


async def test_token_is_required_on_ws_and_metrics(make_daemon):
    d = make_daemon("--token", "s3cret")
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        await websockets.connect(d.ws)
    assert refused.value.response.status_code == 401
    c = await Client.connect(d.ws, token="s3cret")
    async with websockets.connect(d.ws, additional_headers={"Authorization": "Bearer s3cret"}) as ws:
        assert json.loads(await ws.recv())["type"] == "welcome"
    assert d.get("/metrics")[0] == 401
    assert d.get("/metrics?token=s3cret")[0] == 200
    assert d.get("/healthz")[0] == 200
    await c.close()


async def test_max_clients_refuses_with_503(make_daemon):
    d = make_daemon("--max-clients", "2")
    a = await Client.connect(d.ws)
    b = await Client.connect(d.ws)
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        await websockets.connect(d.ws)
    assert refused.value.response.status_code == 503
    await a.close()
    await b.close()
