"""Presence in big rooms against one real tabd: a room past --presence-limit
stops listing each join and leave and counts its clients instead.

Checked: the switch (the first join that does not fit becomes `clientIdsReserved` and
`presenceCounted`, in one batch by tabd); counts coalesced to at most one report per
--presence-interval, ending at the real count; counted snapshots (`clients` [], the count
the stream last reported); the `clients` command and GET /api/rooms/ID/clients paging
through everyone exactly once, in join order, in both modes; a room that empties listed
again at once, its next id past the reserved block; resume across the switch and across
`presenceListed`; replay = sync in both modes (folded by web/model.js through replay.py);
view tokens asking for `clients`; a restart in a counted room; a room of at most 100
clients exactly as before; hostile `clients` commands.

Tests never sleep to let things settle: they wait, with a bound, for what they expect.
"""
import asyncio
import json
import random
import resource
import signal
import time

import pytest
import websockets

from conftest import WAIT, Client, kinds, strip_seq
from replay import frames_after, replay
from test_auth import KEY, claims, sign
from test_rooms import RANDOM_COMMANDS, call

# The snapshot's members before presence in big rooms, and now (in this order).
OLD_SNAPSHOT_KEYS = ["seq", "selected", "scrollToTop", "tabs", "clientCount", "clients"]
SNAPSHOT_KEYS = ["seq", "selected", "scrollToTop", "tabs", "presence", "clientCount", "clients"]
BLOCK = 1000  # client ids a counted room reserves at a time (Coordinator.idBlock)
REPLIES = ("ack", "error", "snapshot", "pong", "clients")
PER_CLIENT = ("clientJoined", "clientLeft")
# For a tabd of many clients: its stderr is a pipe nobody reads (conftest's Daemon), and a
# line per join and leave would fill it (64 KiB, some 250 clients) and block tabd.
QUIET = ("--log-level", "warn")
REPORTS = ("presenceCounted", "clientCount")


class Live(Client):
    """A client whose frames a task of its own reads as they come, each with the time it
    came (`times`, beside `frames`), so that a test can wait for what it expects while
    other clients act."""

    def start_reading(self):
        self.times = [time.monotonic()]  # the welcome's
        self.ended = False
        self._news = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    async def _read(self):
        try:
            async for text in self.ws:
                frame = json.loads(text)
                self.frames.append(frame)
                self.times.append(time.monotonic())
                if frame["type"] == "events":
                    self.batches.append(frame)
                self._news.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.ended = True
            self._news.set()

    async def until(self, predicate, what, timeout=WAIT):
        """Waits until `predicate()` is truthy (checked again at each frame); its value."""
        deadline = time.monotonic() + timeout
        while True:
            found = predicate()
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or self.ended:
                raise AssertionError(f"{self.welcome['client']}: {'ended' if self.ended else 'timed out'} waiting for "
                                     f"{what}; its last frames: {self.frames[-4:]}")
            self._news.clear()
            try:
                await asyncio.wait_for(self._news.wait(), left)
            except asyncio.TimeoutError:
                pass

    def events(self):
        return [e for b in self.batches for e in b["events"]]

    async def until_event(self, test, what):
        """The first event of the stream that passes `test`, once it came."""
        return await self.until(lambda: next((e for e in self.events() if test(e)), None), what)

    async def until_batch(self, test, what):
        return await self.until(lambda: next((b for b in self.batches if test(b)), None), what)

    async def until_seq(self, seq):
        await self.until(lambda: self.last_seq() >= seq, f"seq {seq}")

    async def command(self, type_, **fields):
        start = len(self.frames)
        ref = await self.send(type_, **fields)
        reply = await self.until(lambda: next((f for f in self.frames[start:] if f["type"] in REPLIES and f.get("ref") == ref),
                                              None), f"the answer to {type_}")
        own = [f for f in self.frames[start:] if f["type"] == "events" and f.get("ref") == ref and f["by"] == self.welcome["client"]]
        return (own[0] if own else None), reply

    async def close(self):
        await self.ws.close()
        await self._task


# MARK: Helpers

def number(client_id):
    assert client_id[0] == "c", client_id
    return int(client_id[1:])


def ident(c):
    return c.welcome["client"]


async def one(d, name, live=False, **params):
    """A client named `name` (`live`: read as frames come, see Live). Its frames are
    buffered without bound, so that one that reads nothing (most here) still closes at
    once: with the library's default of 16, it stops reading the socket and then waits
    out its close timeout for tabd's close frame."""
    query = "&".join(f"{k}={v}" for k, v in {"name": name, **params}.items())
    ws = await websockets.connect(f"{d.ws}?{query}", max_size=None, max_queue=None)
    c = (Live if live else Client)(ws)
    c.welcome = await c.recv()
    assert c.welcome["type"] == "welcome", c.welcome
    c.name = name
    if live:
        c.start_reading()
    return c


async def crowd(d, n, prefix, **params):
    """`n` clients that join together (one gather), named prefix0, prefix1, ..."""
    return list(await asyncio.gather(*(one(d, f"{prefix}{i}", **params) for i in range(n))))


async def close_all(clients):
    await asyncio.gather(*(c.close() for c in clients))


def who(clients):
    """[{"id","name"}] of welcomed clients in join order (client numbers increase)."""
    return sorted(({"id": ident(c), "name": c.name} for c in clients), key=lambda x: number(x["id"]))


def connected(d, room="main"):
    """How many clients GET /api/rooms says the room has (its live connections)."""
    status, body, _ = call(d, "GET", "/api/rooms")
    assert status == 200, body
    return {r["id"]: r["clients"] for r in body["rooms"]}.get(room, 0)


