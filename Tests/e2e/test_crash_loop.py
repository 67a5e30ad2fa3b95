"""Crash loop: tabd is killed with SIGKILL at random moments while three writers keep
commands in flight, and started again on the same state file, round after round. It starts
every time; no acknowledged command is ever lost; the whole history stays one gap-free
stream whose replay is the state tabd serves.

`make test` runs a few rounds (TABD_CRASH_ROUNDS, default 4); `make test-long` runs 50."""
import asyncio
import os
import random
import signal

from conftest import Client
from replay import replay

ROUNDS = int(os.environ.get("TABD_CRASH_ROUNDS", "4"))
WINDOW = ("--resume-window", "1000000")  # the whole history stays replayable
COMMANDS = [("push", {"route": "r"}), ("set", {"key": "k", "value": 1}), ("pop", {}), ("scroll", {"offset": 3.5}),
            ("tap", {"tab": "favorites"}), ("tap", {"tab": "home"}), ("select", {"tab": "profile"}),
            ("set", {"key": "n", "value": None})]


async def writer(client, name, acked, stop):
    """Sends commands, 16 in flight, and records each ack (by ref) until the connection dies:
    the seq of its events, or None for a command that changed nothing (no events frame)."""
    window = asyncio.Semaphore(16)
    me = client.welcome["client"]

    async def read():
        changed = set()
        try:
            while True:
                f = await client.recv()
                if f["type"] == "events" and f["by"] == me and f.get("ref"):
                    changed.add(f["ref"])
                elif f["type"] in ("ack", "error") and f.get("ref"):
                    if f["type"] == "ack":
                        acked[(me, f["ref"])] = f["seq"] if f["ref"] in changed else None
                    window.release()
        except Exception:
            stop.set()
            window.release()  # wake the sender, which then sees `stop`

    reader = asyncio.create_task(read())
    i = 0
    try:
        while not stop.is_set():
            await window.acquire()
            if stop.is_set():
                break
            type_, fields = COMMANDS[random.randrange(len(COMMANDS))]
            await client.send(type_, ref=f"{name}-{i}", **fields)
            i += 1
    except Exception:
        pass
    finally:
        stop.set()
        await asyncio.sleep(0)
        reader.cancel()


async def test_kill_9_at_random_moments_loses_no_ack_and_keeps_one_history(make_daemon, tmp_path):
    rng_seed = int(os.environ.get("TABD_CRASH_SEED", random.randrange(1 << 30)))
    random.seed(rng_seed)
    state = str(tmp_path / "state.sqlite")
    acked = {}  # (client id, ref) -> seq of its ack, over every round
    epoch = None
    for round_ in range(ROUNDS):
        d = make_daemon("--state", state, "--rate-limit", "0", *WINDOW)  # starts, or the test fails here
        clients = [await Client.connect(d.ws, name=f"w{n}") for n in range(3)]
        epoch = epoch or clients[0].welcome["epoch"]
        assert clients[0].welcome["epoch"] == epoch, f"round {round_}: the history was replaced (seed {rng_seed})"
        stop = asyncio.Event()
        tasks = [asyncio.create_task(writer(c, f"r{round_}w{n}", acked, stop)) for n, c in enumerate(clients)]
        await asyncio.sleep(random.uniform(0.05, 0.6))
        d.proc.send_signal(signal.SIGKILL)  # mid-storm: commands in flight, some being written
        d.proc.wait()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)

    d = make_daemon("--state", state, *WINDOW)
    checker = await Client.connect(d.ws, name="checker", resume=0, epoch=epoch)
    assert checker.welcome["resumed"] is True, f"the whole history is replayable (seed {rng_seed})"
    _, reply = await checker.command("sync")
    stream = checker.batches
    seqs = [e["seq"] for batch in stream for e in batch["events"]]
    assert seqs == list(range(1, reply["snapshot"]["seq"] + 1)), f"gap-free from seq 1 (seed {rng_seed})"
    by_command = {(batch["by"], batch["ref"]): batch for batch in stream if batch["by"] != "tabd"}
    lost = [key for key, seq in acked.items()
            if seq is not None and (key not in by_command or by_command[key]["events"][-1]["seq"] != seq)]
    phantom = [key for key, seq in acked.items() if seq is None and key in by_command]
    assert not phantom, f"commands acknowledged as changing nothing have events: {phantom[:3]}"
    assert not lost, f"{len(lost)} acknowledged commands lost, e.g. {lost[:3]} (seed {rng_seed})"
    assert replay(stream) == reply["snapshot"], f"the state is the replay of the stored events (seed {rng_seed})"
    assert len(acked) > ROUNDS, "commands were acknowledged in the rounds"
