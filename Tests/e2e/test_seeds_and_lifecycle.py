"""The seed scenarios over the wire, two clients watching; slow and dead peers; graceful stop."""
import asyncio
import json
import signal
import socket
import time

import websockets

import rawws
from conftest import Client, kinds, strip_seq


async def watchers(daemon):
    driver = await Client.connect(daemon.ws, name="driver")
    watcher = await Client.connect(daemon.ws, name="watcher")
    await driver.recv()  # watcher's join
    return driver, watcher


async def same_stream(driver, watcher):
    await watcher.until_seq(driver.last_seq())
    assert watcher.batches == driver.batches[1:]


async def test_seed_000_switching_fires_appear_and_keeps_the_other_tabs_state(daemon):
    driver, watcher = await watchers(daemon)
    await driver.command("push", tab="home", route="detail")
    await driver.command("scroll", tab="home", offset=240)
    await driver.command("set", tab="home", key="draft", value="hello")
    home_before = (await driver.command("sync"))[1]["snapshot"]["tabs"][0]
    away, _ = await driver.command("select", tab="favorites")
    back, _ = await driver.command("select", tab="home")
    assert strip_seq(away) == [
        {"kind": "selected", "from": "home", "to": "favorites"}, {"kind": "disappear", "tab": "home", "page": "p4"},
        {"kind": "firstAppear", "tab": "favorites", "page": "p2"}, {"kind": "appear", "tab": "favorites", "page": "p2"}]
    assert strip_seq(back) == [
        {"kind": "selected", "from": "favorites", "to": "home"}, {"kind": "disappear", "tab": "favorites", "page": "p2"},
        {"kind": "appear", "tab": "home", "page": "p4"}]
    home_after = (await driver.command("sync"))[1]["snapshot"]["tabs"][0]
    home_before["stack"][1]["appearCount"] += 1
    assert home_after == home_before
    await same_stream(driver, watcher)


async def test_seed_002_push_then_pop_appears_again_without_first_appear(daemon):
    driver, watcher = await watchers(daemon)
    await driver.command("set", key="greeting", value="Tapped")
    await driver.command("push", route="pushed")
    pop, _ = await driver.command("pop")
    assert kinds(pop) == ["disappear", "popped", "appear"]
    snap = (await driver.command("sync"))[1]["snapshot"]
    assert snap["tabs"][0]["stack"] == [{"id": "p1", "route": "root", "appeared": True, "appearCount": 2}]
    assert snap["tabs"][0]["values"] == {"greeting": "Tapped"}
    await same_stream(driver, watcher)


async def test_seed_003_tap_pops_to_root_then_scrolls_to_top_with_the_shared_counter(daemon):
    driver, watcher = await watchers(daemon)
    await driver.command("push", route="next")
    await driver.command("push", route="next2")
    await driver.command("scroll", offset=300)
    first, _ = await driver.command("tap", tab="home")
    assert strip_seq(first) == [
        {"kind": "disappear", "tab": "home", "page": "p5"}, {"kind": "popped", "tab": "home", "pages": ["p5", "p4"]},
        {"kind": "appear", "tab": "home", "page": "p1"}]
    second, _ = await driver.command("tap", tab="home")
    assert strip_seq(second) == [{"kind": "scrollToTop", "tab": "home", "count": 1}]
    await driver.command("tap", tab="profile")
    third, _ = await driver.command("tap", tab="profile")
    assert strip_seq(third) == [{"kind": "scrollToTop", "tab": "profile", "count": 2}]
    snap = (await driver.command("sync"))[1]["snapshot"]
    assert snap["scrollToTop"] == 2 and snap["tabs"][0]["scroll"] == 0
    await same_stream(driver, watcher)


async def test_a_client_that_stops_reading_is_closed_and_the_others_get_everything(make_daemon):
    d = make_daemon("--rate-limit", "0", "--queue-limit", "200")
    slow = rawws.connect(d.host, rcvbuf=2048)  # never reads again
    driver = await Client.connect(d.ws, name="driver")
    other = await Client.connect(d.ws, name="other")
    await driver.recv()
    rss_before = d.rss_kib()

    window = asyncio.Semaphore(20)  # commands in flight

    async def read_driver():
        acks = 0
        while acks < 1000:
            if (await driver.recv())["type"] == "ack":
                acks += 1
                window.release()

    async def read_other():
        while not (other.batches and other.batches[-1]["ref"] == "s999"):
            await other.recv()
    readers = [asyncio.create_task(read_driver()), asyncio.create_task(read_other())]
    for i in range(1000):
        await window.acquire()
        await driver.send("set", key="k", value="v" * 4000 + str(i), ref=f"s{i}")
    await asyncio.gather(*readers)
    assert other.batches == driver.batches[1:], "the reader saw every batch, in order"
    values = [b["events"][0]["value"] for b in other.batches if b["events"][0]["kind"] == "valueSet"]
    assert values == ["v" * 4000 + str(i) for i in range(1000)]
    deadline = time.monotonic() + 10
    while "tabd_slow_clients_closed_total 1" not in d.get("/metrics")[1]:
        assert time.monotonic() < deadline, "the slow client was never closed"
        await asyncio.sleep(0.05)
    assert d.rss_kib() - rss_before < 64 * 1024, "memory stayed bounded"
    slow.close()


async def test_a_dead_peer_is_dropped_with_client_left(make_daemon):
    d = make_daemon("--ping-interval", "1")
    watcher = await Client.connect(d.ws, name="watcher")
    dead = rawws.connect(d.host)  # completes the handshake, then never answers a ping
    joined = await watcher.recv()
    dead_id = joined["events"][0]["client"]["id"]
    while True:
        f = await watcher.recv(timeout=15)
        if f["type"] == "events" and f["events"][0]["kind"] == "clientLeft":
            assert f["events"][0]["client"] == dead_id and f["by"] == "tabd"
            break
    dead.close()


async def test_sigterm_closes_every_client_with_1001_and_exits_0(make_daemon):
    d = make_daemon()
    a = await Client.connect(d.ws)
    b = await Client.connect(d.ws)
    _, ack = await a.command("push", route="x")
    d.proc.send_signal(signal.SIGTERM)
    for c in (a, b):
        try:
            while True:
                await c.recv()
        except websockets.exceptions.ConnectionClosed:
            pass
        assert c.ws.close_code == 1001, c.ws.close_code
    assert d.proc.wait(timeout=10) == 0
