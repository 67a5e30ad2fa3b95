"""An ack leaves only after the write holding its batch was synced: read from tabd's own
system calls, not from a setting.

tabd runs under `strace -f`: every write to the state file's WAL, every sync of it, and
every write to a socket, in the order they happened. Each command carries a marker (its
key) that lands verbatim in the WAL page holding its batch, and a ref that its ack
carries. For each command: the first WAL write that holds its marker, then the first WAL
sync that began after that write ended; its ack, and the events frame that broadcast it,
must start after that sync ended. 40 commands over WebSocket and 10 over the HTTP API,
one at a time, as the issue that asked for this measured them.

With `--state-sync off` the same reading must find acks that left before any sync of their
batch: the check can fail, and does when syncing is off.
"""
import asyncio
import json
import os
import re
import subprocess
import threading
import urllib.request
import uuid

import pytest

from conftest import Client, Daemon

pytestmark = pytest.mark.skipif(subprocess.run(["which", "strace"], capture_output=True).returncode != 0,
                                reason="strace is not installed (scripts/install-test-deps installs it)")

SYSCALLS = "pwrite64,pwritev,write,writev,fsync,fdatasync,sendto,sendmsg"
CALL = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()")
FD = re.compile(r"\(\d+<([^>]*)>")


def parse(path):
    """The traced calls, each as (name, fd path, text, first line, last line): the line it
    started on (its entry) and the line it ended on (its exit). strace prints a call cut by
    another thread's as `... <unfinished ...>` then `<... name resumed> ...`."""
    calls, open_ = [], {}
    with open(path, errors="replace") as f:
        for i, line in enumerate(f):
            m = CALL.match(line)
            if not m:
                continue
            pid = m.group(1)
            if m.group(2):  # the end of an unfinished call
                if pid not in open_:
                    continue
                name, text, start = open_.pop(pid)
                calls.append((name, text + line, start, i))
            elif line.rstrip().endswith("<unfinished ...>"):
                open_[pid] = (m.group(3), line, i)
            else:
                calls.append((m.group(3), line, i, i))
    out = []
    for name, text, start, end in calls:
        fd = FD.search(text)
        out.append((name, fd.group(1) if fd else "", text, start, end))
    return out


def late_acks(calls, commands):
    """For each (marker, ref): why its ack or broadcast left before its batch was synced,
    or None when it did not. Also fails the test when a command left no trace at all."""
    wal_writes = [(text, end) for name, path, text, _, end in calls if name.startswith("pwrite") and path.endswith("-wal")]
    wal_syncs = [(start, end) for name, path, _, start, end in calls if name in ("fsync", "fdatasync") and path.endswith("-wal")]
    sends = [(text, start) for name, path, text, start, _ in calls
             if name in ("write", "writev", "sendto", "sendmsg") and path.startswith("socket:")]
    verdicts = []
    for marker, ref in commands:
        written = next((end for text, end in wal_writes if marker in text), None)
        assert written is not None, f"no write to the WAL holds {marker}"
        synced = next((end for start, end in wal_syncs if start > written), None)
        out = [start for text, start in sends if f'\\"{ref}\\"' in text or marker in text]
        assert out, f"no ack or broadcast of {ref} was seen on a socket"
        if synced is None:
            verdicts.append(f"{ref}: left on line {out[0]}; its WAL write (line {written}) was never synced")
        elif min(out) < synced:
            verdicts.append(f"{ref}: left on line {min(out)}, before the sync of its WAL write (line {written}) ended on line {synced}")
        else:
            verdicts.append(None)
    return verdicts


