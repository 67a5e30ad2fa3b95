"""A shard's leader fails while many rooms of that shard are busy.

Rooms live as subjects of a few shard streams: one shard's leader carries thousands of
rooms. Its failure must lose nothing and double nothing in any of them, and their clients
wait out the election. Here 64 rooms of one shard each have a client on a node (spread over
three nodes) keeping commands in flight, while the shard's leader is killed (SIGKILL), comes
back, and the new leader is stopped (SIGTERM). Every room's history is then read back and
checked: every acknowledged command applied exactly once, in one order (the checker of the
cluster fault rounds). The longest any command waited is printed (and bounded loosely: only
a room that never recovers fails it).
"""
import asyncio
import json
import os
import signal
import sys
import time
import uuid

import pytest
import websockets

from conftest import ROOT
from test_cluster_faults import SETTLE_LIMIT, Driver, audit, settle

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from history import check  # noqa: E402
from natscluster import NatsCluster  # noqa: E402
from natsproto import Nats  # noqa: E402
import shards  # noqa: E402

ROOMS = int(os.environ.get("TABD_SHARD_FAULT_ROOMS", "64"))
IN_FLIGHT = 4


def rooms_of_one_shard(url, count):
    """`count` room ids that the cluster's layout puts in one shard, and that shard."""
    lay = shards.layout(url)
    target = None
    ids = []
    while len(ids) < count:
        room = "s" + uuid.uuid4().hex[:10]
        shard = shards.shard_of(lay, room)
        if target is None:
            target = shard
        if shard == target:
            ids.append(room)
    return ids, target


def probe(engine, stream, shard, rooms):
    """What each engine server answers now for a publish on each stalled room's subject (one
    that expects an impossible place, so nothing is stored: an answer proves a responder), and
    which server each node's connection is on: the stall report's evidence."""
    lines = []
    for i, url in enumerate(engine.urls):
        if not engine.alive(i):
            continue
        try:
            with Nats(url, timeout=3) as nc:
                for room in rooms:
                    m = nc.request(f"tabd.r.{shard}.{room}", b"probe", headers={"Nats-Expected-Last-Subject-Sequence": "4000000000"}, timeout=3)
                    lines.append(f"server {engine.names[i]}, {room}: status {m.status} {m.data[:120]!r}")
        except Exception as error:  # noqa: BLE001 - evidence only
            lines.append(f"server {engine.names[i]}: {error!r}")
        try:
            conns = (engine.monitor(i, "/connz?limit=1000&subs=1") or {}).get("connections", [])
            lines.append(f"server {engine.names[i]} connections: " + ", ".join(f"{c.get('name')}({c.get('num_subscriptions')})" for c in conns))
        except Exception as error:  # noqa: BLE001
            lines.append(f"server {engine.names[i]} connz: {error!r}")
    try:
        info = engine.monitor(0, "/jsz?streams=1")
        lines.append(f"jsz: {str(info)[:600]}")
    except Exception as error:  # noqa: BLE001
        lines.append(f"jsz: {error!r}")
    return lines


async def wait_answers(drivers, timeout=60):
    deadline = time.monotonic() + timeout
    while not all(d.rec.answers for d in drivers):
        assert time.monotonic() < deadline, "a room had no answer"
        await asyncio.sleep(0.05)


@pytest.mark.time_limit(600)
async def test_a_shard_leader_killed_and_stopped_under_64_busy_rooms_loses_and_doubles_nothing(make_daemon, tmp_path, monkeypatch):
    monkeypatch.setattr("test_cluster_faults.IN_FLIGHT", IN_FLIGHT)
    with NatsCluster(3, base_dir=str(tmp_path / "nats")) as engine:
        nodes = [make_daemon("--cluster", engine.url_arg, "--node-name", f"n{i}", "--rate-limit", "0", "--cluster-shards", "4")
                 for i in range(3)]
        rooms, shard = rooms_of_one_shard(engine.urls[0], ROOMS)
        stream = f"TABD_SHARD_{shard}"
        starts = {}
        for i, room in enumerate(rooms):
            async with websockets.connect(f"{nodes[i % 3].ws}?room={room}") as ws:
                starts[room] = json.loads(await ws.recv())["snapshot"]["seq"]
        drivers = [Driver(f"d{i}", [nodes[i % 3].ws] + [n.ws for j, n in enumerate(nodes) if j != i % 3], room, seed=i)
                   for i, room in enumerate(rooms)]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(d.run(stop)) for d in drivers]
        kills = []
        try:
            await wait_answers(drivers)
            for sig in (signal.SIGKILL, signal.SIGTERM):
                leader = engine.leader_of(stream)
                assert leader is not None, f"{stream} has a leader"
                before = sum(len(d.rec.answers) for d in drivers)
                engine.kill(leader, sig=sig)
                await asyncio.sleep(3)
                await asyncio.get_running_loop().run_in_executor(None, engine.restart, leader)
                # Every room goes on: each gets answers again after the fault.
                marks = [len(d.rec.answers) for d in drivers]
                deadline = time.monotonic() + 60
                while any(len(d.rec.answers) <= m for d, m in zip(drivers, marks)):
                    if time.monotonic() > deadline:
                        stalled = [(d.room, d.joined, len(d.outstanding)) for d, m in zip(drivers, marks) if len(d.rec.answers) <= m]
                        evidence = await asyncio.get_running_loop().run_in_executor(None, probe, engine, stream, shard, [r for r, _, _ in stalled])
                        logs = ["\n".join(evidence)]
                        for n in nodes:
                            n.stop()
                            text = n.stderr.decode(errors="replace") if isinstance(n.stderr, bytes) else (n.stderr or "")
                            logs.append("\n".join(line for line in text.splitlines() if any(r in line for r, _, _ in stalled) or "shard" in line)[-4000:])
                            folder = os.path.join(ROOT, "test-output", "shard-faults")
                            os.makedirs(folder, exist_ok=True)
                            with open(os.path.join(folder, f"n{len(logs) - 2}.log"), "w") as f:
                                f.write(text)
                        raise AssertionError(f"rooms stalled after the {sig.name} of {stream}'s leader: {stalled}\n" + "\n---\n".join(logs))
                    await asyncio.sleep(0.05)
                kills.append((sig.name, engine.names[leader], sum(len(d.rec.answers) for d in drivers) - before))
            stuck = await settle(drivers)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert stuck == 0, f"{stuck} commands of open connections unanswered {SETTLE_LIMIT:.0f} s after the faults"
        failures = []
        acked = 0
        for i, (room, d) in enumerate(zip(rooms, drivers)):
            until = d.rec.last_seq() or 0
            auditor = await audit(nodes[(i + 1) % 3].ws, room, starts[room], until)
            report = check([d.rec, auditor])
            acked += report.acked
            if not report.ok:
                failures.append(f"{room}: {report.summary()}")
        longest = max(d.longest_wait for d in drivers)
        print(f"\n  {ROOMS} rooms in {stream}: {acked} commands acknowledged; faults {kills}; longest wait for an answer {longest:.1f} s")
        assert not failures, failures
        assert acked > 0
        assert longest < SETTLE_LIMIT
