"""A webhook receiver the tests steer: up or down (not listening), answering at once, slowly,
with 500, or never; it checks every request with contrib/webhooks/receiver.py's `refusal`
(the documented check) and keeps what it got, in arrival order."""
import importlib.util
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("contrib_receiver", os.path.join(ROOT, "contrib", "webhooks", "receiver.py"))
contrib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contrib)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SteeredReceiver:
    """`mode`: "ok" (204), "slow" (204 after `delay` s), "fail" (500), "hang" (never answers).
    `up()` / `down()` start and stop listening on `port`. `got` holds (headers, body) of
    every request answered 2xx, in the order they were answered; `refused` the reasons of
    those whose signature did not check."""

    def __init__(self, secrets=None, port=None, delay=1.0, tls=None):
        self.tls = tls  # (certificate, key): https
        self.port = port or free_port()
        self.secrets = secrets
        self.mode = "ok"
        self.delay = delay
        self.got = []
        self.refused = []
        self.tries = 0
        self.lock = threading.Lock()
        self.server = None
        self.thread = None
        self._hang = threading.Event()

    @property
    def url(self):
        return f"https://localhost:{self.port}/hook?key=x" if self.tls else f"http://127.0.0.1:{self.port}/hook?key=x"

    def up(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.tries += 1
                    mode = receiver.mode
                if mode == "hang":
                    receiver._hang.wait(60)
                    return
                if mode == "slow":
                    time.sleep(receiver.delay)
                if receiver.secrets is not None:
                    why = contrib.refusal(headers, body, receiver.secrets)
                    if why:
                        with receiver.lock:
                            receiver.refused.append(why)
                        self._answer(401)
                        return
                if mode == "fail":
                    self._answer(500)
                    return
                with receiver.lock:
                    receiver.got.append((headers, body))
                self._answer(204)

            def _answer(self, status):
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        if self.tls:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def down(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def close(self):
        self._hang.set()
        self.down()

    def received(self):
        with self.lock:
            return list(self.got)
