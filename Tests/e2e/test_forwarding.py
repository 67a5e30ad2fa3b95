"""Behind a reverse proxy: the forwarding headers (`Forwarded`, `X-Forwarded-For`, `-Host`,
`-Proto`) name the client, the public host and the scheme, believed only from the peers
`--trusted-proxy` names; and SIGHUP, which never ends tabd.

The peers are real loopback addresses: 127.0.0.1 is the trusted proxy, 127.0.0.2 a client
that forges the same headers (the socket binds it as its source)."""
import json
import os
import signal
import subprocess

import pytest

import rawws
from conftest import TABD, WAIT


def test_a_trusted_proxys_headers_name_the_client_and_a_forgers_are_ignored(make_daemon):
    d = make_daemon("--trusted-proxy", "127.0.0.1", "--trusted-proxy", "10.0.0.0/8")
    status, _, proxied = rawws.handshake(d.host, [("X-Forwarded-For", "203.0.113.7, 10.1.2.3")])
    assert status.startswith("HTTP/1.1 101"), status
    a = rawws.welcome(proxied)["client"]
    status, _, forged = rawws.handshake(d.host, [("X-Forwarded-For", "198.51.100.66")], source="127.0.0.2")
    assert status.startswith("HTTP/1.1 101"), status
    b = rawws.welcome(forged)["client"]
    status, _, rfc = rawws.handshake(d.host, [("Forwarded", 'for="[2001:db8:cafe::17]:4711";proto=https, for=10.9.9.9;by=10.0.0.1'),
                              ("X-Forwarded-For", "192.0.2.99")])
    assert status.startswith("HTTP/1.1 101"), status
    c = rawws.welcome(rfc)["client"]
    for s in (proxied, forged, rfc):
        s.close()
    d.stop()
    assert f"from 203.0.113.7 is client {a} " in d.stderr, d.stderr
    assert f"from 127.0.0.2 is client {b} " in d.stderr, "headers from an untrusted peer are ignored"
    assert "198.51.100.66" not in d.stderr
    assert f"from 2001:db8:cafe::17 is client {c} " in d.stderr, "Forwarded wins over X-Forwarded-For"


def test_the_origin_is_checked_against_the_forwarded_public_host(make_daemon):
    # A public name without credentials: tabd answers it only when told to (--allow-host).
    d = make_daemon("--trusted-proxy", "127.0.0.1", "--allow-host", "tabd.example")
    public = [("Origin", "https://tabd.example"), ("X-Forwarded-Host", "tabd.example"), ("X-Forwarded-Proto", "https")]
    status, _, s = rawws.handshake(d.host, public)
    assert status.startswith("HTTP/1.1 101"), f"a browser behind the proxy is let in: {status}"
    rawws.welcome(s)
    s.close()
    status, _, s = rawws.handshake(d.host, public, source="127.0.0.2")
    assert status.startswith("HTTP/1.1 403"), f"a forged X-Forwarded-Host from an untrusted peer: {status}"
    s.close()
    status, _, s = rawws.handshake(d.host, [("Origin", "https://evil.example"), ("X-Forwarded-Host", "tabd.example")])
    assert status.startswith("HTTP/1.1 403"), status
    s.close()
    # Ports count: the public host with a port must be the origin's, 443 implied by https.
    status, _, s = rawws.handshake(d.host, [("Origin", "https://tabd.example"), ("Forwarded", 'host="tabd.example:443";proto=https')])
    assert status.startswith("HTTP/1.1 101"), status
    s.close()
    status, _, s = rawws.handshake(d.host, [("Origin", "https://tabd.example"), ("Forwarded", 'host="tabd.example:8443"')])
    assert status.startswith("HTTP/1.1 403"), status
    s.close()
    d.stop()
    assert "refused upgrade from 127.0.0.2: origin 'https://tabd.example' does not match host" in d.stderr, d.stderr


def test_a_forwarded_header_that_cannot_be_parsed_is_ignored_with_a_log_line(make_daemon):
    d = make_daemon("--trusted-proxy", "127.0.0.1")
    status, _, s = rawws.handshake(d.host, [("Forwarded", 'for="unterminated'), ("X-Forwarded-For", "203.0.113.8")])
    assert status.startswith("HTTP/1.1 101"), status
    me = rawws.welcome(s)["client"]
    s.close()
    d.stop()
    assert "a Forwarded header that cannot be parsed" in d.stderr, d.stderr
    assert f"from 203.0.113.8 is client {me} " in d.stderr, "the X-Forwarded headers still count"


@pytest.mark.parametrize("value", ["host.example", "10.0.0.0/33", "256.1.1.1", ""])
def test_a_trusted_proxy_that_is_not_an_address_is_a_usage_error(value):
    r = subprocess.run([TABD, "--port", "0", "--state", ":memory:", "--trusted-proxy", value],
                       capture_output=True, text=True, timeout=WAIT)
    assert r.returncode == 2, r
    assert "--trusted-proxy takes an IPv4 or IPv6 address or CIDR range" in r.stderr, r.stderr


def test_trusted_proxies_from_the_environment(make_daemon):
    d = make_daemon(env={**os.environ, "TABD_TRUSTED_PROXY": "10.0.0.1, 127.0.0.1"})
    status, _, s = rawws.handshake(d.host, [("X-Forwarded-For", "203.0.113.9")])
    assert status.startswith("HTTP/1.1 101"), status
    me = rawws.welcome(s)["client"]
    s.close()
    d.stop()
    assert f"from 203.0.113.9 is client {me} " in d.stderr, d.stderr


def test_sighup_is_caught_and_changes_nothing_without_tls(make_daemon):
    d = make_daemon()
    status, _, s = rawws.handshake(d.host)
    assert status.startswith("HTTP/1.1 101"), status
    rawws.welcome(s)
    d.proc.send_signal(signal.SIGHUP)
    d.proc.send_signal(signal.SIGHUP)  # the kernel may merge the two: one line or two
    # Still serving: the open connection answers, and a new one is welcomed.
    rawws.send_text(s, b'{"type":"ping","ref":"after-hup"}')
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 1 and json.loads(data).get("ref") == "after-hup":
            break
    status, _, again = rawws.handshake(d.host)
    assert status.startswith("HTTP/1.1 101"), status
    rawws.welcome(again)
    assert d.proc.poll() is None, "SIGHUP ended tabd"
    s.close()
    again.close()
    assert d.stop() == 0
    assert d.stderr.count("received SIGHUP: tabd serves plain HTTP") in (1, 2), d.stderr
    assert "received signal 1," not in d.stderr
