"""Rooms as subjects of a shared shard stream: is the per-subject compare-and-set safe when the
shard's leader dies?

tabd is to keep many rooms in a few R3 "shard" streams, a room per subject
(`tabd.r.<shard>.<room>`), each append carrying `Nats-Expected-Last-Subject-Sequence` = the
room's last stream sequence as its writer believes it (0 for a new room). Before building on
that, this file proves on the pinned server (.venv's nats-server, 2.15.1, every write synced:
`sync_interval: always`) what tabd relies on:

`test_two_writers_racing_one_expectation_never_both_win_while_the_leader_dies`
    Two writers, on two connections to different servers, race over ROOMS rooms of ONE R3
    stream "shard" (file storage, `allow_direct`, `max_msgs_per_subject` 1000, a two-minute
    duplicate window). A round is one room's turn: both writers publish to the room's subject
    with the SAME expectation (the seq the room's last round ended on), each with a Msg-Id of
    its own (room, round, writer and try: an id is never used twice) and a payload naming its
    writer, room, round, try and the predecessor it expected. Rounds of different rooms are in
    flight at once (pipelined across subjects), never two messages of one writer for one room.
    Outcomes: an ack (won); 10071 wrong last sequence (lost; the error names the room's last
    seq); 10164 (another proposal for the subject is in flight) or 10158 or a 503: refused, the
    round is tried again with a new id (a 503, no responders, is what a publish meets while
    the shard has no leader: only the leader subscribes to a stream's subjects, so there is
    no one to take it); a timeout, a lost connection or any other answer: the
    outcome is unknown, and is settled by reading the subject's last message from the leader
    (`$JS.API.STREAM.MSG.GET.shard` `last_by_subj`): the writer's own Msg-Id there means it
    won at that seq; the expected seq still there means nothing landed (try again); anything
    else means it lost. Meanwhile a thread SIGKILLs the stream's current leader (found with
    `$JS.API.STREAM.INFO.shard` `cluster.leader`) KILLS times under load; the 1st, 3rd, …
    killed server is restarted at once, the 2nd, 4th, … only after the other two elected a
    leader; the next kill waits until all three are back and current.

    Then it asserts: no round in which both writers won (neither by two acks, nor by any mix
    of acks and reads); every win found at its seq (`MSG.GET` {"seq": N}: subject, Msg-Id and
    payload); every room's chain whole (its messages in seq order each expected the previous
    one's seq, the first expected 0); no round stored twice, no stored message that no writer
    won, no hole in the sequence; and the replicas equal, compared two ways:
      * each server's own state of its replica (`/jsz?accounts=true&streams=true` reports
        `stream.state()` of the local store): messages, bytes, first/last seq and time,
        subjects, deleted — equal on all three;
      * each replica's content, message by message: batched direct gets
        (`$JS.API.DIRECT.GET.shard`, served by every replica through one queue group, so a
        client cannot choose which replica answers), each sent with a `Nats-Trace-Dest`
        header: the trace events name the server that took the request from the client and,
        when it passed it on, the route it passed it to; the replica that answered is the
        last server on that path (a server's own JetStream subscription shows as no egress
        at all, a forward as an egress of kind ROUTER naming the peer). Requests go on until
        every server has answered every range of sequences itself (a follower joins the
        direct-get group up to ~2 s after it is current: 2.15.1 checks on a 2 s tick); the
        three copies (subject, seq, timestamp, headers, payload) must be identical, and equal
        to the leader's.

`test_a_msg_id_reused_by_another_room_is_acked_as_the_first_rooms_message`
    Settles the earlier probe's 431 "acks not found at their place" (constant across runs):
    Msg-Ids deduplicate per STREAM. An id used again by another room's publish within the
    duplicate window is answered {"seq": <the first message's seq>, "duplicate": true} — with
    or without an expectation, even a wrong one — and nothing is stored for the second room.
    A probe whose ids were, say, writer and round, collided across rooms the same way every
    run. tabd must put the room into its ids.

TABD_SHARD_CAS_ROUNDS (default 2,000) and TABD_SHARD_CAS_KILLS (default 3) size the race;
`make test-long` runs more. Its figures are printed (pytest -s) and kept in
test-output/shard-cas/summary.json (and appended to runs.jsonl there).
"""
import base64
import bisect
import heapq
import json
import math
import os
import select
import signal
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natsproto import Nats, NatsError  # noqa: E402
from test_engine import cluster, shared_cluster  # noqa: E402,F401  (three synced servers, healed before each test)

ROUNDS = int(os.environ.get("TABD_SHARD_CAS_ROUNDS", "2000"))
KILLS = int(os.environ.get("TABD_SHARD_CAS_KILLS", "3"))
ROOMS = max(50, math.ceil(ROUNDS / 500))   # at most 500 messages a room: under max_msgs_per_subject
STREAM = "shard"
SHARD = "7"
MAX_PER_SUBJECT = 1000
DUPLICATE_WINDOW_NS = 120 * 10**9

