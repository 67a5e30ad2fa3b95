"""A bare WebSocket client on a plain socket, for what a polite library will not do:
never read (with a tiny receive buffer), never answer pings."""
import base64
import os
import socket


def connect(host_port, path="/ws", rcvbuf=None):
    host, port = host_port.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            raise ConnectionError("closed during handshake")
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s
