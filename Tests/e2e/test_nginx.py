"""tabd behind a real nginx (Debian's nginx-light, scripts/install-test-deps), each test its
own on free ports, with the configuration docs/DEPLOYING.md gives, read from that page (so the
page and the tests cannot drift): the page, WebSockets and tabctl through it; the client's
address and the public host believed from nginx only with --trusted-proxy; no forwarding
header a client sends reaching tabd as if nginx had written it; the page's TLS suites; tokens
never in nginx's access log."""
import base64
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import rawws
from conftest import ROOT, TABD, WAIT

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from tlscerts import Certificates  # noqa: E402
from natscluster import free_port  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TABCTL = os.environ.get("TABCTL_BIN", os.path.join(os.path.dirname(TABD), "tabctl"))
TOKEN = "nginx-test-operator-token-42"
DEPLOYING = os.path.join(ROOT, "docs", "DEPLOYING.md")

pytestmark = pytest.mark.skipif(not os.path.exists(NGINX), reason="nginx is installed by scripts/install-test-deps")


def documented_configuration():
    """The nginx configuration of DEPLOYING.md's "Behind nginx" section, as written there."""
    with open(DEPLOYING) as f:
        section = f.read().split("\n## Behind nginx\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```nginx\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "DEPLOYING.md's nginx section shows one configuration"
    return blocks[0]


def adapted(upstream, port, redirect_port, certificate=None, without=()):
    """The documented configuration with the test's places in it: tabd's address, loopback
    ports for its two servers, the test certificate (or, without one, plain HTTP on the
    first server), and the directives `without` names left out. Everything else as written."""
    lines, seen = [], set()

    def swap(line, old, new, key):
        if old in line:
            seen.add(key)
            return line.replace(old, new)
        return line

    for line in documented_configuration().splitlines():
        directive = line.strip()
        if any(directive.startswith(w) for w in without):
            continue
        if directive.startswith("listen [::]:"):
            seen.add("ipv6")
            continue  # the tests listen on IPv4 loopback only
        if directive.startswith("ssl_") and certificate is None:
            continue
        line = swap(line, "server 127.0.0.1:8080;", f"server {upstream};", "upstream")
        line = swap(line, "listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;" if certificate else f"listen 127.0.0.1:{port};",
                    "listen")
        line = swap(line, "listen 80;", f"listen 127.0.0.1:{redirect_port};", "redirect")
        if directive.startswith("ssl_certificate ") and certificate:
            line, _ = re.subn(r"ssl_certificate\s+\S+;", f"ssl_certificate {certificate[0]};", line)
            seen.add("cert")
        if directive.startswith("ssl_certificate_key ") and certificate:
            line, _ = re.subn(r"ssl_certificate_key\s+\S+;", f"ssl_certificate_key {certificate[1]};", line)
            seen.add("key")
        lines.append(line)
    expected = {"upstream", "listen", "redirect", "ipv6"} | ({"cert", "key"} if certificate else set())
    assert seen == expected, f"DEPLOYING.md's configuration changed shape: found {seen}, expected {expected}"
    return "\n".join(lines)


class Nginx:
    """An nginx running DEPLOYING.md's configuration in front of `upstream` (HOST:PORT) on a
    free loopback port (TLS with `certificate`, a (cert, key) pair), run from `directory`, its
    access log at `self.access_log`."""

    def __init__(self, directory, upstream, certificate=None, without=()):
        self.port = free_port()
        self.dir = directory
        self.access_log = directory / "access.log"
        self.tls = certificate is not None
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (directory / d).mkdir(exist_ok=True)
        user = "user root;" if os.geteuid() == 0 else ""
        site = adapted(upstream, self.port, free_port(), certificate, without)
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
{site}
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
                    raise RuntimeError(f"nginx did not start: {self.proc.communicate()[1]}\n{conf}")
                time.sleep(0.05)
        self.host = f"127.0.0.1:{self.port}"
        self.origin = f"{'https' if self.tls else 'http'}://{self.host}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certificates(tmp_path_factory.mktemp("certs"))


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


def request(n, head, source="127.0.0.1", certs=None):
    """A socket to nginx `n` from the loopback address `source` (TLS when `n` speaks it,
    verified with the test CA) that has sent `head`; returns (status line, whole head, socket)."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.settimeout(WAIT)
    raw.bind((source, 0))
    raw.connect(("127.0.0.1", n.port))
    s = ssl.create_default_context(cafile=certs.ca).wrap_socket(raw, server_hostname="localhost") if n.tls else raw
    s.sendall(head.encode())
    answer = rawws.read_head(s)
    return answer.split("\r\n", 1)[0], answer, s


def upgrade(n, headers, source="127.0.0.1", certs=None):
    """A WebSocket upgrade through nginx `n` with extra `headers` (name, value pairs, sent as
    they are: repeated names and any case)."""
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return request(n, f"GET /ws?room=main HTTP/1.1\r\nHost: {n.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n", source, certs)


# What a client may send to make itself someone else, from somewhere else: each header tabd
# reads behind a proxy (Forwarded's for, host and proto; X-Forwarded-For, -Host, -Proto),
# some twice, in other cases, and as lists.
FORGED = [
    [("Forwarded", "for=203.0.113.66")],
    [("Forwarded", 'for=203.0.113.66;host=evil.example;proto=http'), ("X-Forwarded-For", "203.0.113.67")],
    [("forwarded", 'for="[2001:db8::66]:4711";host="evil.example:443";proto=https, for=203.0.113.66;by=127.0.0.1')],
    [("Forwarded", "for=203.0.113.66"), ("FORWARDED", "host=evil.example")],
    [("Forwarded", "proto=gopher")],  # unreadable: tabd would fall back to X-Forwarded-*
    [("X-Forwarded-For", "203.0.113.67")],
    [("X-Forwarded-For", "203.0.113.67, 127.0.0.1"), ("x-forwarded-for", "127.0.0.1")],
    [("X-Forwarded-Host", "evil.example")],
    [("X-Forwarded-Host", "evil.example:443"), ("X-Forwarded-Proto", "https")],
    [("X-Forwarded-Proto", "http"), ("X-Forwarded-Proto", "gopher")],
]


class Upstream:
    """A stand-in for tabd behind nginx that records the head of every request it gets and
    answers each with 200."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.host = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.heads = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(WAIT)
                self.heads.append(rawws.read_head(conn))
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    def headers(self, index):
        """The head's headers as (lowercased name, value) pairs."""
        lines = self.heads[index].split("\r\n")[1:]
        return [(k.strip().lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines if ":" in line)]

    def close(self):
        self.sock.close()


def test_no_forwarding_header_a_client_sends_passes_through_the_documented_nginx(nginx, certs):
    upstream = Upstream()
    try:
        n = nginx(upstream.host, certificate=(certs.a, certs.a_key))
        for i, forged in enumerate(FORGED):
            extra = "".join(f"{k}: {v}\r\n" for k, v in forged)
            status, _, s = request(n, f"GET /?room=main HTTP/1.1\r\nHost: {n.host}\r\n{extra}Connection: close\r\n\r\n",
                                   source="127.0.0.5", certs=certs)
            s.close()
            assert status.startswith("HTTP/1.1 200"), status
            headers = upstream.headers(i)
            names = [k for k, _ in headers]
            # Exactly what nginx saw, once each; nothing of the client's.
            assert "forwarded" not in names, (forged, headers)
            assert [v for k, v in headers if k == "x-forwarded-for"] == ["127.0.0.5"], (forged, headers)
            assert [v for k, v in headers if k == "x-forwarded-host"] == [n.host], (forged, headers)
            assert [v for k, v in headers if k == "x-forwarded-proto"] == ["https"], (forged, headers)
            assert [v for k, v in headers if k == "host"] == ["127.0.0.1"], (forged, headers)
            assert "evil.example" not in upstream.heads[i] and "203.0.113." not in upstream.heads[i], upstream.heads[i]
    finally:
        upstream.close()


def test_a_client_forging_forwarding_headers_through_nginx_is_logged_as_itself_and_its_host_is_nginxs(make_daemon, nginx, certs):
    d = make_daemon("--trusted-proxy", "127.0.0.1")
    n = nginx(d.host, certificate=(certs.a, certs.a_key))
    clients = []
    for forged in FORGED:
        # The page's own origin is let in: the host tabd checks it against is the one the
        # client's request went to, not one it named.
        status, _, s = upgrade(n, [*forged, ("Origin", n.origin)], source="127.0.0.5", certs=certs)
        assert status.startswith("HTTP/1.1 101"), (forged, status)
        clients.append(rawws.welcome(s)["client"])
        s.close()
        # A page of the forged host is not, whatever the client says the host or scheme is.
        for origin in ("https://evil.example", "http://evil.example", "https://evil.example:443"):
            status, _, s = upgrade(n, [*forged, ("Origin", origin)], source="127.0.0.5", certs=certs)
            assert status.startswith("HTTP/1.1 403"), (forged, origin, status)
            s.close()
    # The HTTP API the same: a cross-site POST (text/plain, no preflight) from the forged
    # host's page is refused and creates nothing; the page's own origin is served.
    for i, forged in enumerate(FORGED):
        for origin, expected in (("https://evil.example", "403"), (n.origin, "200")):
            room = f"{'csrf' if expected == '403' else 'own'}{i}"
            body = '{"type":"ping"}'
            extra = "".join(f"{k}: {v}\r\n" for k, v in [*forged, ("Origin", origin)])
            status, _, s = request(n, f"POST /api/rooms/{room}/commands HTTP/1.1\r\nHost: {n.host}\r\n{extra}"
                                      f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}",
                                   source="127.0.0.5", certs=certs)
            s.close()
            assert status.split(" ")[1] == expected, (forged, origin, status)
    status, _, s = request(n, f"GET /api/rooms?limit=1000 HTTP/1.1\r\nHost: {n.host}\r\nConnection: close\r\n\r\n", certs=certs)
    listing = b""
    while chunk := s.recv(65536):  # Connection: close: the body ends with the connection
        listing += chunk
    listing = listing.decode(errors="replace")
    s.close()
    assert status.startswith("HTTP/1.1 200") and "own0" in listing and "csrf" not in listing, listing
    # A client whose own address is a trusted one (a user on the proxy's host) cannot put
    # another in front of it either: nginx sends its address alone, not the client's list.
    status, _, s = upgrade(n, [("X-Forwarded-For", "203.0.113.68"), ("Origin", n.origin)], source="127.0.0.1", certs=certs)
    assert status.startswith("HTTP/1.1 101"), status
    local = rawws.welcome(s)["client"]
    s.close()
    d.stop()
    for me in clients:
        assert f"from 127.0.0.5 is client {me} " in d.stderr, f"{me}: the client's real address: {d.stderr}"
    assert f"from 127.0.0.1 is client {local} " in d.stderr
    assert "203.0.113." not in d.stderr and "2001:db8::66" not in d.stderr, d.stderr
    assert "refused upgrade from 127.0.0.5: origin 'https://evil.example' does not match host" in d.stderr


