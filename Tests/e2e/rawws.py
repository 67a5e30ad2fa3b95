"""A bare WebSocket client on a plain socket, for what a polite library will not do:
never read (with a tiny receive buffer), never answer pings."""
import base64
import json
import os
import socket


def frame_bytes(payload: bytes):
    """One masked text frame (zero mask key), as bytes."""
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 65536:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


def handshake(host_port, headers=(), source=None, query="room=main"):
    """(status line, whole response head, socket) of a WebSocket upgrade to `host_port`
    with extra `headers` (name, value pairs), from the loopback address `source` when
    given; the head is read whatever its status, for tests of refusals."""
    host, port = host_port.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    if source:
        s.bind((source, 0))
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    s.sendall((f"GET /ws?{query} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
    head = read_head(s)
    return head.split("\r\n", 1)[0], head, s


def read_head(s):
    """Everything up to the blank line that ends an HTTP head (or what came before EOF)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return head.decode(errors="replace")


def welcome(s):
    """The welcome frame on an upgraded socket (the first text frame; asserted to be one)."""
    while True:
        opcode, data = recv_frame(s)
        if opcode == 1:
            frame = json.loads(data)
            assert frame["type"] == "welcome", frame
            return frame


def connect(host_port, path="/ws", rcvbuf=None, then=b""):
    """Completes a WebSocket handshake on a plain socket. `then` (frame bytes) goes out in
    the same write as the upgrade request, before the server's answer is read."""
    host, port = host_port.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode() + then)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            raise ConnectionError("closed during handshake")
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def send_text(s, payload: bytes):
    """Sends one masked text frame. The mask key is zero (legal, and no XOR to compute)."""
    s.sendall(frame_bytes(payload))


def _exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def recv_frame(s):
    """(opcode, payload) of the next frame from the server (never masked, never fragmented here)."""
    b0, b1 = _exactly(s, 2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(_exactly(s, 2), "big")
    elif n == 127:
        n = int.from_bytes(_exactly(s, 8), "big")
    return b0 & 0x0F, _exactly(s, n)
