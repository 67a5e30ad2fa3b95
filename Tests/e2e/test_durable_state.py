"""Durable state: restarts and kill -9 lose nothing acknowledged; bad files are refused
untouched; a full disk answers `unavailable` and tabd recovers when space returns."""
import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import urllib.request

import pytest
import websockets

from conftest import TABD, Client, kinds, strip_seq
from replay import replay


@pytest.fixture
def state_file(tmp_path):
    (tmp_path / "state").mkdir()  # a directory named with --state must exist
    return str(tmp_path / "state" / "tabd.sqlite")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


async def test_a_restart_keeps_everything_and_continues_seqs_and_page_ids(make_daemon, state_file):
    d = make_daemon("--state", state_file)
    a = await Client.connect(d.ws, name="a")
    await a.command("select", tab="favorites")
    await a.command("select", tab="home")
    await a.command("push", route="detail")
    await a.command("set", key="greeting", value={"text": "Tapped"})
    await a.command("tap", tab="home")
    await a.command("tap", tab="home")  # scroll to top: counter 1
    await a.command("addTab", tab={"id": "mail", "title": "Mail", "icon": "envelope", "color": "#FF9500"})
    await a.command("moveTab", tab="mail", index=0)
    before = (await a.command("sync"))[1]["snapshot"]
    last_seq, epoch = a.last_seq(), a.welcome["epoch"]
    assert d.stop() == 0

    d2 = make_daemon("--state", state_file)
    b = await Client.connect(d2.ws, name="b", resume=last_seq, epoch=epoch)
    assert b.welcome["epoch"] == epoch and b.welcome["resumed"] is True
    await b.until_seq(last_seq + 2)
    assert [kinds(f) for f in b.batches] == [["clientLeft"], ["clientJoined"]], "a's departure, then b's join"
    after = (await b.command("sync"))[1]["snapshot"]
    for s in (before, after):
        for k in ("seq", "clients", "clientCount"):
            s.pop(k)
    assert after == before
    assert after["scrollToTop"] == 1
    select, _ = await b.command("select", tab="favorites")
    assert strip_seq(select) == [{"kind": "selected", "from": "home", "to": "favorites"},
                                 {"kind": "disappear", "tab": "home", "page": "p1"},
                                 {"kind": "appear", "tab": "favorites", "page": "p2"}], "no second firstAppear"
    push, _ = await b.command("push", route="next")
    assert push["events"][0]["page"] == "p6", "page ids continue (p4 pushed, p5 mail's root)"
    assert push["events"][0]["seq"] == last_seq + 2 + 3 + 1, "seqs continue: leave, join, select, then the push"


async def test_kill_9_loses_no_acknowledged_command(make_daemon, state_file):
    d = make_daemon("--state", state_file, "--rate-limit", "0")
    a = await Client.connect(d.ws, name="writer")
    epoch = a.welcome["epoch"]
    acked = {}
    window = asyncio.Semaphore(64)
    commands = [("push", {"route": "r"}), ("set", {"key": "k", "value": 1}), ("pop", {}),
                ("scroll", {"offset": 3.5}), ("tap", {"tab": "favorites"}), ("tap", {"tab": "home"})]

    async def read():
        while True:
            f = await a.recv()
            if f["type"] == "ack":
                acked[f["ref"]] = f["seq"]
                window.release()

    reader = asyncio.create_task(read())
    i = 0
    while len(acked) < 400:
        await window.acquire()
        type_, fields = commands[i % len(commands)]
        await a.send(type_, ref=f"w{i}", **fields)
        i += 1
    d.proc.send_signal(signal.SIGKILL)  # commands are still in flight
    d.proc.wait()
    reader.cancel()
    acked_now = dict(acked)

    d2 = make_daemon("--state", state_file)
    b = await Client.connect(d2.ws, name="checker", resume=0, epoch=epoch)
    assert b.welcome["resumed"] is True
    _, reply = await b.command("sync")
    stream = b.batches
    seqs = [e["seq"] for batch in stream for e in batch["events"]]
    assert seqs == list(range(1, reply["snapshot"]["seq"] + 1)), "gap-free from seq 1"
    by_ref = {batch["ref"]: batch for batch in stream if batch["by"] != "tabd"}
    for ref, seq in acked_now.items():
        assert ref in by_ref and by_ref[ref]["events"][-1]["seq"] == seq, f"acknowledged {ref} was lost"
    assert replay(stream) == reply["snapshot"], "the state is exactly the replay of the stored events"


