"""Fixtures for the end-to-end tests: a real tabd on a free port, and WebSocket clients.

TABD_BIN names the binary (make test builds it); each test that needs a daemon gets a
fresh one, so tests never see each other's state.
"""
import asyncio
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
import urllib.request

import pytest
import websockets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABD = os.environ.get("TABD_BIN", os.path.join(ROOT, ".build", "debug", "tabd"))
WAIT = 10.0  # seconds any single expected frame may take before a test fails


def cluster_secret_file():
    """The cluster secret every node of the tests shares unless a test names another: one
    file per test run, mode 600."""
    global _CLUSTER_SECRET
    if _CLUSTER_SECRET is None:
        import tempfile
        fd, path = tempfile.mkstemp(prefix="tabd-cluster-secret-")
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        _CLUSTER_SECRET = path
    return _CLUSTER_SECRET


_CLUSTER_SECRET = None


class Daemon:
    """A tabd process started with `args`; `http`, `ws` and `host` are set once it printed
    its listening line. It listens on a free port with a history of its own (`--port 0`,
    `--state :memory:` unless the args name a state or a cluster); `bare` adds nothing, for
    tests of the options themselves. `cwd` and `env` are the process's own (the tests' by
    default); `prefix` is a command tabd runs under (`strace -f … --`)."""

    def __init__(self, *args, binary=None, cwd=ROOT, env=None, bare=False, ssl_context=None, prefix=()):
        if not bare:
            if "--state" not in args and "--cluster" not in args:
                args = ("--state", ":memory:", *args)  # each test its own history
            if "--cluster" in args and "--cluster-secret-file" not in args:
                args = (*args, "--cluster-secret-file", cluster_secret_file())  # the nodes' shared secret
            args = ("--port", "0", *args)
        self.stderr = None
        self.prefix = tuple(prefix)
        # `prefix` runs tabd under another program (strace … --).
        self.proc = subprocess.Popen([*prefix, binary or TABD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace", cwd=cwd, env=env)
        ready, _, _ = select.select([self.proc.stdout], [], [], WAIT)
        line = self.proc.stdout.readline() if ready else ""
        m = re.match(r"tabd listening on (https?)://([^/]+)/$", line.strip())
        if not m:
            self.proc.kill()
            raise RuntimeError(f"tabd did not start: {line!r} {self.proc.communicate(timeout=WAIT)[1]}")
        self.host = m.group(2)
        self.http = f"{m.group(1)}://{self.host}"
        self.ws = f"{'wss' if m.group(1) == 'https' else 'ws'}://{self.host}/ws"
        self.ssl_context = ssl_context  # what fetch() verifies an https tabd with
        # tabd's stderr, read as it comes by a thread of its own: a pipe nobody reads fills
        # (64 KiB), and then every thread of tabd that logs blocks in write(2), which froze
        # busy nodes for a minute in the shard fault rounds.
        self._stderr = bytearray()
        self._stderr_ended = False
        self._stderr_changed = threading.Condition()
        self._read_upto = 0  # where wait_for_log's next search starts
        self._reader = threading.Thread(target=self._drain_stderr, daemon=True)
        self._reader.start()

    def _drain_stderr(self):
        fd = self.proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            with self._stderr_changed:
                if chunk:
                    self._stderr += chunk
                else:
                    self._stderr_ended = True
                self._stderr_changed.notify_all()
            if not chunk:
                return

    @property
    def _log(self):
        """Everything tabd has written to its stderr so far (bytes)."""
        with self._stderr_changed:
            return bytes(self._stderr)

    def log_so_far(self):
        """Everything tabd has written to its stderr so far (text)."""
        return self._log.decode(errors="replace")

    def wait_for_log(self, text, timeout=WAIT):
        """Waits until `text` appears in tabd's stderr (after what earlier calls found);
        returns the lines read since. Fails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        start = self._read_upto
        want = text.encode()
        with self._stderr_changed:
            while True:
                at = self._stderr.find(want, start)
                if at >= 0:
                    end = self._stderr.find(b"\n", at)
                    self._read_upto = len(self._stderr) if end < 0 else end + 1
                    return bytes(self._stderr[start:self._read_upto]).decode(errors="replace")
                if self._stderr_ended:
                    raise AssertionError(f"tabd ended without logging {text!r}: {bytes(self._stderr[start:])!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"tabd did not log {text!r} within {timeout} s; it logged {bytes(self._stderr[start:])!r}")
                self._stderr_changed.wait(left)

    def fetch(self, path, headers=None):
        """(status, body bytes) of an HTTP GET."""
        req = urllib.request.Request(self.http + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=WAIT, context=self.ssl_context) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path, headers=None):
        """(status, body text) of an HTTP GET."""
        status, body = self.fetch(path, headers)
        return status, body.decode()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def _signal(self, sig):
        """Sends `sig` to tabd: `proc` itself, or, under a `prefix`, its child (a signal to
        strace would detach it and leave tabd running)."""
        children = []
        if self.prefix:
            try:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    children = [int(pid) for pid in f.read().split()]
            except OSError:
                pass
        if not children:
            self.proc.send_signal(sig)
            return
        try:
            os.kill(children[0], sig)
        except ProcessLookupError:
            pass

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` (once), waits for the exit and returns its code; `stderr` is then
        everything tabd wrote there."""
        if self.proc.poll() is None:
            self._signal(sig)
        if self.stderr is None:
            try:
                self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=WAIT)
            self.stderr = self.log_so_far()
        return self.proc.returncode


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    d.stop()


# A line of tabd's log: `TIME LEVEL message name=value…` (text), or one JSON object with
# its time, level and message (`--log-format json`).
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (ERROR|WARN|INFO|DEBUG) \S")


def malformed_log_lines(d):
    """The lines of a stopped tabd's stderr that are not log lines (a JSON one parses and names
    its time, level and message): every daemon a test starts is held to it, so a whole e2e
    run's logs are read."""
    bad = []
    for line in (d.stderr or "").splitlines():
        if not line:
            continue
        if line.startswith("{"):
            try:
                if not {"time", "level", "message"} <= set(json.loads(line)):
                    bad.append(line)
            except ValueError:
                bad.append(line)
        elif not LOG_LINE.match(line):
            bad.append(line)
    return bad


@pytest.fixture
def make_daemon():
    started = []

    def make(*args, **options):
        d = Daemon(*args, **options)
        started.append(d)
        return d
    yield make
    bad = []
    for d in started:
        d.stop()
        if not d.prefix:
            bad += malformed_log_lines(d)
    assert not bad, f"tabd wrote lines that are not log lines: {bad[:5]}"


class Client:
    """A protocol client: sends commands, reads frames, keeps the event stream it saw."""

    def __init__(self, ws):
        self.ws = ws
        self.welcome = None
        self.batches = []   # every events frame, in order
        self.frames = []    # every frame, in order
        self._n = 0

    @classmethod
    async def connect(cls, url, **params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        ws = await websockets.connect(url + ("?" + query if query else ""), max_size=None)
        c = cls(ws)
        c.welcome = await c.recv()
        assert c.welcome["type"] == "welcome", c.welcome
        return c

    async def recv(self, timeout=WAIT):
        frame = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.frames.append(frame)
        if frame["type"] == "events":
            self.batches.append(frame)
        return frame

    async def send(self, type_, **fields):
        self._n += 1
        ref = fields.pop("ref", f"r{self._n}")
        msg = {"type": type_, **fields}
        if ref is not None:
            msg["ref"] = ref
        await self.send_message(msg)
        return ref

    async def send_message(self, msg):
        """Every command frame `send` makes goes out here (a subclass may look at it)."""
        await self.ws.send(json.dumps(msg))

    async def command(self, type_, **fields):
        """Sends a command and reads up to its reply; returns (events frame or None, reply)."""
        ref = await self.send(type_, **fields)
        events = None
        while True:
            f = await self.recv()
            if f["type"] == "events" and f.get("ref") == ref and f["by"] == self.welcome["client"]:
                events = f
            elif f["type"] in ("ack", "error", "snapshot", "pong", "clients") and f.get("ref") == ref:
                return events, f

    async def until_seq(self, seq):
        """Reads until the stream reached `seq`."""
        while self.last_seq() < seq:
            await self.recv()

    def last_seq(self):
        if self.batches:
            return self.batches[-1]["events"][-1]["seq"]
        return self.welcome["snapshot"]["seq"] if self.welcome.get("snapshot") else 0

    async def close(self):
        await self.ws.close()


def kinds(frame):
    return [e["kind"] for e in frame["events"]]


def strip_seq(frame):
    return [{k: v for k, v in e.items() if k != "seq"} for e in frame["events"]]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs `async def` tests on a fresh event loop (no plugin needed), each within 120 s or
    the seconds of its `time_limit` mark."""
    if asyncio.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        limit = pyfuncitem.get_closest_marker("time_limit")
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), limit.args[0] if limit else 120))
        return True
    return None


# The files whose tests take longest (fault rounds and restarts of whole clusters) run first,
# so that the workers of `make test-e2e` (pytest-xdist) end together instead of one of them
# still running a long round while the others wait.
LONGEST_FIRST = ("test_cluster_faults.py", "test_observation_app.py", "test_engine_trust.py", "test_engine.py", "test_cluster.py",
                 "test_shard_cas.py", "test_shard_faults.py", "test_cluster_move.py", "test_cluster_pipeline.py", "test_cluster_presence.py", "test_peer_cost.py")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = os.path.basename(str(item.fspath))
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)  # stable: each file's tests stay together and in their order
