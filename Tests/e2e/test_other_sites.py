"""Other web sites fenced out, from raw sockets and http.client: what a page of another site
can make a browser send to a tabd without credentials, and what tabd answers.

1. CSRF: a cross-site POST to the HTTP API (text/plain, a CORS "simple" request, or JSON)
   carries the page's `Origin`: refused with 403 `forbidden`, nothing applied, no room
   created. tabd's own origin, an `--allow-origin` and no `Origin` (curl, back ends) work.
   An `--allow-origin` page gets no CORS preflight and no access-control header from the API.
2. DNS rebinding: a request whose `Host` is a name tabd does not know (the attacker's, which
   now resolves to tabd) gets 421 while no credentials are configured: upgrades, the API
   and the page alike; /healthz is exempt. IP addresses, localhost, *.localhost and
   `--allow-host` names (or TABD_ALLOW_HOST) are answered. With a token or a signing key the
   host is not checked (the credentials are the fence). The refusal's log line names
   --allow-host, and a flood of refusals does not flood the log.
3. The order: 421 (host) before 403 (origin) before the API's own 401.
4. The page cannot be framed by another site: `frame-ancestors 'self'` in its
   Content-Security-Policy header.
"""
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import sys

import pytest

import rawws
from conftest import ROOT, WAIT, Daemon

EVIL = "http://evil.example"
SELECT = {"type": "select", "tab": "profile"}


def port_of(d):
    return int(d.host.rsplit(":", 1)[1])


def request(d, method, path, body=None, headers=None, host=None):
    """(status, headers dict with lower-case names, body bytes) of one request over a fresh
    connection; `host` replaces the Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(d), timeout=WAIT)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or d.host)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.putheader("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders(data)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def snapshot(d, room="main", headers=None):
    """The room's snapshot, read by a back end (no Origin); a ping creates the room first."""
    assert request(d, "POST", f"/api/rooms/{room}/commands", {"type": "ping"})[0] == 200
    status, _, body = request(d, "GET", f"/api/rooms/{room}", headers=headers)
    assert status == 200, body
    return json.loads(body)["snapshot"]


def selected(d, room="main", headers=None):
    s = snapshot(d, room, headers)
    return s["selected"], s["seq"]


def upgrade(d, host, origin=None, extra=()):
    """(status line, head) of a WebSocket upgrade sent with `Host: host`; the socket is closed."""
    s = socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET /ws?room=main HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if origin:
            lines.append(f"Origin: {origin}")
        lines += [f"{k}: {v}" for k, v in extra]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = rawws.read_head(s)
        if head.startswith("HTTP/1.1 101"):
            welcome = rawws.welcome(s)
            assert welcome["type"] == "welcome"
        return head.split("\r\n", 1)[0], head
    finally:
        s.close()


def error_code(body):
    frame = json.loads(body)
    assert frame["type"] == "error", frame
    return frame["code"]


# MARK: CSRF

@pytest.mark.parametrize("content_type", ["text/plain", "application/json", "application/x-www-form-urlencoded"])
def test_a_cross_site_post_is_refused_with_403_and_changes_nothing(daemon, content_type):
    before = selected(daemon)
    status, headers, body = request(daemon, "POST", "/api/rooms/main/commands", SELECT,
                                    {"Content-Type": content_type, "Origin": EVIL})
    assert status == 403, body
    assert error_code(body) == "forbidden"
    assert "access-control-allow-origin" not in headers
    assert selected(daemon) == before, "a refused command was applied"


@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
def test_a_cross_site_post_to_an_unknown_room_creates_no_room(daemon, content_type):
    status, _, body = request(daemon, "POST", "/api/rooms/planted/commands", {"type": "ping"},
                              {"Content-Type": content_type, "Origin": EVIL})
    assert status == 403, body
    status, _, body = request(daemon, "PUT", "/api/rooms/planted2", b"", {"Content-Type": content_type, "Origin": EVIL})
    assert status == 403, body
    for room in ("planted", "planted2"):
        status, _, body = request(daemon, "GET", f"/api/rooms/{room}")
        assert status == 404 and error_code(body) == "unknown_room", body
    status, _, body = request(daemon, "GET", "/api/rooms")
    assert [r["id"] for r in json.loads(body)["rooms"]] == []


