"""TLS in tabd (`--tls-cert`, `--tls-key`): HTTPS and WSS verified against a private CA,
clients without it refused, plain HTTP to the TLS port answered only with a redirect and
harmless to everyone else, TLS 1.1 refused, the pair read again on SIGHUP (open
connections kept, a bad pair refused while the old one serves), start-up refusals that
name the file, and tabctl over https and wss."""
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import sys

import pytest
import websockets

from conftest import ROOT, TABD, WAIT, Client, Daemon

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from tlscerts import Certificates  # noqa: E402

TABCTL = os.environ.get("TABCTL_BIN", os.path.join(os.path.dirname(TABD), "tabctl"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certificates(tmp_path_factory.mktemp("certs"))


def trusting(certs):
    """A client context that trusts the test CA (and checks host names)."""
    return ssl.create_default_context(cafile=certs.ca)


@pytest.fixture
def tls_daemon(certs, tmp_path):
    """A tabd serving the `a` pair from copies the test may replace (`cert`, `key`)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copy(certs.a, cert)
    shutil.copy(certs.a_key, key)
    d = Daemon("--tls-cert", str(cert), "--tls-key", str(key), ssl_context=trusting(certs))
    d.cert, d.key = cert, key
    yield d
    d.stop()


def port_of(d):
    return int(d.host.rsplit(":", 1)[1])


def served_serial(d, certs):
    """The serial of the certificate a new TLS connection to `d` is given (verified)."""
    with socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT) as raw:
        with trusting(certs).wrap_socket(raw, server_hostname="localhost") as s:
            der = s.getpeercert(binary_form=True)
    pem = ssl.DER_cert_to_PEM_cert(der)
    out = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem, capture_output=True, text=True, check=True)
    return out.stdout.strip().split("=", 1)[1].upper()


def plain_request(d, request):
    """The whole answer to `request` sent in plain text to the TLS port."""
    with socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT) as s:
        s.sendall(request)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # dropped (unread bytes make the close a reset)
        return answer


async def connect_wss(d, certs, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    ws = await websockets.connect(d.ws + ("?" + query if query else ""), ssl=trusting(certs), max_size=None)
    c = Client(ws)
    c.welcome = await c.recv()
    assert c.welcome["type"] == "welcome", c.welcome
    return c


def test_the_listening_line_says_https_and_https_and_wss_serve_verified_by_the_ca(tls_daemon, certs):
    d = tls_daemon
    assert d.http.startswith("https://") and d.ws.startswith("wss://")
    # The test certificates are valid for two days: tabd names the certificate and warns.
    logged = d.wait_for_log("renew it")
    assert "TLS 1.2 and later only" in logged and "CN=localhost" in logged
    assert re.search(r"expires in [12] days?; renew it and send SIGHUP", logged), logged
    status, body = d.get("/healthz")
    assert (status, body.strip()) == (200, "ok")
    status, page = d.get("/")
    assert status == 200 and "<html" in page

    async def go():
        a = await connect_wss(d, certs, name="a")
        b = await connect_wss(d, certs, name="b")
        _, ack = await a.command("select", tab="profile")
        assert ack["type"] == "ack"
        await b.until_seq(ack["seq"])
        assert b.batches[-1]["by"] == a.welcome["client"]
        await a.close()
        await b.close()
    asyncio.run(go())
    # ALPN: HTTP/1.1, never h2 (which a browser would pick, and tabd does not speak).
    ctx = trusting(certs)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT), server_hostname="localhost") as s:
        assert s.selected_alpn_protocol() == "http/1.1"
        assert s.version() in ("TLSv1.2", "TLSv1.3")


def test_pipelined_requests_in_one_tls_write_are_all_answered_in_order(tls_daemon, certs):
    """Many requests in one write, more than tabd holds unread (256 KiB): over TLS too it
    pauses reading, answers in order, and takes the rest up again."""
    d = tls_daemon
    n = 6000
    request = b"".join(f"GET /healthz?n={i} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() for i in range(n))
    with trusting(certs).wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT),
                                     server_hostname="localhost") as s:
        s.sendall(request + b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        answers = b""
        while chunk := s.recv(65536):
            answers += chunk
    assert answers.count(b"HTTP/1.1 200") == n + 1, answers[-300:]


def test_a_client_without_the_ca_or_for_another_name_is_refused(tls_daemon, certs):
    d = tls_daemon
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        with ssl.create_default_context().wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT),
                                                      server_hostname="localhost"):
            pass
    with pytest.raises(ssl.SSLCertVerificationError, match="[Hh]ostname mismatch"):
        with trusting(certs).wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT),
                                         server_hostname="example.org"):
            pass
    assert d.get("/healthz")[0] == 200, "tabd serves on after refused handshakes"


def test_plain_http_to_the_tls_port_is_only_redirected_and_harms_no_one(tls_daemon, certs):
    d = tls_daemon
    port = port_of(d)

    async def go():
        watcher = await connect_wss(d, certs, name="watcher")
        # A GET: a redirect to the same path over https, nothing of the page in plain text.
        answer = plain_request(d, f"GET /index.html?room=x HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 301"), answer
        assert f"location: https://localhost:{port}/index.html?room=x".encode() in head.lower()
        assert b"<html" not in body and b"connection: close" in head.lower()
        # A WebSocket upgrade: the same redirect (no WebSocket over plain text).
        upgrade = (f"GET /ws HTTP/1.1\r\nHost: localhost:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
        assert plain_request(d, upgrade).startswith(b"HTTP/1.1 301")
        # Any other method, and a Host that cannot be put in a Location: 400.
        assert plain_request(d, f"POST /api/rooms HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Length: 0\r\n\r\n".encode()) \
            .startswith(b"HTTP/1.1 400")
        assert plain_request(d, b"GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n").startswith(b"HTTP/1.1 400")
        # Bytes that are neither TLS nor HTTP, and a TLS record header that stops: dropped.
        assert plain_request(d, b"\x00\x01\x02\x03" * 64) == b""
        stalled = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        stalled.sendall(b"\x16\x03\x01\x02\x00")
        # Everyone else goes on: a new client, a command, the watcher sees it.
        other = await connect_wss(d, certs, name="other")
        _, ack = await other.command("tap", tab="favorites")
        assert ack["type"] == "ack"
        await watcher.until_seq(ack["seq"])
        stalled.close()
        await other.close()
        await watcher.close()
    asyncio.run(go())


def test_a_storm_of_handshakes_and_stalled_hellos_does_not_stall_a_working_client(tls_daemon, certs):
    """300 connections that stop inside their TLS hello, 100 reset inside it, and 200 full
    TLS handshakes at once,
    from other threads, while a client works: each of its commands is answered within a
    generous bound (only a design fault, such as one handshake waiting for another, breaks
    it), and every handshake of the storm is served."""
    import threading
    d = tls_daemon
    port = port_of(d)
    stalled = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        s.sendall(b"\x16\x03\x01\x02\x00\x01")  # a record header and the start of a hello
        stalled.append(s)
    # And 100 that vanish inside their hello: a reset, no FIN.
    import struct
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    served = []

    def handshakes(n):
        for _ in range(n):
            with trusting(certs).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=WAIT * 3),
                                             server_hostname="localhost") as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                served.append(s.recv(100).startswith(b"HTTP/1.1 200"))

    async def go():
        worker = await connect_wss(d, certs, name="worker")
        threads = [threading.Thread(target=handshakes, args=(25,)) for _ in range(8)]
        for t in threads:
            t.start()
        loop = asyncio.get_running_loop()
        worst = 0.0
        while any(t.is_alive() for t in threads):
            started = loop.time()
            _, ack = await asyncio.wait_for(worker.command("tap", tab="favorites"), 5.0)
            assert ack["type"] == "ack"
            worst = max(worst, loop.time() - started)
        for t in threads:
            t.join()
        await worker.close()
        return worst
    worst = asyncio.run(go())
    print(f"worst command latency during the storm: {worst * 1000:.0f} ms")
    for s in stalled:
        s.close()
    assert len(served) == 200 and all(served), f"{served.count(True)} of 200 handshakes served"
    assert worst < 5.0, worst


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_a_wss_connection_outlives_every_handshake_timeout(certs, make_daemon):
    """libwebsockets arms a timeout after each TLS accept that only its HTTP role clears;
    on tabd's raw sockets it dropped every WSS connection that many seconds later (the
    request timeout here: 1 s). A client busy for three times as long keeps its connection."""
    d = make_daemon("--tls-cert", certs.a, "--tls-key", certs.a_key, "--request-timeout", "1", ssl_context=trusting(certs))

    async def go():
        c = await connect_wss(d, certs, name="busy")
        loop = asyncio.get_running_loop()
        until = loop.time() + 3.0
        acks = 0
        while loop.time() < until:
            _, ack = await c.command("tap", tab="profile")
            assert ack["type"] == "ack"
            acks += 1
            await asyncio.sleep(0.2)  # pacing the commands over the 3 s, not waiting for a state
        assert acks >= 10
        await c.close()
    asyncio.run(go())


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_tls_1_1_is_refused_and_1_2_accepted(tls_daemon, certs):
    d = tls_daemon
    old = trusting(certs)
    # OpenSSL's own defaults would not even offer TLS 1.1: lower them, so the refusal is tabd's.
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1_1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError, match="(?i)protocol version|unsupported protocol"):
        with old.wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT), server_hostname="localhost"):
            pass
    tls12 = trusting(certs)
    tls12.set_ciphers("DEFAULT:@SECLEVEL=0")
    tls12.minimum_version = tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    with tls12.wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT), server_hostname="localhost") as s:
        assert s.version() == "TLSv1.2"


def s_client(port, *args):
    """`openssl s_client` to 127.0.0.1:`port` with `args`, its security level lowered so that
    any refusal is the server's: (handshake done, the cipher it settled on, the protocol)."""
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost", *args],
                       input="", capture_output=True, text=True, timeout=WAIT)
    new = re.search(r"^New, (\S+), Cipher is (\S+)", p.stdout, re.M)
    done = p.returncode == 0 and new is not None and new.group(2) != "(NONE)"
    return done, new.group(2) if new else None, new.group(1) if new else None, p.stdout + p.stderr


