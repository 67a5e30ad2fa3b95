"""The HTTP/1.1 and WebSocket front, from a raw socket: what tabd answers to every request it
may get on its port, well-formed or not.

Checked, case by case (each a table or a test below):
1. pipelined requests (one `sendall`, bodiless and with bodies, content-length and chunked)
   are answered in order, one answer each, on the same connection — also when split at
   every byte, or sent byte by byte; a `connection: close` in the middle ends it;
2. a body that stalls is answered 408 and closed within the request timeout, while others
   are served at once;
3. lying or odd `content-length`s are refused (400, then closed); a body over 64 KiB: 413;
4. chunked bodies are decoded (extensions, trailers); bogus chunks: 400; unknown codings:
   501; chunked with a content-length: 400; a chunked body over 64 KiB: 413;
5. odd request lines: unknown methods 501, malformed lines 400, other versions 400 or 505;
   empty lines before a request are skipped; HTTP/1.0 is answered, then closed;
6. bytes a head may never hold (NUL, bare CR, controls, space before a colon, folding, a
   line without a colon): 400, then closed;
7. no `Host`, or two: 400, then closed;
8. a request line over 8 KiB: 414; headers over 16 KiB or 100 lines: 431 (before the body);
9. an idle keep-alive connection is closed by the server, silently;
10. `expect: 100-continue` gets `100 Continue` before the body is sent;
11. WebSocket upgrades: bad key 400, other version 426, other path 404, a frame in the
    upgrade's packet answered after the welcome, an unmasked frame closed with 1002;
12. 200 hostile connections at once neither delay a client's pings nor leave tabd spinning.

"Answered S" means: a status line `HTTP/1.1 S …` with a `content-length` (none for 1xx and
204) and exactly that many body bytes; "then closed": the answer says `connection: close`
and the server ends the TCP connection right after it, sending nothing more. After every
case, `serving` checks that tabd serves on: a WebSocket client connected before the case
gets a pong, a new client is welcomed, `GET /healthz` answers `ok`, and tabd is alive.

Every wait is bounded: a tabd that hangs fails the test within its bound (the failure says
how much CPU tabd burnt meanwhile), and is killed 3 s after SIGTERM at teardown.
"""
import base64
import hashlib
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import threading
import time

import pytest

import rawws
from conftest import ROOT, WAIT, Daemon
from test_closing import PROMPT, frame, server_close
from test_hostile import cpu_seconds

RESPONSE_BOUND = 5.0         # a complete request's answer (all local; generous on a busy machine)
CLOSE_BOUND = 2.5            # "then closed": from the end of the answer to the end of the connection
SERVING_BOUND = 5.0          # each of the checks of `serving`
REQUEST_TIMEOUT_BOUND = 12.0  # the request timeout is 5 s: a stalled request is answered by then
HOST = "Host: tabd.test"

CLOSES = "then closed"       # the answer says `connection: close`, and the connection ends
MAY_CLOSE = "may close"      # if the answer says `connection: close` it ends; if not, it serves on


def process_state(proc, cpu_before, seconds):
    """For failure messages: whether tabd lives, and how busy it was while we waited."""
    code = proc.poll()
    if code is not None:
        return f"tabd has exited with code {code}"
    try:
        return f"tabd alive, {cpu_seconds(proc.pid) - cpu_before:.1f} s of CPU in the last {seconds:.1f} s"
    except OSError:
        return "tabd is gone"


# MARK: Requests

def request(method, target, headers=(), body=None, chunks=None, length=True):
    """The bytes of one HTTP/1.1 request, with a Host. `body` gets a content-length (unless
    `length` is false: the headers then say what they say); `chunks` make a chunked body."""
    lines = [f"{method} {target} HTTP/1.1", HOST, *headers]
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else body.encode()
        if length:
            lines.append(f"Content-Length: {len(data)}")
    if chunks is not None:
        lines.append("Transfer-Encoding: chunked")
        data = chunked(chunks)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def chunked(chunks, extension_on=None, trailer=None):
    """A chunked body of `chunks` (bytes or str), the last chunk and the trailer section."""
    out = b""
    for i, c in enumerate(chunks):
        c = c if isinstance(c, bytes) else c.encode()
        ext = b";x=1" if i == extension_on else b""
        out += b"%x%s\r\n%s\r\n" % (len(c), ext, c)
    return out + b"0\r\n" + (trailer or b"") + b"\r\n"


