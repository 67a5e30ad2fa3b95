"""Power cuts, a failed sync and a full disk, under tabd's state file.

The state file lives on lazyfs (Tests/support/lazyfs.py), a FUSE file system that keeps in
its durable image only what was synced (file data by fsync/fdatasync, names by fsync of
their directory) and drops the rest at a crash, optionally tearing the last unsynced
writes. A round: three writers keep commands in flight; at a random moment the file
system freezes (nothing more reaches the disk), tabd is killed with SIGKILL, the "power"
goes (crash: every unsynced change dropped, some rounds torn), the file system comes back
from its durable image and tabd starts again on it. Then:

- every command acknowledged in any round is in the history, at the seq of its ack (a
  command acknowledged as changing nothing has no events);
- the history is one gap-free stream from seq 1, whose replay is the state tabd serves;
- `resume` from acknowledged seqs replays exactly what followed;
- SQLite's `PRAGMA integrity_check` says ok.

The same rounds with `--state-sync off` must lose acknowledged commands: the check can fail.
`make test` runs a few rounds (TABD_POWER_CUT_ROUNDS, default 3); `make test-long` runs 50.
"""
import asyncio
import json
import os
import random
import signal
import sqlite3

import pytest
import websockets.exceptions

from conftest import Client, WAIT
from replay import replay
from test_crash_loop import writer

from test_lazyfs import lfs  # noqa: F401 (the fixture: a lazyfs mount in tmp_path)

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this machine")

ROUNDS = int(os.environ.get("TABD_POWER_CUT_ROUNDS", "3"))
WINDOW = ("--resume-window", "1000000")  # the whole history stays replayable
SYNC_OFF_WARNING = "--state-sync off: commits are written but not synced before their acks"


async def power_cut(fs, d, tear, seed):
    """Freeze the disk, kill tabd, drop what was not synced, bring the disk back. Nothing
    can be acknowledged while the disk is frozen; the clients get a moment to read the
    acks already sent (a killed tabd's sockets may be reset under unread data)."""
    fs.freeze()
    await asyncio.sleep(0.2)
    d.proc.send_signal(signal.SIGKILL)
    fs.crash(tear=tear, seed=seed)  # answers tabd's blocked requests with EIO: it can die now
    d.proc.wait(timeout=WAIT)
    fs.mount()


async def rounds_of_power_cuts(make_daemon, fs, rounds, seed, extra=(), same_epoch=True):
    """Runs `rounds` power cuts with commands in flight; returns (acked, epoch, state path):
    acked maps (client, ref) to the seq its ack named, None for a command that changed
    nothing; epoch is the last round's. Unless `same_epoch` is False (unsynced commits
    may lose the room's very creation), every round must find the history of the first."""
    rng = random.Random(seed)
    random.seed(seed)  # the writers' choice of commands
    state = os.path.join(fs.mountpoint, "state.sqlite")
    acked, epoch = {}, None
    for round_ in range(rounds):
        d = make_daemon("--state", state, "--rate-limit", "0", *WINDOW, *extra)
        clients = [await Client.connect(d.ws, name=f"w{n}") for n in range(3)]
        epoch = epoch if same_epoch and epoch else clients[0].welcome["epoch"]
        assert clients[0].welcome["epoch"] == epoch, f"round {round_}: the history was replaced (seed {seed})"
        stop = asyncio.Event()
        tasks = [asyncio.create_task(writer(c, f"r{round_}w{n}", acked, stop)) for n, c in enumerate(clients)]
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        await power_cut(fs, d, tear=round_ % 2 == 1, seed=rng.randrange(1 << 30))
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        d.stop()
    return acked, epoch, state


async def history(make_daemon, state, epoch, extra=()):
    """A fresh tabd on `state` and the state it serves (a `sync` snapshot). The stored
    history is read from the file itself (`stored_stream`) once that tabd stopped: a
    `resume` from seq 0 is answered with a snapshot once its replay would outweigh the
    room's state, so a long history is not read over the protocol."""
    d = make_daemon("--state", state, *WINDOW, *extra)
    checker = await Client.connect(d.ws, name="checker")
    assert epoch is None or checker.welcome["epoch"] == epoch, "the history was replaced"
    _, reply = await checker.command("sync")
    await checker.close()
    return d, reply["snapshot"]


