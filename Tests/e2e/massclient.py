"""A crowd of WebSocket clients in one process, for test_mass_connections.py.

    massclient.py HOST:PORT [--clients N] [--rooms R] [--in-flight M] [--step S] [--rcvbuf BYTES]

Opens N WebSocket connections (default: the environment's TABD_MASS_CLIENTS, else 8000) to
`/ws?room=rK&name=mI` (K = I mod R; R default 200), with at most M handshakes in flight
(default 200). Each must be answered 101 and then get a `welcome` as its first frame. It
prints `welcomed K` on stdout after every S welcomes (default 100) and `ready N` once every
one is in; if any failed, `done welcomed=W failed=F` instead (the first 20 failures are
named on stderr). Then it keeps the connections, reading and discarding what comes.

It never writes after a handshake, so it never answers a close frame (nor a ping). A line
`stop-reading` on stdin stops reading every connection (answered `stopped-reading`), so the
server's frames pile up; the end of stdin ends the process (so a crowd never outlives its
test). `--rcvbuf` sets each socket's receive buffer (small: the server's frames back up
sooner once reading stops).
"""
import argparse
import asyncio
import base64
import os
import socket
import sys
import threading


class Member(asyncio.Protocol):
    """One connection: the handshake, the welcome, then bytes dropped as they come."""

    def __init__(self, host_port, path):
        key = base64.b64encode(os.urandom(16)).decode()
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
        self.buf = bytearray()
        self.state = "head"
        self.transport = None
        self.welcomed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data):
        if self.state != "head" and self.state != "frame":
            return  # welcomed (or failed): dropped
        self.buf += data
        if self.state == "head":
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self.buf[: self.buf.find(b"\r\n")])
            if not status.startswith(b"HTTP/1.1 101"):
                return self.fail(f"upgrade answered {status[:80]!r}")
            del self.buf[: end + 4]
            self.state = "frame"
        if len(self.buf) < 2:
            return
        n, offset = self.buf[1] & 0x7F, 2
        if n == 126:
            if len(self.buf) < 4:
                return
            n, offset = int.from_bytes(self.buf[2:4], "big"), 4
        elif n == 127:
            if len(self.buf) < 10:
                return
            n, offset = int.from_bytes(self.buf[2:10], "big"), 10
        if len(self.buf) < offset + n:
            return
        payload = bytes(self.buf[offset: offset + 40])
        if self.buf[0] & 0x0F != 1 or not payload.startswith(b'{"type":"welcome"'):
            return self.fail(f"first frame is not a welcome: {payload!r}")
        self.state = "open"
        self.buf = bytearray()
        if not self.welcomed.done():
            self.welcomed.set_result(None)

    def fail(self, why):
        self.state = "failed"
        if not self.welcomed.done():
            self.welcomed.set_exception(ConnectionError(why))
        self.transport.close()

    def connection_lost(self, exc):
        if not self.welcomed.done():
            self.welcomed.set_exception(ConnectionError(f"closed before the welcome ({exc or 'eof'})"))
        if self.state == "open":
            self.state = "closed"


async def crowd(args):
    loop = asyncio.get_running_loop()
    host, port = args.host_port.rsplit(":", 1)
    in_flight = asyncio.Semaphore(args.in_flight)
    members, counts = [], {"welcomed": 0, "failed": 0}

    def stop_reading():
        for m in members:
            if m.state == "open":
                m.transport.pause_reading()
        print("stopped-reading", flush=True)

    def commands():
        for line in sys.stdin:
            if line.strip() == "stop-reading":
                loop.call_soon_threadsafe(stop_reading)
        os._exit(0)  # stdin ended: the test is done with us

    threading.Thread(target=commands, daemon=True).start()

    async def join(i):
        async with in_flight:
            m = Member(args.host_port, f"/ws?room=r{i % args.rooms}&name=m{i}")
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                if args.rcvbuf:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
                await asyncio.wait_for(loop.sock_connect(s, (host, int(port))), 30)
                await loop.create_connection(lambda: m, sock=s)
                await asyncio.wait_for(asyncio.shield(m.welcomed), 60)
            except (OSError, asyncio.TimeoutError, ConnectionError) as e:
                counts["failed"] += 1
                if counts["failed"] <= 20:
                    print(f"failed {i}: {e!r}", file=sys.stderr, flush=True)
                if m.transport:
                    m.transport.close()
                else:
                    s.close()
                return
        members.append(m)
        counts["welcomed"] += 1
        if counts["welcomed"] % args.step == 0:
            print(f"welcomed {counts['welcomed']}", flush=True)

    await asyncio.gather(*(join(i) for i in range(args.clients)))
    if counts["failed"]:
        print(f"done welcomed={counts['welcomed']} failed={counts['failed']}", flush=True)
    else:
        print(f"ready {counts['welcomed']}", flush=True)
    await asyncio.Event().wait()  # until killed, or stdin ends


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("host_port")
    p.add_argument("--clients", type=int, default=int(os.environ.get("TABD_MASS_CLIENTS", "8000")))
    p.add_argument("--rooms", type=int, default=200)
    p.add_argument("--in-flight", type=int, default=200)
    p.add_argument("--step", type=int, default=100)
    p.add_argument("--rcvbuf", type=int, default=0)
    asyncio.run(crowd(p.parse_args()))


if __name__ == "__main__":
    main()
