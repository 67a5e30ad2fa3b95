"""Moving a running cluster from rooms with streams of their own to rooms in shards.

A tabd before shards keeps each room in a stream of its own and cannot read shards. The move
(docs/CLUSTER.md, "Moving an existing cluster to shards"): nodes are replaced one at a time,
first started with `--cluster-rooms streams` (they read both layouts and create rooms as
streams of their own), then without it; a node that creates rooms in shards moves a room
there as it loads it (a fence ends its stream; the room keeps its life, epoch and seqs), and
the room's clients on other nodes are closed with 1001 and resume in the shard.

Clients keep commands in flight the whole time, reconnecting and resuming through every
restart and move; the history checker of the cluster fault rounds then reads every room
back: nothing acknowledged lost, nothing applied twice, one order, one epoch.

The nodes of the starting cluster are this tabd with `--cluster-rooms streams` (the same
layout as the tabd before shards), or, when TABD_OLD_BIN names the binary of a tabd before
shards (`make test-long` builds one), that tabd itself.
"""
import asyncio
import json
import os
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

OLD = os.environ.get("TABD_OLD_BIN")
ROOMS = 4


def stream_names(url):
    with Nats(url) as nc:
        return set(nc.js("STREAM.NAMES").get("streams") or [])


async def answered_again(drivers, timeout=60):
    """Every driver gets an answer after now."""
    marks = [len(d.rec.answers) for d in drivers]
    deadline = time.monotonic() + timeout
    while any(len(d.rec.answers) <= m for d, m in zip(drivers, marks)):
        assert time.monotonic() < deadline, "a room got no answer after a restart"
        await asyncio.sleep(0.05)


@pytest.mark.time_limit(600)
@pytest.mark.parametrize("start", ["streams", "old build"])
async def test_a_running_cluster_moves_its_rooms_into_shards_without_losing_an_ack_or_a_client_s_place(make_daemon, tmp_path, monkeypatch, start):
    if start == "old build" and not (OLD and os.access(OLD, os.X_OK)):
        pytest.skip("TABD_OLD_BIN names no tabd before shards (make test-long builds one)")
    monkeypatch.setattr("test_cluster_faults.IN_FLIGHT", 8)
    with NatsCluster(3, base_dir=str(tmp_path / "nats")) as engine:
        def node(i, phase):
            args = ("--cluster", engine.url_arg, "--node-name", f"n{i}", "--rate-limit", "0")
            if phase == "old":
                return make_daemon(*args, binary=OLD) if start == "old build" else make_daemon(*args, "--cluster-rooms", "streams")
            return make_daemon(*args, *(("--cluster-rooms", "streams") if phase == "one" else ()))

        nodes = [node(0, "old"), node(1, "old"), node(2, "old")]
        urls = [n.ws for n in nodes]   # mutated in place as nodes restart: the drivers read it
        rooms = ["m" + uuid.uuid4().hex[:10] for _ in range(ROOMS)]
        starts, epochs = {}, {}
        for i, room in enumerate(rooms):
            async with websockets.connect(f"{urls[i % 3]}?room={room}") as ws:
                welcome = json.loads(await ws.recv())
                starts[room], epochs[room] = welcome["snapshot"]["seq"], welcome["epoch"]
        assert {f"TABD_ROOM_{r}" for r in rooms} <= stream_names(engine.urls[0]), "each room a stream of its own"

        drivers = []
        for i, room in enumerate(rooms):
            d = Driver(f"d{i}", urls, room, seed=i)
            drivers.append(d)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(d.run(stop)) for d in drivers]
        try:
            await answered_again(drivers)
            # Phase one, then phase two: each node replaced in turn (SIGTERM: its clients
            # get 1001 and resume on another node).
            for phase in ("one", "two"):
                for i in range(3):
                    nodes[i].stop()
                    nodes[i] = node(i, phase)
                    urls[i] = nodes[i].ws
                    await answered_again(drivers)
            # The whole cluster restarted in phase two: every room is loaded again by a node
            # of phase two, so moved if it was not yet.
            for n in nodes:
                n.stop()
            for i in range(3):
                nodes[i] = node(i, "two")
                urls[i] = nodes[i].ws
            await answered_again(drivers)
            stuck = await settle(drivers)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert stuck == 0, f"{stuck} commands unanswered {SETTLE_LIMIT:.0f} s after the last restart"
        failures, acked = [], 0
        for i, (room, d) in enumerate(zip(rooms, drivers)):
            auditor = await audit(nodes[i % 3].ws, room, starts[room], d.rec.last_seq() or 0)
            report = check([d.rec, auditor])
            acked += report.acked
            if not report.ok:
                failures.append(f"{room}: {report.summary()}")
            async with websockets.connect(f"{nodes[i % 3].ws}?room={room}") as ws:
                assert json.loads(await ws.recv())["epoch"] == epochs[room], f"{room} kept its epoch"
        assert not failures, failures
        assert acked > 0
        left = stream_names(engine.urls[0]) & {f"TABD_ROOM_{r}" for r in rooms}
        assert not left, f"rooms still in streams of their own: {left}"
        print(f"\n  {ROOMS} rooms moved into their shards, {acked} commands acknowledged")