PUB_TIMEOUT = 3.0      # seconds without an ack: the publish's outcome is unknown
READ_TIMEOUT = 2.0     # seconds one read of a subject's last message may take
READ_RETRY = 0.1       # seconds before a read that failed (no leader yet) is sent again
RECONNECT_RETRY = 0.1  # seconds between two rounds of connection attempts
STALL_LIMIT = 60.0     # seconds without a finished round: the test fails
RECOVER_WAIT = 90.0    # seconds a killed leader may take to be back, restarted and current
SETTLE_WAIT = 60.0     # seconds the replicas may take to agree at the end
STALL_WINDOW = 30.0    # seconds after a kill in which its stall is measured
DIRECT_GET_WAIT = 30.0  # seconds every replica may take to answer a range of direct gets itself

WRONG_LAST_SEQUENCE = 10071   # "wrong last sequence: N"
SUBJECT_IN_FLIGHT = 10164     # "wrong last sequence" (another proposal for the subject in flight)
ID_IN_FLIGHT = 10158          # "duplicate message id is in process"
NO_MESSAGE = 10037            # "no message found"
ROUTER = 1                    # a route connection's kind in trace events (CLIENT is 0)


def subject_of(room):
    return f"tabd.r.{SHARD}.room{room:03d}"


def msg_id(room, round_, writer, try_):
    """Unique in the stream: the room, the round, the writer and the try are all in it."""
    return f"{STREAM}{SHARD}-room{room:03d}-k{round_}-w{writer}-t{try_}"


def hpub(subject, reply, headers, data):
    head = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
    return f"HPUB {subject} {reply} {len(head)} {len(head) + len(data)}\r\n".encode() + head + data + b"\r\n"


def parse_headers(raw):
    """The headers of a message as MSG.GET gives them (base64 of "NATS/1.0\\r\\nK: V…")."""
    out = {}
    if raw:
        for line in base64.b64decode(raw).decode().split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                out[k.strip()] = v.strip()
    return out


def create_shard(cluster, name, subjects):
    """Creates an R3 shard stream and waits until every server answers INFO with its leader."""
    config = {"name": name, "subjects": subjects, "num_replicas": 3, "storage": "file",
              "allow_direct": True, "max_msgs_per_subject": MAX_PER_SUBJECT,
              "duplicate_window": DUPLICATE_WINDOW_NS}
    with Nats(cluster.urls[0]) as nc:
        created = nc.js(f"STREAM.CREATE.{name}", config)
    deadline = time.monotonic() + 20
    for url in cluster.urls:
        with Nats(url) as nc:
            while not (nc.js(f"STREAM.INFO.{name}").get("cluster") or {}).get("leader"):
                assert time.monotonic() < deadline, f"stream {name} has no leader"
                time.sleep(0.05)
    return created


def any_connection(cluster):
    """A connection to the first running server that accepts one."""
    for i in range(cluster.size):
        if cluster.alive(i):
            try:
                return Nats(cluster.urls[i], timeout=5)
            except (OSError, NatsError):
                continue
    raise ConnectionError("no server accepts a connection")


# --- the race -----------------------------------------------------------------------------

class Link:
    """One writer's connection, read without blocking: replies come back on `{inbox}.{n}`."""

    def __init__(self, writer, home):
        self.writer, self.home = writer, home
        self.nc = None
        self.server = None
        self.pending = {}        # reply subject -> Op
        self.next_try = 0.0      # monotonic time of the next connection attempt
        self.connects = 0

    def reply(self):
        self.nc.n += 1
        return f"{self.nc.inbox}.{self.nc.n}"

    def fill(self):
        chunk = self.nc.sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("nats-server closed the connection")
        self.nc.buf += chunk

    def take(self):
        """Every whole message in the buffer (a partial one stays); answers PINGs."""
        nc, out = self.nc, []
        while True:
            i = nc.buf.find(b"\r\n")
            if i < 0:
                return out
            line = nc.buf[:i]
            op = line.split(b" ", 1)[0].upper()
            if op in (b"MSG", b"HMSG"):
                if len(nc.buf) < i + 2 + int(line.split()[-1]) + 2:
                    return out
                out.append(nc._next(time.monotonic() + 1))   # all of it is buffered: no wait
                continue
            nc.buf = nc.buf[i + 2:]
            if op == b"PING":
                nc._send(b"PONG\r\n")
            elif op == b"-ERR":
                raise NatsError(line.decode())


class Op:
    """What one writer is doing for one room: a publish or a read in flight, or a wait."""
    __slots__ = ("kind", "room", "reply", "deadline", "then")

    def __init__(self, kind, room, deadline, reply=None, then=None):
        self.kind, self.room, self.deadline, self.reply, self.then = kind, room, deadline, reply, then


class Room:
    def __init__(self, i):
        self.i = i
        self.subject = subject_of(i)
        self.round = -1
        self.expect = 0               # the seq the writers expect as the subject's last
        self.done = 0
        self.new_round()

    def new_round(self):
        self.round += 1
        self.outcome = [None, None]   # ("won", seq, id, how) or ("lost", last)
        self.ids = [[], []]           # the ids each writer sent in this round, in order
        self.unknown = [False, False]  # a try of this round had an unknown outcome
        self.in_flight_refusals = 0   # 10164s in this round: both writers' proposals at once


