"""A reader of server-sent events over a raw socket, for the tests of tabd's event streams
(`/api/rooms/ID/events`, `/api/events`): it sends the request itself, checks the head, and
parses events exactly as the format says (LF line endings, `id:`, `data:`, comments)."""
import json
import socket
import time
from urllib.parse import urlsplit

WAIT = 10.0


class StreamClosed(Exception):
    """The server ended the stream (or the connection)."""


class EventStream:
    """One GET of an event stream. `status` and `headers` come from the head; `next_event`
    returns the next event as a dict: `id` (a string, or None), `data` (parsed JSON) and
    `raw` (the event's text)."""

    def __init__(self, base, path, headers=None, timeout=WAIT, rcvbuf=None):
        u = urlsplit(base)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((u.hostname, u.port))
        lines = [f"GET {path} HTTP/1.1", f"Host: {u.netloc}", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        self.comments = 0
        self.closed = False
        self.head_bytes = self._read_until(b"\r\n\r\n")
        head = self.head_bytes.decode("latin-1").split("\r\n")
        self.status = int(head[0].split(" ")[1])
        self.headers = {}
        for line in head[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                self.headers[k.strip().lower()] = v.strip()
        if self.status != 200 and "content-length" in self.headers:
            n = int(self.headers["content-length"])
            while len(self.buffer) < n:
                self._fill()
            self.body = self.buffer[:n]
        else:
            self.body = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            self.closed = True
            raise StreamClosed("the server closed the stream")
        self.buffer += chunk

    def _read_until(self, marker):
        while marker not in self.buffer:
            self._fill()
        at = self.buffer.index(marker)
        part, self.buffer = self.buffer[:at], self.buffer[at + len(marker):]
        return part

    def error(self):
        """The JSON error body of a refused request."""
        return json.loads(self.body)

    def next_event(self, timeout=WAIT):
        """The next event; comments (heartbeats) are counted and skipped. Raises
        StreamClosed at the end of the stream, socket.timeout when nothing comes."""
        self.sock.settimeout(timeout)
        while True:
            block = self._read_until(b"\n\n").decode()
            assert "\r" not in block, f"an event with CR: {block!r}"
            event = {"id": None, "data": None, "raw": block, "event": None}
            data = []
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "id":
                    event["id"] = value
                elif field == "data":
                    data.append(value)
                elif field == "event":
                    event["event"] = value
            if not data:
                self.comments += 1
                continue
            event["data"] = json.loads("\n".join(data))
            return event

    def events(self, n, timeout=WAIT):
        return [self.next_event(timeout) for _ in range(n)]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def wait_until(predicate, timeout=WAIT, what="the condition"):
    """Polls `predicate` until it is true, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.02)