# TLS 1.2 suites without forward secrecy (RSA key exchange), with CBC and SHA-1 or SHA-256
# MACs, and finite-field DHE: none of them is offered.
REFUSED_SUITES = ["AES128-SHA", "AES256-SHA256", "AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384",
                  "DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-CHACHA20-POLY1305"]
# The test certificate's key is RSA: the forward-secret AEAD suites for it.
SERVED_SUITES = ["ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"]


def test_tls_1_2_offers_only_forward_secret_aead_suites_and_1_3_works(tls_daemon):
    port = port_of(tls_daemon)
    for suite in REFUSED_SUITES:
        done, cipher, _, out = s_client(port, "-tls1_2", "-cipher", f"{suite}:@SECLEVEL=0")
        assert not done, f"{suite} was served ({cipher}): {out[-600:]}"
    for suite in SERVED_SUITES:
        done, cipher, protocol, out = s_client(port, "-tls1_2", "-cipher", suite)
        assert done and cipher == suite and protocol == "TLSv1.2", out[-600:]
    # Everything the client offers at once: the server picks one of its own.
    done, cipher, _, out = s_client(port, "-tls1_2", "-cipher", "ALL:@SECLEVEL=0")
    assert done and cipher in SERVED_SUITES, out[-600:]
    for suite in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"):
        done, cipher, protocol, out = s_client(port, "-tls1_3", "-ciphersuites", suite)
        assert done and cipher == suite and protocol == "TLSv1.3", out[-600:]
    # What survived was a working connection, not only a handshake.
    assert b"HTTP/1.1 200" in https_get(tls_daemon, "/healthz", ciphers="ECDHE-RSA-AES128-GCM-SHA256", version=ssl.TLSVersion.TLSv1_2)