def test_cross_site_reads_and_deletes_are_refused_too(daemon):
    snapshot(daemon)  # room main exists
    # The event streams too: another site's page must not follow a room's history.
    for method, path in [("GET", "/api/rooms"), ("GET", "/api/rooms/main"), ("GET", "/api/rooms/main/clients"),
                         ("DELETE", "/api/rooms/main"), ("OPTIONS", "/api/rooms/main/commands"),
                         ("GET", "/api/rooms/main/events"), ("GET", "/api/rooms/main/events?after=0"), ("GET", "/api/events")]:
        status, _, body = request(daemon, method, path, headers={"Origin": EVIL})
        assert status == 403 and error_code(body) == "forbidden", (method, path, body)
    assert request(daemon, "GET", "/api/rooms/main")[0] == 200, "the refused DELETE deleted the room"


def test_the_pages_own_origin_and_no_origin_still_drive_the_api(daemon):
    port = port_of(daemon)
    for origin in (f"http://127.0.0.1:{port}", None):
        for tab in ("profile", "home"):
            headers = {"Content-Type": "application/json"}
            if origin:
                headers["Origin"] = origin
            status, _, body = request(daemon, "POST", "/api/rooms/main/commands", {"type": "select", "tab": tab}, headers)
            assert status == 200 and json.loads(body)["type"] == "ack", (origin, body)
            assert snapshot(daemon)["selected"] == tab
    # curl's default content type, without Origin: a back end's POST as before.
    status, _, body = request(daemon, "POST", "/api/rooms/made/commands", {"type": "ping"},
                              {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200, body
    assert request(daemon, "GET", "/api/rooms/made")[0] == 200


def test_an_allow_origin_page_is_not_refused_but_gets_no_cors_from_the_api(make_daemon):
    d = make_daemon("--allow-origin", "http://app.example:8000")
    status, headers, body = request(d, "POST", "/api/rooms/main/commands", SELECT,
                                    {"Content-Type": "text/plain", "Origin": "http://app.example:8000"})
    assert status == 200 and json.loads(body)["type"] == "ack", body
    assert "access-control-allow-origin" not in headers
    # Its preflight (a JSON POST would need one) is not answered with CORS: the browser stops.
    status, headers, _ = request(d, "OPTIONS", "/api/rooms/main/commands", headers={
        "Origin": "http://app.example:8000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert status >= 400 and "access-control-allow-origin" not in headers, (status, headers)
    # Another origin is still refused; so is the allowed host on another port.
    for origin in (EVIL, "http://app.example:9000"):
        status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT, {"Content-Type": "text/plain", "Origin": origin})
        assert status == 403, (origin, body)


def test_an_allow_origin_is_compared_as_browsers_send_origins(make_daemon):
    # Browsers send the scheme and host in lower case and leave out :443 and :80: an
    # --allow-origin written otherwise still names that page (it used to match nothing).
    d = make_daemon("--allow-origin", "HTTPS://App.Example:443", "--allow-origin", "http://LAN.example:80")
    for origin in ("https://app.example", "http://lan.example"):
        line, head = upgrade(d, d.host, origin=origin)
        assert line.startswith("HTTP/1.1 101"), (origin, head)
        status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT, {"Content-Type": "text/plain", "Origin": origin})
        assert status == 200, (origin, body)
    # Only those: another scheme or port of the same host, and the sandboxed pages' null, are refused.
    for origin in ("http://app.example", "https://app.example:8443", "null"):
        line, head = upgrade(d, d.host, origin=origin)
        assert line.startswith("HTTP/1.1 403"), (origin, head)


def test_a_cross_site_origin_is_refused_before_the_credentials(make_daemon):
    d = make_daemon("--token", "sesame")
    status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT, {"Content-Type": "text/plain", "Origin": EVIL})
    assert status == 403 and error_code(body) == "forbidden", body
    # With the token, still refused: a browser may carry it, the origin is the fence.
    status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT,
                              {"Content-Type": "text/plain", "Origin": EVIL, "Authorization": "Bearer sesame"})
    assert status == 403, body
    status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT, {"Content-Type": "text/plain"})
    assert status == 401, body


# MARK: DNS rebinding

