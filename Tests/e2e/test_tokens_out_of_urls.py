"""Tokens stay out of URLs and logs: a browser offers its token as a second WebSocket
subprotocol (`tabd.token.<token>`), the command-line and Swift clients send
`Authorization: Bearer`, and tabd writes no token to its logs."""
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
    _, head, s = rawws.handshake(d.host, [("Sec-WebSocket-Protocol", protocols)] if protocols else [], query=query)
    return head, s


def test_a_token_offered_as_a_subprotocol_is_the_credential(make_daemon):
    d = make_daemon("--token", TOKEN)
    head, s = handshake(d, f"tabd.v1, tabd.token.{TOKEN}")
    assert head.startswith("HTTP/1.1 101"), head
    assert "sec-websocket-protocol: tabd.v1\r\n" in head.lower(), "tabd selects tabd.v1, never the token"
    rawws.welcome(s)
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
        self.head = rawws.read_head(conn)
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
