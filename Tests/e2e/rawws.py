"""A bare WebSocket client on a plain socket, for what a polite library will not do:
never read (with a tiny receive buffer), never answer pings."""
import base64
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