def test_a_rebinding_page_gets_421_for_upgrades_the_api_and_the_page(daemon):
    port = port_of(daemon)
    host, origin = f"evil.example:{port}", f"http://evil.example:{port}"
    before = selected(daemon)
    line, head = upgrade(daemon, host, origin)
    assert line.startswith("HTTP/1.1 421"), head
    assert "sec-websocket-accept" not in head.lower()
    for method, path, body in [("POST", "/api/rooms/main/commands", SELECT), ("POST", "/api/rooms/rebound/commands", SELECT),
                               ("GET", "/api/rooms", None), ("GET", "/", None), ("GET", "/index.html", None),
                               ("GET", "/tabd.js", None), ("GET", "/metrics", None), ("GET", "/nothing-here", None),
                               ("GET", "/api/rooms/main/events", None), ("GET", "/api/events", None)]:
        status, _, answer = request(daemon, method, path, body, {"Content-Type": "text/plain", "Origin": origin}, host=host)
        assert status == 421, (method, path, answer)
        # Without Origin too (a rebound page's own navigation sends none on GET).
        status, _, answer = request(daemon, method, path, body, host=host)
        assert status == 421, (method, path, answer)
    assert selected(daemon) == before
    assert request(daemon, "GET", "/api/rooms/rebound")[0] == 404
    status, _, body = request(daemon, "GET", "/healthz", host=host)
    assert (status, body) == (200, b"ok")
    daemon.wait_for_log("--allow-host evil.example")


def test_the_host_is_checked_before_the_origin(daemon):
    port = port_of(daemon)
    status, _, _ = request(daemon, "POST", "/api/rooms/main/commands", SELECT, {"Origin": EVIL}, host=f"evil.example:{port}")
    assert status == 421
    line, _ = upgrade(daemon, f"evil.example:{port}", EVIL)
    assert line.startswith("HTTP/1.1 421")
    # A known host with a foreign origin: the origin's 403.
    line, _ = upgrade(daemon, daemon.host, EVIL)
    assert line.startswith("HTTP/1.1 403")


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "foo.localhost", "LocalHost", "[::1]", "10.1.2.3"])
def test_ip_addresses_and_localhost_names_are_answered(daemon, name):
    port = port_of(daemon)
    host = f"{name}:{port}"
    assert request(daemon, "GET", "/", host=host)[0] == 200
    assert request(daemon, "GET", "/api/rooms", host=host)[0] == 200
    status, _, body = request(daemon, "POST", "/api/rooms/main/commands", SELECT,
                              {"Content-Type": "application/json", "Origin": f"http://{name}:{port}"}, host=host)
    assert status == 200, body
    line, head = upgrade(daemon, host, f"http://{name}:{port}")
    assert line.startswith("HTTP/1.1 101"), head
    # Without a port, as a proxy on port 80 would forward it.
    assert request(daemon, "GET", "/api/rooms", host=name)[0] == 200


def test_allow_host_and_its_variable_name_the_hosts_answered(make_daemon):
    env = dict(os.environ, TABD_ALLOW_HOST="tabd.example, Other.Example")
    for d, names in [(make_daemon("--allow-host", "tabd.example", "--allow-host", ".lan.example"),
                      ["tabd.example", "TABD.example.", "lan.example", "box.lan.example", "a.b.lan.example"]),
                     (make_daemon(env=env), ["tabd.example", "other.example"])]:
        port = port_of(d)
        for name in names:
            host = f"{name}:{port}"
            assert request(d, "GET", "/", host=host)[0] == 200, name
            status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT,
                                      {"Content-Type": "application/json", "Origin": f"http://{name.lower()}:{port}"}, host=host)
            assert status == 200, (name, body)
            line, head = upgrade(d, host, f"http://{name.lower()}:{port}")
            assert line.startswith("HTTP/1.1 101"), (name, head)
        for other in ("evil.example", "tabd.example.evil.example", "xlan.example"):
            assert request(d, "GET", "/", host=f"{other}:{port}")[0] == 421, other


def test_the_hosts_of_allow_origin_and_host_are_answered(make_daemon):
    d = make_daemon("--allow-origin", "https://app.example")
    port = port_of(d)
    assert request(d, "GET", "/", host=f"app.example:{port}")[0] == 200
    assert request(d, "GET", "/", host=f"evil.example:{port}")[0] == 421


def test_behind_a_trusted_proxy_the_public_host_is_checked(make_daemon):
    d = make_daemon("--trusted-proxy", "127.0.0.1", "--allow-host", "tabd.example")
    assert request(d, "GET", "/", headers={"X-Forwarded-Host": "tabd.example", "X-Forwarded-Proto": "https"})[0] == 200
    assert request(d, "GET", "/", headers={"Forwarded": 'host="tabd.example:443";proto=https'})[0] == 200
    assert request(d, "GET", "/", headers={"X-Forwarded-Host": "evil.example"})[0] == 421
    assert request(d, "GET", "/", headers={"Forwarded": "host=evil.example"}, host="tabd.example")[0] == 421
    # The public host, not the proxy's Host, is the page's origin.
    status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT, {
        "Content-Type": "text/plain", "Origin": "https://tabd.example", "X-Forwarded-Host": "tabd.example",
        "X-Forwarded-Proto": "https"})
    assert status == 200, body
    status, _, body = request(d, "POST", "/api/rooms/main/commands", SELECT, {
        "Content-Type": "text/plain", "Origin": f"http://{d.host}", "X-Forwarded-Host": "tabd.example"})
    assert status == 403, body


