"""What the cluster benchmarks share (bench/cluster, bench/cluster-rooms): tabd nodes started
as processes, the cluster secret, process figures read from /proc, a keep-alive HTTP client
of the rooms API, and a WebSocket load over rooms named by the caller.

Standard library, plus the project venv's `websockets` for `room_load`.
"""
import asyncio
import http.client
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".build", "release")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def secret_file(out):
    """The cluster secret a bench's nodes share: `out`/cluster-secret (made once, mode 600)."""
    path = os.path.join(out, "cluster-secret")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
    return path


class Node:
    """One tabd process, its stderr in `log`; `host` is HOST:PORT, `ws` its WebSocket URL.

    With `--cluster` in `args` and a `secret` (a file), `--cluster-secret-file` is added.
    """

    def __init__(self, *args, binary=None, secret=None, log=None):
        if "--cluster" in args and secret:
            args = (*args, "--cluster-secret-file", secret)
        self.args = args
        self.log = open(log or os.devnull, "w")
        self.proc = subprocess.Popen([binary or os.path.join(BIN, "tabd"), "--port", "0", "--rate-limit", "0",
                                      "--log-level", os.environ.get("TABD_BENCH_LOG", "warn"), *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=ROOT)
        m = re.match(r"tabd listening on http://([^/]+)/", self.proc.stdout.readline().strip())
        if not m:
            self.proc.kill()
            raise RuntimeError(f"tabd did not start: {args} (log: {log})")
        self.host = m.group(1)
        self.ws = f"ws://{self.host}/ws"

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        """SIGTERM, then SIGKILL after 15 s; returns the exit status (negative: the signal
        that ended it), which a tabd that stops cleanly has 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


# --- /proc ---------------------------------------------------------------------------------

def cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command's ")": state is field 3, utime and stime fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def status_field(pid, name):
    """A number of /proc/PID/status: `VmRSS` in bytes, `Threads` as it is."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == name:
                parts = value.split()
                return int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    raise KeyError(name)


def rss(pid):
    return status_field(pid, "VmRSS")


def threads(pid):
    return status_field(pid, "Threads")


class CpuWindow:
    """CPU time of processes between `start()` and `stop()`, each as % of one core."""

    def __init__(self, pids):
        self.pids = list(pids)

    def start(self):
        self.t0 = time.monotonic()
        self.c0 = [cpu_seconds(p) for p in self.pids]
        self.self0 = _own_cpu()
        return self

    def stop(self):
        seconds = time.monotonic() - self.t0
        used = [cpu_seconds(p) - c for p, c in zip(self.pids, self.c0)]
        self.seconds = seconds
        self.percent = [100 * u / seconds for u in used]
        self.own_percent = 100 * (_own_cpu() - self.self0) / seconds
        return self


def _own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def disk_usage(path):
    """(bytes allocated on disk, bytes of the files) under `path`, as `du` and `du -b` count them."""
    blocks = size = 0
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(top, name))
            except FileNotFoundError:
                continue
            blocks += st.st_blocks * 512
            size += st.st_size
    return blocks, size


def percentiles(values, points=(50, 99)):
    """{"p50": …, "p99": …, "max": …, "mean": …} of `values` (nearest rank), None if empty."""
    if not values:
        return None
    s = sorted(values)
    out = {f"p{p}": s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))] for p in points}
    out["max"] = s[-1]
    out["mean"] = statistics.fmean(s)
    return out


# --- the rooms API over keep-alive HTTP ------------------------------------------------------

class Api:
    """A keep-alive HTTP connection to one tabd. tabd closes a connection silent for
    --request-timeout (5 s) after its last answer, so one idle for 3 s is opened again."""

    IDLE = 3.0

    def __init__(self, host, timeout=60):
        self.host, self.timeout = host, timeout
        self.conn, self.used = None, 0.0

    def request(self, method, path, body=None):
        """(status, body bytes, seconds from sending to the whole answer)."""
        for attempt in (1, 2):
            if self.conn is None or time.monotonic() - self.used > self.IDLE:
                self.close()
                h, p = self.host.rsplit(":", 1)
                self.conn = http.client.HTTPConnection(h, int(p), timeout=self.timeout)
            t0 = time.perf_counter()
            try:
                self.conn.request(method, path, body=body if body is not None else (b"" if method in ("PUT", "POST") else None))
                r = self.conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # Closed under us before an answer: once more on a new connection (a PUT
                # that was taken meanwhile then answers 409, which the caller sees).
                self.close()
                if attempt == 2:
                    raise
                continue
            self.used = time.monotonic()
            if r.getheader("connection", "").lower() == "close":
                self.close()
            return r.status, data, time.perf_counter() - t0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def metric(self, name):
        """The value of an unlabelled metric of GET /metrics, or None."""
        status, data, _ = self.request("GET", "/metrics")
        if status != 200:
            return None
        for line in data.decode(errors="replace").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