def stored_stream(state, upto, room="main"):
    """The room's events frames in the state file, in order, up to seq `upto`."""
    db = sqlite3.connect(state)
    try:
        rows = db.execute("SELECT frame FROM batches WHERE room = ? ORDER BY first_seq", (room,)).fetchall()
    finally:
        db.close()
    stream = [json.loads(bytes(row[0])) for row in rows]
    return [batch for batch in stream if batch["events"][-1]["seq"] <= upto]


def lost_acks(acked, stream):
    by_command = {(batch["by"], batch["ref"]): batch for batch in stream if batch["by"] != "tabd"}
    lost = [key for key, seq in acked.items()
            if seq is not None and (key not in by_command or by_command[key]["events"][-1]["seq"] != seq)]
    phantom = [key for key, seq in acked.items() if seq is None and key in by_command]
    return lost, phantom


def integrity(path):
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA integrity_check").fetchall()
    finally:
        db.close()


def stored_outbox(state):
    """The outbox's events in the state file, in position order: (position, event)."""
    db = sqlite3.connect(state)
    try:
        rows = db.execute("SELECT position, body FROM outbox ORDER BY position").fetchall()
    finally:
        db.close()
    return [(position, json.loads(bytes(body))) for position, body in rows]


async def test_power_cuts_with_commands_in_flight_lose_no_ack(make_daemon, lfs):
    seed = int(os.environ.get("TABD_POWER_CUT_SEED", random.randrange(1 << 30)))
    # Every batch goes to the outbox too (what webhooks deliver): it must hold one event per
    # stored batch, with no hole, after every cut.
    every = ("--webhook-events", "roomCreated,roomDeleted,clientJoined,clientLeft,batch")
    acked, epoch, state = await rounds_of_power_cuts(make_daemon, lfs, ROUNDS, seed, extra=every)
    assert sum(1 for seq in acked.values() if seq is not None) > ROUNDS, "commands were acknowledged in the rounds"
    d, snapshot = await history(make_daemon, state, epoch, extra=every)
    # Resume from acknowledged seqs of the last round: exactly what followed each, in order.
    rng = random.Random(seed)
    ends = sorted({seq for (client, ref), seq in acked.items() if seq is not None and ref.startswith(f"r{ROUNDS - 1}w")})
    for at in rng.sample(ends, min(5, len(ends))):
        c = await Client.connect(d.ws, name="resumer", resume=at, epoch=epoch)
        assert c.welcome["resumed"] is True, f"resume from acknowledged seq {at} (seed {seed})"
        _, reply = await c.command("sync")
        await c.until_seq(reply["snapshot"]["seq"])
        mine = [e["seq"] for batch in c.batches for e in batch["events"] if e["seq"] <= snapshot["seq"]]
        assert mine == list(range(at + 1, snapshot["seq"] + 1)), f"resume from {at} replays what followed (seed {seed})"
        await c.close()
    assert d.stop() == 0
    assert integrity(state) == [("ok",)]
    stream = stored_stream(state, snapshot["seq"])
    seqs = [e["seq"] for batch in stream for e in batch["events"]]
    assert seqs == list(range(1, snapshot["seq"] + 1)), f"gap-free from seq 1 (seed {seed})"
    lost, phantom = lost_acks(acked, stream)
    assert not phantom, f"commands acknowledged as changing nothing have events: {phantom[:3]} (seed {seed})"
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged commands lost, e.g. {lost[:3]} (seed {seed})"
    assert replay(stream) == snapshot, f"the state is the replay of the stored events (seed {seed})"
    # The outbox survived the same cuts with its batches: one event per stored batch, in
    # order, positions without a hole, so every acknowledged command's batch is there.
    outbox = stored_outbox(state)
    assert [p for p, _ in outbox] == list(range(1, len(outbox) + 1)), f"outbox positions without a hole (seed {seed})"
    batches = [e for _, e in outbox if e["type"] == "batch" and e["room"] == "main" and e["seq"] <= snapshot["seq"]]
    assert [(b["seq"], b["events"]) for b in batches] == [(s["events"][-1]["seq"], s["events"]) for s in stream], \
        f"the outbox holds every stored batch once, in order (seed {seed})"