class Race:
    """Two writers racing round after round over `rooms` rooms; one thread, select() over the
    two connections. `limit` (set by the Killer) holds new rounds back at a kill's threshold
    until the killer is ready for it."""

    def __init__(self, cluster, rooms, rounds):
        self.cluster = cluster
        self.rooms = [Room(i) for i in range(rooms)]
        self.per_room = math.ceil(rounds / rooms)
        self.total = self.per_room * rooms
        self.links = [Link(0, 0), Link(1, 1)]
        self.ops = [[None] * rooms for _ in range(2)]
        self.timers = []                # heap of (deadline, serial, writer, op)
        self.serial = 0
        self.limit = math.inf
        self.completed = 0
        self.held = []                  # rooms whose next round waits for `limit`
        self.sent = {}                  # msg id -> (room, round, writer, try, expect, payload)
        self.wins = []                  # (id, seq, room, round, writer, expect, how)
        self.win_times = []             # monotonic time of each win, in order
        self.counts = {k: 0 for k in ("published", "acks", "read_wins", "refused_10071", "refused_10164",
                                      "refused_10158", "no_responders", "other_errors", "duplicate_acks",
                                      "timeouts", "reads", "read_failures", "connections_lost",
                                      "double_acks", "double_wins", "rounds_without_winner",
                                      "loser_saw_other_seq", "late_landings", "contended_rounds")}
        self.other_errors = {}
        self.max_tries = 0
        self.stopped = False
        self.last_progress = time.monotonic()

    # --- connections ----------------------------------------------------------------------

    def connect(self, link, now):
        other = self.links[1 - link.writer].server
        order = [link.home] + [i for i in range(self.cluster.size) if i != link.home and i != other] + \
                ([other] if other is not None and other != link.home else [])
        for i in order:
            if not self.cluster.alive(i):
                continue
            try:
                link.nc = Nats(self.cluster.urls[i], timeout=2)
            except (OSError, NatsError, TimeoutError):
                continue
            link.nc.sock.settimeout(5)
            link.server = i
            link.connects += 1
            return True
        link.next_try = now + RECONNECT_RETRY
        return False

    def lose(self, link, now):
        """The connection broke: every publish on it has an unknown outcome (read it back),
        every read on it is sent again, on the next connection."""
        self.counts["connections_lost"] += 1
        try:
            link.nc.close()
        except OSError:
            pass
        link.nc, link.server = None, None
        for op in link.pending.values():
            w = link.writer
            if self.ops[w][op.room] is op:
                if op.kind == "pub":
                    self.rooms[op.room].unknown[w] = True
                self.wait(w, op.room, now, "read")
        link.pending.clear()

    def send(self, w, data, op, now):
        link = self.links[w]
        link.pending[op.reply] = op
        try:
            link.nc._send(data)
        except OSError:
            self.lose(link, now)

    # --- operations -----------------------------------------------------------------------

    def schedule(self, w, op):
        self.ops[w][op.room] = op
        self.serial += 1
        heapq.heappush(self.timers, (op.deadline, self.serial, w, op))

    def wait(self, w, r, now, then, delay=0.0):
        self.schedule(w, Op("wait", r, now + delay, then=then))

    def publish(self, w, room, now):
        link = self.links[w]
        if link.nc is None:
            self.wait(w, room.i, now, "pub", RECONNECT_RETRY)
            return
        t = len(room.ids[w])
        self.max_tries = max(self.max_tries, t + 1)
        mid = msg_id(room.i, room.round, w, t)
        room.ids[w].append(mid)
        payload = json.dumps({"writer": w, "room": room.i, "round": room.round, "try": t,
                              "expect": room.expect}).encode()
        self.sent[mid] = (room.i, room.round, w, t, room.expect, payload)
        op = Op("pub", room.i, now + PUB_TIMEOUT, reply=link.reply())
        self.schedule(w, op)
        self.counts["published"] += 1
        self.send(w, hpub(room.subject, op.reply, {"Nats-Msg-Id": mid,
                                                   "Nats-Expected-Last-Subject-Sequence": str(room.expect)},
                          payload), op, now)

    def read(self, w, room, now):
        """Reads the subject's last message from the leader to settle an unknown outcome."""
        link = self.links[w]
        if link.nc is None:
            self.wait(w, room.i, now, "read", RECONNECT_RETRY)
            return
        room.unknown[w] = True
        op = Op("read", room.i, now + READ_TIMEOUT, reply=link.reply())
        self.schedule(w, op)
        self.counts["reads"] += 1
        body = json.dumps({"last_by_subj": room.subject}).encode()
        self.send(w, f"PUB $JS.API.STREAM.MSG.GET.{STREAM} {op.reply} {len(body)}\r\n".encode() + body + b"\r\n",
                  op, now)

    def start(self, room, now):
        room.new_round()
        for w in ((0, 1) if room.round % 2 == 0 else (1, 0)):   # both at once; who goes first alternates
            self.publish(w, room, now)

    # --- outcomes -------------------------------------------------------------------------

    def won(self, w, room, seq, mid, how, now):
        if mid != room.ids[w][-1]:
            self.counts["late_landings"] += 1    # an earlier try landed after a read had not found it
        room.outcome[w] = ("won", seq, mid, how)
        self.counts["acks" if how == "ack" else "read_wins"] += 1
        self.wins.append((mid, seq, room.i, room.round, w, room.expect, how))
        self.win_times.append(now)
        self.ops[w][room.i] = None
        self.finish(room, now)

    def lost(self, w, room, last, now):
        room.outcome[w] = ("lost", last)
        self.ops[w][room.i] = None
        self.finish(room, now)

    def finish(self, room, now):
        if None in room.outcome:
            return
        winners = [o for o in room.outcome if o[0] == "won"]
        if len(winners) == 2:
            self.counts["double_wins"] += 1
            if all(o[3] == "ack" for o in winners):
                self.counts["double_acks"] += 1
            room.expect = max(o[1] for o in winners)
        elif len(winners) == 1:
            seq = winners[0][1]
            if any(o[0] == "lost" and o[1] != seq for o in room.outcome):
                self.counts["loser_saw_other_seq"] += 1
            room.expect = seq
        else:
            self.counts["rounds_without_winner"] += 1
            room.expect = max(o[1] for o in room.outcome)
        if room.in_flight_refusals:
            self.counts["contended_rounds"] += 1
        room.done += 1
        self.completed += 1
        self.last_progress = now
        if room.done < self.per_room:
            if self.completed < self.limit:
                self.start(room, now)
            else:
                self.held.append(room)

    def on_reply(self, link, m, now):
        op = link.pending.pop(m.subject, None)
        w = link.writer
        if op is None or self.ops[w][op.room] is not op:
            return
        room = self.rooms[op.room]
        if op.kind == "pub":
            if m.status:                    # 503: no stream took it
                self.counts["no_responders"] += 1
                self.wait(w, room.i, now, "pub", READ_RETRY)
                return
            ack = m.json()
            err = ack.get("error")
            if err is None:
                if ack.get("duplicate"):    # ids are never reused: not expected; settle by reading
                    self.counts["duplicate_acks"] += 1
                    self.read(w, room, now)
                else:
                    self.won(w, room, ack["seq"], room.ids[w][-1], "ack", now)
            elif err.get("err_code") == WRONG_LAST_SEQUENCE:
                self.counts["refused_10071"] += 1
                if room.unknown[w]:         # an earlier try may have landed after all: look
                    self.read(w, room, now)
                else:
                    self.lost(w, room, int(err["description"].rsplit(":", 1)[1]), now)
            elif err.get("err_code") in (SUBJECT_IN_FLIGHT, ID_IN_FLIGHT):
                self.counts["refused_10164" if err["err_code"] == SUBJECT_IN_FLIGHT else "refused_10158"] += 1
                room.in_flight_refusals += 1
                self.publish(w, room, now)
            else:
                self.counts["other_errors"] += 1
                key = f"{err.get('err_code')} {err.get('description')}"
                self.other_errors[key] = self.other_errors.get(key, 0) + 1
                self.read(w, room, now)
        else:
            reply = None if m.status else m.json()
            err = (reply or {}).get("error")
            if reply is None or (err and err.get("err_code") != NO_MESSAGE):
                self.counts["read_failures"] += 1      # no leader yet: ask again
                self.wait(w, room.i, now, "read", READ_RETRY)
                return
            if err:
                last_seq, last_id = 0, None
            else:
                last_seq = reply["message"]["seq"]
                last_id = parse_headers(reply["message"].get("hdrs")).get("Nats-Msg-Id")
            if last_id in room.ids[w]:
                self.won(w, room, last_seq, last_id, "read", now)
            elif last_seq == room.expect:
                self.publish(w, room, now)    # nothing of this round landed: try again
            else:
                self.lost(w, room, last_seq, now)

    def expire(self, w, op, now):
        room = self.rooms[op.room]
        if op.kind == "wait":
            (self.publish if op.then == "pub" else self.read)(w, room, now)
            return
        self.links[w].pending.pop(op.reply, None)
        if op.kind == "pub":
            self.counts["timeouts"] += 1
        else:
            self.counts["read_failures"] += 1
        self.read(w, room, now)

    # --- the loop -------------------------------------------------------------------------

    def run(self):
        now = time.monotonic()
        for link in self.links:
            assert self.connect(link, now), "no server takes the writers' connections"
        for room in self.rooms:
            self.start(room, now)
        while self.completed < self.total:
            now = time.monotonic()
            assert not self.stopped, "the race was stopped"
            for link in self.links:
                if link.nc is None and now >= link.next_try:
                    self.connect(link, now)
            if self.held and self.completed < self.limit:
                held, self.held = self.held, []
                for room in held:
                    self.start(room, now)
            elif self.held and not any(any(ops) for ops in self.ops):
                self.last_progress = now    # held by the killer, which has a bound of its own
            while self.timers and self.timers[0][0] <= now:
                _, _, w, op = heapq.heappop(self.timers)
                if self.ops[w][op.room] is op:
                    self.expire(w, op, now)
            live = [link for link in self.links if link.nc is not None]
            # What take() left in a buffer is a partial message: select() waits for the rest.
            timeout = 0.05 if not self.timers else min(0.05, max(0.0, self.timers[0][0] - now))
            readable, _, _ = select.select([link.nc.sock for link in live], [], [], timeout)
            now = time.monotonic()
            for link in live:
                if link.nc is None:     # lost meanwhile: a round started by the other link published on it
                    continue
                try:
                    if link.nc.sock in readable:
                        link.fill()
                    for m in link.take():
                        self.on_reply(link, m, now)
                        if link.nc is None:
                            break
                except (OSError, ConnectionError, NatsError, TimeoutError):
                    if link.nc is not None:
                        self.lose(link, now)
            if now - self.last_progress > STALL_LIMIT:
                busy = {(w, r): op.kind for w in range(2) for r, op in enumerate(self.ops[w]) if op}
                raise AssertionError(f"no round finished for {STALL_LIMIT:.0f} s: {self.completed}/{self.total} done, "
                                     f"limit {self.limit}, servers alive {[self.cluster.alive(i) for i in range(3)]}, "
                                     f"links on {[l.server for l in self.links]}, {len(busy)} ops {list(busy.items())[:6]}, "
                                     f"counts {self.counts}")
        for link in self.links:
            if link.nc is not None:
                link.nc.close()


