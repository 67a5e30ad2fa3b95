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


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_every_log_line_carries_the_fields_of_what_it_is_about(make_daemon, log_format):
    """A session's whole log (joins, commands, an error, a leave, refusals, a room made and
    deleted over the API): every JSON line parses and names its time, level and message; the
    lines about a client name its room, client and connection, a leave its close code, a
    refusal the peer and the status."""
    import re
    import urllib.request
    from conftest import Client
    d = make_daemon("--log-format", log_format)
    c = await Client.connect(d.ws, room="fields", name="f1")
    me = c.welcome["client"]
    _, reply = await c.command("select", tab="nowhere")
    assert reply["type"] == "error"
    await c.close()
    # Another site's upgrade, and a host tabd does not know: refused, logged with the peer.
    status, _, _ = rawws.handshake(d.host, query="room=fields", headers=[("Origin", "https://evil.example")])
    assert status.startswith("HTTP/1.1 403"), status
    # (Refusals are logged at most one a second, whatever their kind: the host's on a tabd of its own.)
    import http.client
    other = make_daemon("--log-format", log_format)
    host, port = other.host.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT)
    conn.request("GET", "/api/rooms", headers={"Host": "elsewhere.example"})
    assert conn.getresponse().status == 421
    conn.close()
    other.wait_for_log("elsewhere.example")
    assert other.stop() == 0
    urllib.request.urlopen(urllib.request.Request(d.http + "/api/rooms/made", method="PUT"), timeout=WAIT)
    urllib.request.urlopen(urllib.request.Request(d.http + "/api/rooms/made", method="DELETE"), timeout=WAIT)
    d.wait_for_log(f"client {me} left")
    d.wait_for_log("room 'made' deleted")
    assert d.stop() == 0
    lines = [line for line in (d.stderr + other.stderr).splitlines() if line]

    def fields(line):
        if log_format == "json":
            record = json.loads(line)   # every line parses
            assert {"time", "level", "message"} <= set(record), record
            return record
        m = re.match(r"^\S+ (ERROR|WARN|INFO|DEBUG) (.*)$", line)
        assert m, line
        return {"message": m.group(2), **dict(re.findall(r' (room|client|connection|peer|code|node|kind)=(\S+)', m.group(2)))}

    records = [fields(line) for line in lines]

    def one(pred, what):
        found = [r for r in records if pred(r["message"])]
        assert found, f"no line {what}: {lines}"
        return found[0]
    welcome = one(lambda m: f"is client {me}" in m, "of the welcome")
    assert welcome["room"] == "fields" and welcome["client"] == me and welcome["connection"].isdigit() and welcome["peer"]
    error = one(lambda m: "unknown_tab" in m, "of the error answered")
    assert (error["room"], error["client"], error["code"]) == ("fields", me, "unknown_tab")
    left = one(lambda m: f"client {me} left" in m, "of the leave")
    assert (left["room"], left["client"], left["code"]) == ("fields", me, "1000")
    refused = one(lambda m: "origin 'https://evil.example'" in m, "of the refused origin")
    assert refused["code"] == "403" and refused["peer"].startswith("127.0.0.1")
    misdirected = one(lambda m: "elsewhere.example" in m, "of the unknown host")
    assert misdirected["code"] == "421" and misdirected["peer"].startswith("127.0.0.1")
    assert one(lambda m: "room 'made' deleted" in m, "of the deletion")["room"] == "made"
