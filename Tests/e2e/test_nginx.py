"""tabd behind a real nginx (Debian's nginx-light, scripts/install-test-deps), each test its
own on a free port with the configuration docs/DEPLOYING.md gives: the page, WebSockets and
tabctl through it; the client's address and the public host believed from nginx only with
--trusted-proxy; tokens never in nginx's access log."""
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

import rawws
from conftest import TABD, WAIT

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TABCTL = os.environ.get("TABCTL_BIN", os.path.join(os.path.dirname(TABD), "tabctl"))
TOKEN = "nginx-test-operator-token-42"

pytestmark = pytest.mark.skipif(not os.path.exists(NGINX), reason="nginx is installed by scripts/install-test-deps")

# The location block docs/DEPLOYING.md shows (the upstream and the listen line aside).
LOCATION = """
        proxy_pass http://tabd;
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection $connection_upgrade;
        {host}
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_set_header X-Forwarded-Host $http_host;
        {forwarded}
        proxy_read_timeout 1h;
        proxy_send_timeout 1h;
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Nginx:
    """An nginx in front of `upstream` (HOST:PORT) on a free loopback port, run from
    `directory`, its access log at `self.access_log`."""

    def __init__(self, directory, upstream, host="proxy_set_header Host $host;", forwarded=""):
        self.port = free_port()
        self.dir = directory
        self.access_log = directory / "access.log"
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (directory / d).mkdir(exist_ok=True)
        user = "user root;" if os.geteuid() == 0 else ""
        conf = f"""
{user}
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {self.access_log};
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    upstream tabd {{ server {upstream}; }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{{LOCATION.format(host=host, forwarded=forwarded)}        }}
    }}
}}
"""
        (directory / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen([NGINX, "-p", str(directory), "-c", str(directory / "nginx.conf"), "-g", "daemon off;"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError(f"nginx did not start: {self.proc.communicate()[1]}")
                time.sleep(0.05)
        self.host = f"127.0.0.1:{self.port}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def nginx(tmp_path):
    started = []

    def start(upstream, **options):
        directory = tmp_path / f"nginx{len(started)}"
        directory.mkdir()
        n = Nginx(directory, upstream, **options)
        started.append(n)
        return n
    yield start
    for n in started:
        n.stop()


def test_the_page_and_websockets_through_nginx_name_the_real_client(make_daemon, nginx):
    d = make_daemon("--trusted-proxy", "127.0.0.1")
    n = nginx(d.host)
    with urllib.request.urlopen(f"http://{n.host}/", timeout=WAIT) as r:
        assert r.status == 200 and b"<html" in r.read().lower()
    # A browser on the proxy's address: its Origin is the proxy's, and so is the Host nginx forwards.
    status, _, s = rawws.handshake(n.host, [("Origin", f"http://{n.host}")], source="127.0.0.3")
    assert status.startswith("HTTP/1.1 101"), status
    me = rawws.welcome(s)["client"]
    rawws.send_text(s, b'{"type":"push","route":"through-nginx","ref":"p"}')
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 1 and json.loads(data).get("type") == "ack":
            break
    s.close()
    d.stop()
    assert f"from 127.0.0.3 is client {me} " in d.stderr, "the client's address, not nginx's"


def test_nginxs_default_host_works_only_with_a_trusted_proxy(make_daemon, nginx):
    # nginx's default Host is the upstream's name; the public host then comes only from
    # X-Forwarded-Host, which tabd believes from a --trusted-proxy alone.
    plain = make_daemon()
    n = nginx(plain.host, host="")
    status, _, s = rawws.handshake(n.host, [("Origin", f"http://{n.host}")])
    assert status.startswith("HTTP/1.1 403"), f"without --trusted-proxy the origin cannot match: {status}"
    s.close()
    trusting = make_daemon("--trusted-proxy", "127.0.0.1")
    m = nginx(trusting.host, host="")
    status, _, s = rawws.handshake(m.host, [("Origin", f"http://{m.host}")])
    assert status.startswith("HTTP/1.1 101"), status
    rawws.welcome(s)
    s.close()


def test_a_forwarded_hop_a_client_forges_is_not_believed(make_daemon, nginx):
    d = make_daemon("--trusted-proxy", "127.0.0.1")
    n = nginx(d.host, forwarded='proxy_set_header Forwarded "$http_forwarded, for=$remote_addr;host=\\"$http_host\\";proto=$scheme";')
    status, _, s = rawws.handshake(n.host, [("Forwarded", "for=198.51.100.1;host=evil.example"), ("Origin", f"http://{n.host}")],
                        source="127.0.0.4")
    assert status.startswith("HTTP/1.1 101"), status
    me = rawws.welcome(s)["client"]
    s.close()
    status, _, s = rawws.handshake(n.host, [("Origin", "http://evil.example")], source="127.0.0.4")
    assert status.startswith("HTTP/1.1 403"), f"the forged host is not the public one: {status}"
    s.close()
    d.stop()
    assert f"from 127.0.0.4 is client {me} " in d.stderr, "the hop nginx added is the nearest untrusted one"
    assert "198.51.100.1" not in d.stderr


def tabctl(*args):
    p = subprocess.run([TABCTL, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_tabctl_through_nginx_keeps_the_token_out_of_the_access_log(make_daemon, nginx):
    d = make_daemon("--token", TOKEN, "--trusted-proxy", "127.0.0.1")
    n = nginx(d.host)
    url = f"http://{n.host}"
    tabctl("--url", url, "--token", TOKEN, "--room", "kiosk", "push", "detail")
    state = json.loads(tabctl("--url", url, "--token", TOKEN, "--room", "kiosk", "--json", "state"))
    assert [p["route"] for p in state["snapshot"]["tabs"][0]["stack"]] == ["root", "detail"]
    assert "kiosk" in tabctl("--url", url, "--token", TOKEN, "rooms")
    n.stop()
    log = n.access_log.read_text()
    assert "GET /ws?" in log and "GET /api/rooms" in log, f"the session went through nginx: {log}"
    assert TOKEN not in log, f"a token in nginx's access log: {log}"
    d.stop()
    assert TOKEN not in d.stderr
