"""The cluster under faults other than a kill: pauses (SIGSTOP for longer than every liveness
bound, then SIGCONT) of an engine server and of a tabd node, and a node cut from the engine
and healed. Three engine servers, three nodes, a client on each node keeping 64 commands in
flight and reconnecting (with `resume`) whenever its connection drops; every round is judged
by the history checker (Tests/support/history.py), which knows nothing of tabd's internals.
The rounds and what they measured are printed; `TABD_FAULT_ROUNDS` sets how many of each.

The rounds found more than they pass yet: those run only with `TABD_FAULTS_KNOWN=1` (see
`known`), each with what it found.
"""
import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid

import pytest
import websockets

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from faults import Proxy, paused  # noqa: E402
from history import Recorder, check  # noqa: E402
from natscluster import NatsCluster  # noqa: E402

ROUNDS = int(os.environ.get("TABD_FAULT_ROUNDS", "1"))
IN_FLIGHT = 64
PAUSE = 8.0          # seconds: longer than the nodes' liveness bound (5 s) and the engine's elections
SETTLE_LIMIT = 60.0  # seconds every command may take to be answered once the fault is over


class Driver:
    """One client that keeps IN_FLIGHT commands outstanding, each with a ref unique in the
    test, over whichever of `urls` answers; on a drop it reconnects with `resume` from the
    last seq it saw. Everything goes through its Recorder."""

    def __init__(self, name, urls, room, seed):
        self.name, self.urls, self.room = name, urls, room
        self.rec = Recorder(name)
        self.rng = random.Random(seed)
        self.n = 0
        self.outstanding = set()
        self.sending = True
        self.longest_wait = 0.0   # the longest a command waited for its answer
        self.sent_at = {}

    def command(self):
        self.n += 1
        ref = f"{self.name}-{self.n}"
        kind = self.rng.random()
        if kind < 0.6:
            cmd = {"type": "set", "key": f"{self.name}-{self.n % 4}", "value": uuid.uuid4().hex}
        elif kind < 0.9:
            cmd = {"type": "scroll", "tab": "home", "offset": self.n + self.rng.random()}
        else:   # may change nothing (the tab may be selected already)
            cmd = {"type": "select", "tab": self.rng.choice(["home", "favorites", "profile"])}
        return ref, cmd

    async def run(self, stop):
        k = 0
        while not stop.is_set():
            url = self.urls[k % len(self.urls)]
            k += 1
            resume = self.rec.last_seq() if self.rec.sessions else None
            query = f"?room={self.room}&name={self.name}" + (f"&resume={resume}" if resume is not None else "")
            try:
                async with websockets.connect(url + query, max_size=None, open_timeout=5) as ws:
                    welcome = json.loads(await ws.recv())
                    assert welcome["type"] == "welcome", welcome
                    self.rec.connected(welcome, resumed_from=resume)
                    self.outstanding = set()   # what the last session left unanswered is the checker's to judge
                    tasks = [asyncio.create_task(self._send(ws, stop)), asyncio.create_task(self._read(ws, stop))]
                    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                    for t in pending:
                        t.cancel()
                    for t in done:
                        t.result()
            except (OSError, asyncio.TimeoutError, TimeoutError, websockets.exceptions.WebSocketException):
                await asyncio.sleep(0.2)   # a client's reconnect backoff

    async def _send(self, ws, stop):
        while not stop.is_set():
            while self.sending and len(self.outstanding) < IN_FLIGHT:
                ref, cmd = self.command()
                self.rec.sent_command(ref, cmd)
                self.outstanding.add(ref)
                self.sent_at[ref] = time.monotonic()
                await ws.send(json.dumps({**cmd, "ref": ref}))
            await asyncio.sleep(0.005)

    async def _read(self, ws, stop):
        while not stop.is_set():
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
            except (asyncio.TimeoutError, TimeoutError):
                continue
            self.rec.received(frame)
            if frame.get("type") in ("ack", "error"):
                ref = frame.get("ref")
                self.outstanding.discard(ref)
                if ref in self.sent_at:
                    self.longest_wait = max(self.longest_wait, time.monotonic() - self.sent_at.pop(ref))


