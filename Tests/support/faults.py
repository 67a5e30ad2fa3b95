"""Faults for the cluster tests: pauses and cut links.

- `paused(pid)`: SIGSTOP now, SIGCONT when the block ends (always, even when it raises). A
  paused process keeps its sockets open: its peers see silence, not a close.
- `Proxy`: a TCP relay between a tabd node and one engine server that a test cuts (every
  connection through it is dropped and new ones are refused) and heals.
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
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

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
