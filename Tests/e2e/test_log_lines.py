"""What a peer puts in a value tabd logs cannot end a log line or start a forged one: a
client's name full of line breaks, terminal escapes (ESC, CSI as U+009B), DEL, NEL and the
Unicode line and paragraph separators reaches tabd's log, text or JSON, written out."""
import json
import urllib.parse

import pytest

import rawws
from conftest import WAIT

# Every kind of scalar that ends a line or steers a terminal somewhere, each followed by a
# marker (a name holds at most 64 characters).
# (NUL is not among them: tabd refuses a %00 in a request's target before it reads a name.)
HOSTILE = ["\n", "\r", "\x1b[31m", "\x7f", "\x85", "\x9b31m", "\u2028", "\u2029", "\x0b", "\x0c"]
NAME = "kiosk" + "".join(f"{c}<{i}>" for i, c in enumerate(HOSTILE))
MARKERS = [f"<{i}>" for i in range(len(HOSTILE))]
RAW = [c.encode() for c in ("\n", "\r", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\x0b", "\x0c")]


def connect_named(d, name):
    status, _, s = rawws.handshake(d.host, query="room=main&name=" + urllib.parse.quote(name, safe=""))
    assert status.startswith("HTTP/1.1 101"), status
    me = rawws.welcome(s)["client"]
    return s, me


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_name_full_of_controls_and_separators_stays_on_its_log_line(make_daemon, log_format):
    d = make_daemon("--log-format", log_format)
    s, me = connect_named(d, NAME)
    d.wait_for_log(f"is client {me} ", timeout=WAIT)
    s.close()
    # tabd's stderr, which it writes as UTF-8: decoding and encoding again keep every scalar
    # (a raw CR the reader turned into a line break would show as a line of its own).
    d.stop()
    raw = d.stderr.encode()
    lines = raw.split(b"\n")
    assert lines[-1] == b"", "the log ends with a whole line"
    joined = [line for line in lines if f"is client {me} ".encode() in line]
    assert len(joined) == 1, raw
    line = joined[0]
    for scalar in RAW:
        assert scalar not in line, f"{scalar!r} raw in the log line: {line!r}"
    for scalar in RAW[1:]:
        assert scalar not in raw, f"{scalar!r} raw somewhere in the log: {raw!r}"
    # Every marker is on the join's line, in order: nothing the name held ended it.
    positions = [line.find(m.encode()) for m in MARKERS]
    assert -1 not in positions and positions == sorted(positions), line
    if log_format == "json":
        entry = json.loads(line)
        assert NAME in entry["message"], "the JSON line still says exactly what the client sent"
        for escape in ("\\u007f", "\\u0085", "\\u009b", "\\u2028", "\\u2029", "\\u001b"):
            assert escape in line.decode().lower(), line
    else:
        text = line.decode()
        for escape in ("\\x0A", "\\x0D", "\\x1B", "\\x7F", "\\x85", "\\x9B", "\\u2028", "\\u2029", "\\x0B", "\\x0C"):
            assert escape in text, f"{escape} not in {text!r}"
