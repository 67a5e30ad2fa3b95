"""Connections that come and go leave nothing behind (docs/RELIABILITY.md "Churn").

Waves of 2,000 clients over 200 rooms connect to a release tabd, are welcomed and leave at
once (half with a close frame, half by dropping the connection), driven by `tabbench
--waves` (a WebSocket client in Swift: Python does not reach thousands of connections a
second). After each wave tabbench waits until tabd's /metrics counts no client, then reads
tabd's RSS. The first waves fill what the contract keeps on purpose (each room's history
within `--resume-window 100`: 200 rooms x 100 events, 20 a wave, and up to as many again
before the history compacts) and tabd's pools; from there on, RSS
may grow by at most BOUND bytes per connection that came and went. (Before the history
released what left its window, it grew about 1,250 bytes per connection.)
"""
import json
import os
import subprocess

from conftest import ROOT

RELEASE = os.environ.get("TABD_RELEASE_BIN", os.path.join(ROOT, ".build", "release", "tabd"))
TABBENCH = os.environ.get("TABBENCH_RELEASE_BIN", os.path.join(ROOT, ".build", "release", "tabbench"))

CLIENTS, ROOMS = 2000, 200
WARMUP_WAVES = 10    # 20,000 connections: every room's history (100 to 200 events, 20 a wave) full
WAVES = 32           # 44,000 connections measured after the warm-up
BOUND = 250          # bytes of RSS per departed connection (measured: about 40)


def test_connections_that_came_and_went_leave_no_memory_behind(make_daemon, tmp_path):
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    assert os.access(TABBENCH, os.X_OK), f"no release tabbench at {TABBENCH}: run `make test-e2e`, or set TABBENCH_RELEASE_BIN"
    d = make_daemon("--resume-window", "100", "--log-level", "warn", binary=RELEASE)
    out = tmp_path / "churn.json"
    run = subprocess.run([TABBENCH, "--url", d.ws, "--pid", str(d.proc.pid), "--waves", str(WAVES),
                          "--warmup-waves", str(WARMUP_WAVES), "--clients", str(CLIENTS), "--rooms", str(ROOMS),
                          "--connect-concurrency", "500", "--quiet", "--json", str(out)],
                         capture_output=True, text=True, timeout=240)
    print(run.stdout)
    assert run.returncode == 0, f"tabbench failed: {run.stdout}\n{run.stderr}"
    r = json.loads(out.read_text())
    assert r["connections"] == r["welcomed"] == CLIENTS * WAVES and r["failed"] == 0
    departed = (WAVES - WARMUP_WAVES) * CLIENTS
    growth = (r["rss_end_kib"] - r["rss_before_kib"]) * 1024
    assert growth <= BOUND * departed, (
        f"tabd's RSS grew {growth / 2**20:.1f} MiB over {departed} connections that came and went after the warm-up "
        f"({growth / departed:.0f} bytes each, bound {BOUND}): {[s['rss_kib'] for s in r['samples']]} KiB after each wave")
    # Still serving, and nobody left behind in the rooms' presence.
    status, body = d.get("/metrics")
    assert status == 200 and "\ntabd_clients 0\n" in "\n" + body
    status, body = d.get("/api/rooms/bench-7")
    assert status == 200 and json.loads(body)["snapshot"]["clients"] == []