def https_get(d, path, ciphers, version):
    context = ssl._create_unverified_context()
    context.set_ciphers(ciphers)
    context.minimum_version = context.maximum_version = version
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port_of(d)), timeout=WAIT), server_hostname="localhost") as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def test_tabctl_refuses_a_server_that_offers_only_suites_without_forward_secrecy(certs):
    # An openssl s_server that speaks TLS 1.2 with AES128-SHA alone (RSA key exchange, CBC).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", certs.a, "-key", certs.a_key,
                               "-tls1_2", "-cipher", "AES128-SHA:@SECLEVEL=0", "-www", "-naccept", "4"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "openssl s_server did not start"
                time.sleep(0.05)
        # It does serve a client that offers that suite...
        done, cipher, _, out = s_client(port, "-tls1_2", "-cipher", "AES128-SHA:@SECLEVEL=0")
        assert done and cipher == "AES128-SHA", out[-600:]
        # ...and tabctl, which offers only forward-secret AEAD suites in TLS 1.2, refuses it.
        p = tabctl("--url", f"https://localhost:{port}", "--ca-file", certs.ca, "rooms")
        assert p.returncode == 3 and "handshake" in p.stderr.lower(), p.stderr
    finally:
        server.kill()
        server.wait()


def test_sighup_rotates_the_pair_keeps_open_connections_and_refuses_a_bad_pair(tls_daemon, certs):
    d = tls_daemon
    first, second = certs.serial(certs.a), certs.serial(certs.b)
    assert served_serial(d, certs) == first

    async def go():
        kept = await connect_wss(d, certs, name="kept")
        # A new pair: the next handshakes get it; the open connection stays and works.
        shutil.copy(certs.b, d.cert)
        shutil.copy(certs.b_key, d.key)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("TLS certificate and key read again")
        assert served_serial(d, certs) == second
        _, ack = await kept.command("select", tab="favorites")
        assert ack["type"] == "ack", "a connection opened before SIGHUP still works"
        # A bad pair (the key of neither certificate): refused with a log line, b serves on.
        shutil.copy(certs.a, d.cert)
        shutil.copy(certs.stray_key, d.key)
        d.proc.send_signal(signal.SIGHUP)
        line = d.wait_for_log("the certificate in use keeps serving")
        assert str(d.key) in line and "does not belong to the certificate" in line
        assert served_serial(d, certs) == second
        # A missing file: the same.
        os.remove(d.key)
        d.proc.send_signal(signal.SIGHUP)
        assert "No such file" in d.wait_for_log("the certificate in use keeps serving")
        assert served_serial(d, certs) == second
        _, ack = await kept.command("select", tab="home")
        assert ack["type"] == "ack"
        await kept.close()
    asyncio.run(go())
    assert d.proc.poll() is None, "SIGHUP never ends tabd"