async def until_connected(d, n, room="main"):
    """Waits (bounded) until tabd took in the joins and leaves that bring the room to `n`
    (the count is stored once the presence batch is applied)."""
    deadline = time.monotonic() + WAIT
    while (now := connected(d, room)) != n:
        assert time.monotonic() < deadline, f"room {room} has {now} clients, not {n}"
        await asyncio.sleep(0.02)


def room_snapshot(d, room="main"):
    status, body, _ = call(d, "GET", f"/api/rooms/{room}")
    assert status == 200, body
    return body["snapshot"]


def events_of(batches):
    return [e for b in batches for e in b["events"]]


def counts_of(events):
    """The counts the stream reported, in order (presenceCounted and clientCount)."""
    return [e["count"] for e in events if e["kind"] in REPORTS]


def contiguous(batches, after):
    """The seqs of `batches` follow `after` with no gap and no repeat."""
    seqs = [e["seq"] for e in events_of(batches)]
    assert seqs == list(range(after + 1, after + 1 + len(seqs))), seqs


async def sync_and_fold(c, start, batches):
    """(a `sync` snapshot, the fold of `batches` into `start` up to that snapshot's seq).
    The frames before the sync's answer are exactly those up to its seq."""
    _, answer = await c.command("sync")
    assert answer["type"] == "snapshot", answer
    snap = answer["snapshot"]
    stream = [b for b in batches if b["events"][-1]["seq"] <= snap["seq"]]
    assert (stream[-1]["events"][-1]["seq"] if stream else start["seq"]) == snap["seq"], "the stream reaches the sync's seq"
    return snap, replay(frames_after(start, stream), start=start)


def check_page(page, limit):
    assert len(page["clients"]) <= limit, page
    assert all(list(c) == ["id", "name"] for c in page["clients"]), page
    if page["next"] is not None:  # its cursor: the last client's id
        assert page["clients"] and page["next"] == page["clients"][-1]["id"], page


async def pages_ws(c, limit, after=None):
    """Every client `clients` lists at `limit` a page, over the socket, after `after`."""
    out = []
    for _ in range(1000):
        _, page = await c.command("clients", limit=limit, **({"after": after} if after else {}))
        assert page["type"] == "clients" and list(page) == ["type", "ref", "clients", "next"], page
        check_page(page, limit)
        out += page["clients"]
        if page["next"] is None:
            return out
        after = page["next"]
    raise AssertionError("the pages never ended")


def pages_http(d, limit, after=None, room="main"):
    """The same over GET /api/rooms/ID/clients."""
    out = []
    for _ in range(1000):
        status, page, _ = call(d, "GET", f"/api/rooms/{room}/clients?limit={limit}" + (f"&after={after}" if after else ""))
        assert status == 200, page
        check_page(page, limit)
        out += page["clients"]
        if page["next"] is None:
            return out
        after = page["next"]
    raise AssertionError("the pages never ended")


