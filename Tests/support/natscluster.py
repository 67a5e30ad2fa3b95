"""NATS JetStream servers on loopback, for tests, benchmarks and `make cluster`.

`NatsCluster(1)` is a single JetStream server; `NatsCluster(3)` (or more) is a cluster whose
servers all route to each other, so R3 streams work. Everything lives in one directory
(a fresh temporary one unless `base_dir` is given): per server a config file `nN.conf`, a log
`nN.log` and the JetStream store `nN/js`. Ports are picked free up front (or laid out from
`base_port`), so several clusters can run side by side on one machine.

    with NatsCluster(3) as c:          # start() waits until JetStream has a meta leader
        run_tabd("--cluster", c.url_arg)
        c.kill(c.leader_of("rooms"))   # SIGKILL the stream leader
        c.restart(...)                 # same ports and store, waits for its health

The server is the project's own, .venv/bin/nats-server (v2.15.1, put there by
scripts/install-pinned), unless $NATS_SERVER (or `binary`) names another, such as Debian's
2.9.10 at /usr/sbin/nats-server. Its version is read from `nats-server --version`; from 2.10
on every server's config says `jetstream { sync_interval: always }`, so JetStream syncs each
write to disk before it acks it (`synced`). 2.9 rejects that setting and syncs only every two
minutes.

Readiness, as nats-server 2.9.10 and 2.15.1 both report it: `GET /healthz` on the monitoring port answers
503 `{"status":"unavailable","error":"JetStream has not established contact with a meta
leader"}` until the JetStream meta group has a leader (and, after a restart, until the server
is current with it), then 200 `{"status":"ok"}`. `/healthz?js-enabled-only=true` answers 200
as soon as JetStream is switched on, before any leader exists, so it is not used. `/jsz`
carries `meta_cluster.leader` (a server name) on clustered servers; `/jsz?accounts=true&
streams=true` lists `account_details[].stream_detail[]` with `cluster.leader` per stream.

Standard library only: scripts/cluster runs it outside the test environment.
"""
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

READY_TIMEOUT = 30.0  # seconds start() and restart() wait for health
POLL = 0.1            # seconds between two health polls
STOP_TIMEOUT = 10.0   # seconds stop() gives SIGTERM before SIGKILL
LOG_TAIL = 40         # log lines quoted when a start fails

_lock = threading.Lock()
_taken = set()        # ports handed to clusters of this process that are still running
_live = set()         # clusters to stop when the interpreter exits


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINNED = os.path.join(ROOT, ".venv", "bin", "nats-server")   # scripts/install-pinned puts 2.15.1 there
DEBIAN = "/usr/sbin/nats-server"                             # Debian 12's 2.9.10 (scripts/install-deps)
SYNC_ALWAYS_SINCE = (2, 10, 0)                               # first release with sync_interval


def nats_server_binary():
    """The nats-server to run: $NATS_SERVER, else the project's pinned one in .venv."""
    explicit = os.environ.get("NATS_SERVER")
    if explicit:
        return explicit
    if os.access(PINNED, os.X_OK):
        return PINNED
    raise RuntimeError(f"no nats-server at {PINNED}: scripts/install-pinned installs it "
                       f"(NATS_SERVER={DEBIAN} runs Debian's 2.9 instead, unsynced)")


_versions = {}


def server_version(binary):
    """(major, minor, patch) of `binary`, from `nats-server --version` ("nats-server: v2.15.1")."""
    if binary not in _versions:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).strip()
        m = re.search(r"v?(\d+)\.(\d+)\.(\d+)", text)
        if not m:
            raise RuntimeError(f"{binary} --version said {text!r}: not a nats-server version")
        _versions[binary] = tuple(int(x) for x in m.groups())
    return _versions[binary]


def _worker_range():
    """Under pytest-xdist, this worker's own block of ports below the kernel's ephemeral range
    (32768 and up by default), which `bind(("", 0))` never hands out: a port chosen here and
    released until its server binds it cannot be taken meanwhile by another worker's tabd or
    client. None outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    first = 12000 + 2000 * int(worker[2:])
    return range(first, first + 2000)


_next_in_range = {}


def _free_ports(count):
    """`count` distinct free loopback ports: all bound at once (so no duplicates), then released.

    Ports already given to a running cluster of this process are skipped, so clusters made
    one after another never share a port even before their servers have bound them. Under
    pytest-xdist each worker takes them from its own block (`_worker_range`).
    """
    socks, ports = [], []
    block = _worker_range()
    tries = 0
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if block is None:
                s.bind(("127.0.0.1", 0))
            else:
                # Round the block, skipping ports in use.
                with _lock:
                    i = _next_in_range.get(block.start, 0)
                    _next_in_range[block.start] = i + 1
                tries += 1
                if tries > len(block):
                    raise RuntimeError(f"no free port left in {block}")
                try:
                    s.bind(("127.0.0.1", block[i % len(block)]))
                except OSError:
                    s.close()
                    continue
            socks.append(s)
            port = s.getsockname()[1]
            with _lock:
                if port in _taken:
                    continue
                _taken.add(port)
            ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def free_port():
    """One free loopback port, for a server a test starts (see `_free_ports`)."""
    port = _free_ports(1)[0]
    _release([port])
    return port


def _release(ports):
    with _lock:
        _taken.difference_update(ports)


def _get(url, timeout=2.0):
    """(status, body text) of an HTTP GET; (None, reason) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ValueError) as e:
        return None, str(e)