def test_a_request_without_host_is_answered_only_on_healthz(daemon):
    port = port_of(daemon)
    for path, want in [("/", 421), ("/api/rooms", 421), ("/healthz", 200)]:
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        try:
            s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
            assert rawws.read_head(s).startswith(f"HTTP/1.1 {want}"), path
        finally:
            s.close()


@pytest.mark.parametrize("credential", ["token", "secret"])
def test_with_credentials_the_host_is_not_checked(make_daemon, tmp_path, credential):
    if credential == "token":
        d = make_daemon("--token", "sesame")
    else:
        key = tmp_path / "key"
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        d = make_daemon("--auth-secret-file", str(key))
    port = port_of(d)
    host = f"evil.example:{port}"
    assert request(d, "GET", "/", host=host)[0] == 200
    status, _, body = request(d, "GET", "/api/rooms", host=host)
    assert status == 401, body  # the credentials guard it, not the host
    line, _ = upgrade(d, host, f"http://evil.example:{port}")
    assert line.startswith("HTTP/1.1 401"), line
    if credential == "token":
        status, _, body = request(d, "GET", "/api/rooms", headers={"Authorization": "Bearer sesame"}, host=host)
        assert status == 200, body


def test_a_flood_of_refused_hosts_does_not_flood_the_log():
    d = Daemon()
    try:
        port = port_of(d)
        for i in range(60):
            assert request(d, "GET", "/", host=f"evil.example:{port}")[0] == 421
        for i in range(60):
            assert request(d, "GET", "/", host=f"rebind{i}.example:{port}")[0] == 421
        assert request(d, "GET", "/healthz")[0] == 200
    finally:
        d.stop()
    lines = [line for line in d.stderr.splitlines() if "with 421" in line]
    assert lines and "--allow-host evil.example" in lines[0], d.stderr
    # One for the repeated host; the 60 others at most one a second (they took far less than 30 s).
    assert len(lines) <= 31, len(lines)


def https_status(d, host):
    """The status of GET / over TLS (the certificate not checked: the Host is what counts)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port_of(d), timeout=WAIT, context=context)
    try:
        conn.putrequest("GET", "/", skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def test_the_names_of_the_tls_certificate_are_answered_and_follow_sighup(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
    import tlscerts
    certs = tlscerts.Certificates(tmp_path / "certs")
    tlscerts._server(certs.dir, "named", "DNS:tabd.example,DNS:*.wild.example,IP:127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copy(os.path.join(certs.dir, "named.pem"), cert)
    shutil.copy(os.path.join(certs.dir, "named.key"), key)
    d = Daemon("--tls-cert", str(cert), "--tls-key", str(key))
    try:
        port = port_of(d)
        for name, want in [("tabd.example", 200), ("a.wild.example", 200), ("wild.example", 421), ("a.b.wild.example", 421),
                           ("evil.example", 421), ("example.org", 421), ("localhost", 200)]:
            assert https_status(d, f"{name}:{port}") == want, name
        # SIGHUP reads another certificate: its names replace the old ones.
        shutil.copy(certs.other_host, cert)
        shutil.copy(certs.other_host_key, key)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("TLS certificate and key read again")
        assert https_status(d, f"example.org:{port}") == 200
        assert https_status(d, f"tabd.example:{port}") == 421
    finally:
        d.stop()


# MARK: Framing

def test_the_page_cannot_be_framed_by_another_site(daemon):
    for path in ("/", "/index.html", "/app.js", "/style.css", "/tabd.js"):
        status, headers, _ = request(daemon, "GET", path)
        assert status == 200, path
        policy = headers.get("content-security-policy", "")
        assert "frame-ancestors 'self'" in policy, (path, headers)
    conn = http.client.HTTPConnection("127.0.0.1", port_of(daemon), timeout=WAIT)
    conn.request("GET", "/")
    r = conn.getresponse()
    r.read()
    assert len(r.headers.get_all("content-security-policy")) == 1
    conn.close()