def enough_files(n):
    """Raises this process's soft limit of open files to `n` (its sockets); skips when the
    hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        if hard < n:
            pytest.skip(f"{n} open files needed; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def http_error(d, path):
    status, body, _ = call(d, "GET", path)
    return status, body["code"]


# MARK: 1. The switch

async def test_the_join_past_the_limit_reserves_ids_and_counts_instead_of_listing(make_daemon):
    d = make_daemon("--presence-limit", "3", "--presence-interval", "100")
    w = await one(d, "watcher", live=True)
    assert w.welcome["snapshot"]["presence"] == "listed"
    assert w.welcome["snapshot"]["clients"] == [{"id": ident(w), "name": "watcher"}]
    listed = []
    for i in (1, 2):  # the joins up to 3 are listed, one by one
        c = await one(d, f"j{i}")
        listed.append(c)
        me = {"id": ident(c), "name": f"j{i}"}
        batch = await w.until_batch(lambda b: any(e.get("client") == me for e in b["events"]), f"the join of j{i}")
        assert batch["by"] == "tabd" and batch["ref"] is None and strip_seq(batch) == [{"kind": "clientJoined", "client": me}]
        snap = c.welcome["snapshot"]
        assert snap["presence"] == "listed" and snap["clientCount"] == i + 1 and snap["seq"] == batch["events"][0]["seq"]
        assert snap["clients"] == who([w, *listed])

    crosser = await one(d, "crosser")  # the 4th
    switch = await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    assert switch["by"] == "tabd" and switch["ref"] is None, switch
    assert strip_seq(switch) == [{"kind": "clientIdsReserved", "from": number(ident(crosser)), "count": BLOCK},
                                 {"kind": "presenceCounted", "count": 4}], switch
    assert [list(e) for e in switch["events"]] == [["seq", "kind", "from", "count"], ["seq", "kind", "count"]]
    reserved = switch["events"][0]
    assert reserved["from"] > max(number(ident(c)) for c in [w, *listed]), "the block lies past every id handed out"
    # The joiner's welcome: its own id (the block's first) and a counted snapshot.
    snap = crosser.welcome["snapshot"]
    assert ident(crosser) == f"c{reserved['from']}"
    assert list(snap) == SNAPSHOT_KEYS and snap["presence"] == "counted" and snap["clients"] == [] and snap["clientCount"] == 4
    assert snap["seq"] == switch["events"][-1]["seq"]
    # A later join takes the block's next id, and is only counted.
    late = await one(d, "late")
    assert number(ident(late)) == reserved["from"] + 1
    await w.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == 5, "clientCount 5")
    assert [e["client"]["id"] for e in w.events() if e["kind"] == "clientJoined"] == [ident(c) for c in listed], \
        "only the joins up to the limit are listed"
    everyone = [w, *listed, crosser, late]
    assert len({ident(c) for c in everyone}) == len(everyone), "every client's id is unique"
    _, page = await w.command("clients")
    assert page["clients"] == who(everyone) and page["next"] is None
    await close_all(everyone)


async def test_joins_that_cross_the_limit_together_list_those_that_fit_and_count_the_rest(make_daemon):
    d = make_daemon("--presence-limit", "3", "--presence-interval", "50")
    w = await one(d, "watcher", live=True)
    burst = await crowd(d, 10, "b")  # arriving together: one batch, or a few
    await w.until(lambda: counts_of(w.events())[-1:] == [11], "the count 11 reported")
    switch = next(b for b in w.batches if "presenceCounted" in kinds(b))
    before = [b for b in w.batches if b["events"][0]["seq"] < switch["events"][0]["seq"]]
    assert {k for b in before for k in kinds(b)} <= {"clientJoined"}
    listed_before = 1 + sum(kinds(b).count("clientJoined") for b in before)
    fit = kinds(switch).count("clientJoined")
    # The batch lists the joins that fit, then reserves ids and counts: all its joins.
    assert kinds(switch) == ["clientJoined"] * fit + ["clientIdsReserved", "presenceCounted"], kinds(switch)
    assert listed_before + fit == 3, "listed up to the limit"
    reserved, counted = switch["events"][-2], switch["events"][-1]
    assert reserved["count"] == BLOCK and 3 < counted["count"] <= 11, switch
    listed = [e["client"] for e in events_of(before) + switch["events"] if e["kind"] == "clientJoined"]
    assert sorted(listed, key=lambda c: number(c["id"])) == listed and len(listed) == 2
    ids = sorted(number(ident(c)) for c in burst)
    assert ids[:2] == [number(c["id"]) for c in listed], "the joins that fit, listed with their own ids"
    assert ids[2:] == list(range(reserved["from"], reserved["from"] + 8)), "the rest from the block, in order"
    assert all(kinds(b) == ["clientCount"] for b in w.batches[w.batches.index(switch) + 1:])
    await close_all([w, *burst])


async def test_a_counted_room_that_hands_out_its_block_reserves_the_next(make_daemon):
    enough_files(BLOCK + 200)
    d = make_daemon("--presence-limit", "2", "--presence-interval", "50", *QUIET)
    w = await one(d, "watcher", live=True)
    clients = [await one(d, "a1"), await one(d, "a2")]   # a2: the block c3..c1002
    switch = await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    first = switch["events"][0]
    for k in range(20):                                    # 999 more: the block is used up
        clients += await crowd(d, 50 if k < 19 else 49, f"m{k}-")
    assert sorted(number(ident(c)) for c in clients[1:]) == list(range(first["from"], first["from"] + BLOCK))
    assert not [e for e in w.events() if e["kind"] == "clientIdsReserved" and e is not first]
    more = await crowd(d, 3, "next")                       # the next block's first three
    nxt = await w.until_event(lambda e: e["kind"] == "clientIdsReserved" and e["from"] != first["from"], "another block")
    assert nxt["from"] == first["from"] + first["count"] and nxt["count"] == BLOCK, nxt
    assert sorted(number(ident(c)) for c in more) == [nxt["from"], nxt["from"] + 1, nxt["from"] + 2]
    batch = next(b for b in w.batches if nxt in b["events"])
    assert batch["by"] == "tabd" and {k for k in kinds(batch)} <= {"clientIdsReserved", "clientCount"}, batch
    live = 1 + len(clients) + len(more)
    await w.until(lambda: counts_of(w.events())[-1:] == [live], f"the count {live} reported")
    snap, folded = await sync_and_fold(w, w.welcome["snapshot"], w.batches)
    assert snap == folded and snap["clientCount"] == live
    assert not [e for e in events_of(w.batches[w.batches.index(switch):]) if e["kind"] in PER_CLIENT]
    await close_all([w, *clients, *more])


# MARK: 2. Coalescing

async def test_a_burst_in_a_counted_room_is_reported_at_most_once_per_interval_and_ends_at_the_real_count(make_daemon):
    interval = 0.3
    d = make_daemon("--presence-limit", "2", "--presence-interval", str(int(interval * 1000)), *QUIET)
    w = await one(d, "watcher", live=True)
    first = [await one(d, "a1"), await one(d, "a2")]      # the second crosses
    await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    burst = await crowd(d, 40, "b")                        # 40 at once,
    await close_all(burst[:15])                            # then 15 leave:
    stay = [w, *first, *burst[15:]]
    await w.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == len(stay), f"clientCount {len(stay)}")
    took = time.monotonic() - w.times[w.frames.index(next(b for b in w.batches if "presenceCounted" in kinds(b)))]
    assert len(counts_of(w.events())) <= 2 + took / interval, f"55 changes in {took:.2f} s: {counts_of(w.events())}"
    # Changes right after each report: the next report waits for the interval.
    late = []
    for k in range(3):
        reported = len(counts_of(w.events()))
        more = await crowd(d, 2, f"r{k}-")
        await more[0].close()
        stay.append(more[1])
        changed = time.monotonic()
        await w.until(lambda: len(counts_of(w.events())) > reported and counts_of(w.events())[-1] == len(stay),
                      f"clientCount {len(stay)}")
        came = next(t for f, t in zip(reversed(w.frames), reversed(w.times)) if f["type"] == "events" and "clientCount" in kinds(f))
        late.append(round(came - changed, 3))
    # ... and comes no later than an interval after the change (slack for a loaded machine).
    assert all(t <= 2 * interval for t in late), f"reports {late} s after their change"
    await until_connected(d, len(stay))
    _, answer = await w.command("sync")
    assert answer["snapshot"]["clientCount"] == len(stay) and answer["snapshot"]["presence"] == "counted"

    switch = next(i for i, b in enumerate(w.batches) if "presenceCounted" in kinds(b))
    assert counts_of(w.batches[switch]["events"]) == [3]
    after = w.batches[switch + 1:]
    assert all(b["by"] == "tabd" and b["ref"] is None and kinds(b) == ["clientCount"] for b in after), \
        f"a counted room has no per-client event: {[kinds(b) for b in after]}"
    assert all(list(e) == ["seq", "kind", "count"] for e in events_of(after))
    counts = counts_of(events_of(after))
    assert all(a != b for a, b in zip([3, *counts], counts)), f"a count is reported when it changed: {counts}"
    assert counts[-1] == len(stay) == connected(d), "the last report is the real count"
    # At most one report per interval: the times between reports (presenceCounted too).
    times = [t for f, t in zip(w.frames, w.times) if f["type"] == "events" and set(kinds(f)) & set(REPORTS)]
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:])]
    assert len(gaps) >= 4 and all(g >= 0.8 * interval for g in gaps), f"reports at least {interval} s apart: gaps {gaps}"
    _, page = await w.command("clients", limit=1000)
    assert page["clients"] == who(stay)
    assert w.batches[-1]["events"][-1]["count"] == len(stay), "nothing reported since"
    await close_all(stay)


# MARK: 3. Counted snapshots

async def test_counted_snapshots_list_nobody_and_show_the_count_the_stream_last_reported(make_daemon):
    # A count not yet due (an interval of an hour): the snapshots keep the stream's count.
    d = make_daemon("--presence-limit", "2", "--presence-interval", "3600000")
    w = await one(d, "watcher", live=True)
    others = [await one(d, "a1"), await one(d, "a2")]     # the second crosses: presenceCounted 3
    others += await crowd(d, 2, "late")                    # 5 connected, 3 reported
    await until_connected(d, 5)
    assert counts_of(w.events()) == [3]
    for late in others[2:]:
        snap = late.welcome["snapshot"]
        assert list(snap) == SNAPSHOT_KEYS and snap["presence"] == "counted" and snap["clients"] == [] \
            and snap["clientCount"] == 3, snap
    _, answer = await w.command("sync")
    snap = answer["snapshot"]
    assert list(snap) == SNAPSHOT_KEYS and snap["presence"] == "counted" and snap["clients"] == [], snap
    assert snap["clientCount"] == counts_of(w.events())[-1] == 3 and snap["seq"] == w.last_seq()
    assert room_snapshot(d) == snap, "GET /api/rooms/main shows the same counted snapshot"
    _, page = await w.command("clients")
    assert len(page["clients"]) == 5, "clients lists who is connected, whatever the count says"
    assert connected(d) == 5
    await close_all([w, *others])

    # Counts that come: the snapshots follow the stream's last report.
    d = make_daemon("--presence-limit", "2", "--presence-interval", "50")
    w = await one(d, "watcher", live=True)
    others = [await one(d, "a1"), await one(d, "a2")] + await crowd(d, 4, "late")
    await w.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == 7, "clientCount 7")
    await close_all(others[-3:])
    await w.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == 4, "clientCount 4")
    _, answer = await w.command("sync")
    snap = answer["snapshot"]
    assert snap["presence"] == "counted" and snap["clients"] == [] and snap["clientCount"] == counts_of(w.events())[-1] == 4
    api = room_snapshot(d)
    assert list(api) == SNAPSHOT_KEYS and api["presence"] == "counted" and api["clients"] == [] and api["clientCount"] == 4
    await close_all([w, *others[:-3]])


# MARK: 4. Paging

@pytest.mark.parametrize("mode, n", [("listed", 60), ("counted", 250)])
async def test_clients_pages_through_everyone_connected_once_in_join_order(make_daemon, mode, n):
    d = make_daemon(*QUIET)  # the default limit, 100: 60 clients are listed, 250 counted
    bursts = [await crowd(d, min(50, n - k), f"m{k}-") for k in range(0, n, 50)]
    clients = [c for b in bursts for c in b]
    assert all(max(map(number, map(ident, a))) < min(map(number, map(ident, b))) for a, b in zip(bursts, bursts[1:])), \
        "one burst after the other"
    pager = clients[0]
    everyone = who(clients)
    assert room_snapshot(d)["presence"] == mode
    for limit in (7, 1000):
        assert await pages_ws(pager, limit) == everyone, limit
        assert pages_http(d, limit) == everyone, limit
    _, page = await pager.command("clients")
    assert page["clients"] == everyone[:100] and page["next"] == (everyone[99]["id"] if n > 100 else None)

    # Some leave (every third, and the last): each one still connected is listed once.
    gone = clients[1:-1:3] + [clients[-1]]
    await close_all(gone)
    stay = [c for c in clients if c not in gone]
    await until_connected(d, len(stay))
    for limit in (7, 1000):
        assert await pages_ws(pager, limit) == who(stay), limit
        assert pages_http(d, limit) == who(stay), limit
    # A cursor of a client that left still works: the page starts after it.
    left = ident(gone[len(gone) // 2])
    rest = [c for c in who(stay) if number(c["id"]) > number(left)]
    _, page = await pager.command("clients", after=left, limit=5)
    assert page["clients"] == rest[:5] and page["next"] == rest[4]["id"], page
    assert await pages_ws(pager, 7, after=left) == rest
    assert pages_http(d, 1000, after=left) == rest
    # The end: after the last one connected (and past every id), nothing, and next null.
    for after in (who(stay)[-1]["id"], "c999999"):
        _, page = await pager.command("clients", after=after)
        assert page["clients"] == [] and page["next"] is None, page
    await close_all(stay)


async def test_clients_refuses_a_bad_limit_or_cursor_as_invalid(make_daemon):
    d = make_daemon("--presence-limit", "1")
    c = await one(d, "pager")
    for fields in ({"limit": 0}, {"limit": 1001}, {"after": "p1"}, {"limit": 0, "after": "c1"}):
        _, reply = await c.command("clients", **fields)
        assert reply["type"] == "error" and reply["code"] == "invalid" and reply["ref"], (fields, reply)
    for query in ("limit=0", "limit=1001", "limit=x", "after=p1", "after=p1&limit=5", "limit="):
        assert http_error(d, f"/api/rooms/main/clients?{query}") == (400, "invalid"), query
    # Refusals change nothing; the command still answers, in either mode.
    _, page = await c.command("clients", limit=1)
    assert page["clients"] == [{"id": ident(c), "name": "pager"}] and page["next"] is None
    other = await one(d, "other")  # the room counts from here on
    _, page = await c.command("clients", limit=1)
    assert page["clients"] == [{"id": ident(c), "name": "pager"}] and page["next"] == ident(c)
    _, page = await c.command("clients", limit=1, after=page["next"])
    assert page["clients"] == [{"id": ident(other), "name": "other"}] and page["next"] is None
    _, reply = await c.command("clients", limit=1001)
    assert reply["code"] == "invalid"
    await close_all([c, other])


# MARK: 5. Listed again

async def test_a_counted_room_that_empties_is_listed_again_at_once_and_its_next_id_is_past_the_block(make_daemon):
    interval = 5.0  # a report would be due long after the room emptied
    d = make_daemon("--presence-limit", "2", "--presence-interval", str(int(interval * 1000)))
    w = await one(d, "watcher", live=True)
    others = [await one(d, "a1"), await one(d, "a2"), await one(d, "a3")]  # a2 crosses; a3 is not reported yet
    switch = await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    reserved = switch["events"][0]
    assert reserved["kind"] == "clientIdsReserved"
    seen, epoch, before = w.last_seq(), w.welcome["epoch"], list(w.batches)
    handed_out = max(number(ident(c)) for c in [w, *others])
    began = time.monotonic()
    await close_all([w, *others])
    await until_connected(d, 0)
    # Once the last leave is taken in, the room is listed again: not an interval later.
    snap = room_snapshot(d)
    assert snap["presence"] == "listed" and snap["clients"] == [] and snap["clientCount"] == 0, snap
    assert time.monotonic() - began < interval, "listed before a report could have been due"

    # Nobody saw it live: a client that resumes from the watcher's last seq replays it.
    back = await one(d, "back", live=True, resume=seen, epoch=epoch)
    assert back.welcome["resumed"] is True and "snapshot" not in back.welcome
    me = {"id": ident(back), "name": "back"}
    await back.until_event(lambda e: e.get("client") == me, "its own join")
    assert all(b["by"] == "tabd" and b["ref"] is None for b in back.batches)
    assert [strip_seq(b) for b in back.batches] == [[{"kind": "presenceListed", "clients": []}],
                                                    [{"kind": "clientJoined", "client": me}]], back.batches
    assert list(back.batches[0]["events"][0]) == ["seq", "kind", "clients"]
    contiguous(back.batches, seen)
    assert number(ident(back)) >= reserved["from"] + reserved["count"] > handed_out, \
        "the next id is past every id handed out, the reserved block included"
    # The room is listed: the next join is a clientJoined, live.
    nxt = await one(d, "next")
    assert number(ident(nxt)) > number(ident(back))
    await back.until_event(lambda e: e.get("client") == {"id": ident(nxt), "name": "next"}, "the next join")
    snap, folded = await sync_and_fold(back, w.welcome["snapshot"], before + back.batches)
    assert snap == folded and snap["presence"] == "listed" and snap["clients"] == who([back, nxt])
    await close_all([back, nxt])


# MARK: 6. Resume across the switch

async def test_a_resume_across_the_switch_to_counted_replays_exactly_the_missed_batches(make_daemon):
    d = make_daemon("--presence-limit", "3", "--presence-interval", "50")
    w = await one(d, "watcher", live=True)           # sees everything: the reference stream
    r = await one(d, "r", live=True)
    _, ack = await r.command("push", route="before")
    await r.until_seq(ack["seq"])
    seen, start, before = r.last_seq(), r.welcome["snapshot"], list(r.batches)
    await r.close()
    await w.until_event(lambda e: e == {"seq": e["seq"], "kind": "clientLeft", "client": ident(r)}, "r's leave")
    others = [await one(d, "a1"), await one(d, "a2"), await one(d, "a3")]  # a3 is the 4th: counted
    await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    others.append(await one(d, "a4"))
    await w.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == 5, "clientCount 5")
    _, ack = await w.command("select", tab="profile")  # a command in the counted room

    back = await one(d, "r", live=True, resume=seen, epoch=r.welcome["epoch"])
    assert back.welcome["resumed"] is True and "snapshot" not in back.welcome
    _, mark = await w.command("tap", tab="favorites")  # a batch after the resume, for both
    await back.until_seq(mark["seq"])
    await w.until_seq(mark["seq"])
    missed = [b for b in w.batches if seen < b["events"][0]["seq"] <= mark["seq"]]
    assert [b for b in back.batches if b["events"][0]["seq"] <= mark["seq"]] == missed, \
        "the replay is exactly the batches it missed, then the live ones"
    contiguous(missed, seen)
    replayed = [e["kind"] for e in events_of(missed)]
    for kind in ("clientLeft", "clientJoined", "clientIdsReserved", "presenceCounted", "clientCount", "selected"):
        assert kind in replayed, (kind, replayed)
    snap, folded = await sync_and_fold(back, start, before + back.batches)
    assert snap == folded and snap["presence"] == "counted"
    await close_all([w, back, *others])


async def test_a_resume_across_presence_listed_replays_it_and_folds_to_the_sync(make_daemon):
    d = make_daemon("--presence-limit", "2", "--presence-interval", "50")
    w = await one(d, "watcher")
    a = await one(d, "a")
    r = await one(d, "r", live=True)                  # the 3rd: the room counts
    assert r.welcome["snapshot"]["presence"] == "counted"
    _, ack = await r.command("push", route="counted")
    seen, start, before = r.last_seq(), r.welcome["snapshot"], list(r.batches)
    assert seen == ack["seq"]
    await close_all([r, a, w])
    await until_connected(d, 0)                       # listed again, with nobody to see it
    n = await one(d, "n", live=True)                  # a listed join
    assert n.welcome["snapshot"]["presence"] == "listed" and n.welcome["snapshot"]["clients"] == who([n])

    back = await one(d, "r", live=True, resume=seen, epoch=r.welcome["epoch"])
    assert back.welcome["resumed"] is True
    me = {"id": ident(back), "name": "r"}
    await back.until_event(lambda e: e.get("client") == me, "its own join")
    contiguous(back.batches, seen)
    evs = events_of(back.batches)
    listed_at = [i for i, e in enumerate(evs) if e["kind"] == "presenceListed"]
    assert len(listed_at) == 1 and evs[listed_at[0]]["clients"] == [], evs
    assert {e["kind"] for e in evs[:listed_at[0]]} <= {"clientCount"}, "only counts before it"
    assert strip_seq({"events": evs[listed_at[0] + 1:]}) == [{"kind": "clientJoined", "client": {"id": ident(n), "name": "n"}},
                                                            {"kind": "clientJoined", "client": me}]
    # The client that joined after it saw the same batches from its welcome on.
    await n.until_event(lambda e: e.get("client") == me, "r's join")
    assert [b for b in back.batches if b["events"][0]["seq"] > n.welcome["snapshot"]["seq"]] == n.batches
    snap, folded = await sync_and_fold(back, start, before + back.batches)
    assert snap == folded and snap["presence"] == "listed" and snap["clients"] == who([n, back])
    await close_all([n, back])


# MARK: 7. Replay = sync

async def test_replay_equals_sync_in_a_listed_room(make_daemon):
    d = make_daemon()
    w = await one(d, "watcher")
    rnd = random.Random(23)
    clients = []
    for step in range(40):
        if step % 5 == 0 or not clients:
            clients += await crowd(d, rnd.randint(1, 4), f"s{step}-")
        elif step % 7 == 0:
            leaving = rnd.sample(clients, min(2, len(clients)))
            await close_all(leaving)
            clients = [c for c in clients if c not in leaving]
        else:
            type_, fields = rnd.choice(RANDOM_COMMANDS)(rnd)
            await rnd.choice(clients).command(type_, **fields)
    await until_connected(d, 1 + len(clients))
    snap, folded = await sync_and_fold(w, w.welcome["snapshot"], w.batches)
    assert snap["presence"] == "listed" and snap["clients"] == who([w, *clients])
    assert folded == snap
    assert {e["kind"] for e in events_of(w.batches)} >= {"clientJoined", "clientLeft"}
    await close_all([w, *clients])


async def test_replay_equals_sync_in_a_counted_room_with_churn(make_daemon):
    d = make_daemon("--presence-limit", "3", "--presence-interval", "30", *QUIET)
    w = await one(d, "watcher", live=True)
    rnd = random.Random(2323)
    clients = await crowd(d, 5, "first")  # past the limit from the start
    for step in range(60):
        roll = rnd.random()
        if roll < 0.3 or len(clients) < 2:
            clients += await crowd(d, rnd.randint(1, 5), f"s{step}-")
        elif roll < 0.5:
            leaving = rnd.sample(clients, rnd.randint(1, min(3, len(clients) - 1)))
            await close_all(leaving)
            clients = [c for c in clients if c not in leaving]
        else:
            type_, fields = rnd.choice(RANDOM_COMMANDS)(rnd)
            await rnd.choice(clients).command(type_, **fields)
        if step % 15 == 14:  # now and then, until the count is reported
            live = 1 + len(clients)
            await w.until(lambda: counts_of(w.events())[-1:] == [live], f"the count {live} reported")
    live = 1 + len(clients)
    await until_connected(d, live)
    await w.until(lambda: counts_of(w.events())[-1:] == [live], f"the count {live} reported")
    snap, folded = await sync_and_fold(w, w.welcome["snapshot"], w.batches)
    assert snap["presence"] == "counted" and snap["clientCount"] == live and snap["clients"] == []
    assert folded == snap
    evs = events_of(w.batches)
    switch = next(i for i, e in enumerate(evs) if e["kind"] == "presenceCounted")
    assert not [e for e in evs[switch:] if e["kind"] in PER_CLIENT], "no per-client event once counted"
    assert sum(e["kind"] == "clientCount" for e in evs) >= 3 and len({e["kind"] for e in evs}) > 6, {e["kind"] for e in evs}
    await close_all([w, *clients])


# MARK: 8. View tokens

async def test_a_view_token_may_ask_for_clients(make_daemon, tmp_path):
    key = tmp_path / "tabd.key"
    key.write_bytes(KEY + b"\n")
    key.chmod(0o600)
    d = make_daemon("--auth-secret-file", str(key), "--presence-limit", "1")
    viewer = await one(d, "viewer", token=sign(claims("main", "view")))
    actor = await one(d, "actor", token=sign(claims("main", "control")))  # the 2nd: the room counts
    assert viewer.welcome["role"] == "view" and actor.welcome["snapshot"]["presence"] == "counted"
    _, page = await viewer.command("clients")
    assert page["type"] == "clients" and page["clients"] == who([viewer, actor]) and page["next"] is None, page
    _, page = await viewer.command("clients", limit=1, after=ident(viewer))
    assert page["clients"] == who([actor]) and page["next"] is None, page
    _, reply = await viewer.command("clients", limit=0)
    assert reply["code"] == "invalid", "a view's bad clients is invalid, not forbidden"
    _, reply = await viewer.command("tap", tab="home")
    assert reply["code"] == "forbidden", "a view still may not act"
    # The HTTP API's page is an admin's.
    def get(role):
        return call(d, "GET", "/api/rooms/main/clients", headers={"Authorization": "Bearer " + sign(claims("main", role))})
    assert get("view")[0] == 403 and get("view")[1]["code"] == "forbidden"
    status, body, _ = get("admin")
    assert status == 200 and body["clients"] == who([viewer, actor]), body
    await close_all([viewer, actor])


# MARK: 9. Restart

async def counted_room_to_restart(d):
    """A counted room (of --presence-limit 2) with its count reported and a command after
    it: (watcher, the others, the watcher's batches, the reserved block)."""
    w = await one(d, "watcher", live=True)
    others = [await one(d, "a1"), await one(d, "a2"), await one(d, "a3")]
    switch = await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    await w.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == 4, "clientCount 4")
    _, ack = await w.command("push", route="kept")
    assert w.last_seq() == ack["seq"]
    return w, others, list(w.batches), switch["events"][0]


