"""Faults for the cluster tests: pauses and cut links.

- `paused(pid)`: SIGSTOP now, SIGCONT when the block ends (always, even when it raises). A
  paused process keeps its sockets open: its peers see silence, not a close.
- `Proxy`: a TCP relay between a tabd node and one engine server that a test cuts (every
  connection through it is dropped and new ones are refused) and heals.
- `NatsProxy`: a `Proxy` that reads the NATS protocol a node sends and, while `silence()`d,
  drops the node's core-NATS messages on tabd's node-to-node subjects (heartbeats,
  forwards, answers, deletion notices) and passes everything else, its JetStream traffic
  included: the other nodes stop hearing a node that still reaches the engine.
"""
import contextlib
import os
import signal
import socket
import threading


@contextlib.contextmanager
def paused(pid):
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


class Proxy:
    """Relays 127.0.0.1:`port` to `target` (host, port) until `cut()`; `heal()` lets new
    connections through again."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"nats://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.open = True
        self.pairs = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if not self.open:
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    client.close()
                    continue
                upstream.settimeout(None)
                self.pairs.append((client, upstream))
            outbound = self._outbound_filter()
            for a, b, f in ((client, upstream, outbound), (upstream, client, None)):
                threading.Thread(target=self._pump, args=(a, b, f), daemon=True).start()

    @staticmethod
    def _pump(src, dst, filter=None):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if filter:
                    data = filter(data)
                if data:
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _outbound_filter(self):
        """A new connection's filter of what the client sends (bytes in, bytes to relay), or None."""
        return None

    def cut(self):
        """Drops every connection through the proxy and refuses new ones."""
        with self.lock:
            self.open = False
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def heal(self):
        with self.lock:
            self.open = True

    def close(self):
        self.closed = True
        self.cut()
        self.listener.close()


# The subjects on which tabd nodes speak to each other over core NATS (not JetStream).
NODE_SUBJECTS = (b"tabd.node.", b"tabd.fwd.", b"tabd.fwdr.", b"tabd.deleted.")


class NatsProxy(Proxy):
    """A Proxy that parses the client's NATS protocol (`PUB`/`HPUB` with their payloads,
    every other operation a line) and, while silenced, drops `PUB`/`HPUB` on
    NODE_SUBJECTS. Dropped messages are gone, as on a network that lost them."""

    def __init__(self, target):
        self.silenced = False
        self.dropped = 0
        super().__init__(target)

    def silence(self):
        self.silenced = True

    def unsilence(self):
        self.silenced = False

    def _outbound_filter(self):
        buffer = bytearray()

        def relay(data):
            buffer.extend(data)
            out = bytearray()
            while True:
                end = buffer.find(b"\r\n")
                if end < 0:
                    break
                line = bytes(buffer[:end])
                op = line.split(b" ", 1)[0].upper()
                if op in (b"PUB", b"HPUB"):
                    parts = line.split()
                    size = int(parts[-1])
                    total = end + 2 + size + 2
                    if len(buffer) < total:
                        break   # the payload is still on its way
                    subject = parts[1]
                    if self.silenced and subject.startswith(NODE_SUBJECTS):
                        self.dropped += 1
                    else:
                        out += buffer[:total]
                    del buffer[:total]
                else:
                    out += buffer[:end + 2]
                    del buffer[:end + 2]
            return bytes(out)
        return relay
