"""What the engine's servers are and what a node says of them.

The project runs NATS 2.15.1 (.venv/bin/nats-server, from scripts/install-pinned) with
`jetstream { sync_interval: always }`: each JetStream write is synced to disk before its
ack. Debian's 2.9.10 (/usr/sbin/nats-server, from scripts/install-deps) cannot do that and
refuses the setting. A tabd node reads the version of the server it is connected to (from
the INFO line the server sends first) at start and after each reconnect: it logs it, refuses
to start on a server older than NATS 2.11.7, and warns when a reconnect lands on one.
"""
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, TABD, WAIT, cluster_secret_file

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import DEBIAN, PINNED, NatsCluster, server_version  # noqa: E402

WARNING = "tabd needs NATS 2.11.7 or later"
SYNCED_IF = "acks are synced to disk before they are sent only if the engine's servers are configured " \
            "`jetstream { sync_interval: always }`"


def needs(binary):
    if not os.access(binary, os.X_OK):
        pytest.skip(f"no {binary} (scripts/install-deps and scripts/install-pinned install them)")


def test_the_pinned_server_is_2_15_1_and_syncs_every_write():
    needs(PINNED)
    assert server_version(PINNED) == (2, 15, 1)
    with NatsCluster(3) as c:
        if "NATS_SERVER" not in os.environ:
            assert c.binary == PINNED
        assert c.synced
        for i in range(c.size):
            with open(c.conf_path(i)) as f:
                assert "sync_interval: always" in f.read()
            config = c.monitor(i, "/varz")["jetstream"]["config"]
            assert config.get("sync_always") is True, config


def test_debian_2_9_gets_no_sync_interval():
    needs(DEBIAN)
    assert server_version(DEBIAN)[:2] == (2, 9)
    with NatsCluster(1, binary=DEBIAN) as c:
        assert not c.synced
        with open(c.conf_path(0)) as f:
            assert "sync_interval" not in f.read()
        assert "sync_always" not in c.monitor(0, "/varz")["jetstream"]["config"]


def test_a_node_on_nats_2_9_refuses_to_start_and_says_which_version_it_found_and_needs():
    """Rooms live in shard streams, ordered by a per-subject compare-and-set that NATS 2.9
    does not keep under failures (nats-server #4320, fixed later; leaders that serve before
    applying their log, fixed in 2.11): a node refuses such an engine, naming both versions."""
    needs(DEBIAN)
    with NatsCluster(1, binary=DEBIAN) as engine:
        proc = subprocess.run([TABD, "--port", "0", "--cluster", engine.url_arg, "--node-name", "old",
                               "--cluster-secret-file", cluster_secret_file()],
                              capture_output=True, text=True, timeout=WAIT * 3)
        assert proc.returncode != 0, proc.stdout
        assert "runs NATS 2.9.10; tabd needs NATS 2.11.7 or later" in proc.stderr, proc.stderr
        assert "tabd listening" not in proc.stdout


def test_a_node_on_nats_2_15_logs_the_version_again_after_a_reconnect_without_warning(make_daemon):
    needs(PINNED)
    with NatsCluster(3, binary=PINNED) as engine:
        node = make_daemon("--cluster", engine.url_arg, "--node-name", "new")
        said = node.wait_for_log(SYNCED_IF)
        assert "runs NATS 2.15.1" in said
        first = next(name for name in engine.names if f"engine server {name} (" in said)
        # The server it is on goes: it reconnects to another and says which, and what it runs.
        engine.kill(engine.index_of(first))
        said = node.wait_for_log("engine connection up", timeout=WAIT * 2)
        # The version line may come in the same read as the reconnect's.
        if SYNCED_IF not in said.split("engine connection up", 1)[1]:
            said += node.wait_for_log(SYNCED_IF)
        second = next(name for name in engine.names if f"engine server {name} (" in said)
        assert second != first
        node.stop()
        assert WARNING not in node.stderr
        assert node.stderr.count("runs NATS 2.15.1") >= 2