async def resumed_after_restart(second, seen, epoch):
    """A client resuming after `seen` on the restarted tabd `second`, once its own join
    came: (the client, its {id, name})."""
    back = await one(second, "back", live=True, resume=seen, epoch=epoch)
    assert back.welcome["resumed"] is True
    me = {"id": ident(back), "name": "back"}
    await back.until_event(lambda e: e.get("client") == me, "its own join")
    return back, me


async def test_a_restart_lists_a_counted_room_again_in_its_first_batch_and_ids_go_on(make_daemon, tmp_path):
    # A crash: the state file holds the room counted, as its last batch left it.
    options = ("--state", str(tmp_path / "state.sqlite"), "--presence-limit", "2", "--presence-interval", "50")
    first = make_daemon(*options)
    w, others, before, reserved = await counted_room_to_restart(first)
    seen, epoch = w.last_seq(), w.welcome["epoch"]
    assert await asyncio.to_thread(first.stop, signal.SIGKILL) == -signal.SIGKILL
    await close_all([w, *others])

    second = make_daemon(*options)
    back, me = await resumed_after_restart(second, seen, epoch)
    assert back.batches[0] == {"type": "events", "by": "tabd", "ref": None,
                               "events": [{"seq": seen + 1, "kind": "presenceListed", "clients": []}]}, back.batches
    assert [strip_seq(b) for b in back.batches[1:]] == [[{"kind": "clientJoined", "client": me}]]
    assert number(ident(back)) >= reserved["from"] + reserved["count"], "ids go on past the reserved block"
    nxt = await one(second, "next")
    assert number(ident(nxt)) > number(ident(back))
    await back.until_event(lambda e: e.get("client") == {"id": ident(nxt), "name": "next"}, "the next join")
    # One stream across the restart: folded, it is the new tabd's state.
    snap, folded = await sync_and_fold(back, w.welcome["snapshot"], before + back.batches)
    assert snap == folded and snap["presence"] == "listed" and snap["clients"] == who([back, nxt])
    home = next(t for t in snap["tabs"] if t["id"] == "home")
    assert [p["route"] for p in home["stack"]] == ["root", "kept"]
    await close_all([back, nxt])