async def test_power_cuts_with_state_sync_off_lose_acknowledged_commands(make_daemon, lfs):
    """The reference: the same rounds, untorn, without syncs before acks."""
    seed = int(os.environ.get("TABD_POWER_CUT_SEED", random.randrange(1 << 30)))
    acked, epoch, state = await rounds_of_power_cuts(make_daemon, lfs, 2, seed, extra=("--state-sync", "off"),
                                                     same_epoch=False)
    d, snapshot = await history(make_daemon, state, None)  # unsynced, even the room's creation may go
    assert d.stop() == 0
    assert integrity(state) == [("ok",)]
    lost, _ = lost_acks(acked, stored_stream(state, snapshot["seq"]))
    assert lost, f"no acknowledged command was lost without syncs ({len(acked)} acked, seed {seed})"


async def test_the_option_that_skips_syncs_is_announced_as_a_risk(make_daemon, tmp_path):
    d = make_daemon("--state", str(tmp_path / "s.sqlite"), "--state-sync", "off")
    said = d.wait_for_log(SYNC_OFF_WARNING)
    assert "a power cut or a kernel crash may lose the last acknowledged commands" in said
    d.stop()
    synced = make_daemon("--state", str(tmp_path / "t.sqlite"))
    synced.wait_for_log("every commit is synced to disk before its acks")
    synced.stop()
    assert SYNC_OFF_WARNING not in synced.stderr


async def test_a_failed_sync_is_never_acknowledged_and_stops_tabd(make_daemon, lfs):
    state = os.path.join(lfs.mountpoint, "state.sqlite")
    d = make_daemon("--state", state, "--rate-limit", "0")
    a = await Client.connect(d.ws, name="a")
    w = await Client.connect(d.ws, name="watcher")
    events, ok = await a.command("set", key="before", value=1)
    assert ok["type"] == "ack"
    await w.until_seq(ok["seq"])

    lfs.fail_next_sync("/state.sqlite-wal")  # EIO: the kernel may have dropped the pages
    ref = await a.send("set", key="doomed", value=2)
    answer, seen = None, []
    try:
        while answer is None:
            f = await a.recv()
            seen.append(f)
            if f.get("ref") == ref and f["type"] in ("ack", "error"):
                answer = f
    except (websockets.exceptions.ConnectionClosed, TimeoutError):
        pass  # closed as tabd stops: no answer is no ack
    assert answer is None or (answer["type"] == "error" and answer["code"] == "unavailable"), answer
    assert not any(f["type"] == "events" and f.get("ref") == ref for f in seen), "a batch whose sync failed was broadcast"
    def data_writes():  # the database and its WAL (the -shm index is rebuilt from them)
        return {path: n for path, n in lfs.stats()["writes"].items() if not path.endswith("-shm")}
    writes = data_writes()
    # tabd stops by itself, with a failure status, and says why.
    assert d.proc.wait(timeout=WAIT) == 1
    d.stop()
    assert "could not be synced" in d.stderr, d.stderr[-2000:]
    # Everything the watcher was sent, up to its close as tabd stopped.
    watched = []
    try:
        while True:
            watched.append(await w.recv())
    except (websockets.exceptions.ConnectionClosed, TimeoutError):
        pass
    assert not any(f["type"] == "events" and f.get("ref") == ref for f in watched), "nothing unsynced was broadcast"
    assert data_writes() == writes, "nothing was written to the state file after the failure"
    assert lfs.stats()["sync_errors"] == 1

    # After a power cut the acknowledged command is there and the failed one is not.
    lfs.freeze()
    lfs.crash()
    lfs.mount()
    d2 = make_daemon("--state", state)
    c = await Client.connect(d2.ws)
    assert c.welcome["snapshot"]["tabs"][0]["values"] == {"before": 1}
    assert d2.stop() == 0
    assert integrity(state) == [("ok",)]


