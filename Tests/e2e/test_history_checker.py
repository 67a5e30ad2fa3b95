"""The history checker (Tests/support/history.py) fails on what it is there to catch: a lost,
doubled or mis-answered command, a gap in a client's stream, and two clients that saw
different batches at one seq. Synthetic histories, no tabd: a checker that cannot fail
proves nothing about the cluster rounds it judges.
"""
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from history import Recorder, check  # noqa: E402


def events(seq, by, ref, key="k", value="v"):
    return {"type": "events", "by": by, "ref": ref,
            "events": [{"seq": seq, "kind": "valueSet", "tab": "home", "key": key, "value": value}]}


def welcome(client, seq):
    return {"type": "welcome", "client": client, "resumed": False, "snapshot": {"seq": seq}}


def two_clients():
    """Client a sends r1 (seq 11) and r2 (seq 12); b watches. Both see both batches."""
    a, b = Recorder("a"), Recorder("b")
    a.connected(welcome("c1", 10))
    b.connected(welcome("c2", 10))
    a.sent_command("r1", {"type": "set", "key": "k", "value": "1"})
    a.sent_command("r2", {"type": "set", "key": "k", "value": "2"})
    for r in (a, b):
        r.received(events(11, "c1", "r1", value="1"))
        r.received(events(12, "c1", "r2", value="2"))
    return a, b


def test_a_consistent_history_passes():
    a, b = two_clients()
    a.received({"type": "ack", "ref": "r1", "seq": 11})
    a.received({"type": "ack", "ref": "r2", "seq": 12})
    report = check([a, b])
    assert report.ok, report.problems()
    assert (report.sent, report.acked, report.history_seqs) == (2, 2, 2)


def test_an_ack_naming_another_batch_is_a_mismatch():
    a, b = two_clients()
    a.received({"type": "ack", "ref": "r1", "seq": 12})
    a.received({"type": "ack", "ref": "r2", "seq": 12})
    report = check([a, b])
    assert not report.ok and [(m[1], m[3], m[4]) for m in report.mismatched] == [("r1", 12, 11)]


def test_an_acked_change_seen_by_nobody_is_lost():
    a, b = two_clients()
    a.sent_command("r3", {"type": "set", "key": "k", "value": "3"})
    a.received({"type": "ack", "ref": "r3", "seq": 12})
    report = check([a, b])
    assert [m[1] for m in report.lost] == ["r3"]


def test_a_command_in_two_batches_is_doubled_and_an_error_with_an_effect_is_caught():
    a, b = two_clients()
    for r in (a, b):
        r.received(events(13, "c1", "r1", value="1"))
    a.received({"type": "error", "ref": "r2", "code": "conflict"})
    report = check([a, b])
    assert [d[1] for d in report.doubled] == ["r1"]
    assert [e[1] for e in report.errored_with_effect] == ["r2"]


def test_a_gap_and_a_fork_are_caught():
    a, b = two_clients()
    a.received(events(14, "c1", None))                 # 13 missing for a
    b.received(events(13, "c9", None, value="x"))
    b.received(events(14, "c9", None, value="y"))      # b saw another batch at 14
    report = check([a, b])
    assert report.gaps == [("a", 0, 12, 14)]
    assert [f[0] for f in report.forks] == [14]


def test_a_resumed_session_goes_on_from_where_it_asked():
    a, b = two_clients()
    b.connected({"type": "welcome", "client": "c3", "resumed": True}, resumed_from=11)
    b.received(events(12, "c1", "r2", value="2"))
    assert check([a, b]).ok
    b.connected({"type": "welcome", "client": "c4", "resumed": True}, resumed_from=11)
    b.received(events(13, "c1", None))
    assert check([a, b]).gaps == [("b", 2, 11, 13)]