def test_sighup_without_tls_is_logged_and_changes_nothing(make_daemon):
    d = make_daemon()
    d.proc.send_signal(signal.SIGHUP)
    d.wait_for_log("no certificate to read again")
    assert d.get("/healthz")[0] == 200


@pytest.mark.parametrize("case", ["missing certificate", "missing key", "key of another certificate",
                                  "certificate not PEM", "certificate without key"])
def test_start_up_refusals_name_the_file(certs, tmp_path, case):
    missing = str(tmp_path / "nowhere.pem")
    args, named, status = {
        "missing certificate": (["--tls-cert", missing, "--tls-key", certs.a_key], missing, 1),
        "missing key": (["--tls-cert", certs.a, "--tls-key", missing], missing, 1),
        "key of another certificate": (["--tls-cert", certs.a, "--tls-key", certs.stray_key], certs.stray_key, 1),
        "certificate not PEM": (["--tls-cert", certs.a_key, "--tls-key", certs.a_key], certs.a_key, 1),
        "certificate without key": (["--tls-cert", certs.a], "--tls-key", 2),
    }[case]
    p = subprocess.run([TABD, "--port", "0", "--state", ":memory:", *args], capture_output=True, text=True, timeout=WAIT * 3)
    assert p.returncode == status, p.stderr
    assert named in p.stderr, p.stderr
    assert "listening" not in p.stdout