async def test_a_full_disk_refuses_commands_unavailable_and_loses_nothing(make_daemon, lfs):
    state = os.path.join(lfs.mountpoint, "state.sqlite")
    d = make_daemon("--state", state, "--rate-limit", "0")
    a = await Client.connect(d.ws, name="a")
    w = await Client.connect(d.ws, name="watcher")
    acked = {}
    for i in range(20):
        _, ok = await a.command("set", key=f"k{i}", value=i)
        assert ok["type"] == "ack"
        acked[f"k{i}"] = i
    lfs.set_capacity(lfs.stats()["used_bytes"] + 2048)  # the disk fills up within a few commits
    refused = 0
    for i in range(20, 200):
        _, reply = await a.command("set", key=f"k{i}", value="x" * 500)
        if reply["type"] == "ack":
            acked[f"k{i}"] = "x" * 500
            continue
        assert reply["code"] == "unavailable", reply
        refused += 1
        if refused == 3:
            break
    assert refused == 3, "the full disk refused commands"
    _, pong = await w.command("ping")
    assert pong["type"] == "pong", "the other clients are served"
    assert d.proc.poll() is None, "a full disk does not stop tabd"

    lfs.set_capacity(None)  # space returns
    events, ok = await a.command("set", key="after", value=True)
    assert ok["type"] == "ack"
    acked["after"] = True
    snapshot = (await w.command("sync"))[1]["snapshot"]
    assert snapshot["tabs"][0]["values"] == acked, "exactly the acknowledged commands, nothing refused"
    await w.until_seq(ok["seq"])
    seqs = [e["seq"] for batch in w.batches for e in batch["events"]]
    assert seqs == list(range(seqs[0], ok["seq"] + 1)), "seqs follow on, no gap"

    # A power cut now keeps every acknowledged command; the file is whole.
    await power_cut(lfs, d, tear=True, seed=7)
    d.stop()
    d2 = make_daemon("--state", state)
    c = await Client.connect(d2.ws)
    assert c.welcome["snapshot"]["tabs"][0]["values"] == acked
    assert d2.stop() == 0
    assert integrity(state) == [("ok",)]


async def test_a_checkpoint_whose_sync_fails_stops_tabd_and_keeps_every_ack(make_daemon, lfs):
    """The writer runs the WAL's checkpoints itself (every 256 commits; SQLite's automatic
    one would ignore a failed sync of the main file): a failed sync there stops tabd too,
    and every command acknowledged before it is still in the WAL after a power cut."""
    state = os.path.join(lfs.mountpoint, "state.sqlite")
    d = make_daemon("--state", state, "--rate-limit", "0")
    a = await Client.connect(d.ws, name="a")
    lfs.fail_next_sync("/state.sqlite")  # the main file: synced only by checkpoints
    acked, count = {}, 0
    try:
        for i in range(600):
            _, reply = await a.command("set", key=f"k{i % 50}", value=i)
            if reply["type"] != "ack":
                assert reply["code"] == "unavailable", reply
                break
            acked[f"k{i % 50}"] = i
            count = i + 1
    except (websockets.exceptions.ConnectionClosed, TimeoutError):
        pass
    assert d.proc.wait(timeout=WAIT) == 1, "a failed checkpoint sync stops tabd"
    d.stop()
    assert "could not be synced" in d.stderr
    assert lfs.stats()["sync_errors"] == 1
    assert 200 < count < 600, f"the checkpoint came after a few hundred commits, not after {count}"
    await power_cut(lfs, d, tear=False, seed=1)
    d2 = make_daemon("--state", state)
    c = await Client.connect(d2.ws)
    assert c.welcome["snapshot"]["tabs"][0]["values"] == acked
    assert d2.stop() == 0
    assert integrity(state) == [("ok",)]