def post(daemon, room, command):
    req = urllib.request.Request(f"{daemon.http}/api/rooms/{room}/commands", data=json.dumps(command).encode(),
                                 headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


async def run_traced(tmp_path, *args):
    """Runs 40 WebSocket and 10 API commands one at a time against a traced tabd; returns
    the parsed trace and the (marker, ref) of every command."""
    trace = str(tmp_path / "trace.txt")
    state = str(tmp_path / "state.sqlite")
    d = Daemon("--state", state, *args,
               prefix=["strace", "-f", "-qq", "-y", "-s", "65536", "-o", trace, "-e", f"trace={SYSCALLS}", "--"])
    try:
        commands = []
        c = await Client.connect(d.ws, room="ordered")
        for i in range(40):
            marker = f"MK{uuid.uuid4().hex[:12]}"
            ref = f"RF{uuid.uuid4().hex[:12]}"
            _, reply = await c.command("set", key=marker, value=i, ref=ref)
            assert reply["type"] == "ack", reply
            commands.append((marker, ref))
        for i in range(10):
            marker = f"MK{uuid.uuid4().hex[:12]}"
            ref = f"RF{uuid.uuid4().hex[:12]}"
            reply = await asyncio.to_thread(post, d, "ordered", {"type": "set", "key": marker, "value": i, "ref": ref})
            assert reply["type"] == "ack", reply
            commands.append((marker, ref))
            await c.until_seq(reply["seq"])  # its broadcast has reached the client too
        await c.close()
    finally:
        assert d.stop() == 0, d.stderr
    return parse(trace), commands, d


async def test_every_ack_and_broadcast_leaves_after_the_sync_of_its_batch(tmp_path):
    calls, commands, _ = await run_traced(tmp_path)
    verdicts = late_acks(calls, commands)
    late = [v for v in verdicts if v]
    assert not late, f"{len(late)} of {len(commands)} acks left before their batch was synced: {late[:5]}"
    syncs = sum(1 for name, path, *_ in calls if name in ("fsync", "fdatasync") and path.endswith("-wal"))
    assert syncs >= len(commands), f"{syncs} WAL syncs for {len(commands)} commands sent one at a time"


async def test_with_state_sync_off_the_same_reading_finds_acks_before_any_sync(tmp_path):
    calls, commands, d = await run_traced(tmp_path, "--state-sync", "off")
    late = [v for v in late_acks(calls, commands) if v]
    assert len(late) >= len(commands) // 2, f"only {len(late)} of {len(commands)} acks left unsynced with --state-sync off"
    assert "--state-sync off: commits are written but not synced" in d.stderr


def test_a_new_state_file_and_its_new_directory_are_synced_before_tabd_serves(tmp_path):
    """The file's name (and a directory tabd made for it) must survive a power cut too:
    its directory is synced after it is created, before tabd says it listens."""
    trace = str(tmp_path / "trace.txt")
    workdir = tmp_path / "work"
    workdir.mkdir()
    # The default place, .tabd/state.sqlite under the working directory, is made by tabd.
    web = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "web")
    d = Daemon("--port", "0", "--web-root", web, bare=True, cwd=str(workdir),
               prefix=["strace", "-f", "-qq", "-y", "-o", trace, "-e", "trace=openat,mkdir,mkdirat,fsync,fdatasync", "--"])
    assert d.stop() == 0
    lines = open(trace).read().splitlines()
    state_dir = str(workdir / ".tabd")
    made = next(i for i, l in enumerate(lines) if "mkdir" in l and ".tabd" in l and "= 0" in l)
    created = next(i for i, l in enumerate(lines) if "openat(" in l and "state.sqlite\"" in l and "O_CREAT" in l and "= -1" not in l)
    assert made < created
    parent_synced = [i for i, l in enumerate(lines) if re.search(r"f(data)?sync\(\d+<" + re.escape(str(workdir)) + r">\)", l)]
    # tabd's own sync of the new file's directory: on a descriptor it opened with
    # O_DIRECTORY (SQLite syncs the directory when it makes the WAL, without that flag).
    own = {m.group(1) for l in lines[created:] if "O_DIRECTORY" in l and (m := re.search(
        r'openat\(AT_FDCWD[^,]*, "' + re.escape(state_dir) + r'", [^)]*\) = (\d+)', l))}
    dir_synced = [i for i, l in enumerate(lines) if (m := re.search(r"f(data)?sync\((\d+)<" + re.escape(state_dir) + r">\)", l))
                  and m.group(2) in own]
    assert any(i > made for i in parent_synced), "the directory tabd made was not synced into its parent"
    assert any(i > created for i in dir_synced), "the new state file's directory was not synced by tabd"
