"""Frames a client sends before its welcome are not lost: they are read once it is
welcomed, in the order they were sent, before anything it sends later."""
import json

import rawws


def frames_until(s, count, kinds=("pong", "ack", "error", "events")):
    """The next `count` frames of the given types (welcome included first if asked)."""
    out = []
    while len(out) < count:
        opcode, data = rawws.recv_frame(s)
        if opcode != 1:
            continue
        f = json.loads(data)
        if f["type"] in kinds:
            out.append(f)
    return out


def test_frames_sent_before_the_welcome_are_answered_after_it_in_order(daemon):
    # Sent with the upgrade request itself: they are there before the welcome can be.
    early = [{"type": "ping", "ref": "a"}, {"type": "push", "route": "early", "ref": "b"},
             {"type": "select", "tab": "nope", "ref": "c"}, {"type": "ping", "ref": "d"}]
    s = rawws.connect(daemon.host, then=b"".join(rawws.frame_bytes(json.dumps(m).encode()) for m in early))
    welcome = frames_until(s, 1, kinds=("welcome",))[0]
    me = welcome["client"]
    replies = frames_until(s, 5)
    assert [(f["type"], f.get("ref")) for f in replies] == [
        ("pong", "a"), ("events", "b"), ("ack", "b"), ("error", "c"), ("pong", "d")]
    assert replies[1]["by"] == me and [e["kind"] for e in replies[1]["events"]][0] == "pushed"
    assert replies[3]["code"] == "unknown_tab"
    s.close()


def test_a_burst_right_after_the_handshake_is_answered_whole_and_in_order(daemon):
    # Sent right after the handshake, while the welcome may or may not be out: every frame
    # is answered, in order; of those that came before the welcome, at most 64 are read and
    # the rest are answered rate_limited (so a refusal can only follow the 64th frame).
    s = rawws.connect(daemon.host)
    rawws.send_text(s, b"")  # an empty frame is bad_json: a marker that reading began
    for i in range(70):
        rawws.send_text(s, json.dumps({"type": "ping", "ref": f"p{i}"}).encode())
    frames_until(s, 1, kinds=("welcome",))
    replies = frames_until(s, 71, kinds=("pong", "error"))
    assert (replies[0]["type"], replies[0]["code"]) == ("error", "bad_json")
    pongs = [f for f in replies[1:] if f["type"] == "pong"]
    refused = [f for f in replies[1:] if f["type"] == "error"]
    assert [f["ref"] for f in pongs] == [f"p{i}" for i in range(len(pongs))], "in order, none lost"
    assert replies[1:] == pongs + refused, "refusals only after the frames that were read"
    assert all((f["code"], f["ref"]) == ("rate_limited", None) for f in refused)
    assert len(pongs) >= 63 and len(pongs) + len(refused) == 70
    s.close()
