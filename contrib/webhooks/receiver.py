#!/usr/bin/env python3
"""A minimal receiver of tabd's webhooks, in Python's standard library alone.

    TABD_WEBHOOK_SECRET_FILE=webhook.secret python3 receiver.py 9000

It checks each request as Standard Webhooks say (an HMAC-SHA256 of "id.timestamp.body" with
the secret, base64, in `webhook-signature` as `v1,…`; a `webhook-timestamp` within five
minutes of now), answers 401 to one that fails, skips a `webhook-id` it has seen already
(tabd delivers at least once: a retry or a restart can post an event again), and prints each
new event as one line of JSON, then answers 204. Without a secret file it checks nothing.
A real back end would store `webhook-id`s with its own data, in the same transaction.
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE = 300  # seconds between webhook-timestamp and now


def load_secrets(path):
    """The secrets of tabd's --webhook-secret-file: one per line (two during a rotation),
    `whsec_` and base64, or the line's own bytes."""
    with open(path, encoding="utf-8") as f:
        return load_secrets_from_text(f.read())


def load_secrets_from_text(text):
    secrets = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            secrets.append(base64.b64decode(line[6:]) if line.startswith("whsec_") else line.encode())
    return secrets


def refusal(headers, body, secrets, now=None):
    """Why the request is refused, or None when it is tabd's."""
    msg_id, stamp, signature = headers.get("webhook-id"), headers.get("webhook-timestamp"), headers.get("webhook-signature")
    if not msg_id or not stamp or not signature:
        return "a header is missing"
    try:
        seconds = int(stamp)
    except ValueError:
        return "webhook-timestamp is not a number"
    if abs((now or time.time()) - seconds) > TOLERANCE:
        return "webhook-timestamp is too far from now"
    content = f"{msg_id}.{seconds}.".encode() + body
    expected = [base64.b64encode(hmac.new(s, content, hashlib.sha256).digest()).decode() for s in secrets]
    given = [part[3:] for part in signature.split(" ") if part.startswith("v1,")]
    if any(hmac.compare_digest(e, g) for e in expected for g in given):
        return None
    return "no signature matches"


class Receiver(BaseHTTPRequestHandler):
    secrets = None
    seen = set()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.secrets is not None:
            why = refusal({k.lower(): v for k, v in self.headers.items()}, body, self.secrets)
            if why:
                self.send_response(401)
                self.end_headers()
                print(json.dumps({"refused": why}), file=sys.stderr, flush=True)
                return
        msg_id = self.headers.get("webhook-id")
        if msg_id not in self.seen:  # a duplicate is answered, not handled twice
            self.seen.add(msg_id)
            print(json.dumps({"id": msg_id, "event": json.loads(body)}), flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    path = os.environ.get("TABD_WEBHOOK_SECRET_FILE")
    Receiver.secrets = load_secrets(path) if path else None
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    print(json.dumps({"listening": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
