"""The fold of tabd's event stream, for checking that what tabd stored and serves is exactly
the fold of its events. It is the page's own fold, web/model.js (which Tests/web checks
against the daemon's fold with the golden streams), run by node on fold.mjs: the tests
have no fold of their own.

- replay(batches, start=None): the snapshot (the wire form `sync` answers with, toWire:
  at most 100 clients listed) that `start` (a wire snapshot; by default origin()) becomes
  with the events frames `batches` folded in, frame by frame (applyFrame). `batches` are
  the frames after `start`: the first event's seq must be start's seq + 1. An event the
  fold refuses (a gap, a page or tab the state does not have, a frame that ends with the
  selection on a removed tab, ...) raises AssertionError naming its seq. It compares
  equal (==) to tabd's snapshot at the same seq: `values` keys may come in another order,
  which dicts do not see; and model.js's one limit applies (a start that lists only 100
  clients, one of which leaves: tabd then lists one the fold never heard of).
- replay_all(streams, label=""): replay for each (batches, start) of `streams`, with one
  node process; `label` begins the message of a refusal.
- frames_after(snapshot, batches): the frames of `batches` whose events come after
  `snapshot` (a client's welcome snapshot), for replay(frames_after(s, batches), start=s).
"""
import json
import os
import subprocess

FOLD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fold.mjs")
NODE = os.environ.get("NODE", "node")

DEFAULT_TABS = [("home", "Home", "house", "#FF3B30"), ("favorites", "Favorites", "heart", "#007AFF"),
                ("profile", "Profile", "person", "#34C759")]


def origin():
    """The state of a new history with the default tabs, before seq 1."""
    tabs = [{"id": i, "title": t, "icon": ic, "color": c, "badge": None,
             "stack": [{"id": f"p{n + 1}", "route": "root", "appeared": False, "appearCount": 0}],
             "scroll": 0, "values": {}} for n, (i, t, ic, c) in enumerate(DEFAULT_TABS)]
    return {"seq": 0, "selected": "home", "scrollToTop": 0, "tabs": tabs, "clientCount": 0, "clients": []}


def frames_after(snapshot, batches):
    """The frames of `batches` past `snapshot`: those whose first event's seq is beyond it
    (a frame that straddles it is left out, and the fold then refuses the gap)."""
    return [b for b in batches if b["events"][0]["seq"] > snapshot["seq"]]


def replay_all(streams, label=""):
    """[replay(batches, start) for (batches, start) in streams], folded by one node process.
    `label` begins the message of a refusal."""
    jobs = [{"start": start if start is not None else origin(), "frames": list(batches)} for batches, start in streams]
    p = subprocess.run([NODE, FOLD], input=json.dumps(jobs), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{NODE} {FOLD} failed ({p.returncode}): {p.stderr.strip()}")
    results = json.loads(p.stdout)
    assert len(results) == len(jobs), f"fold.mjs answered {len(results)} streams of {len(jobs)}"
    for i, r in enumerate(results):
        if "refused" in r:
            where = "".join([f"{label}: " if label else "", f"stream {i + 1} of {len(jobs)}: " if len(jobs) > 1 else ""])
            raise AssertionError(f"{where}web/model.js: {r['refused']['message']}")
    return [r["snapshot"] for r in results]


def replay(batches, start=None):
    """The wire snapshot of `start` (default origin()) with `batches` folded in (see above)."""
    return replay_all([(batches, start)])[0]
