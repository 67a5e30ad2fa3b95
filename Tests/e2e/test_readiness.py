"""What systemd and probes see of tabd: `READY=1` on `NOTIFY_SOCKET` once tabd serves (its
state loaded, listening), `STOPPING=1` when it stops; `/livez` and `/readyz` beside
`/healthz`, and a node whose engine is away not ready while still alive."""
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, TABD, WAIT, Daemon, cluster_secret_file
from sse import wait_until

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import NatsCluster  # noqa: E402


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=WAIT) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def notify_socket(tmp_path, abstract):
    """A datagram socket systemd would listen on, and the NOTIFY_SOCKET that names it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"tabd-test-{os.getpid()}-{os.urandom(4).hex()}"
        s.bind("\0" + name)
        value = "@" + name
    else:
        value = str(tmp_path / "notify")
        s.bind(value)
    s.settimeout(WAIT)
    return s, value


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_systemd_hears_ready_once_tabd_serves_and_stopping_when_it_stops(tmp_path, abstract):
    s, value = notify_socket(tmp_path, abstract)
    state = str(tmp_path / "state.sqlite")
    proc = subprocess.Popen([TABD, "--port", "0", "--state", state], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, NOTIFY_SOCKET=value))
    try:
        ready = s.recv(4096).decode().split("\n")
        assert "READY=1" in ready and f"MAINPID={proc.pid}" in ready, ready
        port = int(re.search(r"listening on port (\d+)", "\n".join(ready)).group(1))
        # Ready means serving: asked the moment systemd hears it, tabd answers.
        assert get(port, "/readyz") == (200, "ready\n")
        assert get(port, "/livez") == (200, "ok\n")
        proc.send_signal(15)
        stopping = s.recv(4096).decode().split("\n")
        assert "STOPPING=1" in stopping, stopping
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        s.close()


def test_without_notify_socket_tabd_sends_nothing_and_a_bad_one_changes_nothing(tmp_path):
    # A NOTIFY_SOCKET that names nothing (systemd gone, a stale variable): tabd starts all the same.
    d = Daemon(env=dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "nobody-listens")))
    try:
        assert d.get("/readyz") == (200, "ready\n")
    finally:
        assert d.stop() == 0


def test_probes_and_fences_the_readiness_paths_like_healthz(daemon):
    # Probes name the host as they please (a pod's IP, a service name): answered like /healthz.
    for path in ["/healthz", "/livez", "/readyz"]:
        req = urllib.request.Request(daemon.http + path, headers={"Host": "probe.internal"})
        with urllib.request.urlopen(req, timeout=WAIT) as r:
            assert r.status == 200, path


def test_a_node_whose_engine_is_away_is_alive_but_not_ready(make_daemon, tmp_path):
    with NatsCluster(1, base_dir=str(tmp_path / "nats")) as engine:
        d = make_daemon("--cluster", engine.url_arg, "--node-name", "r0", "--cluster-secret-file", cluster_secret_file())
        assert d.get("/readyz") == (200, "ready\n")
        engine.kill(0)
        wait_until(lambda: d.get("/readyz")[0] == 503, timeout=30, what="/readyz 503 with the engine away")
        status, body = d.get("/readyz")
        assert "engine unreachable (node r0)" in body
        assert d.get("/livez") == (200, "ok\n"), "alive: a restart would not bring the engine back"
        engine.restart(0)
        wait_until(lambda: d.get("/readyz") == (200, "ready\n"), timeout=60, what="/readyz 200 with the engine back")