async def test_a_graceful_restart_of_a_counted_room_keeps_one_stream_that_lists_it_again(make_daemon, tmp_path):
    # SIGTERM: the clients take their close, and the stopping tabd may record their leaves
    # (counts, and the room listed again once it is empty); the restarted one lists the
    # room if it is still counted. Either way: one gap-free stream, listed again once.
    options = ("--state", str(tmp_path / "state.sqlite"), "--presence-limit", "2", "--presence-interval", "50")
    first = make_daemon(*options)
    w, others, before, reserved = await counted_room_to_restart(first)
    seen, epoch = w.last_seq(), w.welcome["epoch"]
    # Stopped off the loop, so that the clients take their close frames meanwhile.
    assert await asyncio.to_thread(first.stop) == 0
    await w.until(lambda: w.ended, "the close at the stop")
    await close_all([w, *others])

    back, me = await resumed_after_restart(make_daemon(*options), seen, epoch)
    contiguous(back.batches, seen)
    evs = events_of(back.batches)
    assert [e["kind"] for e in evs][-2:] == ["presenceListed", "clientJoined"] and evs[-2]["clients"] == [], evs
    assert {e["kind"] for e in evs[:-2]} <= {"clientCount"}, evs
    assert number(ident(back)) >= reserved["from"] + reserved["count"], "ids go on past the reserved block"
    snap, folded = await sync_and_fold(back, w.welcome["snapshot"], before + back.batches)
    assert snap == folded and snap["presence"] == "listed" and snap["clients"] == who([back])
    await back.close()