def s_client(port, *args):
    """(handshake done, the suite agreed) of `openssl s_client` to `port` with `args`."""
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost", *args],
                       input="", capture_output=True, text=True, timeout=WAIT)
    new = re.search(r"^New, \S+, Cipher is (\S+)", p.stdout, re.M)
    return p.returncode == 0 and new is not None and new.group(1) != "(NONE)", new.group(1) if new else None


def test_the_documented_nginx_offers_the_tls_suites_tabd_offers(nginx, certs):
    upstream = Upstream()
    try:
        n = nginx(upstream.host, certificate=(certs.a, certs.a_key))
        for suite in ("AES128-SHA", "AES256-SHA256", "AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA", "DHE-RSA-AES128-GCM-SHA256"):
            done, agreed = s_client(n.port, "-tls1_2", "-cipher", f"{suite}:@SECLEVEL=0")
            assert not done, f"nginx served {suite} ({agreed})"
        for suite in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"):
            assert s_client(n.port, "-tls1_2", "-cipher", suite) == (True, suite)
        assert s_client(n.port, "-tls1_1", "-cipher", "ALL:@SECLEVEL=0")[0] is False
        assert s_client(n.port, "-tls1_3")[0] is True
    finally:
        upstream.close()


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
    n = nginx(plain.host, without=("proxy_set_header Host ",))
    status, _, s = rawws.handshake(n.host, [("Origin", f"http://{n.host}")])
    # (421 since tabd checks Host while no credentials are set: "tabd" is no name it knows.)
    assert status.split(" ")[1] in ("403", "421"), f"without --trusted-proxy the host cannot match: {status}"
    s.close()
    trusting = make_daemon("--trusted-proxy", "127.0.0.1")
    m = nginx(trusting.host, without=("proxy_set_header Host ",))
    status, _, s = rawws.handshake(m.host, [("Origin", f"http://{m.host}")])
    assert status.startswith("HTTP/1.1 101"), status
    rawws.welcome(s)
    s.close()


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