# --- a WebSocket load over chosen rooms -------------------------------------------------------

async def room_load(nodes_ws, rooms, window=2, duration=10.0, warmup=2.0, value_bytes=100, on_window=None):
    """Every room in `rooms` gets one client on each URL of `nodes_ws` (a cluster's nodes);
    room r's client on node r mod n sends `set` commands, `window` in flight (closed loop: a
    command is done when every client of its room has its `events` frame, matched by
    `ref`). Measures the `duration` seconds after `warmup`: commands done per second, and
    the latency from sending a command to its room's last client receiving it.
    `on_window(True)` is called as the measured seconds begin, `on_window(False)` as they end.
    """
    import websockets  # the project venv's

    n = len(nodes_ws)
    conns = [[None] * n for _ in rooms]
    sem = asyncio.Semaphore(64)

    async def open_one(r, j):
        async with sem:
            ws = await websockets.connect(f"{nodes_ws[j]}?room={rooms[r]}&name=b{j}", max_size=None,
                                          compression=None, ping_interval=None, open_timeout=60)
            first = json.loads(await asyncio.wait_for(ws.recv(), 60))
            if first.get("type") != "welcome":
                raise RuntimeError(f"room {rooms[r]}: {first}")
            conns[r][j] = ws

    await asyncio.gather(*(open_one(r, j) for r in range(len(rooms)) for j in range(n)))

    pending = {}            # ref -> [sent at, clients still to receive it, room]
    counters = [0] * len(rooms)
    padding = "x" * value_bytes
    latencies, done = [], 0
    errors = {}
    start = time.perf_counter()
    t_from, t_to = start + warmup, start + warmup + duration
    stopping = False

    async def send(r):
        counters[r] += 1
        ref = f"{r}.{counters[r]}"
        pending[ref] = [time.perf_counter(), n, r]
        await conns[r][r % n].send(json.dumps({"type": "set", "ref": ref, "tab": "home", "key": "k",
                                               "value": f"{counters[r]}-{padding}"}))

    def finish(ref, ok):
        nonlocal done
        sent, _, r = pending.pop(ref)
        now = time.perf_counter()
        if ok and t_from <= now <= t_to:
            done += 1
            latencies.append(now - sent)
        if not stopping:
            asyncio.ensure_future(send(r))

    async def reader(r, j):
        ws = conns[r][j]
        try:
            async for raw in ws:
                f = json.loads(raw)
                kind, ref = f.get("type"), f.get("ref")
                if kind == "events":
                    p = pending.get(ref)
                    if p is not None:
                        p[1] -= 1
                        if p[1] == 0:
                            finish(ref, True)
                elif kind == "error":
                    code = f.get("code")
                    errors[code] = errors.get(code, 0) + 1
                    if ref in pending:
                        finish(ref, False)
        except websockets.ConnectionClosed:
            pass

    readers = [asyncio.ensure_future(reader(r, j)) for r in range(len(rooms)) for j in range(n)]
    for r in range(len(rooms)):
        for _ in range(window):
            await send(r)
    await asyncio.sleep(max(0.0, t_from - time.perf_counter()))
    if on_window:
        on_window(True)
    await asyncio.sleep(max(0.0, t_to - time.perf_counter()))
    if on_window:
        on_window(False)
    stopping = True
    # What is in flight finishes (or not) within a few seconds; then everything closes.
    deadline = time.perf_counter() + 10
    while pending and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    unfinished = len(pending)
    await asyncio.gather(*(ws.close() for row in conns for ws in row), return_exceptions=True)
    for t in readers:
        t.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    lat = percentiles([x * 1000 for x in latencies])
    return {"rooms": len(rooms), "clients": len(rooms) * n, "window_per_room": window, "seconds": duration,
            "commands_done": done, "commands_per_second": done / duration, "latency_ms": lat,
            "errors": errors, "unfinished_at_end": unfinished}