class NatsCluster:
    """`size` nats-server processes with JetStream: one on its own (size 1) or a full-mesh cluster.

    `base_port`, when given, lays the ports out like NATS's defaults do around 4222: client
    ports base_port+i, cluster (route) ports base_port+2000+i, monitoring ports
    base_port+4000+i. Otherwise every port is picked free. `extra` is configuration added
    to every server's file as it is (a `tls { … }` or `authorization { … }` block for the
    client port); the monitoring port stays plain HTTP, so readiness is checked the same.
    """

    def __init__(self, size=3, base_dir=None, name="tabd", base_port=None, binary=None, extra="", advertise=True,
                 route_proxies=False):
        if size != 1 and size < 3:
            raise ValueError("size is 1 (a single server) or at least 3 (a cluster with a quorum)")
        self.size = size
        self.name = name
        self.extra = extra
        # advertise=False: the servers do not tell clients of each other (`no_advertise`),
        # so a client given proxies' URLs reaches the servers only through them.
        self.advertise = advertise
        # route_proxies=True: each server reaches each other one through a TCP relay of its
        # own (Tests/support/faults.py's Proxy), so that `cut_off(i)` can split server i from
        # the others, and `rejoin(i)` heal it, while its clients still reach it. The servers
        # advertise no reachable route address: none learns a way around the relays.
        self.route_proxies = {} if route_proxies and size > 1 else None
        self.binary = binary or nats_server_binary()
        self.version = server_version(self.binary)
        # 2.10+: every write synced before its ack; 2.9 refuses the setting (syncs every 2 min).
        self.synced = self.version >= SYNC_ALWAYS_SINCE
        self.own_dir = base_dir is None
        self.base_dir = tempfile.mkdtemp(prefix="nats-") if base_dir is None else os.path.abspath(base_dir)
        os.makedirs(self.base_dir, exist_ok=True)
        self.names = [f"n{i + 1}" for i in range(size)]
        self.fixed_ports = base_port is not None
        if self.fixed_ports:
            if base_port + 4000 + size > 65535:
                raise ValueError(f"base port {base_port} leaves no room for the monitoring ports")
            self._layout([base_port + i for i in range(size)],
                         [base_port + 2000 + i for i in range(size)],
                         [base_port + 4000 + i for i in range(size)])
        else:
            self._pick_ports()
        self.procs = [None] * size
        self._logs = [None] * size
        self._stopped = False

    # --- layout -------------------------------------------------------------------------

    def _pick_ports(self):
        per = 3 if self.size > 1 else 2
        ports = _free_ports(per * self.size)
        n = self.size
        self._layout(ports[:n], ports[2 * n:3 * n] if per == 3 else [], ports[n:2 * n])

    def _layout(self, client, route, http):
        self.client_ports, self.route_ports, self.http_ports = client, route, http
        if self.route_proxies is not None:
            from faults import Proxy   # standard library only, like this file
            for i in range(self.size):
                for j in range(self.size):
                    if i != j:
                        # A relay's own port must not be one picked for a server.
                        while (i, j) not in self.route_proxies or self.route_proxies[(i, j)].port in (*client, *route, *http):
                            if (i, j) in self.route_proxies:
                                self.route_proxies[(i, j)].close()
                            self.route_proxies[(i, j)] = Proxy(("127.0.0.1", route[j]))
                        self.route_proxies[(i, j)].target = ("127.0.0.1", route[j])
        for i in range(self.size):
            with open(self.conf_path(i), "w") as f:
                f.write(self._config(i))

    def _all_ports(self):
        return [*self.client_ports, *self.route_ports, *self.http_ports]

    def _config(self, i):
        store = os.path.join(self.base_dir, self.names[i], "js")
        lines = [
            f"server_name: {self.names[i]}",
            f"listen: 127.0.0.1:{self.client_ports[i]}",
            f"http: 127.0.0.1:{self.http_ports[i]}",
            "jetstream {",
            f"  store_dir: {json.dumps(store)}",
            "  max_mem_store: 256MB",
            "  max_file_store: 2GB",
            *(["  sync_interval: always"] if self.synced else []),
            "}",
        ]
        if self.size > 1:
            if self.route_proxies is not None:
                routes = ", ".join(f"nats-route://127.0.0.1:{self.route_proxies[(i, j)].port}"
                                   for j in range(self.size) if j != i)
            else:
                routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
            lines += [
                "cluster {",
                f"  name: {self.name}",
                f"  listen: 127.0.0.1:{self.route_ports[i]}",
                f"  routes: [{routes}]",
                *([] if self.advertise else ["  no_advertise: true"]),
                # Port 1 refuses: a route address gossiped around the relays leads nowhere.
                *(["  advertise: 127.0.0.1:1"] if self.route_proxies is not None else []),
                "}",
            ]
        if self.extra:
            lines.append(self.extra.rstrip("\n"))
        return "\n".join(lines) + "\n"

    def conf_path(self, i):
        return os.path.join(self.base_dir, f"{self.names[i]}.conf")

    def log_path(self, i):
        return os.path.join(self.base_dir, f"{self.names[i]}.log")

    # --- addresses ----------------------------------------------------------------------

    @property
    def urls(self):
        """Client URLs, one per server: nats://127.0.0.1:PORT."""
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    @property
    def url_arg(self):
        """The client URLs comma-joined, as `tabd --cluster` takes them."""
        return ",".join(self.urls)

    @property
    def monitor_urls(self):
        return [f"http://127.0.0.1:{p}" for p in self.http_ports]

    @property
    def pids(self):
        """Process ids of the servers now running (None for one that is not)."""
        return [p.pid if p is not None and p.poll() is None else None for p in self.procs]

    def alive(self, i):
        p = self.procs[i]
        return p is not None and p.poll() is None

    # --- processes ----------------------------------------------------------------------

    def start(self, timeout=READY_TIMEOUT):
        """Starts every server and waits until JetStream is usable; RuntimeError otherwise.

        With picked ports a server that lost its port to another process in the moment
        between picking and binding makes the whole cluster start again on new ports.
        """
        if self._stopped:
            raise RuntimeError("a stopped NatsCluster does not start again; make a new one")
        with _lock:
            _live.add(self)
        for attempt in range(3):
            for i in range(self.size):
                self._launch(i)
            try:
                self.wait_ready(timeout=timeout)
                return self
            except RuntimeError:
                if self.fixed_ports or attempt == 2 or not self._lost_a_port():
                    self.stop()
                    raise
            # Someone took a port: start over on new ones, same directory.
            self._terminate_all()
            _release(self._all_ports())
            self._pick_ports()
        return self

    def _lost_a_port(self):
        return any(not self.alive(i) and "address already in use" in self._tail(i).lower()
                   for i in range(self.size))

    def _launch(self, i):
        if self.alive(i):
            return
        if self._logs[i] is None:
            self._logs[i] = open(self.log_path(i), "ab")
        self._logs[i].write(f"--- tabd natscluster: starting {self.names[i]} ---\n".encode())
        self._logs[i].flush()
        # A session of its own: Ctrl-C in a terminal reaches the script, which stops the
        # servers in its own order, not the servers directly.
        self.procs[i] = subprocess.Popen([self.binary, "-c", self.conf_path(i)],
                                         stdin=subprocess.DEVNULL, stdout=self._logs[i],
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, indices=None, timeout=READY_TIMEOUT):
        """Waits until each server in `indices` (default: all running) answers /healthz with 200
        and, for a cluster, some server names a JetStream meta leader. RuntimeError on timeout."""
        wanted = list(range(self.size)) if indices is None else list(indices)
        deadline = time.monotonic() + timeout
        last = {}
        while True:
            dead = [i for i in wanted if not self.alive(i)]
            if dead:
                raise RuntimeError(self._failure(f"nats-server {', '.join(self.names[i] for i in dead)} exited"))
            for i in wanted:
                last[i] = _get(self.monitor_urls[i] + "/healthz", timeout=1.0)
            healthy = all(status == 200 for status, _ in last.values())
            if healthy and (self.size == 1 or self.meta_leader() is not None):
                return
            if time.monotonic() >= deadline:
                states = "; ".join(f"{self.names[i]}: {s} {b.strip()[:120]}" for i, (s, b) in last.items())
                raise RuntimeError(self._failure(f"JetStream not ready after {timeout:.0f} s ({states})"))
            time.sleep(POLL)

    def kill(self, i, sig=signal.SIGKILL, wait=True):
        """Sends `sig` to server i. For SIGKILL/SIGTERM/SIGINT with `wait`, returns once it exited."""
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        if wait and sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            try:
                p.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def restart(self, i, timeout=READY_TIMEOUT):
        """Starts server i again (killing it first if it runs), same ports and store; waits
        until it is healthy (caught up with the meta leader) and a meta leader exists."""
        if self._stopped:
            raise RuntimeError("the NatsCluster was stopped")
        if self.alive(i):
            self.kill(i, signal.SIGTERM)
        self._launch(i)
        self.wait_ready(indices=[i], timeout=timeout)

    def _terminate_all(self):
        running = [p for p in self.procs if p is not None and p.poll() is None]
        for p in running:
            try:
                p.terminate()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_TIMEOUT
        for p in running:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cut_off(self, i):
        """Splits server i from the others (its routes dropped, new ones refused); its clients
        still reach it. Needs route_proxies=True."""
        for (a, b), proxy in self.route_proxies.items():
            if i in (a, b):
                proxy.cut()

    def rejoin(self, i):
        """Lets server i's routes through again: it joins the others once it reconnects."""
        for (a, b), proxy in self.route_proxies.items():
            if i in (a, b):
                proxy.heal()

    def stop(self):
        """SIGTERM to every server, SIGKILL to any still there after STOP_TIMEOUT; removes the
        directory if this object made it. Safe to call more than once."""
        self._terminate_all()
        for proxy in (self.route_proxies or {}).values():
            proxy.close()
        for i, f in enumerate(self._logs):
            if f is not None:
                f.close()
                self._logs[i] = None
        if not self._stopped:
            self._stopped = True
            _release(self._all_ports())
            if self.own_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)
        with _lock:
            _live.discard(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # --- monitoring ---------------------------------------------------------------------

    def monitor(self, i, path):
        """The JSON of monitoring endpoint `path` (e.g. "/jsz?streams=true") on server i, or None."""
        status, body = _get(self.monitor_urls[i] + path)
        if status != 200:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def index_of(self, server_name):
        """The index of the server called `server_name` (n1 → 0), or None."""
        return self.names.index(server_name) if server_name in self.names else None

    def meta_leader(self):
        """The index of the JetStream meta leader as the running servers report it, or None.
        A single server (no cluster) leads itself."""
        if self.size == 1:
            return 0 if self.alive(0) else None
        return self._agreed(lambda i: ((self.monitor(i, "/jsz") or {}).get("meta_cluster") or {}).get("leader"))

    def leader_of(self, stream):
        """The index of the server leading `stream`, from /jsz?accounts=true&streams=true
        (2.9.10 has `account_details[].stream_detail[].cluster.leader`); None if unknown."""
        def reported(i):
            data = self.monitor(i, "/jsz?accounts=true&streams=true") or {}
            for account in data.get("account_details") or []:
                for s in account.get("stream_detail") or []:
                    if s.get("name") == stream:
                        # A server without a cluster leads its own streams.
                        return (s.get("cluster") or {}).get("leader") or (self.names[i] if self.size == 1 else None)
            return None
        return self._agreed(reported)

    def _agreed(self, ask):
        """Asks every running server for a leader's name; the one a leader claims for itself
        wins, else the name most servers give; as an index, or None."""
        votes = {}
        for i in range(self.size):
            if not self.alive(i):
                continue
            name = ask(i)
            if not name or self.index_of(name) is None:
                continue
            if name == self.names[i]:
                return i
            votes[name] = votes.get(name, 0) + 1
        if not votes:
            return None
        return self.index_of(max(votes, key=votes.get))

    # --- diagnostics --------------------------------------------------------------------

    def _tail(self, i, lines=LOG_TAIL):
        try:
            with open(self.log_path(i), "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _failure(self, what):
        tails = "\n".join(f"--- {self.names[i]} ({self.log_path(i)}) ---\n{self._tail(i)}" for i in range(self.size))
        return f"{what}\n{tails}"

    @property
    def version_text(self):
        """The server's version as text, e.g. "2.15.1"."""
        return ".".join(map(str, self.version))

    def __repr__(self):
        return f"NatsCluster(size={self.size}, version={self.version_text}, synced={self.synced}, urls={self.urls}, dir={self.base_dir!r})"


@atexit.register
def _stop_leftovers():
    """Never leave servers behind when the interpreter exits with clusters still running."""
    with _lock:
        live = list(_live)
    for c in live:
        c.stop()