# --- the leader killer ---------------------------------------------------------------------

class Killer(threading.Thread):
    """Kills the shard's leader `kills` times, the j-th once `thresholds[j]` + `under_load`
    rounds are done; holds the race at each threshold until the previous kill is healed (the
    server back and every replica current), so that every kill finds the race running."""

    def __init__(self, cluster, race, kills, under_load):
        super().__init__(daemon=True)
        self.cluster, self.race, self.count = cluster, race, kills
        self.thresholds = [race.total * (j + 1) // (kills + 1) for j in range(kills)]
        self.under_load = under_load
        self.kills = []        # one dict per kill (see run)
        self.error = None
        race.limit = self.thresholds[0] if kills else math.inf

    def stream_info(self):
        with any_connection(self.cluster) as nc:
            return nc.js(f"STREAM.INFO.{STREAM}", wait=5)

    def healed(self):
        """Waits until every server runs and the stream has a leader with both followers
        current; the leader's name."""
        deadline = time.monotonic() + RECOVER_WAIT
        while True:
            try:
                if all(self.cluster.alive(i) for i in range(self.cluster.size)):
                    c = self.stream_info().get("cluster") or {}
                    if c.get("leader") and len(c.get("replicas") or []) == 2 and all(r.get("current") for r in c["replicas"]):
                        if self.kills:
                            self.kills[-1]["leader_after"] = c["leader"]
                        return c["leader"]
            except (OSError, NatsError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the shard did not heal within {RECOVER_WAIT:.0f} s")
            time.sleep(0.1)

    def run(self):
        try:
            for j in range(self.count):
                self.healed()
                # The race may go on a little past the kill's point, not to the next one, until
                # the kill is done: so that it finds the race running.
                kill_at = self.thresholds[j] + self.under_load
                self.race.limit = min(kill_at + 4 * len(self.race.rooms), self.race.total)
                while self.race.completed < kill_at:
                    if self.race.stopped:
                        return
                    time.sleep(0.005)
                name = (self.stream_info().get("cluster") or {}).get("leader")
                leader = self.cluster.index_of(name)
                assert leader is not None, f"no stream leader to kill: {name!r}"
                self.kills.append({"killed": name, "at": time.monotonic(),
                                   "restart": "after the others elected a leader" if j % 2 else "at once",
                                   "in_flight": sum(len(link.pending) for link in self.race.links)})
                self.cluster.kill(leader, signal.SIGKILL)
                self.race.limit = self.thresholds[j + 1] if j + 1 < self.count else math.inf
                if j % 2 == 1:        # let the other two elect a leader first
                    deadline = time.monotonic() + RECOVER_WAIT
                    while True:
                        try:
                            now_leader = (self.stream_info().get("cluster") or {}).get("leader")
                        except (OSError, NatsError, TimeoutError):
                            now_leader = None
                        if now_leader and now_leader != name:
                            break
                        assert time.monotonic() < deadline, f"no new leader after {name} was killed"
                        time.sleep(0.05)
                self.cluster.restart(leader)
            self.healed()
        except BaseException as e:   # reported by the test
            self.error = e
            self.race.limit = math.inf


# --- reading the stream back -----------------------------------------------------------------

def read_all(nc, last_seq, window=256):
    """Every message of the shard by seq through the leader (`MSG.GET` {"seq": N}, pipelined):
    {seq: (subject, headers, payload)}; seqs without a message are left out."""
    out = {}
    seqs = list(range(1, last_seq + 1))
    for start in range(0, len(seqs), window):
        batch = seqs[start:start + window]
        replies = {}
        for seq in batch:
            nc.n += 1
            reply = f"{nc.inbox}.{nc.n}"
            replies[reply] = seq
            body = json.dumps({"seq": seq}).encode()
            nc._send(f"PUB $JS.API.STREAM.MSG.GET.{STREAM} {reply} {len(body)}\r\n".encode() + body + b"\r\n")
        deadline = time.monotonic() + 30
        got = {}
        while len(got) < len(batch):
            m = nc._next(deadline)
            if m.subject in replies:
                got[replies[m.subject]] = m
        for seq, m in got.items():
            assert not m.status, f"MSG.GET {seq}: status {m.status}"
            reply = m.json()
            if "error" in reply:
                assert reply["error"]["err_code"] == NO_MESSAGE, reply
                continue
            msg = reply["message"]
            out[seq] = (msg["subject"], parse_headers(msg.get("hdrs")), base64.b64decode(msg.get("data") or ""))
    return out


def replica_states(cluster):
    """Each server's own state of its replica of the shard (/jsz: the local store's state)."""
    states = []
    for i in range(cluster.size):
        data = cluster.monitor(i, "/jsz?accounts=true&streams=true") or {}
        found = None
        for account in data.get("account_details") or []:
            for s in account.get("stream_detail") or []:
                if s.get("name") == STREAM:
                    st = s["state"]
                    found = {k: st.get(k, 0) for k in ("messages", "bytes", "first_seq", "first_ts", "last_seq",
                                                       "last_ts", "num_subjects", "num_deleted")}
        states.append(found)
    return states


def traced_direct_get(nc, trace_prefix, start, batch, names, deadline_s=15):
    """One batched direct get, traced: (index of the server whose replica answered,
    {seq: (subject, timestamp, headers, payload)})."""
    nc.n += 1
    reply, trace = f"{nc.inbox}.{nc.n}", f"{trace_prefix}.{nc.n}"
    body = json.dumps({"seq": start, "batch": batch}).encode()
    nc._send(hpub(f"$JS.API.DIRECT.GET.{STREAM}", reply, {"Nats-Trace-Dest": trace}, body))
    deadline = time.monotonic() + deadline_s
    msgs, events, ended = {}, {}, False

    def path():
        """The servers the request went through, from the client to the replica; None while
        a trace event on the way is still missing."""
        entry = [e for e in events.values() if e["events"][0].get("kind") == 0]
        if not entry:
            return None
        at, seen = entry[0], []
        while True:
            seen.append(at["server"]["name"])
            forwards = [e for e in at["events"] if e.get("type") == "eg" and e.get("kind") == ROUTER]
            assert len(forwards) <= 1, f"a direct get forwarded twice: {at}"
            if not forwards:
                return seen
            nxt = forwards[0].get("name")
            if nxt not in events:
                return None
            at = events[nxt]

    while not (ended and path() is not None):
        m = nc._next(deadline)
        if m.subject == trace:
            ev = m.json()
            events[ev["server"]["name"]] = ev
        elif m.subject == reply:
            if m.status in ("204", "404"):
                ended = True
            else:
                assert not m.status, f"direct get from {start}: status {m.status}"
                h = m.headers
                seq = int(h["Nats-Sequence"])
                own = {k: v for k, v in h.items() if not k.startswith(("Nats-Stream", "Nats-Subject", "Nats-Sequence",
                                                                       "Nats-Time-Stamp", "Nats-Num-Pending",
                                                                       "Nats-Last-Sequence"))}
                msgs[seq] = (h["Nats-Subject"], h["Nats-Time-Stamp"], tuple(sorted(own.items())), m.data)
    route = path()
    return names.index(route[-1]), msgs, route


def replica_contents(cluster, last_seq, chunk=500):
    """Every replica's whole content, each range of seqs answered by that replica itself
    (see the module's docstring): ({server: {seq: record}}, {"entry>answerer": requests}).

    A follower joins the direct-get queue group on its own clock: 2.15.1 checks every 2 s,
    after a leader change, whether it is (90%) caught up; a replica just restarted, or a new
    stream's followers, answer no direct get for a few seconds. So each range is asked for
    again until every replica has answered it, within DIRECT_GET_WAIT."""
    ranges = list(range(1, last_seq + 1, chunk))
    need = {(i, r) for i in range(cluster.size) for r in ranges}
    got = {i: {} for i in range(cluster.size)}
    conns = [Nats(url) for url in cluster.urls]
    prefix = f"_TRACE.shardcas.{os.getpid()}"
    paths = {}
    try:
        for i, nc in enumerate(conns):
            nc.sub(f"{prefix}.{i}.>")
        # First, cheaply: until each replica has answered a one-message get itself.
        serving, tries, deadline = set(), 0, time.monotonic() + DIRECT_GET_WAIT
        while len(serving) < cluster.size:
            tries += 1
            assert time.monotonic() < deadline, f"replicas answering direct gets: {sorted(serving)} after {tries} tries"
            entry = tries % cluster.size
            serving.add(traced_direct_get(conns[entry], f"{prefix}.{entry}", 1, 1, cluster.names)[0])
            time.sleep(0.02)     # a poll: a follower joins on a 2 s tick
        for r in ranges:
            tries, deadline = 0, time.monotonic() + DIRECT_GET_WAIT
            while any((i, r) in need for i in range(cluster.size)):
                tries += 1
                assert time.monotonic() < deadline, \
                    f"seqs {r}…: {tries} direct gets in {DIRECT_GET_WAIT:.0f} s, not answered by every replica: " \
                    f"{sorted(need)} {paths}"
                entry = tries % cluster.size
                answerer, msgs, route = traced_direct_get(conns[entry], f"{prefix}.{entry}", r, chunk, cluster.names)
                key = f"{route[0]}>{route[-1]}"
                paths[key] = paths.get(key, 0) + 1
                assert route[0] == cluster.names[entry], f"asked through {cluster.names[entry]}, traced {route}"
                if (answerer, r) in need:
                    need.discard((answerer, r))
                    got[answerer].update(msgs)
    finally:
        for nc in conns:
            nc.close()
    return got, paths


# --- the tests ------------------------------------------------------------------------------

def test_two_writers_racing_one_expectation_never_both_win_while_the_leader_dies(cluster):
    began = time.monotonic()
    create_shard(cluster, STREAM, [f"tabd.r.{SHARD}.*"])
    race = Race(cluster, ROOMS, ROUNDS)
    segment = max(1, race.total // (KILLS + 1))   # rounds between two kills
    killer = Killer(cluster, race, KILLS, under_load=min(2 * ROOMS, segment // 4))
    killer.start()
    try:
        race.run()
    finally:
        race.stopped = True
        killer.join(RECOVER_WAIT * 3)
    raced = time.monotonic()
    assert not killer.is_alive(), "the killer did not finish"
    assert killer.error is None, f"killing the leader went wrong: {killer.error!r}"
    assert len(killer.kills) == KILLS, killer.kills

    # Everything back, every replica current and agreeing on its state.
    for i in range(cluster.size):
        assert cluster.alive(i)
    deadline = time.monotonic() + SETTLE_WAIT
    with any_connection(cluster) as nc:
        while True:
            info = nc.js(f"STREAM.INFO.{STREAM}")
            states = replica_states(cluster)
            if (all(s is not None and s == states[0] for s in states) and states[0]["last_seq"] == info["state"]["last_seq"]
                    and all(r.get("current") for r in info["cluster"]["replicas"])):
                break
            assert time.monotonic() < deadline, f"replicas disagree after {SETTLE_WAIT:.0f} s: {states} vs {info['state']}"
            time.sleep(0.1)
        last_seq = info["state"]["last_seq"]
        stored = read_all(nc, last_seq)

    # Every win at its place.
    not_found = []
    for mid, seq, room, round_, w, expect, how in race.wins:
        at = stored.get(seq)
        if at is None or at[0] != subject_of(room) or at[1].get("Nats-Msg-Id") != mid or at[2] != race.sent[mid][5]:
            not_found.append((mid, seq, how, at and (at[0], at[1].get("Nats-Msg-Id"))))

    # Every room's chain whole; no round stored twice; nothing stored that nobody won.
    won_ids = {w[0] for w in race.wins}
    chains, per_round, unclaimed, foreign, header_mismatch = {}, {}, [], [], []
    for seq in sorted(stored):
        subject, headers, payload = stored[seq]
        mid = headers.get("Nats-Msg-Id")
        if mid not in race.sent:
            foreign.append((seq, subject, mid))
            continue
        room, round_, w, t, expect, sent_payload = race.sent[mid]
        if subject != subject_of(room) or payload != sent_payload:
            foreign.append((seq, subject, mid))   # an id of ours on another message
            continue
        if headers.get("Nats-Expected-Last-Subject-Sequence") != str(expect):
            header_mismatch.append((seq, mid, headers.get("Nats-Expected-Last-Subject-Sequence")))
        chains.setdefault(subject, []).append((seq, expect, mid))
        per_round[(room, round_)] = per_round.get((room, round_), 0) + 1
        if mid not in won_ids:
            unclaimed.append((seq, mid))
    broken = []
    for subject, chain in chains.items():
        previous = 0
        for seq, expect, mid in chain:
            if expect != previous:
                broken.append((subject, seq, mid, f"expected {expect}, follows {previous}"))
            previous = seq
    twice = sorted(k for k, n in per_round.items() if n > 1)
    holes = [seq for seq in range(1, last_seq + 1) if seq not in stored]

    # The replicas, message by message, each answering for itself.
    contents, direct_gets = replica_contents(cluster, last_seq)
    leader_view = {seq: (s, h.get("Nats-Msg-Id"), p) for seq, (s, h, p) in stored.items()}
    replica_diffs = {}
    for i, content in contents.items():
        view = {seq: (rec[0], dict(rec[2]).get("Nats-Msg-Id"), rec[3]) for seq, rec in content.items()}
        diff = sorted(seq for seq in set(view) | set(leader_view) if view.get(seq) != leader_view.get(seq))
        diff += sorted(seq for seq in set(content) | set(contents[0]) if content.get(seq) != contents[0].get(seq))
        replica_diffs[cluster.names[i]] = sorted(set(diff))
    states = replica_states(cluster)

    # A kill's stall: the longest time without a win from the last win before the SIGKILL to
    # STALL_WINDOW after it or the next kill (acks already on their way when the leader died
    # still arrive after it).
    stalls = []
    for k, kill in enumerate(killer.kills):
        end = min([kill["at"] + STALL_WINDOW] + [later["at"] for later in killer.kills[k + 1:k + 2]])
        lo = max(0, bisect.bisect_left(race.win_times, kill["at"]) - 1)
        hi = bisect.bisect_left(race.win_times, end)
        times = race.win_times[lo:hi]
        stalls.append(round(max((b - a for a, b in zip(times, times[1:])), default=0.0), 2))
    gaps = [b - a for a, b in zip(race.win_times, race.win_times[1:])]
    summary = {
        "server": cluster.version_text, "rounds": race.completed, "rooms": ROOMS, "kills": len(killer.kills),
        "killed": [{k: v for k, v in kill.items() if k != "at"} for kill in killer.kills],
        "double_acks": race.counts["double_acks"], "double_wins": race.counts["double_wins"],
        "acks_not_found_at_their_place": len(not_found), "chains_broken": len(broken),
        "rounds_stored_twice": len(twice), "stored_but_won_by_nobody": len(unclaimed),
        "foreign_messages": len(foreign), "expectation_header_mismatches": len(header_mismatch), "holes": len(holes), "messages": len(stored), "last_seq": last_seq,
        "stall_after_each_kill_s": stalls, "longest_stall_after_a_kill_s": max(stalls, default=None),
        "longest_gap_between_wins_s": round(max(gaps), 2) if gaps else None,
        "replica_states_equal": all(s == states[0] for s in states), "replica_state": states[0],
        "replica_content_diffs": {k: len(v) for k, v in replica_diffs.items()},
        "replica_direct_gets": direct_gets, "replica_direct_get_requests": sum(direct_gets.values()), "max_publishes_in_a_round": race.max_tries,
        "other_error_kinds": race.other_errors, **race.counts,
        "race_s": round(raced - began, 1), "wall_s": round(time.monotonic() - began, 1),
    }
    out = os.path.join(ROOT, "test-output", "shard-cas")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "runs.jsonl"), "a") as f:      # every run's figures, one a line
        f.write(json.dumps(dict(summary, when=time.strftime("%Y-%m-%dT%H:%M:%S"))) + "\n")
    print("\nshard CAS:", json.dumps(summary))

    assert race.counts["double_acks"] == 0 and race.counts["double_wins"] == 0, summary
    assert not not_found, (not_found[:10], summary)
    assert not broken, (broken[:10], summary)
    assert not twice and not unclaimed and not foreign and not holes and not header_mismatch, \
        (twice[:5], unclaimed[:5], foreign[:5], holes[:5], header_mismatch[:5], summary)
    assert race.counts["rounds_without_winner"] == 0 and race.counts["duplicate_acks"] == 0, summary
    assert len(race.wins) == race.completed == race.total, summary
    assert all(s == states[0] for s in states) and states[0]["messages"] == len(stored), (states, summary)
    assert all(len(contents[i]) == len(stored) for i in contents), ({i: len(c) for i, c in contents.items()}, summary)
    assert not any(replica_diffs.values()), ({k: v[:10] for k, v in replica_diffs.items()}, summary)
    # The writers really raced: both won rounds, and their proposals met in flight.
    assert {w[4] for w in race.wins} == {0, 1}, summary


def test_a_msg_id_reused_by_another_room_is_acked_as_the_first_rooms_message(cluster):
    name = "shardids"
    create_shard(cluster, name, ["tabd.r.8.*"])
    a, b, c = "tabd.r.8.a", "tabd.r.8.b", "tabd.r.8.c"

    def last_of(nc, subject):
        return nc.request(f"$JS.API.STREAM.MSG.GET.{name}", {"last_by_subj": subject}).json()

    with Nats(cluster.urls[1]) as nc:
        # Room a's first message; then rooms b and c with the same id, as a writer whose ids
        # leave the room out would send them ("k5-w0": round 5 of writer 0).
        first = nc.publish(a, b"room a", headers={"Nats-Msg-Id": "k5-w0", "Nats-Expected-Last-Subject-Sequence": "0"})
        assert first == {"stream": name, "seq": 1}
        as_new_room = nc.publish(b, b"room b", headers={"Nats-Msg-Id": "k5-w0", "Nats-Expected-Last-Subject-Sequence": "0"})
        plain = nc.publish(c, b"room c", headers={"Nats-Msg-Id": "k5-w0"})
        wrong_expectation = nc.publish(b, b"room b", headers={"Nats-Msg-Id": "k5-w0",
                                                              "Nats-Expected-Last-Subject-Sequence": "99"})
        # Each is "acked", at room a's seq, marked duplicate: the ack names a place that holds
        # another room's message (the probe's "ack not found at its place").
        for ack in (as_new_room, plain, wrong_expectation):
            assert ack == {"stream": name, "seq": 1, "duplicate": True}
        at = nc.js(f"STREAM.MSG.GET.{name}", {"seq": 1})["message"]
        assert at["subject"] == a and base64.b64decode(at["data"]) == b"room a"
        assert parse_headers(at["hdrs"])["Nats-Msg-Id"] == "k5-w0"
        # Nothing was stored for rooms b and c.
        for subject in (b, c):
            assert last_of(nc, subject)["error"]["err_code"] == NO_MESSAGE
        state = nc.js(f"STREAM.INFO.{name}")["state"]
        assert (state["messages"], state["last_seq"], state["num_subjects"]) == (1, 1, 1)

        # With the room in the id, each room's first message is its own.
        for k, subject in enumerate((b, c), start=2):
            ack = nc.publish(subject, f"room {subject[-1]}".encode(),
                             headers={"Nats-Msg-Id": f"{subject}:k5-w0", "Nats-Expected-Last-Subject-Sequence": "0"})
            assert ack == {"stream": name, "seq": k}
            assert last_of(nc, subject)["message"]["seq"] == k
        assert nc.js(f"STREAM.INFO.{name}")["state"]["messages"] == 3