def test_the_tls_files_may_come_from_the_environment(certs):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TABD_")}
    env.update(TABD_TLS_CERT=certs.a, TABD_TLS_KEY=certs.a_key)
    d = Daemon(env=env, ssl_context=trusting(certs))
    try:
        assert d.http.startswith("https://")
        assert d.get("/healthz")[0] == 200
    finally:
        d.stop()
    env.pop("TABD_TLS_KEY")
    p = subprocess.run([TABD, "--port", "0", "--state", ":memory:"], env=env, capture_output=True, text=True, timeout=WAIT)
    assert p.returncode == 2 and "TABD_TLS_CERT needs --tls-key" in p.stderr, p.stderr


def tabctl(*args, env=None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TABD_")}
    environment.update(env or {})
    return subprocess.run([TABCTL, *args], capture_output=True, text=True, timeout=60, env=environment)


def test_tabctl_over_https_and_wss_with_and_without_the_ca(tls_daemon, certs):
    d = tls_daemon
    https, wss = d.http, d.ws
    for url in (https, wss):
        p = tabctl("--url", url, "--ca-file", certs.ca, "tap", "favorites")
        assert p.returncode == 0 and "ok, seq" in p.stdout, p.stderr
        p = tabctl("--url", url, "tap", "home")
        assert p.returncode == 3, p.stderr
        assert "certificate" in p.stderr and "unable to get local issuer" in p.stderr, p.stderr
    p = tabctl("--url", https, "state", "--json", env={"TABD_CA_FILE": certs.ca})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["snapshot"]["selected"] == "favorites"
    # The HTTP API (rooms) over https: verified the same way.
    p = tabctl("--url", https, "--ca-file", certs.ca, "rooms", "--json")
    assert p.returncode == 0 and json.loads(p.stdout.splitlines()[0])["id"] == "main", p.stderr
    p = tabctl("--url", https, "rooms")
    assert p.returncode == 3 and "certificate verify failed" in p.stderr, p.stderr
    # Plain http:// to the TLS port: the redirect is reported, never followed into a
    # connection the user did not ask for.
    p = tabctl("--url", https.replace("https://", "http://"), "tap", "home")
    assert p.returncode == 3 and "https" in p.stderr, p.stderr
    p = tabctl("--url", https, "--ca-file", os.path.join(os.path.dirname(certs.ca), "nowhere.pem"), "tap", "home")
    assert p.returncode == 2 and "nowhere.pem" in p.stderr, p.stderr


def test_tabctl_refuses_a_certificate_for_another_host_name(certs, make_daemon):
    d = make_daemon("--tls-cert", certs.other_host, "--tls-key", certs.other_host_key)
    port = port_of(d)
    for url, why in ((f"https://localhost:{port}", "hostname mismatch"), (f"wss://127.0.0.1:{port}/ws", "ip address mismatch")):
        p = tabctl("--url", url, "--ca-file", certs.ca, "tap", "home")
        assert p.returncode == 3 and why in p.stderr.lower(), p.stderr
    p = tabctl("--url", f"https://localhost:{port}", "--ca-file", certs.ca, "rooms")
    assert p.returncode == 3 and "hostname mismatch" in p.stderr.lower(), p.stderr
