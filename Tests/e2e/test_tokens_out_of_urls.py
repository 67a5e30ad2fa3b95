"""Tokens stay out of URLs and logs: a browser offers its token as a second WebSocket
subprotocol (`tabd.token.<token>`), the command-line and Swift clients send
`Authorization: Bearer`, and tabd writes no token to its logs."""
import base64
import json
import os
import socket
import subprocess
import threading

import rawws
from conftest import TABD, WAIT

TOKEN = "operator-token-0123456789"
TABCTL = os.environ.get("TABCTL_BIN", os.path.join(os.path.dirname(TABD), "tabctl"))


def handshake(d, protocols, query="room=main"):
    """(response head, socket) of an upgrade offering `protocols`."""
    host, port = d.host.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=WAIT)
    key = base64.b64encode(os.urandom(16)).decode()
    offer = f"Sec-WebSocket-Protocol: {protocols}\r\n" if protocols else ""
    s.sendall((f"GET /ws?{query} HTTP/1.1\r\nHost: {d.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return head.decode(), s


def test_a_token_offered_as_a_subprotocol_is_the_credential(make_daemon):
    d = make_daemon("--token", TOKEN)
    head, s = handshake(d, f"tabd.v1, tabd.token.{TOKEN}")
    assert head.startswith("HTTP/1.1 101"), head
    assert "sec-websocket-protocol: tabd.v1\r\n" in head.lower(), "tabd selects tabd.v1, never the token"
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 1:
            assert json.loads(data)["type"] == "welcome"
            break
    s.close()
    for offer, why in [(None, "no credential"), ("tabd.v1, tabd.token.wrong", "a wrong token"),
                       ("tabd.v1", "the plain subprotocol only")]:
        head, s = handshake(d, offer)
        assert head.startswith("HTTP/1.1 401"), f"{why}: {head}"
        s.close()
    # The query still works, and the subprotocol's token wins over a stale one there.
    head, s = handshake(d, None, query=f"room=main&token={TOKEN}")
    assert head.startswith("HTTP/1.1 101"), head
    s.close()
    head, s = handshake(d, f"tabd.v1, tabd.token.{TOKEN}", query="room=main&token=stale")
    assert head.startswith("HTTP/1.1 101"), head
    s.close()
    d.stop()
    assert TOKEN not in d.stderr, "a token in tabd's log"


class Recorder:
    """A TCP listener that records the first request head it gets, then closes."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.head = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conn, _ = self.sock.accept()
        conn.settimeout(WAIT)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        self.head = data.decode(errors="replace")
        conn.close()


def test_tabctl_sends_its_token_in_authorization_never_in_the_url():
    for args in (["state"], ["rooms"]):
        r = Recorder()
        p = subprocess.run([TABCTL, "--url", f"http://127.0.0.1:{r.port}", "--token", TOKEN, *args],
                           capture_output=True, text=True, timeout=60)
        r.thread.join(WAIT)
        assert r.head, f"tabctl {args} sent nothing: {p.stderr}"
        request_line = r.head.split("\r\n", 1)[0]
        assert TOKEN not in request_line, f"tabctl {args} put the token in its URL: {request_line}"
        assert f"authorization: bearer {TOKEN}".lower() in r.head.lower(), r.head
