"""An independent history checker for a room, from the clients' side only.

It knows nothing of tabd's internals: it reads what clients sent (each command with a `ref`
unique in the whole test), what they were answered, and every `events` frame every client
on every node saw, across reconnects. Then it checks what the protocol promises:

- every client's stream, from its welcome (a snapshot, or the seq it resumed from), is
  gap-free, and every batch two clients saw is the same batch: one history;
- no command's events appear in two batches;
- an acknowledged command that changes the room (the workload's `set` and `scroll` always
  do: unique values) has its events in the history once, in the batch whose last seq its ack
  names; an acknowledged command with no events anywhere is lost;
- a command answered with an error has no events anywhere;
- an unanswered command is in the history once or not at all.

A lost, doubled or mis-answered command fails the check whatever caused it.
"""
import json


class Session:
    """One connection of a recorder: its welcome, the seq it asked to resume from (None for a
    fresh join), and every frame after the welcome, in order."""

    def __init__(self, welcome, resumed_from=None):
        self.welcome = welcome
        self.resumed_from = resumed_from
        self.frames = []


class Recorder:
    """One client across reconnects: the commands it sent and the answers it got, by ref,
    and its sessions."""

    def __init__(self, name):
        self.name = name
        self.sent = {}       # ref -> the command (a dict)
        self.answers = {}    # ref -> the ack or error frame
        self.sessions = []

    def connected(self, welcome, resumed_from=None):
        self.sessions.append(Session(welcome, resumed_from))

    def sent_command(self, ref, command):
        assert ref not in self.sent, f"ref {ref} sent twice"
        self.sent[ref] = command

    def received(self, frame):
        self.sessions[-1].frames.append(frame)
        if frame.get("type") in ("ack", "error") and frame.get("ref") in self.sent:
            ref = frame["ref"]
            if ref in self.answers:
                raise AssertionError(f"{self.name}: two answers to {ref}: {self.answers[ref]} and {frame}")
            self.answers[ref] = frame

    def last_seq(self):
        """The last seq this recorder's latest session saw (for `resume`)."""
        s = self.sessions[-1]
        for f in reversed(s.frames):
            if f.get("type") == "events":
                return f["events"][-1]["seq"]
            if f.get("type") == "snapshot" and f.get("ref") is None:
                return f["snapshot"]["seq"]
        return s.welcome["snapshot"]["seq"] if s.welcome.get("snapshot") else s.resumed_from


# Commands that always change the room: an ack without events means the command was lost.
ALWAYS_CHANGES = {"set", "scroll"}


class Report:
    def __init__(self):
        self.sent = self.acked = self.errors = self.unanswered = 0
        self.lost = []
        self.doubled = []
        self.mismatched = []
        self.errored_with_effect = []
        self.gaps = []
        self.forks = []
        self.examples = []
        self.history_seqs = 0
        # Reconnects answered with a snapshot instead of the missed batches (the protocol
        # allows it; the batches in between are then seen by other clients only).
        self.snapshots_instead_of_replay = 0

    @property
    def ok(self):
        return not (self.lost or self.doubled or self.mismatched or self.errored_with_effect or self.gaps or self.forks)

    def summary(self):
        return (f"{self.sent} sent, {self.acked} acked, {self.errors} errors, {self.unanswered} unanswered; "
                f"lost {len(self.lost)}, applied twice {len(self.doubled)}, answers not matching their effect "
                f"{len(self.mismatched)}, errors with an effect {len(self.errored_with_effect)}, gaps {len(self.gaps)}, "
                f"forks {len(self.forks)}; history of {self.history_seqs} seqs")

    def problems(self):
        out = []
        for name in ("lost", "doubled", "mismatched", "errored_with_effect", "gaps", "forks"):
            items = getattr(self, name)
            if items:
                out.append(f"{name}: {items[:5]}{' …' if len(items) > 5 else ''}")
        if self.examples:
            out.append(f"doubled batches, as clients saw them: {self.examples}")
        return "; ".join(out)


def check(recorders):
    """Checks the recorders' histories; returns a Report (see `Report.ok`, `problems()`)."""
    report = Report()
    batch_at = {}   # last seq -> the batch (as JSON text) every client must agree on
    seq_owner = {}  # seq -> last seq of the batch holding it
    for r in recorders:
        for k, s in enumerate(r.sessions):
            w = s.welcome
            if w.get("resumed"):
                at = s.resumed_from
            else:
                at = w["snapshot"]["seq"]
                if s.resumed_from is not None:
                    report.snapshots_instead_of_replay += 1
            for f in s.frames:
                t = f.get("type")
                if t == "snapshot" and f.get("ref") is None:
                    at = f["snapshot"]["seq"]        # a resync: the stream goes on from here
                    continue
                if t != "events":
                    continue
                first, last = f["events"][0]["seq"], f["events"][-1]["seq"]
                if at is not None and first != at + 1:
                    report.gaps.append((r.name, k, at, first))
                at = last
                text = json.dumps(f, sort_keys=True)
                if last in batch_at and batch_at[last] != text:
                    report.forks.append((last, batch_at[last][:200], text[:200]))
                batch_at.setdefault(last, text)
                for e in f["events"]:
                    if seq_owner.setdefault(e["seq"], last) != last:
                        report.forks.append((e["seq"], "in two batches"))
    report.history_seqs = len(seq_owner)
    # Each command's batches, by its ref (unique in the whole test).
    by_ref = {}
    for last, text in batch_at.items():
        f = json.loads(text)
        if f.get("ref") is not None and f.get("by") != "tabd":
            by_ref.setdefault(f["ref"], []).append(last)
    for r in recorders:
        for ref, command in r.sent.items():
            report.sent += 1
            batches = by_ref.get(ref, [])
            if len(batches) > 1:
                report.doubled.append((r.name, ref, batches))
                if len(report.examples) < 3:   # what the batches hold, for the finding's cause
                    report.examples.append([batch_at[b][:240] for b in batches[:3]])
            answer = r.answers.get(ref)
            if answer is None:
                report.unanswered += 1
            elif answer["type"] == "error":
                report.errors += 1
                if batches:
                    report.errored_with_effect.append((r.name, ref, answer.get("code"), batches))
            else:
                report.acked += 1
                if len(batches) == 1 and answer.get("seq") != batches[0]:
                    report.mismatched.append((r.name, ref, command.get("type"), answer.get("seq"), batches[0]))
                if not batches and command.get("type") in ALWAYS_CHANGES:
                    report.lost.append((r.name, ref, command, answer))
    return report
