"""Hostile connections: many that send half a request and stop (slowloris), more than the
process may open, requests too big to hold. tabd times the first out, refuses what it cannot
take without spinning, counts both, and serves everyone else meanwhile."""
import asyncio
import os
import re
import resource
import socket
import subprocess
import time

from conftest import ROOT, TABD, WAIT, Client

HALF_UPGRADE = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"


def raise_own_file_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def open_half_requests(host_port, count):
    host, port = host_port.rsplit(":", 1)
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, int(port)), timeout=WAIT)
        s.sendall(HALF_UPGRADE)
        s.setblocking(False)
        socks.append(s)
    return socks


def wait_all_closed_by_server(socks, limit):
    """Seconds until the server has closed every socket; fails past `limit`."""
    start, open_ = time.monotonic(), set(range(len(socks)))
    while open_:
        assert time.monotonic() - start < limit, f"{len(open_)} of {len(socks)} still open after {limit} s"
        for i in list(open_):
            try:
                if socks[i].recv(1024) == b"":
                    open_.discard(i)
            except BlockingIOError:
                pass
            except OSError:
                open_.discard(i)
        time.sleep(0.05)
    return time.monotonic() - start


def metric(daemon, name):
    status, body = daemon.get("/metrics")
    assert status == 200
    m = re.search(rf"^{name} (\d+)$", body, re.M)
    return int(m.group(1))


async def a_client_is_served(url):
    """Welcome and a pong, each well within WAIT."""
    c = await asyncio.wait_for(Client.connect(url), WAIT)
    _, pong = await asyncio.wait_for(c.command("ping"), WAIT)
    assert pong["type"] == "pong"
    await c.close()


async def test_a_thousand_half_requests_neither_block_others_nor_stay(daemon):
    raise_own_file_limit(4096)
    socks = open_half_requests(daemon.host, 1000)
    try:
        start = time.monotonic()
        await a_client_is_served(daemon.ws)
        status, _ = daemon.get("/healthz")
        assert status == 200
        assert time.monotonic() - start < 3, "served while 1,000 connections hang"
        # Dropped after the 5 s request timeout (with room for a busy machine).
        wait_all_closed_by_server(socks, limit=20)
    finally:
        for s in socks:
            s.close()
    assert metric(daemon, "tabd_incomplete_requests_total") >= 1000


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_past_the_open_file_limit_tabd_waits_without_spinning_and_serves_on():
    raise_own_file_limit(4096)

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))

    proc = subprocess.Popen([TABD, "--port", "0", "--state", ":memory:", "--max-clients", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=low_limit)
    try:
        m = re.match(r"tabd listening on http://([^/]+)/$", proc.stdout.readline().strip())
        assert m, proc.stderr.read()
        host = m.group(1)
        # More connections than the process may have files: the kernel queues the rest.
        socks = open_half_requests(host, 300)
        time.sleep(1)
        before = cpu_seconds(proc.pid)
        time.sleep(3)
        spent = cpu_seconds(proc.pid) - before
        assert spent < 0.5, f"tabd used {spent:.2f} s of CPU in 3 s while refusing"
        for s in socks:
            s.close()
        await a_client_is_served(f"ws://{host}/ws")
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    # No flood of errors while it could not accept.
    assert "errno 24" not in err and len(err.splitlines()) < 100, err[-2000:]


OVERSIZED = {
    "request line of 100 KB": b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "header of 100 KB": b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n",
    "5,000 headers": b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(5000)) + b"\r\n",
    "upgrade with a 20 KB query": b"GET /ws?name=" + b"n" * 20_000 + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                  b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                  b"Sec-WebSocket-Version: 13\r\n\r\n",
}


async def test_oversized_requests_are_refused_and_tabd_serves_on(daemon):
    host, port = daemon.host.rsplit(":", 1)
    for name, request in OVERSIZED.items():
        s = socket.create_connection((host, int(port)), timeout=WAIT)
        try:
            s.sendall(request)
            answer = s.recv(200)
        except ConnectionResetError:
            answer = b""
        finally:
            s.close()
        # Dropped, or answered with an error: never served, never upgraded.
        assert answer == b"" or re.match(rb"HTTP/1\.1 4\d\d", answer), (name, answer[:60])
    await a_client_is_served(daemon.ws)
    assert metric(daemon, "tabd_incomplete_requests_total") >= len(OVERSIZED)


def test_max_clients_over_the_open_file_limit_stops_tabd_naming_both():
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))

    p = subprocess.run([TABD, "--port", "0", "--state", ":memory:", "--max-clients", "1000"],
                       capture_output=True, text=True, timeout=30, preexec_fn=low_limit)
    assert p.returncode != 0 and "listening" not in p.stdout
    assert "200" in p.stderr and "1064" in p.stderr, p.stderr


async def test_a_client_that_pipelines_thousands_of_requests_and_reads_late_gets_every_answer(daemon):
    # 20,000 requests for the page in a row (about 80 MB of answers, far more than the
    # sockets' buffers hold) from a client that reads nothing for a second, then everything:
    # tabd reads that client's requests only as fast as it takes the answers, so it neither
    # piles the answers up in memory (libwebsockets would refuse past 1,024 pending writes
    # and lose them) nor stalls anyone else meanwhile.
    host, port = daemon.host.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=WAIT)
    count = 20_000
    before = daemon.rss_kib()
    sender = asyncio.get_running_loop().run_in_executor(None, s.sendall, f"GET / HTTP/1.1\r\nHost: {daemon.host}\r\n\r\n".encode() * count)
    try:
        await a_client_is_served(daemon.ws)
        status, _ = daemon.get("/healthz")
        assert status == 200
        grown = daemon.rss_kib() - before
        assert grown < 32 * 1024, f"tabd grew by {grown} KiB for a client that does not read"
        with open(os.path.join(ROOT, "web", "index.html"), "rb") as f:
            page = f.read()  # the page tabd serves from the checkout's web root
        # Now read every answer: each a 200 with the page, none missing, none cut.
        buffer = b""
        answers = 0
        deadline = time.monotonic() + 60
        while answers < count:
            assert time.monotonic() < deadline, f"{answers} of {count} answers in 60 s"
            chunk = s.recv(1 << 20)
            assert chunk, f"closed after {answers} of {count} answers"
            buffer += chunk
            while True:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buffer[:end].decode()
                assert head.startswith("HTTP/1.1 200"), head
                length = int(re.search(r"content-length: (\d+)", head).group(1))
                if len(buffer) < end + 4 + length:
                    break
                body = buffer[end + 4:end + 4 + length]
                assert body == page
                buffer = buffer[end + 4 + length:]
                answers += 1
        await sender
    finally:
        s.close()