# MARK: 10. Rooms of at most 100

async def test_a_room_of_at_most_100_lists_every_join_and_leave_as_before_and_the_101st_counts(make_daemon):
    d = make_daemon(*QUIET)  # the default --presence-limit, 100
    w = await one(d, "watcher", live=True)
    clients = []
    for k in range(3):  # 99 more, in three bursts
        clients += await crowd(d, 33, f"k{k}-")
    await w.until(lambda: sum(e["kind"] == "clientJoined" for e in w.events()) == 99, "99 joins")
    gone = clients[5:15]
    await close_all(gone)
    await w.until(lambda: sum(e["kind"] == "clientLeft" for e in w.events()) == 10, "10 leaves")
    stay = [c for c in clients if c not in gone]
    again = await crowd(d, 10, "again")
    await w.until(lambda: sum(e["kind"] == "clientJoined" for e in w.events()) == 109, "10 more joins")
    room = [w, *stay, *again]
    assert len(room) == 100

    # Frame for frame as before: only clientJoined and clientLeft, by tabd.
    contiguous(w.batches, w.welcome["snapshot"]["seq"])
    for b in w.batches:
        assert list(b) == ["type", "by", "ref", "events"] and b["by"] == "tabd" and b["ref"] is None, b
        assert all(list(e) == ["seq", "kind", "client"] for e in b["events"]), b
    evs = events_of(w.batches)
    assert [e["client"] for e in evs if e["kind"] == "clientJoined"] == who(clients) + who(again), \
        "each join's client object, in join order"
    assert sorted(e["client"] for e in evs if e["kind"] == "clientLeft") == sorted(ident(c) for c in gone)
    assert sorted(number(ident(c)) for c in [w, *clients, *again]) == list(range(number(ident(w)), number(ident(w)) + 110)), \
        "a listed room's ids are consecutive: no block is reserved"
    # Snapshots: the old members and `presence`, everyone listed.
    for snap in (clients[-1].welcome["snapshot"], again[-1].welcome["snapshot"], room_snapshot(d),
                 (await w.command("sync"))[1]["snapshot"]):
        assert list(snap) == SNAPSHOT_KEYS and snap["presence"] == "listed", list(snap)
        assert [k for k in snap if k != "presence"] == OLD_SNAPSHOT_KEYS
    snap = room_snapshot(d)
    assert snap["clients"] == who(room) and snap["clientCount"] == 100

    # The 101st join: counted from here on.
    extra = await one(d, "extra")
    switch = await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    assert strip_seq(switch) == [{"kind": "clientIdsReserved", "from": number(ident(extra)), "count": BLOCK},
                                 {"kind": "presenceCounted", "count": 101}]
    assert extra.welcome["snapshot"]["presence"] == "counted" and extra.welcome["snapshot"]["clients"] == []
    assert not [e for e in w.events() if e.get("client") == {"id": ident(extra), "name": "extra"}]
    await close_all([*room, extra])


