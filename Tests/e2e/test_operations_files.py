"""What operators take from contrib/: the Grafana dashboard and the Prometheus alert rules
name only metrics tabd exports (a single tabd with a state file, TLS and a webhook, and a
node of a cluster with one), and what `/metrics` adds for them: the build, the process, the
certificate's expiry, and how long commands, welcomes and commits take."""
import json
import os
import re
import ssl
import subprocess
import sys
import time

from conftest import ROOT, Daemon
from sse import wait_until

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import NatsCluster  # noqa: E402
from tlscerts import Certificates  # noqa: E402

# PromQL's own words, functions and label names: never metric names.
PROMQL = {"sum", "by", "rate", "increase", "histogram_quantile", "count", "absent", "changes", "time", "and", "or",
          "le", "job", "instance", "type", "code", "status", "kind", "node", "webhook", "version", "commit", "max",
          "min", "avg", "without", "on", "unless"}


def queries():
    """Every query of the dashboard and of the alert rules, with where it is."""
    out = []
    dash = json.load(open(os.path.join(ROOT, "contrib", "grafana", "tabd-dashboard.json")))
    for panel in dash["panels"]:
        out += [(f"dashboard panel '{panel['title']}'", t["expr"]) for t in panel["targets"]]
    rules = open(os.path.join(ROOT, "contrib", "prometheus", "tabd-alerts.yml")).read()
    out += [("alert rules", m.group(1)) for m in re.finditer(r"^\s+expr: (.+)$", rules, re.M)]
    assert len(out) > 20
    return out


def names_in(expr):
    """The metric names a query reads (histograms by their series: `_bucket`, `_sum`, `_count`)."""
    expr = re.sub(r'"[^"]*"', '""', expr)            # label values
    expr = re.sub(r"\[[^\]]*\]", "", expr)            # ranges
    words = set(re.findall(r"(?<![\w.])[a-zA-Z_][a-zA-Z0-9_]*", expr))
    return {w for w in words if w not in PROMQL and not w.startswith("__")}


def exported(body):
    names = set()
    for line in body.splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names


def test_every_metric_the_dashboard_and_the_alerts_read_is_one_tabd_exports(make_daemon, tmp_path):
    certs = Certificates(str(tmp_path / "tls"))
    single = make_daemon("--state", str(tmp_path / "state.sqlite"), "--tls-cert", certs.a, "--tls-key", certs.a_key,
                         "--webhook", "http://127.0.0.1:9/hook",
                         ssl_context=ssl.create_default_context(cafile=certs.ca))
    status, body = single.get("/metrics")
    assert status == 200
    names = exported(body)
    with NatsCluster(1, base_dir=str(tmp_path / "nats")) as engine:
        node = make_daemon("--cluster", engine.url_arg, "--node-name", "o0", "--webhook", "http://127.0.0.1:9/hook")
        status, body = node.get("/metrics")
        assert status == 200
        names |= exported(body)
    missing = [(where, name) for where, expr in queries() for name in names_in(expr) if name not in names]
    assert not missing, f"queries name metrics tabd does not export: {missing}"


def test_metrics_name_the_build_the_process_and_the_certificates_expiry(make_daemon, tmp_path):
    certs = Certificates(str(tmp_path / "tls"))
    d = make_daemon("--tls-cert", certs.a, "--tls-key", certs.a_key, ssl_context=ssl.create_default_context(cafile=certs.ca))
    _, body = d.get("/metrics")
    version = open(os.path.join(ROOT, "VERSION")).read().strip()
    assert re.search(rf'^tabd_build_info{{version="{re.escape(version)}",commit="[0-9a-f]{{12}}(-dirty)?"}} 1$', body, re.M), body
    def value(name):
        return float(re.search(rf"^{name} (\S+)$", body, re.M).group(1))
    with open(f"/proc/{d.proc.pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024
    assert 0.5 * rss < value("process_resident_memory_bytes") < 2 * rss
    fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
    assert abs(value("process_open_fds") - fds) <= 8, (value("process_open_fds"), fds)
    assert value("process_max_fds") >= value("process_open_fds")
    assert abs(value("process_start_time_seconds") - time.time()) < 120
    # The certificate's notAfter, as openssl reads it.
    out = subprocess.run(["openssl", "x509", "-enddate", "-noout", "-in", certs.a], capture_output=True, text=True, check=True).stdout
    not_after = time.mktime(time.strptime(out.strip().split("=", 1)[1], "%b %d %H:%M:%S %Y %Z")) - time.timezone
    assert abs(value("tabd_tls_certificate_expiry_seconds") - not_after) < 5, (value("tabd_tls_certificate_expiry_seconds"), not_after)


def histogram(body, name):
    """(buckets [(le, cumulative)], sum, count) of a histogram in /metrics text."""
    buckets = [(m.group(1), int(m.group(2))) for m in re.finditer(rf'^{name}_bucket{{le="([^"]+)"}} (\d+)$', body, re.M)]
    total = float(re.search(rf"^{name}_sum (\S+)$", body, re.M).group(1))
    count = int(re.search(rf"^{name}_count (\d+)$", body, re.M).group(1))
    counts = [c for _, c in buckets]
    assert counts == sorted(counts) and buckets[-1] == ("+Inf", count), buckets
    return buckets, total, count


async def test_commands_welcomes_and_commits_are_timed(make_daemon, tmp_path):
    from conftest import Client
    d = make_daemon("--state", str(tmp_path / "state.sqlite"))
    _, body = d.get("/metrics")
    _, _, commands0 = histogram(body, "tabd_command_seconds")
    _, _, welcomes0 = histogram(body, "tabd_welcome_seconds")
    _, _, commits0 = histogram(body, "tabd_commit_seconds")
    clients = [await Client.connect(d.ws, room="timed") for _ in range(3)]
    tab = clients[0].welcome["snapshot"]["tabs"][1]["id"]
    for k in range(10):
        _, reply = await clients[k % 3].command("scroll", tab=tab, offset=k)
        assert reply["type"] == "ack"
    _, reply = await clients[0].command("select", tab="nowhere")   # an error is an answer too
    assert reply["type"] == "error"
    _, body = d.get("/metrics")
    _, total, commands = histogram(body, "tabd_command_seconds")
    assert commands - commands0 == 11 and total > 0
    assert histogram(body, "tabd_welcome_seconds")[2] - welcomes0 == 3
    # Each ack waited for its commit: at least one transaction per command (joins are stored too).
    assert histogram(body, "tabd_commit_seconds")[2] - commits0 >= 10
    for c in clients:
        await c.close()