async def audit(url, room, since, until, timeout=30):
    """A recorder that resumes from `since` and reads every batch up to `until`: the room's
    whole history of the round, as one client sees it afterwards."""
    rec = Recorder("auditor")
    async with websockets.connect(f"{url}?room={room}&resume={since}&name=auditor", max_size=None) as ws:
        rec.connected(json.loads(await ws.recv()), resumed_from=since)
        deadline = time.monotonic() + timeout
        while rec.last_seq() < until:
            assert time.monotonic() < deadline, f"the auditor did not reach seq {until}"
            rec.received(json.loads(await asyncio.wait_for(ws.recv(), timeout)))
    return rec


async def round_with(fault, make_daemon, engine, node_urls=None, extra=()):
    """One round: three nodes, a driver on each; `fault(nodes)` (a coroutine) runs while they
    send; then the drivers stop sending, every command is answered (bounded), an auditor
    reads the round's history, and the checker judges it. Returns the report."""
    urls = node_urls or [engine.url_arg] * 3
    nodes = [make_daemon("--cluster", urls[i], "--node-name", f"f{i}", "--rate-limit", "0", *extra) for i in range(3)]
    room = "f" + uuid.uuid4().hex[:10]
    # The first node creates the room and writes it: the others forward to it.
    first = await websockets.connect(f"{nodes[0].ws}?room={room}")
    since = json.loads(await first.recv())["snapshot"]["seq"]
    drivers = [Driver(f"d{i}", [nodes[i].ws] + [n.ws for j, n in enumerate(nodes) if j != i], room, seed=i) for i in range(3)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(d.run(stop)) for d in drivers]
    try:
        await asyncio.sleep(1.5)   # load before the fault
        await fault(nodes, room)
        await asyncio.sleep(1.5)   # load after it
        for d in drivers:
            d.sending = False
        deadline = time.monotonic() + SETTLE_LIMIT
        while any(d.outstanding for d in drivers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # Commands of a connection that is still open and never answered: a stall.
        stuck = sum(len(d.outstanding) for d in drivers)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await first.close()
    until = max(d.rec.last_seq() or 0 for d in drivers)
    alive = next(n for n in nodes[1:] + nodes[:1] if n.proc.poll() is None)
    auditor = await audit(alive.ws, room, since, until)
    report = check([d.rec for d in drivers] + [auditor])
    report.longest_wait = max(d.longest_wait for d in drivers)
    report.stuck = stuck
    for n in nodes:
        n.stop()
    return report


def judge(name, reports):
    for i, r in enumerate(reports):
        print(f"{name} round {i + 1}: {r.summary()}; longest wait for an answer {r.longest_wait:.1f} s")
        assert r.ok, f"{name} round {i + 1}: {r.problems()}"
        assert r.stuck == 0, f"{name} round {i + 1}: {r.stuck} commands of open connections unanswered {SETTLE_LIMIT:.0f} s after the fault"
        assert r.acked > 0


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    # Not advertising each other: a node given proxies reaches the servers only through them.
    with NatsCluster(3, base_dir=str(tmp_path_factory.mktemp("nats")), advertise=False) as c:
        yield c


# What these rounds found, not fixed yet: each such round runs only with
# TABD_FAULTS_KNOWN=1, so that `make test` stays a test of what holds.
def known(why):
    return pytest.mark.skipif(os.environ.get("TABD_FAULTS_KNOWN") != "1", reason=f"found by the checker, not fixed yet: {why}")


def leader_paused(engine):
    async def fault(nodes, room):
        leader = engine.leader_of(f"TABD_ROOM_{room}")
        assert leader is not None, "the room's stream has a leader"
        with paused(engine.pids[leader]):
            await asyncio.sleep(PAUSE)
    return fault


def writer_paused(engine):
    async def fault(nodes, room):
        with paused(nodes[0].proc.pid):
            await asyncio.sleep(PAUSE)
    return fault


# Forwarding on, a command of another node's client can be decided twice (by the room's
# writer and, once it seems gone or silent, by the forwarder); when one of the decisions
# changes nothing, the command's answer and its effect come from different decisions: a
# `select` acked at one seq whose events stand thousands of seqs later (every round).
UNFENCED = known("with forwarding, a command's answer and its effect can come from two decisions")


@pytest.mark.parametrize("forwarding", [pytest.param("off", id="forwarding-off"),
                                        pytest.param("on", id="forwarding-on", marks=UNFENCED)])
async def test_the_engine_stream_leader_paused_longer_than_every_bound(make_daemon, engine, forwarding):
    reports = [await round_with(leader_paused(engine), make_daemon, engine, extra=("--cluster-forwarding", forwarding))
               for _ in range(ROUNDS)]
    judge(f"engine leader paused, forwarding {forwarding}", reports)


# Forwarding off, this round found a gap in the stream of a client of the paused node (one
# round in four, the build before sealed messages too): waking, the node published the
# others' batches from where its kept history began, past what it had published. The
# history now keeps every batch the coordinator has not published
# (ClusterRoomMachineTests.theHistoryKeepsEveryBatchTheCoordinatorHasNotPublished).
@pytest.mark.parametrize("forwarding", [pytest.param("off", id="forwarding-off"),
                                        pytest.param("on", id="forwarding-on", marks=UNFENCED)])
async def test_the_rooms_writer_paused_longer_than_every_bound(make_daemon, engine, forwarding):
    # Forwarding on, the other nodes' commands are in flight to it when it stops.
    reports = [await round_with(writer_paused(engine), make_daemon, engine, extra=("--cluster-forwarding", forwarding))
               for _ in range(ROUNDS)]
    judge(f"writer paused, forwarding {forwarding}", reports)


# This round found a client that joined the cut node just before the cut with no answer to
# its 64 commands for a minute after the connection came back (one round in six): the same
# trimmed history, which the node waited to see continue. Fixed with it.
async def test_a_node_cut_from_the_engine_then_healed(make_daemon, engine):
    reports = []
    for _ in range(ROUNDS):
        proxies = [Proxy(("127.0.0.1", port)) for port in engine.client_ports]
        try:
            urls = [engine.url_arg, engine.url_arg, ",".join(p.url for p in proxies)]

            async def fault(nodes, room):
                for p in proxies:
                    p.cut()
                await asyncio.get_running_loop().run_in_executor(None, nodes[2].wait_for_log, "engine connection lost")
                await asyncio.sleep(PAUSE)
                for p in proxies:
                    p.heal()
                await asyncio.get_running_loop().run_in_executor(None, lambda: nodes[2].wait_for_log("engine connection up", timeout=30))
            reports.append(await round_with(fault, make_daemon, engine, node_urls=urls))
        finally:
            for p in proxies:
                p.close()
    judge("node cut from the engine", reports)


# --- each fault combined with kill -9 of another node, and random rounds -------------------

def with_kill(fault, victim):
    """`fault`, with node `victim` killed (SIGKILL) a second into it: its client resumes on
    another node, and its commands in flight are in the history once or not at all."""
    async def combined(nodes, room):
        async def kill():
            await asyncio.sleep(1)
            nodes[victim].stop(signal.SIGKILL)
        await asyncio.gather(fault(nodes, room), kill())
    return combined


@pytest.mark.parametrize("scenario", ["leader paused", "writer paused"])
async def test_a_fault_combined_with_kill_9_of_another_node(make_daemon, engine, scenario):
    fault = leader_paused(engine) if scenario == "leader paused" else writer_paused(engine)
    reports = [await round_with(with_kill(fault, victim=2), make_daemon, engine, extra=("--cluster-forwarding", "off"))
               for _ in range(ROUNDS)]
    judge(f"{scenario} with kill -9 of another node, forwarding off", reports)


RANDOM_ROUNDS = int(os.environ.get("TABD_FAULT_RANDOM_ROUNDS", "0"))


@pytest.mark.skipif(RANDOM_ROUNDS == 0, reason="make test-long runs the random rounds (TABD_FAULT_RANDOM_ROUNDS)")
async def test_random_rounds_of_the_faults_that_hold(make_daemon, engine):
    rng = random.Random(int(os.environ.get("TABD_FAULT_SEED", "37")))
    reports = []
    for n in range(RANDOM_ROUNDS):
        fault = rng.choice([leader_paused(engine), writer_paused(engine)])
        if rng.random() < 0.5:
            fault = with_kill(fault, victim=rng.choice([1, 2]))
        reports.append(await round_with(fault, make_daemon, engine, extra=("--cluster-forwarding", "off")))
    judge("random round", reports)