# MARK: 11. Hostile input

async def test_hostile_clients_commands_are_refused_and_the_connection_stays_usable(make_daemon):
    d = make_daemon("--presence-limit", "2", "--presence-interval", "50")
    w = await one(d, "watcher", live=True)
    h = await one(d, "hostile")
    o = await one(d, "other")  # the 3rd: counted
    await w.until_batch(lambda b: "presenceCounted" in kinds(b), "presenceCounted")
    seq = w.last_seq()
    bad = [{"after": "c" * 10_000}, {"after": "x" * 10_000}, {"after": "c" + "9" * 9_999}, {"after": 5}, {"after": ["c1"]},
           {"after": {"id": "c1"}}, {"after": True}, {"after": ""}, {"after": "c"}, {"after": "c-1"}, {"after": "c1.5"},
           {"after": "C1"}, {"after": " c1"}, {"after": "c１"}, {"limit": 1.5}, {"limit": -1}, {"limit": -0.5},
           {"limit": 10 ** 30}, {"limit": 2 ** 63}, {"limit": -(2 ** 63) - 1}, {"limit": 1e300}, {"limit": "5"},
           {"limit": True}, {"limit": []}, {"limit": {}}, {"limit": 1.5, "after": "c" * 10_000}]
    for fields in bad:
        ref = await h.send("clients", **fields)
        reply = await h.recv()
        while reply["type"] == "events":
            reply = await h.recv()
        assert reply["type"] == "error" and reply["code"] in ("invalid", "bad_command") and reply["ref"] == ref, \
            (str(fields)[:80], reply)
        _, pong = await h.command("ping")
        assert pong["type"] == "pong", (str(fields)[:80], pong)
    # Over HTTP the same: 400 invalid, and tabd answers on.
    status, _ = d.get("/api/rooms/main/clients?after=" + "c" * 10_000)
    assert status == 414, "a request line over 8 KiB is refused before any route"
    for query in ("after=" + "c" * 5_000, "after=" + "c" + "9" * 5_000, "limit=-1", "limit=1.5", "limit=1e3",
                  "limit=99999999999999999999999", "after=c1%20", "after=%E2%80%8Bc1"):
        assert http_error(d, f"/api/rooms/main/clients?{query}") == (400, "invalid"), query[:40]
    _, page = await h.command("clients")
    assert page["clients"] == who([w, h, o])
    _, page = await o.command("clients", limit=2)
    assert page["clients"] == who([w, h]) and page["next"] == ident(h)
    _, pong = await o.command("ping")
    assert pong["type"] == "pong"
    assert w.last_seq() == seq and room_snapshot(d)["seq"] == seq, "nothing happened in the room"
    await close_all([w, h, o])
