"""A minimal NATS client for the tests: a few lines of the NATS text protocol over a socket
(CONNECT, SUB, PUB/HPUB with a reply subject, PING/PONG), enough for JetStream's
request/reply API, publishes that wait for their ack, and the hostile peer of the engine
trust tests, which publishes whatever it likes on tabd's subjects and reads what the
nodes send there. No NATS client library.
"""
import itertools
import json
import os
import socket
import time

WAIT = 10.0  # seconds one request may take


class NatsError(Exception):
    pass


class Msg:
    """A received message: `status` is the header status ("503" for no responders) or None."""

    def __init__(self, subject, headers, status, data, reply=None):
        self.subject, self.headers, self.status, self.data, self.reply = subject, headers, status, data, reply

    def json(self):
        return json.loads(self.data)


class Nats:
    """One connection speaking the NATS text protocol; synchronous, one request at a time."""

    _ids = itertools.count(1)

    def __init__(self, url, timeout=WAIT):
        self.url = url
        host, port = url.split("//", 1)[-1].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.timeout = timeout
        self.buf = b""
        info = self._line(time.monotonic() + timeout)
        if not info.startswith(b"INFO "):
            raise NatsError(f"not a NATS server: {info!r}")
        self.info = json.loads(info[5:])
        self.inbox = f"_INBOX.{os.getpid()}.{next(self._ids)}"
        self.n = 0
        self.sids = 0
        self.pending = []   # messages read while waiting for something else (flush)
        # no_responders: a request nobody serves (JetStream without a leader, no stream for the
        # subject) comes back at once as a 503 status message instead of timing out.
        self._send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
                   + f"SUB {self.inbox}.* 1\r\nPING\r\n".encode())
        self._next(time.monotonic() + timeout, want_pong=True)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer from nats-server")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no answer from nats-server") from None
        if not chunk:
            raise ConnectionError("nats-server closed the connection")
        self.buf += chunk

    def _line(self, deadline):
        while b"\r\n" not in self.buf:
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _payload(self, size, deadline):
        while len(self.buf) < size + 2:
            self._fill(deadline)
        data, self.buf = self.buf[:size], self.buf[size + 2:]
        return data

    def _next(self, deadline, want_pong=False):
        """The next message (or None for the PONG when `want_pong`); answers server PINGs."""
        while True:
            line = self._line(deadline)
            op = line.split(b" ", 1)[0].upper()
            if op == b"PING":
                self._send(b"PONG\r\n")
            elif op == b"PONG":
                if want_pong:
                    return None
            elif op in (b"+OK", b"INFO"):
                pass
            elif op == b"-ERR":
                raise NatsError(line.decode())
            elif op == b"MSG":      # MSG <subject> <sid> [reply] <size>
                parts = line.decode().split()
                return Msg(parts[1], {}, None, self._payload(int(parts[-1]), deadline), parts[3] if len(parts) == 5 else None)
            elif op == b"HMSG":     # HMSG <subject> <sid> [reply] <header size> <total size>
                parts = line.decode().split()
                raw = self._payload(int(parts[-1]), deadline)
                head, data = raw[:int(parts[-2])].decode(), raw[int(parts[-2]):]
                first, *rest = head.split("\r\n")
                status = first.split(" ")[1] if " " in first else None  # "NATS/1.0 503"
                headers = dict(h.split(":", 1) for h in rest if ":" in h)
                return Msg(parts[1], {k.strip(): v.strip() for k, v in headers.items()}, status, data,
                           parts[3] if len(parts) == 6 else None)
            else:
                raise NatsError(f"unexpected from nats-server: {line!r}")

    def request(self, subject, data=b"", headers=None, timeout=None):
        """Publishes with a reply subject (HPUB when `headers`) and returns the reply Msg."""
        if isinstance(data, (dict, list)):
            data = json.dumps(data).encode()
        elif isinstance(data, str):
            data = data.encode()
        self.n += 1
        reply = f"{self.inbox}.{self.n}"
        if headers:
            head = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            self._send(f"HPUB {subject} {reply} {len(head)} {len(head) + len(data)}\r\n".encode()
                       + head + data + b"\r\n")
        else:
            self._send(f"PUB {subject} {reply} {len(data)}\r\n".encode() + data + b"\r\n")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            m = self._next(deadline)
            if m.subject == reply:   # an earlier request's late reply is skipped
                return m

    def js(self, api, body=None, wait=WAIT):
        """A JetStream API call ("STREAM.CREATE.x"): the JSON reply; NatsError on an error reply.

        Right after a stream is created or a server restarted, a request can meet no responder
        (503) or no answer at all for a moment (the stream has no leader yet, or its interest has
        not reached this server over the routes): those are retried until `wait` runs out. The
        calls used here (INFO, STREAM.CREATE with the same config) are safe to repeat.
        """
        deadline = time.monotonic() + wait
        while True:
            try:
                m = self.request(f"$JS.API.{api}", body if body is not None else b"", timeout=2.0)
                if not m.status:
                    break
                why = f"status {m.status}"
            except TimeoutError:
                why = "no answer"
            if time.monotonic() >= deadline:
                raise NatsError(f"$JS.API.{api}: {why} for {wait:.0f} s")
            time.sleep(0.05)
        reply = m.json()
        if "error" in reply:
            raise NatsError(f"$JS.API.{api}: {reply['error']}")
        return reply

    def publish(self, subject, data=b"x", headers=None, timeout=None, wait=WAIT):
        """A JetStream publish: the ack JSON ({"stream", "seq"[, "duplicate"]} or {"error"}).

        A 503 (no responders) means no stream got the message, so it is sent again until `wait`
        runs out (the stream's interest may not have reached this server yet)."""
        deadline = time.monotonic() + wait
        while True:
            m = self.request(subject, data, headers=headers, timeout=timeout)
            if not m.status:
                return m.json()
            if time.monotonic() >= deadline:
                raise NatsError(f"publish on {subject}: status {m.status} for {wait:.0f} s")
            time.sleep(0.05)

    # --- a peer that is not a node: plain publishes and subscriptions -------------------

    def pub(self, subject, data=b"", headers=None, reply=None):
        """Publishes without waiting (PUB, or HPUB with `headers`), with `reply` if given."""
        if isinstance(data, str):
            data = data.encode()
        r = f" {reply}" if reply else ""
        if headers:
            head = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            self._send(f"HPUB {subject}{r} {len(head)} {len(head) + len(data)}\r\n".encode() + head + data + b"\r\n")
        else:
            self._send(f"PUB {subject}{r} {len(data)}\r\n".encode() + data + b"\r\n")

    def flush(self, timeout=None):
        """Waits until the server has taken everything sent before (PING/PONG); messages
        that arrive meanwhile are kept for `next`."""
        self._send(b"PING\r\n")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            m = self._next(deadline, want_pong=True)
            if m is None:
                return
            self.pending.append(m)

    def sub(self, subject):
        """Subscribes to `subject` (wildcards allowed); its messages come from `next`."""
        self.sids += 1
        self._send(f"SUB {subject} {100 + self.sids}\r\n".encode())
        self.flush()

    def next(self, timeout=None):
        """The next message of a subscription (None once `timeout` passed without one)."""
        if self.pending:
            return self.pending.pop(0)
        try:
            return self._next(time.monotonic() + (timeout or self.timeout))
        except TimeoutError:
            return None

    def drain(self, timeout=None):
        """Every message of the subscriptions the server has sent so far (a flush's worth)."""
        self.flush(timeout)
        out, self.pending = self.pending, []
        return out

    def until(self, pred, timeout=None):
        """The first message (of the subscriptions) for which `pred` holds, within `timeout`."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            m = self.next(timeout=max(0.01, deadline - time.monotonic()))
            if m is not None and pred(m):
                return m
        raise TimeoutError("no such message within the time")
