"""Frames a client sends before its welcome are not lost: tabd keeps up to 64 of them and
reads them once it is welcomed, in the order they were sent, before anything it sends
later; each frame beyond the 64th is answered `rate_limited` (Gateway.maxEarlyFrames).

The frames go out in the same write as the upgrade request, so tabd has them in the same
read as the request and takes them in before the connection can be welcomed (the welcome
needs the room, which hears of the connection only at the end of that pass). Were any of
them read after the welcome instead, fewer than the frames beyond 64 would be refused
and their commands would run: the exact counts below fail then, they cannot pass by the
welcome winning a race."""
import json

import pytest

import rawws

CAP = 64  # frames kept before the welcome


def next_text(s):
    """The next text frame from tabd, parsed."""
    while True:
        opcode, data = rawws.recv_frame(s)
        if opcode == 1:
            return json.loads(data)


def early_frames(extra):
    """CAP + extra commands, each with its ref: a ping, a push, a select of a tab that does
    not exist, a ping, then sets of `n` to the frame's index and pings by turns. The frames
    beyond CAP are all sets, so a refused one that ran anyway would show in `n`."""
    frames = [{"type": "ping", "ref": "e0"}, {"type": "push", "route": "early", "ref": "e1"},
              {"type": "select", "tab": "nope", "ref": "e2"}, {"type": "ping", "ref": "e3"}]
    for i in range(len(frames), CAP):
        frames.append({"type": "set", "key": "n", "value": i, "ref": f"e{i}"} if i % 2 else {"type": "ping", "ref": f"e{i}"})
    frames += [{"type": "set", "key": "n", "value": i, "ref": f"e{i}"} for i in range(CAP, CAP + extra)]
    return frames


def answers_of(frame):
    """The (type, ref) frames a command that is read is answered with, in order."""
    ref = frame["ref"]
    if frame["type"] == "ping":
        return [("pong", ref)]
    if frame["type"] == "select":
        return [("error", ref)]  # unknown_tab: no events
    return [("events", ref), ("ack", ref)]


@pytest.mark.parametrize("extra", [1, 6])
def test_the_first_64_frames_before_the_welcome_are_read_in_order_and_only_the_rest_refused(daemon, extra):
    frames = early_frames(extra)
    s = rawws.connect(daemon.host, then=b"".join(rawws.frame_bytes(json.dumps(m).encode()) for m in frames))
    welcome = next_text(s)
    assert welcome["type"] == "welcome", f"the welcome comes first, not {welcome}"
    me = welcome["client"]
    start = welcome["snapshot"]["seq"]
    rawws.send_text(s, json.dumps({"type": "ping", "ref": "later"}).encode())  # after the welcome

    got = []
    while not got or (got[-1]["type"], got[-1].get("ref")) != ("pong", "later"):
        got.append(next_text(s))  # each frame within rawws's 10 s socket timeout
    want = [a for f in frames[:CAP] for a in answers_of(f)] + [("error", None)] * extra + [("pong", "later")]
    assert [(f["type"], f.get("ref")) for f in got] == want, \
        "the first 64 answered in order, then exactly one rate_limited per frame beyond them, then the later frame"

    refused = [f for f in got if f["type"] == "error" and f.get("ref") is None]
    assert len(refused) == extra and all(f["code"] == "rate_limited" for f in refused)
    assert next(f for f in got if f.get("ref") == "e2")["code"] == "unknown_tab"
    batches = [f for f in got if f["type"] == "events"]
    assert all(b["by"] == me for b in batches)
    assert [e["seq"] for b in batches for e in b["events"]] == list(range(start + 1, start + 1 + sum(len(b["events"]) for b in batches))), \
        "the commands' events follow the welcome's snapshot without a gap"
    assert batches[0]["events"][0]["kind"] == "pushed" and batches[0]["events"][0]["route"] == "early"
    sets = [e["value"] for b in batches[1:] for e in b["events"] if e["kind"] == "valueSet"]
    assert sets == list(range(5, CAP, 2)), "every set among the first 64 ran, in order; none beyond them"

    rawws.send_text(s, json.dumps({"type": "sync", "ref": "check"}).encode())
    reply = next_text(s)
    assert (reply["type"], reply.get("ref")) == ("snapshot", "check"), reply
    home = next(t for t in reply["snapshot"]["tabs"] if t["id"] == "home")
    assert home["values"] == {"n": CAP - 1}, "the refused sets changed nothing"
    assert [p["route"] for p in home["stack"]] == ["root", "early"]
    s.close()