def thirds(text):
    n = len(text)
    return [text[: n // 3], text[n // 3: 2 * n // 3], text[2 * n // 3:]]


HEALTHZ = request("GET", "/healthz")


# MARK: Answers

class Response:
    def __init__(self, status, line, headers, body):
        self.status, self.line, self.headers, self.body = status, line, headers, body

    def header(self, name):
        """The one value of a header (None when absent); a repeated header fails."""
        values = [v for n, v in self.headers if n == name]
        assert len(values) <= 1, f"header {name} repeated in {self}"
        return values[0] if values else None

    @property
    def closes(self):
        return "close" in [t.strip().lower() for t in (self.header("connection") or "").split(",")]

    def json(self):
        assert (self.header("content-type") or "").startswith("application/json"), self
        return json.loads(self.body)

    def __repr__(self):
        head = "\\r\\n".join([self.line] + [f"{n}: {v}" for n, v in self.headers])
        return f"<{head} | {self.body[:200]!r}>"


def parse_response(buf, head_only=False):
    """(Response, bytes used) of the response at the start of `buf`; None when incomplete.
    Fails on anything that is not a well-formed HTTP/1.1 response with a content-length
    (none for 1xx and 204, which carry no body)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        start = buf[:9]
        assert start == b"HTTP/1.1 "[:len(start)] and len(buf) < 65536, f"not an HTTP/1.1 answer: {buf[:200]!r}"
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    m = re.fullmatch(r"HTTP/1\.1 (\d{3})(?: [^\r\n]*)?", lines[0])
    assert m, f"not an HTTP/1.1 status line: {lines[0]!r} (answer {buf[:300]!r})"
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        assert colon and name and name == name.strip(), f"bad header line {line!r} in {buf[:300]!r}"
        headers.append((name.lower(), value.strip(" \t")))
    r = Response(int(m.group(1)), lines[0], headers, b"")
    assert r.header("transfer-encoding") is None, f"answers carry a content-length, not {r}"
    if 100 <= r.status < 200 or r.status == 204:
        assert r.header("content-length") is None, f"a {r.status} must carry no content-length: {r}"
        n = 0
    else:
        length = r.header("content-length")
        assert length is not None and length.isdigit(), f"no content-length in {r}"
        n = 0 if head_only or r.status == 304 else int(length)
    if len(buf) < end + 4 + n:
        return None
    r.body = bytes(buf[end + 4: end + 4 + n])
    return r, end + 4 + n


class Wire:
    """One raw TCP connection to tabd, reading its answers one by one."""

    def __init__(self, daemon, timeout=RESPONSE_BOUND):
        host, port = daemon.host.rsplit(":", 1)
        self.proc = daemon.proc
        self.s = socket.create_connection((host, int(port)), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.ended = None  # "eof" or "reset" once the server ended the connection

    def send(self, data):
        """Sends the bytes. A server that refused the request may end the connection before
        it took them all; what it answered is still read by `response`."""
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _fill(self, deadline):
        """Reads more bytes; False once the server ended the connection. socket.timeout at
        the deadline."""
        if self.ended:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout
        self.s.settimeout(remaining)
        try:
            chunk = self.s.recv(65536)
        except ConnectionResetError:
            self.ended = "reset"
            return False
        if not chunk:
            self.ended = "eof"
            return False
        self.buf += chunk
        return True

    def response(self, head_only=False, within=RESPONSE_BOUND, what="the answer"):
        deadline, cpu = time.monotonic() + within, cpu_seconds(self.proc.pid)
        try:
            while (parsed := parse_response(self.buf, head_only)) is None:
                if not self._fill(deadline):
                    raise AssertionError(f"connection ended ({self.ended}) before {what}; got {self.buf[:300]!r}")
        except socket.timeout:
            raise AssertionError(f"{what}: nothing complete within {within} s; got {self.buf[:300]!r}; "
                                 f"{process_state(self.proc, cpu, within)}") from None
        r, used = parsed
        self.buf = self.buf[used:]
        return r

    def closed(self, within=CLOSE_BOUND, what="the connection"):
        """Fails unless the server ends the connection within `within` s, sending nothing more."""
        deadline, cpu = time.monotonic() + within, cpu_seconds(self.proc.pid)
        try:
            while self._fill(deadline):
                pass
        except socket.timeout:
            raise AssertionError(f"{what} still open {within} s later (got {self.buf[:200]!r}); "
                                 f"{process_state(self.proc, cpu, within)}") from None
        assert self.buf == b"", f"bytes after the last answer: {self.buf[:300]!r}"

    def close(self):
        self.s.close()


def answered(wire, status, what, head_only=False):
    r = wire.response(head_only=head_only, what=f"the answer to {what}")
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status in statuses, f"{what}: answered {r.status}, expected {status}: {r}"
    return r


def answered_then_closed(wire, status, what, within=RESPONSE_BOUND):
    r = wire.response(within=within, what=f"the answer to {what}")
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status in statuses, f"{what}: answered {r.status}, expected {status}, then closed: {r}"
    assert r.closes, f"{what}: the {r.status} does not say connection: close: {r}"
    wire.closed(what=f"the connection after {what}")
    return r


def still_serves(wire, what):
    """The connection answers one more request (keep-alive after an answer)."""
    wire.send(HEALTHZ)
    r = wire.response(what=f"a GET /healthz after {what}, on the same connection")
    assert (r.status, r.body) == (200, b"ok"), f"after {what}: {r}"


# MARK: WebSocket

def ws_open(daemon, path="/ws", then=b"", within=SERVING_BOUND):
    """A WebSocket handshake on a plain socket, checked (101, upgrade, accept key); `then`
    goes out in the same write as the upgrade request. Returns the socket, right after the
    handshake's head (read byte by byte, so no frame is consumed)."""
    host, port = daemon.host.rsplit(":", 1)
    deadline = time.monotonic() + within
    s = socket.create_connection((host, int(port)), timeout=within)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\n{HOST}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode() + then)
    head = b""
    try:
        while not head.endswith(b"\r\n\r\n"):
            s.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = s.recv(1)
            assert chunk, f"closed during the handshake: {head!r}"
            head += chunk
    except socket.timeout:
        s.close()
        raise AssertionError(f"the handshake: no answer within {within} s: {head[:200]!r}") from None
    assert head.startswith(b"HTTP/1.1 101"), f"upgrade answered {head[:300]!r}"
    lines = {ln.split(b":", 1)[0].strip().lower(): ln.split(b":", 1)[1].strip()
             for ln in head.split(b"\r\n")[1:] if b":" in ln}
    accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert lines.get(b"upgrade", b"").lower() == b"websocket" and lines.get(b"sec-websocket-accept") == accept, head
    s.settimeout(within)
    return s


def next_text(s, deadline, what):
    """The next text frame's JSON (control frames other than close are skipped)."""
    while True:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            opcode, data = rawws.recv_frame(s)
        except socket.timeout:
            raise AssertionError(f"{what}: none in time") from None
        if opcode == 8:
            raise AssertionError(f"closed ({data[:2].hex()}) waiting for {what}")
        if opcode == 1:
            return json.loads(data)


class Watcher:
    """A WebSocket client connected before a case, which must get its pongs throughout."""

    def __init__(self, daemon, room=None):
        self.s = ws_open(daemon, "/ws?name=watcher" + (f"&room={room}" if room else ""), within=WAIT)
        welcome = next_text(self.s, time.monotonic() + WAIT, "the watcher's welcome")
        assert welcome["type"] == "welcome", welcome
        self.n = 0

    def ping(self, within=SERVING_BOUND):
        """Seconds to a pong; fails past `within`."""
        self.n += 1
        ref = f"w{self.n}"
        start = time.monotonic()
        rawws.send_text(self.s, json.dumps({"type": "ping", "ref": ref}).encode())
        while True:
            frame_ = next_text(self.s, start + within, f"the pong {ref} within {within} s")
            if frame_["type"] == "pong" and frame_["ref"] == ref:
                return time.monotonic() - start


# MARK: The daemon under test

class Front:
    """A fresh tabd, a watcher connected to it, and the checks that it serves on. tabd's
    stderr is read all along (its log must never block it)."""

    def __init__(self, *args):
        # The requests name `Host: tabd.test`, a name tabd answers only when told to.
        self.daemon = Daemon("--allow-host", "tabd.test", *args)
        self.proc = self.daemon.proc
        self.log = []
        self._drain = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self._drain.start()
        try:
            self.watcher = Watcher(self.daemon)
        except BaseException:
            self.proc.kill()
            raise

    def wire(self):
        return Wire(self.daemon)

    def serving(self, bound=SERVING_BOUND):
        """(a) the watcher gets a pong, (b) a new client is welcomed, (c) GET /healthz
        answers 200 ok, (d) tabd is alive: each within `bound` s."""
        assert self.proc.poll() is None, f"tabd exited with {self.proc.returncode}"
        cpu = cpu_seconds(self.proc.pid)
        try:
            self.watcher.ping(within=bound)
        except (AssertionError, OSError) as e:
            raise AssertionError(f"(a) the client connected before got no pong: {e}; "
                                 f"{process_state(self.proc, cpu, bound)}") from None
        try:
            s = ws_open(self.daemon, "/ws?name=newcomer", within=bound)
        except (AssertionError, OSError) as e:
            raise AssertionError(f"(b) a new client: {e}; {process_state(self.proc, cpu, bound)}") from None
        try:
            welcome = next_text(s, time.monotonic() + bound, "(b) a new client's welcome")
            assert welcome["type"] == "welcome", f"(b) a new client got {welcome}"
        finally:
            s.close()
        w = self.wire()
        w.send(HEALTHZ)
        r = w.response(within=bound, what="(c) the answer to GET /healthz")
        assert (r.status, r.body) == (200, b"ok"), f"(c) GET /healthz: {r}"
        w.close()
        assert self.proc.poll() is None, f"(d) tabd exited with {self.proc.returncode}"

    def stop(self):
        try:
            self.watcher.s.close()
        finally:
            if self.proc.poll() is None:
                cpu = cpu_seconds(self.proc.pid)
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    # A hung tabd may never act on SIGTERM: say so (it shows under a failure).
                    print(f"tabd did not stop within 3 s of SIGTERM ({process_state(self.proc, cpu, 3)}): killed")
                    self.proc.kill()
                    self.proc.wait()
            self._drain.join(timeout=5)
            self.daemon.stderr = "".join(self.log)


@pytest.fixture
def front():
    f = Front()
    yield f
    f.stop()


def refused(front, name, case):
    """Sends one case on a fresh connection and checks its answer and what follows."""
    data, status, closing = case
    w = front.wire()
    try:
        w.send(data)
        if closing == CLOSES:
            answered_then_closed(w, status, name)
        else:
            r = answered(w, status, name)
            if r.closes:
                w.closed(what=f"the connection after {name} (its answer says connection: close)")
            else:
                still_serves(w, name)
    finally:
        w.close()


# MARK: 1. Pipelining

class Ask:
    """One request of a pipeline and what its answer must be: `status`, and `body` (bytes),
    or `json` (the exact value), or `check` (a predicate on the JSON value)."""

    def __init__(self, name, data, status, body=None, json_=None, check=None, head=False, headers=()):
        self.name, self.data, self.status = name, data, status
        self.body, self.json, self.check, self.head, self.headers = body, json_, check, head, dict(headers)

    def verify(self, r, where=""):
        what = f"{self.name}{where}"
        assert r.status == self.status, f"{what}: answered {r.status}, expected {self.status}: {r}"
        for name, value in self.headers.items():
            assert r.header(name) == value, f"{what}: {name} is {r.header(name)!r}, expected {value!r}: {r}"
        if self.body is not None:
            assert r.body == self.body, f"{what}: body {r.body[:200]!r}, expected {self.body[:200]!r}"
        if self.json is not None:
            assert r.json() == self.json, f"{what}: {r.body[:300]!r}, expected {self.json}"
        if self.check is not None:
            assert self.check(r.json()), f"{what}: unexpected answer {r.body[:300]!r}"


def tabs_body(room):
    return json.dumps({"tabs": [{"id": f"t-{room.lower()}", "title": room, "icon": "star", "color": "#123456"}]})


def healthz():
    return Ask("GET /healthz", HEALTHZ, 200, body=b"ok")


def head_healthz():
    return Ask("HEAD /healthz", request("HEAD", "/healthz"), 200, body=b"", head=True, headers={"content-length": "2"})


def ping(ref, chunks=False):
    body = json.dumps({"type": "ping", "ref": ref})
    data = request("POST", "/api/rooms/main/commands", chunks=thirds(body)) if chunks else \
        request("POST", "/api/rooms/main/commands", body=body)
    return Ask(f"POST ping {ref}{' (chunked)' if chunks else ''}", data, 200, json_={"type": "pong", "ref": ref})


def set_value(ref):
    body = json.dumps({"type": "set", "key": ref, "value": ref, "ref": ref})
    return Ask(f"POST set {ref}", request("POST", "/api/rooms/main/commands", body=body), 200,
               check=lambda v: v["type"] == "ack" and v["ref"] == ref)


def create(room, chunks=False):
    body = tabs_body(room)
    data = request("PUT", f"/api/rooms/{room}", chunks=thirds(body)) if chunks else \
        request("PUT", f"/api/rooms/{room}", body=body)
    return Ask(f"PUT /api/rooms/{room}{' (chunked)' if chunks else ''}", data, 201, check=lambda v: v["room"] == room)


def read(room):
    return Ask(f"GET /api/rooms/{room}", request("GET", f"/api/rooms/{room}"), 200,
               check=lambda v: v["room"] == room and [t["id"] for t in v["snapshot"]["tabs"]] == [f"t-{room.lower()}"])


def unknown(room):
    return Ask(f"GET /api/rooms/{room} (deleted)", request("GET", f"/api/rooms/{room}"), 404,
               check=lambda v: v["code"] == "unknown_room")


def delete(room):
    return Ask(f"DELETE /api/rooms/{room}", request("DELETE", f"/api/rooms/{room}"), 204, body=b"")


def listing(*rooms):
    ids = sorted(("main", *rooms))
    return Ask(f"GET /api/rooms (expecting {ids})", request("GET", "/api/rooms"), 200,
               check=lambda v: [r["id"] for r in v["rooms"]] == ids and v["next"] is None)


def app_js():
    with open(os.path.join(ROOT, "web", "app.js"), "rb") as f:
        return Ask("GET /app.js", request("GET", "/app.js"), 200, body=f.read())


def missing():
    return Ask("GET /nope.txt", request("GET", "/nope.txt"), 404)


PIPELINES = {
    "GET+POST": lambda: [healthz(), ping("p1")],
    "POST+GET": lambda: [ping("p1"), healthz()],
    "POST+POST": lambda: [ping("p1"), ping("p2")],
    "GET+GET": lambda: [healthz(), listing()],
    "HEAD+GET": lambda: [head_healthz(), healthz()],
    "PUT+GET": lambda: [create("r1"), read("r1")],
    "GET+POST+PUT+GET+DELETE+GET": lambda: [healthz(), ping("p1"), create("r1"), read("r1"), delete("r1"), listing()],
    "PUT r1 r2 r3 then the list": lambda: [create("r1"), create("r2"), create("r3"), listing("r1", "r2", "r3")],
    "chunked bodies among them": lambda: [healthz(), ping("p1", chunks=True), create("r1", chunks=True), read("r1"),
                                          ping("p2"), create("r2"), ping("p3", chunks=True), listing("r1", "r2")],
    "files and misses": lambda: [app_js(), missing(), healthz(), app_js()],
    "a run of 20 mixed": lambda: [
        create("m1"), ping("p1"), head_healthz(), read("m1"), create("m2", chunks=True), healthz(),
        ping("p2", chunks=True), read("m2"), app_js(), missing(), delete("m1"), unknown("m1"), set_value("s1"),
        create("m3"), listing("m2", "m3"), ping("p3"), healthz(), head_healthz(), read("m3"), listing("m2", "m3")],
}


def exchange(front, asks, pieces, pause=0.0):
    """Sends the asks' bytes in `pieces` (byte offsets where a new send starts), then reads
    one answer per ask, in order, on the same connection, and checks each."""
    data = b"".join(a.data for a in asks)
    cuts = [0, *pieces, len(data)]
    w = front.wire()
    try:
        for a, b in zip(cuts, cuts[1:]):
            w.send(data[a:b])
            if pause:
                time.sleep(pause)  # apart in time, so that the server reads the pieces apart
        how = "" if not pieces else ", sent byte by byte" if len(pieces) > 2 else f", sent in pieces at {pieces}"
        for i, a in enumerate(asks):
            where = f" (request {i + 1} of {len(asks)}{how})"
            a.verify(w.response(head_only=a.head, what=f"the answer to {a.name}{where}"), where)
        still_serves(w, f"{len(asks)} pipelined requests")
    finally:
        w.close()


@pytest.mark.parametrize("name", PIPELINES)
def test_pipelined_requests_are_answered_in_order_one_answer_each_on_one_connection(front, name):
    asks = PIPELINES[name]()
    exchange(front, asks, [])
    front.serving()


SPLIT_PAIRS = {
    "POST with content-length, then GET": lambda: [ping("p1"), healthz()],
    "GET, then POST with content-length": lambda: [healthz(), ping("p1")],
    "chunked PUT, then GET": lambda: [create("rc", chunks=True), read("rc")],
}


@pytest.mark.parametrize("name", SPLIT_PAIRS)
def test_a_pipelined_pair_split_at_any_byte_is_answered_the_same(front, name):
    asks = SPLIT_PAIRS[name]()
    total = sum(len(a.data) for a in asks)
    for cut in range(1, total):
        # A room can be created once: the chunked pair deletes it again after each round.
        exchange(front, asks + ([delete("rc")] if name.startswith("chunked") else []), [cut], pause=0.002)
    front.serving()


def test_pipelined_requests_sent_byte_by_byte_are_answered(front):
    asks = [create("r1"), ping("p1", chunks=True), read("r1")]
    exchange(front, asks, list(range(1, sum(len(a.data) for a in asks))), pause=0.0005)
    front.serving()


def test_a_connection_close_in_the_middle_is_answered_then_the_connection_ends(front):
    w = front.wire()
    w.send(HEALTHZ + request("GET", "/api/rooms", headers=["Connection: close"]) + HEALTHZ + ping("late").data)
    r = answered(w, 200, "GET /healthz (first)")
    assert r.body == b"ok" and not r.closes, r
    r = answered(w, 200, "GET /api/rooms with connection: close")
    assert r.json()["rooms"][0]["id"] == "main", r
    assert r.closes, f"the answer to a connection: close request does not say so: {r}"
    w.closed(what="the connection after the connection: close request (the later ones must stay unanswered)")
    w.close()
    front.serving()


# MARK: 2. A body that stalls

def test_a_stalled_body_is_answered_408_and_closed_while_others_are_served_at_once(front):
    stalled = front.wire()
    stalled.send(request("POST", "/api/rooms/main/commands", headers=["Content-Length: 100"],
                         body=b'{"type":"p', length=False))
    start = time.monotonic()
    # Meanwhile: another connection and the WebSocket client are served at once.
    other = front.wire()
    other.send(HEALTHZ)
    r = other.response(within=1.0, what="GET /healthz on another connection while a body stalls")
    assert (r.status, r.body) == (200, b"ok"), r
    other.close()
    pong = front.watcher.ping(within=1.0)
    r = stalled.response(within=REQUEST_TIMEOUT_BOUND, what="the 408 to a stalled body")
    took = time.monotonic() - start
    print(f"stalled body answered {r.status} after {took:.2f} s")
    assert r.status == 408 and r.closes, f"a stalled body answered {r} after {took:.2f} s"
    stalled.closed(what="the connection after the 408")
    assert took <= REQUEST_TIMEOUT_BOUND, f"the 408 took {took:.2f} s"
    assert pong <= 1.0
    stalled.close()
    front.serving()


# MARK: 3. Lengths

PING = '{"type":"ping","ref":"len"}'
LENGTHS = {
    "content-length: -1": (["Content-Length: -1"], 400, CLOSES),
    "content-length: abc": (["Content-Length: abc"], 400, CLOSES),
    "content-length: 1e3": (["Content-Length: 1e3"], 400, CLOSES),
    "content-length: 23 digits": (["Content-Length: 99999999999999999999999"], 400, CLOSES),
    "content-length: 5 and 6": (["Content-Length: 5", "Content-Length: 6"], 400, CLOSES),
    "content-length: 5, 6": (["Content-Length: 5, 6"], 400, CLOSES),
    "content-length: +27": (["Content-Length: +27"], 400, CLOSES),
    "content-length: empty": (["Content-Length: "], 400, CLOSES),
}


@pytest.mark.parametrize("name", LENGTHS)
def test_a_lying_or_odd_content_length_is_refused_400_then_closed(front, name):
    headers, status, closing = LENGTHS[name]
    data = request("POST", "/api/rooms/main/commands", headers=headers, body=PING, length=False)
    refused(front, name, (data, status, closing))
    front.serving()


def test_two_identical_content_lengths_are_accepted(front):
    length = f"Content-Length: {len(PING)}"
    w = front.wire()
    w.send(request("POST", "/api/rooms/main/commands", headers=[length, length], body=PING, length=False))
    r = answered(w, 200, "a POST with its content-length twice")
    assert r.json() == {"type": "pong", "ref": "len"}, r
    still_serves(w, "a POST with its content-length twice")
    w.close()
    front.serving()


def test_a_body_over_the_api_limit_is_answered_413(front):
    prefix = b'{"type":"set","key":"k","value":"'
    body = prefix + b"v" * (70000 - len(prefix) - 2) + b'"}'
    w = front.wire()
    w.send(request("POST", "/api/rooms/main/commands", body=body))
    r = answered(w, 413, "a 70,000-byte body")
    if r.closes:
        w.closed(what="the connection after the 413 (it said connection: close)")
    else:
        still_serves(w, "a 413 that keeps the connection")
    w.close()
    front.serving()


# MARK: 4. Chunked bodies

def test_a_chunked_body_is_decoded_with_extensions_and_trailers(front):
    body = tabs_body("rc")
    w = front.wire()
    w.send(request("PUT", "/api/rooms/rc", headers=["Transfer-Encoding: chunked"], length=False,
                   body=chunked(thirds(body), extension_on=1, trailer=b"X-Checksum: none\r\n")))
    r = answered(w, 201, "a chunked PUT /api/rooms/rc (an extension, a trailer)")
    assert r.json()["room"] == "rc", r
    w.send(read("rc").data)
    read("rc").verify(w.response(what="the answer to GET /api/rooms/rc after the chunked PUT"))
    still_serves(w, "a chunked body")
    w.close()
    front.serving()


def raw_chunked(body):
    return request("POST", "/api/rooms/main/commands", headers=["Transfer-Encoding: chunked"], body=body, length=False)


CHUNKED = {
    "chunk size zz": (raw_chunked(b"zz\r\n" + b"x" * 20 + b"\r\n0\r\n\r\n"), 400, CLOSES),
    "chunk size of 100 hex digits": (raw_chunked(b"1" * 100 + b"\r\nxx\r\n0\r\n\r\n"), 400, CLOSES),
    "no CRLF after a chunk's data": (raw_chunked(b"5\r\n{\"typ0\r\n\r\n"), 400, CLOSES),
    "chunk size -5": (raw_chunked(b"-5\r\nxxxxx\r\n0\r\n\r\n"), 400, CLOSES),
    "transfer-encoding: gzip": (request("POST", "/api/rooms/main/commands", headers=["Transfer-Encoding: gzip"],
                                        body=b"\x1f\x8b\x08\x00", length=False), 501, CLOSES),
    "transfer-encoding: gzip, chunked": (request("POST", "/api/rooms/main/commands",
                                                 headers=["Transfer-Encoding: gzip, chunked"],
                                                 body=chunked([b"\x1f\x8b"]), length=False), 501, CLOSES),
    # RFC 9112 §6.3: chunked not last is a 400; an unknown coding a 501: either is right here.
    "transfer-encoding: chunked, gzip": (request("POST", "/api/rooms/main/commands",
                                                 headers=["Transfer-Encoding: chunked, gzip"],
                                                 body=chunked([b"\x1f\x8b"]), length=False), (400, 501), CLOSES),
    "transfer-encoding: identity": (request("POST", "/api/rooms/main/commands", headers=["Transfer-Encoding: identity"],
                                            body=PING, length=False), 501, CLOSES),
    "chunked and a content-length": (request("POST", "/api/rooms/main/commands",
                                             headers=["Transfer-Encoding: chunked", f"Content-Length: {len(PING)}"],
                                             body=chunked([PING]), length=False), 400, CLOSES),
    "a chunked body over 64 KiB": (raw_chunked(chunked([b"a" * 4096] * 17)), 413, CLOSES),
}


@pytest.mark.parametrize("name", CHUNKED)
def test_a_bad_or_oversized_chunked_body_is_refused_then_closed(front, name):
    refused(front, name, CHUNKED[name])
    front.serving()


# MARK: 5. Request lines

def line(text):
    """A request with this request line, a Host and nothing else."""
    return text.encode() + b"\r\n" + HOST.encode() + b"\r\n\r\n"


REQUEST_LINES = {
    "unknown method FOO": (line("FOO /healthz HTTP/1.1"), 501, MAY_CLOSE),
    "TRACE": (line("TRACE /healthz HTTP/1.1"), 501, MAY_CLOSE),
    "CONNECT host:80": (line("CONNECT tabd.test:80 HTTP/1.1"), 501, MAY_CLOSE),
    "lowercase method get": (line("get /healthz HTTP/1.1"), 501, MAY_CLOSE),
    "no version": (line("GET /healthz"), 400, CLOSES),
    "two spaces": (line("GET  /healthz HTTP/1.1"), 400, CLOSES),
    "something after the version": (line("GET /healthz HTTP/1.1 extra"), 400, CLOSES),
    "version http/1.1 in lower case": (line("GET /healthz http/1.1"), (400, 505), CLOSES),
    "version HTTP/2.0": (line("GET /healthz HTTP/2.0"), (400, 505), CLOSES),
    "version HTTP/1.2": (line("GET /healthz HTTP/1.2"), (400, 505), CLOSES),
    "version HTTP/3": (line("GET /healthz HTTP/3"), (400, 505), CLOSES),
}


@pytest.mark.parametrize("name", REQUEST_LINES)
def test_an_odd_request_line_is_refused(front, name):
    refused(front, name, REQUEST_LINES[name])
    front.serving()


def test_empty_lines_before_a_request_line_are_skipped(front):
    w = front.wire()
    w.send(b"\r\n\r\n" + HEALTHZ)
    r = answered(w, 200, "GET /healthz after two empty lines")
    assert r.body == b"ok", r
    still_serves(w, "empty lines before a request")
    w.close()
    front.serving()


def test_an_http_1_0_request_is_answered_then_closed(front):
    w = front.wire()
    w.send(b"GET /healthz HTTP/1.0\r\n\r\n")
    r = answered_then_closed(w, 200, "GET /healthz HTTP/1.0")
    assert r.body == b"ok", r
    w.close()
    front.serving()


# MARK: 6. Bytes never allowed in a head

def head(*lines):
    return b"\r\n".join(lines) + b"\r\n\r\n"


H = HOST.encode()
FORBIDDEN_BYTES = {
    "NUL in the request line": head(b"GET /heal\0thz HTTP/1.1", H),
    "NUL in a header name": head(b"GET /healthz HTTP/1.1", H, b"X-A\0b: 1"),
    "NUL in a header value": head(b"GET /healthz HTTP/1.1", H, b"X-A: 1\0 2"),
    "bare CR in the request line": head(b"GET /heal\rthz HTTP/1.1", H),
    "bare CR in a header value": head(b"GET /healthz HTTP/1.1", H, b"X-A: 1\r2"),
    "bare CR ending a header line": head(b"GET /healthz HTTP/1.1", b"X-A: 1\r" + H),
    "0x01 in a header value": head(b"GET /healthz HTTP/1.1", H, b"X-A: a\x01b"),
    "0x7f in a header value": head(b"GET /healthz HTTP/1.1", H, b"X-A: a\x7fb"),
    "space before the colon (Host : x)": head(b"GET /healthz HTTP/1.1", b"Host : tabd.test"),
    "space before the colon of another header": head(b"GET /healthz HTTP/1.1", H, b"X-A : 1"),
    "obsolete folding with a space": head(b"GET /healthz HTTP/1.1", H, b"X-A: 1", b" 2"),
    "obsolete folding with a tab": head(b"GET /healthz HTTP/1.1", H, b"X-A: 1", b"\t2"),
    "a header line without a colon": head(b"GET /healthz HTTP/1.1", H, b"X-A 1"),
    "a header with an empty name": head(b"GET /healthz HTTP/1.1", H, b": 1"),
}


@pytest.mark.parametrize("name", FORBIDDEN_BYTES)
def test_a_byte_never_allowed_in_a_head_is_refused_400_then_closed(front, name):
    refused(front, name, (FORBIDDEN_BYTES[name], 400, CLOSES))
    front.serving()


# MARK: 7. Host

HOSTS = {
    "no Host": head(b"GET /healthz HTTP/1.1", b"Accept: */*"),
    "two different Hosts": head(b"GET /healthz HTTP/1.1", H, b"Host: other.test"),
    "two identical Hosts": head(b"GET /healthz HTTP/1.1", H, H),
}


@pytest.mark.parametrize("name", HOSTS)
def test_an_http_1_1_request_without_one_host_is_refused_400_then_closed(front, name):
    refused(front, name, (HOSTS[name], 400, CLOSES))
    front.serving()


# MARK: 8. Sizes

def post_head(target="/api/rooms/main/commands", headers=()):
    """A POST's head announcing a 10-byte body that is never sent: a refusal of the head must
    come without waiting for the body (it would otherwise be a 408, 5 s later)."""
    return request("POST", target, headers=[*headers, "Content-Length: 10"])


SIZES = {
    "a request line of 9 KiB": (post_head("/api/rooms/main/commands?x=" + "a" * 9216), 414, CLOSES),
    "a request line of 64 KiB": (post_head("/api/rooms/main/commands?x=" + "a" * 65536), 414, CLOSES),
    "one header of 17 KiB": (post_head(headers=["X-Big: " + "b" * 17408]), 431, CLOSES),
    "90 headers of 200 bytes (18 KB)": (post_head(headers=[f"X-{i:03}: " + "c" * 194 for i in range(90)]), 431, CLOSES),
    "101 header lines": (post_head(headers=[f"X-{i}: y" for i in range(100)]), 431, CLOSES),
    "5,000 header lines": (post_head(headers=[f"X-{i}: y" for i in range(5000)]), 431, CLOSES),
}


@pytest.mark.parametrize("name", SIZES)
def test_an_oversized_head_is_refused_before_its_body_then_closed(front, name):
    refused(front, name, SIZES[name])
    front.serving()


WITHIN_SIZES = {
    "a request line of 6 KiB": request("GET", "/healthz?x=" + "a" * 6144),
    "headers of 12 KB in 60 lines": request("GET", "/healthz", headers=[f"X-{i:03}: " + "c" * 194 for i in range(60)]),
    "90 header lines": request("GET", "/healthz", headers=[f"X-{i}: y" for i in range(89)]),
}


@pytest.mark.parametrize("name", WITHIN_SIZES)
def test_a_head_within_the_limits_is_served(front, name):
    w = front.wire()
    w.send(WITHIN_SIZES[name])
    r = answered(w, 200, name)
    assert r.body == b"ok", r
    still_serves(w, name)
    w.close()
    front.serving()


# MARK: 9. Idle keep-alive

def test_an_idle_keep_alive_connection_is_closed_by_the_server_silently(front):
    w = front.wire()
    w.send(HEALTHZ)
    r = answered(w, 200, "GET /healthz")
    assert r.body == b"ok" and not r.closes, r
    start = time.monotonic()
    w.closed(within=REQUEST_TIMEOUT_BOUND, what="an idle keep-alive connection")
    print(f"idle keep-alive connection closed after {time.monotonic() - start:.2f} s")
    w.close()
    front.serving()


# MARK: 10. Expect: 100-continue

def test_expect_100_continue_gets_100_before_the_body_then_the_answer(front):
    body = json.dumps({"type": "ping", "ref": "continued"})
    w = front.wire()
    w.send(request("POST", "/api/rooms/main/commands",
                   headers=["Expect: 100-continue", f"Content-Length: {len(body)}"]))
    r = w.response(what="the 100 Continue (the body is not sent before it)")
    assert r.status == 100 and r.body == b"", f"expected HTTP/1.1 100 Continue first: {r}"
    w.send(body.encode())
    r = answered(w, 200, "the POST after its 100 Continue")
    assert r.json() == {"type": "pong", "ref": "continued"}, r
    still_serves(w, "a 100-continue exchange")
    w.close()
    front.serving()


# MARK: 11. WebSocket upgrades

def upgrade(path="/ws", key="dGhlIHNhbXBsZSBub25jZQ==", version="13"):
    lines = [f"GET {path} HTTP/1.1", HOST, "Upgrade: websocket", "Connection: Upgrade"]
    if key is not None:
        lines.append(f"Sec-WebSocket-Key: {key}")
    lines.append(f"Sec-WebSocket-Version: {version}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


UPGRADES = {
    "no Sec-WebSocket-Key": (upgrade(key=None), 400),
    "a key of 3 characters": (upgrade(key="abc"), 400),
    "a key of 15 bytes (20 characters)": (upgrade(key=base64.b64encode(b"k" * 15).decode()), 400),
    "a key of 17 bytes (24 characters)": (upgrade(key=base64.b64encode(b"k" * 17).decode()), 400),
    "a key of 24 characters not base64": (upgrade(key="!" * 22 + "=="), 400),
    "an upgrade on /other": (upgrade(path="/other"), 404),
}


@pytest.mark.parametrize("name", UPGRADES)
def test_a_bad_upgrade_is_refused(front, name):
    data, status = UPGRADES[name]
    refused(front, name, (data, status, MAY_CLOSE))
    front.serving()


def test_an_upgrade_of_another_websocket_version_is_answered_426_naming_13(front):
    w = front.wire()
    w.send(upgrade(version="8"))
    r = answered(w, 426, "an upgrade with Sec-WebSocket-Version: 8")
    assert r.header("sec-websocket-version") == "13", f"the 426 does not name version 13: {r}"
    if r.closes:
        w.closed(what="the connection after the 426")
    w.close()
    front.serving()


def test_a_frame_in_the_upgrades_packet_is_answered_after_the_welcome(front):
    s = ws_open(front.daemon, then=rawws.frame_bytes(json.dumps({"type": "ping", "ref": "early"}).encode()))
    try:
        deadline = time.monotonic() + RESPONSE_BOUND
        first = next_text(s, deadline, "the welcome")
        assert first["type"] == "welcome", f"the first frame is not the welcome: {first}"
        while (f := next_text(s, deadline, "the pong for ref early"))["type"] != "pong":
            assert f["type"] == "events", f
        assert f["ref"] == "early", f
    finally:
        s.close()
    front.serving()


def test_an_unmasked_client_frame_is_closed_with_1002_and_dropped_promptly(front):
    s = ws_open(front.daemon, "/ws?name=unmasked")
    try:
        assert next_text(s, time.monotonic() + RESPONSE_BOUND, "the welcome")["type"] == "welcome"
        s.sendall(frame(1, b'{"type":"ping","ref":"bare"}', masked=False))
        start = time.monotonic()
        s.settimeout(PROMPT)
        try:
            code, _ = server_close(s)
        except socket.timeout:
            raise AssertionError(f"no close frame within {PROMPT} s after an unmasked frame") from None
        except ConnectionError:
            raise AssertionError("dropped without a close frame after an unmasked frame") from None
        assert code == 1002, f"an unmasked frame was closed with {code}"
        while True:
            try:
                s.settimeout(max(0.01, start + PROMPT - time.monotonic()))
                if s.recv(4096) == b"":
                    break
            except socket.timeout:
                raise AssertionError(f"the connection stayed open {PROMPT} s after the 1002") from None
            except ConnectionResetError:
                break
        print(f"unmasked frame: 1002 and dropped after {time.monotonic() - start:.2f} s")
    finally:
        s.close()
    front.serving()


# MARK: 12. Many at once

def hostile_cases():
    """Every case that must end in an answer and a close, named; and the stalled body."""
    cases = []
    for name, (data, status, closing) in {**CHUNKED, **REQUEST_LINES, **SIZES}.items():
        cases.append((name, data, status, closing))
    for name, (headers, status, closing) in LENGTHS.items():
        cases.append((name, request("POST", "/api/rooms/main/commands", headers=headers, body=PING, length=False),
                      status, closing))
    for table in (FORBIDDEN_BYTES, HOSTS):
        cases += [(name, data, 400, CLOSES) for name, data in table.items()]
    cases += [(name, data, status, MAY_CLOSE) for name, (data, status) in UPGRADES.items()]
    cases.append(("a stalled body", request("POST", "/api/rooms/main/commands", headers=["Content-Length: 100"],
                                            body=b'{"type":"p', length=False), 408, CLOSES))
    return cases


def test_two_hundred_hostile_connections_at_once_neither_delay_pings_nor_leave_tabd_spinning(front):
    cases = hostile_cases()
    host, port = front.daemon.host.rsplit(":", 1)
    conns = []
    for i in range(200):
        s = socket.create_connection((host, int(port)), timeout=RESPONSE_BOUND)
        conns.append({"case": cases[i % len(cases)], "s": s, "buf": b"", "done": None})

    rtts, ping_failure, stop = [], [], threading.Event()

    def pinger():
        try:
            for _ in range(50):
                rtts.append(front.watcher.ping(within=SERVING_BOUND))  # a late pong is measured
                if rtts[-1] > 1.0 or stop.wait(0.1):  # spread over the burst (the 408s come after 5 s)
                    return
        except (AssertionError, OSError) as e:
            ping_failure.append(f"ping {len(rtts) + 1}: {e}")

    thread = threading.Thread(target=pinger)
    thread.start()
    try:
        start = time.monotonic()
        sel = selectors.DefaultSelector()
        for c in conns:
            try:
                c["s"].sendall(c["case"][1])
            except (BrokenPipeError, ConnectionResetError):
                pass
            except socket.timeout:
                c["done"] = "send timed out"
                continue
            c["s"].setblocking(False)
            sel.register(c["s"], selectors.EVENT_READ, c)
        deadline = start + 15.0
        cpu = cpu_seconds(front.proc.pid)
        pending = sum(1 for c in conns if c["done"] is None)
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.2):
                c = key.data
                try:
                    chunk = c["s"].recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    c["buf"] += chunk
                    name, _, _, closing = c["case"]
                    parsed = parse_response_or_none(c["buf"])
                    if closing == MAY_CLOSE and parsed and not parsed[0].closes:
                        c["done"] = time.monotonic()  # answered and kept open: that is allowed
                    else:
                        continue
                else:
                    c["done"] = time.monotonic()
                sel.unregister(c["s"])
                pending -= 1
        last = time.monotonic()
        open_ = [c["case"][0] for c in conns if c["done"] is None]
        hung = process_state(front.proc, cpu, last - start)
        assert not open_, f"{len(open_)} of 200 hostile connections neither answered nor closed in 15 s " \
                          f"(e.g. {sorted(set(open_))[:5]}); {hung}"
        print(f"200 hostile connections answered or closed in {last - start:.2f} s")
        # Nothing spins once they are all done.
        before = cpu_seconds(front.proc.pid)
        time.sleep(5)
        spent = cpu_seconds(front.proc.pid) - before
    finally:
        stop.set()  # by now the 50 pings are done, unless this test failed already
        thread.join(timeout=SERVING_BOUND + 5)
        for c in conns:
            c["s"].close()
    wrong = []
    for c in conns:
        name, _, status, closing = c["case"]
        statuses = status if isinstance(status, tuple) else (status,)
        parsed = parse_response_or_none(c["buf"])
        if parsed is None:
            wrong.append(f"{name}: {c['buf'][:80]!r}")
            continue
        r, used = parsed
        if r.status not in statuses or (closing == CLOSES and (not r.closes or c["buf"][used:])):
            wrong.append(f"{name}: {r!r:.120}")
    assert not wrong, f"{len(wrong)} of 200 not answered as alone: {wrong[:8]}"
    print(f"{len(rtts)} pings meanwhile, slowest {max(rtts, default=0) * 1000:.0f} ms; "
          f"tabd used {spent:.2f} s of CPU in the 5 s after")
    assert not ping_failure, f"the WebSocket client: {ping_failure[0]}"
    assert max(rtts, default=0) <= 1.0, f"a pong took {max(rtts):.2f} s (ping {len(rtts)} of 50)"
    assert len(rtts) == 50
    assert spent < 1.0, f"tabd used {spent:.2f} s of CPU in the 5 s after the hostile connections ended"
    front.serving()


def parse_response_or_none(buf):
    try:
        return parse_response(buf)
    except AssertionError:
        return None