def start_and_fail(*args):
    p = subprocess.run([TABD, "--port", "0", *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def make_state(make_daemon, path):
    d = make_daemon("--state", path)
    assert d.stop() == 0


def test_a_file_from_a_newer_tabd_is_refused_and_left_alone(make_daemon, state_file):
    make_state(make_daemon, state_file)
    with sqlite3.connect(state_file) as db:
        db.execute("PRAGMA user_version = 99")
    before = digest(state_file)
    code, out, err = start_and_fail("--state", state_file)
    assert code != 0 and "listening" not in out
    assert state_file in err and "newer tabd" in err
    assert digest(state_file) == before


def test_a_corrupt_file_is_refused_and_left_alone(make_daemon, state_file):
    make_state(make_daemon, state_file)
    with open(state_file, "r+b") as f:
        f.seek(0)
        f.write(b"this is not a database header!!!")
    before = digest(state_file)
    code, out, err = start_and_fail("--state", state_file)
    assert code != 0 and state_file in err
    assert digest(state_file) == before


async def test_a_damaged_page_is_refused(make_daemon, state_file):
    """Damage SQLite cannot see (quick_check passes) is found when the room is read: the
    room refuses to load (1011), naming the file, tabd serves on, the file is untouched."""
    d = make_daemon("--state", state_file)
    a = await Client.connect(d.ws, name="a")
    for i in range(40):
        await a.command("set", key=f"k{i}", value="x" * 200)
    assert d.stop() == 0
    size = os.path.getsize(state_file)
    with open(state_file, "r+b") as f:
        f.seek(size - 2048)
        f.write(os.urandom(1024))
    before = digest(state_file)
    p = subprocess.Popen([TABD, "--port", "0", "--state", state_file], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("tabd listening on "):
        # Found at start (the damage broke SQLite's own structure).
        assert p.wait(timeout=30) != 0 and state_file in p.stderr.read()
    else:
        url = "ws://" + line.strip().removeprefix("tabd listening on http://").rstrip("/") + "/ws"
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            c = await Client.connect(url)
            await c.recv()
        assert closed.value.rcvd.code == 1011
        health = url.replace("ws://", "http://").removesuffix("/ws") + "/healthz"
        with urllib.request.urlopen(health, timeout=10) as r:
            assert r.status == 200, "tabd serves on"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
        assert state_file in p.stderr.read(), "the log names the file"
    assert digest(state_file) == before


def test_an_unwritable_path_fails_at_start_naming_it():
    path = "/proc/tabd-no-such-dir/state.sqlite"
    code, out, err = start_and_fail("--state", path)
    assert code != 0 and path in err


async def test_a_full_disk_answers_unavailable_broadcasts_nothing_and_recovers(make_daemon, state_file):
    d = make_daemon("--state", state_file)
    a = await Client.connect(d.ws, name="a")
    w = await Client.connect(d.ws, name="watcher")
    await a.recv()  # the watcher's join
    _, ok = await a.command("set", key="before", value=1)
    assert ok["type"] == "ack"
    await w.until_seq(ok["seq"])

    subprocess.run(["prlimit", "--pid", str(d.proc.pid), "--fsize=1:unlimited"], check=True)  # the disk is "full"
    events, reply = await a.command("set", key="lost", value=2)
    assert reply["type"] == "error" and reply["code"] == "unavailable", reply
    assert events is None
    _, pong = await w.command("ping")
    assert pong["type"] == "pong" and w.frames[-1] == pong
    assert not any(f["type"] == "events" and f["ref"] == reply["ref"] for f in w.frames), "nothing half-applied was broadcast"

    subprocess.run(["prlimit", "--pid", str(d.proc.pid), "--fsize=unlimited:unlimited"], check=True)  # space returns
    events, reply = await a.command("set", key="after", value=3)
    assert reply["type"] == "ack" and events["events"][0]["seq"] == ok["seq"] + 1, "seqs follow on, no gap"
    await w.until_seq(reply["seq"])
    snap = (await a.command("sync"))[1]["snapshot"]
    assert snap["tabs"][0]["values"] == {"before": 1, "after": 3}
    assert d.stop() == 0
    d2 = make_daemon("--state", state_file)
    c = await Client.connect(d2.ws)
    assert c.welcome["snapshot"]["tabs"][0]["values"] == {"before": 1, "after": 3}
