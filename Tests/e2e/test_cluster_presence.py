"""Big-room presence in a cluster: three tabd nodes over three NATS JetStream
servers, a room past --presence-limit. Each node counts its own clients: the switch
(`presenceCounted`) gives every node's share, `clientCount` replaces one node's, a dead
node's share goes to 0 within the liveness bound (docs/CLUSTER.md), the room is listed
again when the sum is 0, `clients` lists the answering node's own clients, and client ids
(listed ones and reserved blocks) never collide across nodes, also across a restart of
every node.

The events are those of docs/schema/event.json (cluster variants: `node`, `nodes`); streams
are folded with the page's own fold (web/model.js, by replay.py) and compared with what
`sync` answers. Three tests at the end pin counts that must not go stale: a node killed and
started again at once, a node stopped with SIGTERM within its report interval, and a join
whose report waits while another node empties the room.
"""
import asyncio
import re
import signal
import time

from conftest import WAIT, Client
from replay import replay_all
from test_cluster import engine, nodes, room_name  # noqa: F401 (engine: the module's three JetStream servers)
from test_rooms import call
from test_schema import check

LIMIT = 4
PRESENCE = ("--presence-limit", str(LIMIT), "--presence-interval", "200")
NAMES = ["n0", "n1", "n2"]  # nodes(...) names node i "n{i}"
# docs/CLUSTER.md: "a node not heard from for 5 s is dead ... Bound: a dead node's clients
# leave within about 7 s." A counted room's share of a dead node goes to 0 within the same.
LIVENESS = 7.0
# What a loaded machine may add; a design fault (a second timeout, a missed sweep that waits
# for the next event) does not fit in it.
MARGIN = 3.0
# The wire order of each presence event's members (the cluster variants).
FIELDS = {
    "presenceCounted": ["seq", "kind", "count", "nodes"],
    "clientCount": ["seq", "kind", "node", "count"],
    "presenceListed": ["seq", "kind", "node", "clients"],
    "clientIdsReserved": ["seq", "kind", "node", "from", "count"],
}


# MARK: Reading streams

def events(c):
    return [e for b in c.batches for e in b["events"]]


def number(client_id):
    assert client_id[0] == "c" and client_id[1:].isdigit(), client_id
    return int(client_id[1:])


def start_seq(c):
    """The seq a client's stream starts after: its welcome snapshot's, or the resume seq
    its replay continues (the first replayed batch's first seq - 1)."""
    if c.welcome.get("snapshot"):
        return c.welcome["snapshot"]["seq"]
    return c.batches[0]["events"][0]["seq"] - 1 if c.batches else c.last_seq()


def reported(c, start=None):
    """The per-node counts as `start` (default: c's welcome snapshot) and c's stream after
    it last reported them: None while the room is listed. (Only what the tests wait for;
    the fold itself is model.js's, by replay.)"""
    snap = c.welcome.get("snapshot") if start is None else start
    shares = dict(snap["nodes"]) if snap and snap.get("presence") == "counted" else None
    for e in events(c):
        if e["kind"] == "presenceCounted":
            shares = dict(e["nodes"])
        elif e["kind"] == "clientCount":
            assert shares is not None, f"clientCount in a listed room: {e}"
            shares[e["node"]] = e["count"]
        elif e["kind"] == "presenceListed":
            shares = None
    return shares


def nonzero(shares):
    """A nodes map without its zero counts (a node's count 0 may be kept or dropped)."""
    return None if shares is None else {k: v for k, v in shares.items() if v != 0}


async def read_until(c, done, what, timeout=WAIT):
    """Reads c's frames until done() holds; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"not within {timeout} s: {what}; last reported {reported(c)}")
        try:
            await c.recv(timeout=left)
        except TimeoutError:
            raise AssertionError(f"not within {timeout} s: {what}; last reported {reported(c)}") from None


async def poll(fetch, done, what, timeout=WAIT):
    """Calls fetch() until done(its value); returns that value; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}; last {value}"
        await asyncio.sleep(0.05)


def check_presence_events(evs):
    """Every presence event of a cluster's stream has its members in the wire order, and
    carries `node` where the cluster variant has it."""
    for e in evs:
        if e["kind"] in FIELDS:
            assert list(e) == FIELDS[e["kind"]], f"members of {e} (wire order {FIELDS[e['kind']]})"
            if "node" in e:
                assert isinstance(e["node"], str) and e["node"], e


def assert_one_stream(clients, end):
    """Every client's batches after its start, up to seq `end`, are the very same batches
    (events, seqs, by, ref) as the reference's, the client that started first (which must
    have reached `end`), whose stream is gap-free."""
    ref = min(clients, key=start_seq)
    ref_batches = [b for b in ref.batches if start_seq(ref) < b["events"][0]["seq"] <= end]
    seqs = [e["seq"] for b in ref_batches for e in b["events"]]
    assert seqs == list(range(start_seq(ref) + 1, end + 1)), "the reference stream has a gap or did not reach the end"
    for i, c in enumerate(clients):
        mine = [b for b in c.batches if start_seq(c) < b["events"][0]["seq"] <= end]
        theirs = [b for b in ref_batches if b["events"][0]["seq"] > start_seq(c)][:len(mine)]
        if mine != theirs:
            at = next((k for k, (x, y) in enumerate(zip(mine, theirs)) if x != y), min(len(mine), len(theirs)))
            raise AssertionError(f"client {i} ({c.welcome['client']}) saw another stream than {ref.welcome['client']} "
                                 f"at batch {at}: {mine[at] if at < len(mine) else None} against "
                                 f"{theirs[at] if at < len(theirs) else None}")


def assert_switch_shares(start, evs, node_of):
    """The one presenceCounted of `evs` (the stream after the listed snapshot `start`) gives
    each node the listed clients it owned at that point, and the node that decided the
    switch (the node of the clientIdsReserved just before it, in its batch) also the joins
    that crossed; the shares add up to count. Returns the event."""
    switched = [k for k, e in enumerate(evs) if e["kind"] == "presenceCounted"]
    assert len(switched) == 1, f"{len(switched)} presenceCounted in one stream: {[evs[k] for k in switched]}"
    k = switched[0]
    sw = evs[k]
    listed = [c["id"] for c in start["clients"]]
    for e in evs[:k]:
        if e["kind"] == "clientJoined":
            listed.append(e["client"]["id"])
        elif e["kind"] == "clientLeft":
            listed.remove(e["client"])
    reserve = evs[k - 1]
    assert reserve["kind"] == "clientIdsReserved" and reserve["seq"] == sw["seq"] - 1, \
        f"the switch is not preceded by its node's reserved block: {reserve}, {sw}"
    decider = reserve["node"]
    crossing = sw["count"] - len(listed)
    assert len(listed) == LIMIT and crossing >= 1, f"switched with {len(listed)} listed and {crossing} joining"
    shares = {decider: 0}
    for cid in listed:
        shares[node_of[cid]] = shares.get(node_of[cid], 0) + 1
    shares[decider] += crossing
    assert sw["nodes"] == shares, f"switch shares {sw['nodes']}, but the nodes own {shares} (decided by {decider})"
    assert sum(sw["nodes"].values()) == sw["count"]
    return sw


def assert_ids(evs, node_of, counted_ids):
    """Client ids are unique across nodes; reserved blocks never overlap (whatever node);
    every id handed out in the counted room comes from a block its own node reserved, and no
    listed id lies in a block. Returns the blocks (node, from, count)."""
    assert len(node_of) == len(set(node_of)), "an id handed out twice"
    blocks = [(e["node"], e["from"], e["count"]) for e in evs if e["kind"] == "clientIdsReserved"]
    spans = sorted((f, f + n, node) for node, f, n in blocks)
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        assert a1 <= b0, f"reserved blocks overlap: {an} c{a0}..c{a1 - 1} and {bn} c{b0}..c{b1 - 1}"
    for cid, node in node_of.items():
        n = number(cid)
        owners = [b for b in blocks if b[1] <= n < b[1] + b[2]]
        if cid in counted_ids:
            assert [b[0] for b in owners] == [node], f"{cid} (a counted join on {node}) is in blocks {owners}"
        else:
            assert owners == [], f"listed {cid} lies in reserved blocks {owners}"
    return blocks


def node(make_daemon, engine, name, *extra):
    """One more tabd node called `name` (a node started again takes its old name)."""
    return make_daemon("--cluster", engine.url_arg, "--node-name", name, "--rate-limit", "0", *PRESENCE, *extra)


async def join(ds, room, plan, node_of):
    """Connects one client per entry of `plan` (node indexes), one after the other."""
    out = []
    for k, i in enumerate(plan):
        c = await Client.connect(ds[i].ws, room=room, name=f"on-n{i}-{k}")
        node_of[c.welcome["client"]] = NAMES[i]
        out.append(c)
    return out


async def sync_matches_replay(c):
    """`sync` on c's node, read up to its seq: the fold of c's welcome snapshot and stream
    equals the answer. Returns the snapshot."""
    _, answer = await c.command("sync")
    assert answer["type"] == "snapshot", answer
    snap = answer["snapshot"]
    await c.until_seq(snap["seq"])
    frames = [b for b in c.batches if start_seq(c) < b["events"][0]["seq"] <= snap["seq"]]
    [state] = replay_all([(frames, c.welcome["snapshot"])], label=f"{c.welcome['client']}'s stream")
    assert state == snap, f"replay of {c.welcome['client']}'s stream differs from its node's sync"
    return snap


async def sync_matches_replay_from(c, first):
    """sync_matches_replay for a client that resumed: the fold of `first`'s welcome and
    stream up to where c resumed, then c's stream."""
    _, answer = await c.command("sync")
    snap = answer["snapshot"]
    await c.until_seq(snap["seq"])
    frames = ([b for b in first.batches if start_seq(first) < b["events"][0]["seq"] <= start_seq(c)]
              + [b for b in c.batches if b["events"][0]["seq"] <= snap["seq"]])
    [state] = replay_all([(frames, first.welcome["snapshot"])], label=f"{c.welcome['client']}'s stream")
    assert state == snap, f"replay of {c.welcome['client']}'s stream differs from its node's sync"
    return snap


def assert_counted_snapshot(snap, expected):
    assert snap["presence"] == "counted" and snap["clients"] == [], snap
    assert nonzero(snap["nodes"]) == expected, f"snapshot nodes {snap['nodes']}, the nodes hold {expected}"
    assert snap["clientCount"] == sum(snap["nodes"].values()) == sum(expected.values()), snap
    assert list(snap)[-1] == "nodes", "nodes is the snapshot's last member"


async def snapshot_of(c):
    """The snapshot `sync` answers on c's node."""
    _, answer = await c.command("sync")
    assert answer["type"] == "snapshot", answer
    return answer["snapshot"]


async def close_all(clients):
    for c in clients:
        await c.close()


# MARK: The switch

async def test_the_limit_crossed_by_joins_on_different_nodes_switches_once_with_every_node_s_share(make_daemon, engine):
    ds = nodes(make_daemon, engine, 3, *PRESENCE)
    room = room_name()
    node_of = {}
    # Joins alternate n0, n1, n2, n0: four listed; the fifth (on n1) crosses; four more counted.
    clients = await join(ds, room, [k % 3 for k in range(9)], node_of)
    assert [c.welcome["snapshot"]["presence"] for c in clients] == ["listed"] * LIMIT + ["counted"] * 5
    first = clients[0]
    assert first.welcome["snapshot"]["clients"] == [{"id": first.welcome["client"], "name": "on-n0-0"}]
    # Two leave (one of n0, one of n2): each node's count follows its own clients.
    gone = [clients[3], clients[5]]
    await close_all(gone)
    alive = [c for c in clients if c not in gone]
    real = {name: sum(node_of[c.welcome["client"]] == name for c in alive) for name in NAMES}
    assert real == {"n0": 2, "n1": 3, "n2": 2}
    await read_until(first, lambda: nonzero(reported(first)) == real, f"the per-node counts reach {real}")
    end = first.last_seq()

    evs = events(first)
    check_presence_events(evs)
    sw = assert_switch_shares(first.welcome["snapshot"], evs, node_of)
    assert sw["count"] == LIMIT + 1 and sw["nodes"] == {"n0": 2, "n1": 2, "n2": 1}, sw
    assert not [e for e in evs[evs.index(sw):] if e["kind"] in ("clientJoined", "clientLeft")], "listed presence after the switch"
    counted_ids = {c.welcome["client"] for c in clients[LIMIT:]}
    assert_ids(evs, node_of, counted_ids)
    # Every node's clients changed after the switch, and each node reported its own count.
    assert {e["node"] for e in evs if e["kind"] == "clientCount"} == set(NAMES)

    # A sync on every node: counted, the same nodes map, clientCount its sum; the fold of
    # each node's client's stream is that answer.
    snaps = []
    for c in clients[:3]:
        await c.until_seq(end)
        snap = await sync_matches_replay(c)
        assert_counted_snapshot(snap, real)
        snaps.append(snap)
    assert len({s["seq"] for s in snaps}) == 1 and snaps[0] == snaps[1] == snaps[2], "the nodes' syncs differ"
    for c in alive:
        await c.until_seq(snaps[0]["seq"])
    assert_one_stream(clients, snaps[0]["seq"])
    # The cluster's shapes (`node`, `nodes`) are those of the JSON Schemas, every frame.
    for c in clients:
        for f in c.frames:
            check("server-frame.json", f)
            check(f"{f['type']}.json", f)
    await close_all(alive)


async def test_joins_racing_on_three_nodes_across_the_limit_switch_once_with_unique_ids(make_daemon, engine):
    ds = nodes(make_daemon, engine, 3, *PRESENCE)
    for round_ in range(3):
        room = room_name()
        node_of = {}
        watchers = await join(ds, room, [0, 1, 2], node_of)  # listed: 3 of 4
        # Fifteen joins at once, five per node: the nodes race for the seqs across the limit.
        plan = [k % 3 for k in range(15)]
        crowd = await asyncio.gather(*(Client.connect(ds[i].ws, room=room, name=f"on-n{i}-{k}") for k, i in enumerate(plan)))
        for c, i in zip(crowd, plan):
            assert c.welcome["client"] not in node_of, f"round {round_}: {c.welcome['client']} handed out twice"
            node_of[c.welcome["client"]] = NAMES[i]
        everyone = watchers + list(crowd)
        assert len(node_of) == 18
        real = {"n0": 6, "n1": 6, "n2": 6}
        await read_until(watchers[0], lambda: nonzero(reported(watchers[0])) == real, f"round {round_}: counts reach {real}")
        evs = events(watchers[0])
        check_presence_events(evs)
        assert_switch_shares(watchers[0].welcome["snapshot"], evs, node_of)
        listed_ids = {e["client"]["id"] for e in evs if e["kind"] == "clientJoined"} | {watchers[0].welcome["client"]}
        assert_ids(evs, node_of, set(node_of) - listed_ids)
        snaps = []
        for c in watchers:
            await c.until_seq(watchers[0].last_seq())
            snap = await sync_matches_replay(c)
            assert_counted_snapshot(snap, real)
            snaps.append(snap)
        assert snaps[0] == snaps[1] == snaps[2], f"round {round_}: the nodes' syncs differ"
        end = snaps[0]["seq"]
        for c in everyone:
            await c.until_seq(end)
        assert_one_stream(everyone, end)
        # Every client's fold (from its own welcome) is its node's snapshot.
        streams = [([b for b in c.batches if start_seq(c) < b["events"][0]["seq"] <= end], c.welcome["snapshot"]) for c in everyone]
        for c, state in zip(everyone, replay_all(streams, label=f"round {round_}")):
            assert state == snaps[0], f"round {round_}: the fold of {c.welcome['client']}'s stream is not the nodes' sync"
        await close_all(everyone)
    conflicts = sum(int(re.search(r"^tabd_engine_conflicts_total (\d+)$", d.get("/metrics")[1], re.M).group(1)) for d in ds)
    print(f"\n{conflicts} conflicts among the nodes' joins")
    assert conflicts > 0, "the nodes never raced: nothing was decided again"


# MARK: clients

async def test_clients_in_a_cluster_lists_the_answering_node_s_own_clients(make_daemon, engine):
    ds = nodes(make_daemon, engine, 4, *PRESENCE)  # n3 has no client of the room
    room = room_name()
    node_of = {}
    mine = {name: [] for name in NAMES + ["n3"]}

    async def check(phase):
        answers = {}
        for i, name in enumerate(NAMES):
            c = next(c for c in everyone if node_of[c.welcome["client"]] == name)
            _, page = await c.command("clients", limit=1000)
            assert page["type"] == "clients" and list(page) == ["type", "ref", "node", "clients", "next"], page
            assert page["node"] == name and page["next"] is None, f"{phase}: {page}"
            answers[name] = [x["id"] for x in page["clients"]]
            # The API on the same node: the same page, with the node named.
            status, body, _ = call(ds[i], "GET", f"/api/rooms/{room}/clients?limit=1000")
            assert status == 200 and body.get("node") == name, f"{phase}: GET on {name}: {status} {body}"
            assert body["clients"] == page["clients"] and body["next"] is None, f"{phase}: GET on {name}: {body}"
        status, body, _ = call(ds[3], "GET", f"/api/rooms/{room}/clients")
        assert status == 200 and body.get("node") == "n3" and body["clients"] == [] and body["next"] is None, body
        for name in NAMES:
            expect = [c.welcome["client"] for c in everyone if node_of[c.welcome["client"]] == name]
            assert answers[name] == sorted(expect, key=number), f"{phase}: {name} lists {answers[name]}, owns {expect}"
        union = [cid for ids in answers.values() for cid in ids]
        assert sorted(union, key=number) == sorted((c.welcome["client"] for c in everyone), key=number), \
            f"{phase}: the nodes' lists {answers} are not everyone once"
        return answers

    everyone = await join(ds, room, [0, 0, 1, 2], node_of)  # listed (4 = the limit)
    assert everyone[-1].welcome["snapshot"]["presence"] == "listed"
    await check("listed")
    everyone += await join(ds, room, [0, 1, 0, 0], node_of)  # counted: n0 5, n1 2, n2 1
    assert everyone[-1].welcome["snapshot"]["presence"] == "counted"
    answers = await check("counted")
    # n0's five, two at a time through `next`, on the socket and over the API.
    c = everyone[0]
    pages, after = [], None
    while True:
        _, page = await c.command("clients", limit=2, **({"after": after} if after else {}))
        assert page["node"] == "n0"
        pages.append([x["id"] for x in page["clients"]])
        after = page["next"]
        if after is None:
            break
    assert pages == [answers["n0"][0:2], answers["n0"][2:4], answers["n0"][4:]]
    status, body, _ = call(ds[0], "GET", f"/api/rooms/{room}/clients?limit=2&after={answers['n0'][1]}")
    assert status == 200 and body["node"] == "n0" and [x["id"] for x in body["clients"]] == answers["n0"][2:4], body
    await close_all(everyone)


# MARK: Nodes that go

async def test_a_killed_node_s_share_of_a_counted_room_goes_to_zero_within_the_liveness_bound(make_daemon, engine):
    ds = nodes(make_daemon, engine, 3, *PRESENCE)
    room = room_name()
    node_of = {}
    clients = await join(ds, room, [k % 3 for k in range(9)], node_of)
    watcher, other = clients[0], clients[1]  # on n0 and n1
    real = {"n0": 3, "n1": 3, "n2": 3}
    await read_until(watcher, lambda: nonzero(reported(watcher)) == real, f"counts reach {real}")
    before = watcher.last_seq()
    ds[2].stop(signal.SIGKILL)
    killed = time.monotonic()

    def dead_reported(c):
        return next((e for b in c.batches if b["events"][0]["seq"] > before for e in b["events"]
                     if e["kind"] == "clientCount" and e["node"] == "n2"), None)

    await read_until(watcher, lambda: dead_reported(watcher) is not None,
                     "a surviving node reports the killed n2's count 0", timeout=LIVENESS + MARGIN)
    took = time.monotonic() - killed
    print(f"\nn2 killed: its count reported 0 after {took:.2f} s (bound {LIVENESS} s + {MARGIN} s)")
    e = dead_reported(watcher)
    assert e["count"] == 0, f"the dead node's count is {e}"
    batch = next(b for b in watcher.batches if e in b["events"])
    assert batch["by"] == "tabd" and batch["ref"] is None, batch
    living = {"n0": 3, "n1": 3}
    assert nonzero(reported(watcher)) == living
    # Both survivors' snapshots: n2 at 0 (kept at 0 or dropped), clientCount the living's sum.
    for c, d in ((watcher, ds[0]), (other, ds[1])):
        await c.until_seq(watcher.last_seq())
        snap = await sync_matches_replay(c)
        assert_counted_snapshot(snap, living)
        assert snap["nodes"].get("n2", 0) == 0, snap["nodes"]
        status, body, _ = call(d, "GET", f"/api/rooms/{room}")
        assert status == 200
        assert_counted_snapshot(body["snapshot"], living)
    check_presence_events(events(watcher))
    # The rest leave: the sum reaches 0, the room is listed again, and a join is listed.
    seen, epoch = watcher.last_seq(), watcher.welcome["epoch"]
    await close_all(clients)
    await poll(lambda: call(ds[0], "GET", f"/api/rooms/{room}")[1]["snapshot"], lambda s: s["presence"] == "listed",
               "the emptied room is listed again")
    back = await Client.connect(ds[1].ws, room=room, name="back", resume=seen, epoch=epoch)
    assert back.welcome["resumed"] is True
    me = back.welcome["client"]
    await read_until(back, lambda: any(e["kind"] == "clientJoined" for e in events(back)), "the join after the room emptied")
    evs = events(back)
    check_presence_events(evs)
    kinds_ = [e["kind"] for e in evs]
    assert kinds_.count("presenceListed") == 1, evs
    listed = evs[kinds_.index("presenceListed")]
    assert listed["node"] in ("n0", "n1") and listed["clients"] == [], listed
    assert evs[-1]["kind"] == "clientJoined" and evs[-1]["client"] == {"id": me, "name": "back"}, evs[-1]
    assert kinds_.index("presenceListed") < len(evs) - 1
    blocks = [e for e in events(watcher) + evs if e["kind"] == "clientIdsReserved"]
    assert all(number(me) >= b["from"] + b["count"] for b in blocks), f"{me} is not past the blocks {blocks}"
    assert all(number(me) > number(cid) for cid in node_of)
    # The whole: watcher's welcome, its stream and back's replay fold to back's sync.
    _, answer = await back.command("sync")
    await back.until_seq(answer["snapshot"]["seq"])
    frames = [b for b in watcher.batches if b["events"][0]["seq"] > start_seq(watcher)] + back.batches
    [state] = replay_all([(frames, watcher.welcome["snapshot"])])
    assert state == answer["snapshot"] and state["presence"] == "listed" and state["clients"] == [{"id": me, "name": "back"}]
    await back.close()



async def counted_room_of_nine(make_daemon, engine):
    """Three nodes and a counted room of 9 clients, 3 on each, every count reported:
    (nodes, room, node of each client id, the clients, the first client as a watcher)."""
    ds = nodes(make_daemon, engine, 3, *PRESENCE)
    room = room_name()
    node_of = {}
    clients = await join(ds, room, [k % 3 for k in range(9)], node_of)
    watcher = clients[0]
    await read_until(watcher, lambda: nonzero(reported(watcher)) == {"n0": 3, "n1": 3, "n2": 3}, "counts reach 3 each")
    return ds, room, node_of, clients, watcher


async def test_every_node_killed_and_started_again_zeroes_the_counts_of_nodes_not_back_and_ids_go_on_past_every_block(
        make_daemon, engine):
    ds, room, node_of, clients, watcher = await counted_room_of_nine(make_daemon, engine)
    blocks = [e for e in events(watcher) if e["kind"] == "clientIdsReserved"]
    assert {b["node"] for b in blocks} == set(NAMES)
    past = max([number(cid) + 1 for cid in node_of] + [b["from"] + b["count"] for b in blocks])
    seen, epoch = watcher.last_seq(), watcher.welcome["epoch"]
    counted_state = {"presence": "counted", "nodes": reported(watcher)}
    counted_ids = {c.welcome["client"] for c in clients[LIMIT:]}
    for d in ds:
        d.stop(signal.SIGKILL)
    # The engine keeps the room's stream. n0 and n1 start again at once, n2 later; the
    # clients come back on n0 (two) and n1 (one) and resume where they were.
    again = [node(make_daemon, engine, "n0"), node(make_daemon, engine, "n1")]
    restarted = time.monotonic()
    back = []
    for i in (0, 0, 1):
        c = await Client.connect(again[i].ws, room=room, name=f"back-n{i}", resume=seen, epoch=epoch)
        assert c.welcome["resumed"] is True, c.welcome
        assert number(c.welcome["client"]) >= past, f"{c.welcome['client']} after the restart is not past c{past - 1}"
        node_of[c.welcome["client"]] = NAMES[i]
        counted_ids.add(c.welcome["client"])
        back.append(c)
    # Each node that came back counts its new clients; n2, not alive, goes to 0 once the
    # nodes that came back have listened for the liveness bound.
    expected = {"n0": 2, "n1": 1}
    await read_until(back[0], lambda: nonzero(reported(back[0], counted_state)) == expected,
                     f"the counts after the restart reach {expected}, n2's 0",
                     timeout=LIVENESS + MARGIN - (time.monotonic() - restarted))
    print(f"\nthe counts of every node were right {time.monotonic() - restarted:.2f} s after the restart")
    after = events(back[0])
    assert any(e["kind"] == "clientCount" and e["node"] == "n2" and e["count"] == 0 for e in after), after
    assert not [e for e in after if e["kind"] == "presenceCounted"], "the room switched again though it never was listed"
    for c in back:
        await c.until_seq(back[0].last_seq())
        assert nonzero(reported(c, counted_state)) == expected
        assert_counted_snapshot(await sync_matches_replay_from(c, watcher), expected)
    # n2 starts again and a client joins there.
    n2 = node(make_daemon, engine, "n2")
    c = await Client.connect(n2.ws, room=room, name="back-n2")
    assert c.welcome["snapshot"]["presence"] == "counted" and number(c.welcome["client"]) >= past
    node_of[c.welcome["client"]] = "n2"
    counted_ids.add(c.welcome["client"])
    back.append(c)
    expected = {"n0": 2, "n1": 1, "n2": 1}
    await read_until(back[0], lambda: nonzero(reported(back[0], counted_state)) == expected, f"counts reach {expected}")
    end = back[0].last_seq()
    for c in back:
        await c.until_seq(end)
    assert_one_stream(back[:3], end)
    evs = events(watcher) + [e for e in events(back[0]) if e["seq"] > seen]
    check_presence_events(evs)
    new_blocks = [e for e in evs if e["kind"] == "clientIdsReserved" and e["seq"] > seen]
    assert new_blocks and all(b["from"] >= past for b in new_blocks), f"blocks after the restart: {new_blocks}, before up to c{past - 1}"
    assert_ids(evs, node_of, counted_ids)
    # Everyone leaves: the room is listed again and the next join is listed, past every id.
    last = back[0].last_seq()
    await close_all(back)
    await poll(lambda: call(again[0], "GET", f"/api/rooms/{room}")[1]["snapshot"], lambda s: s["presence"] == "listed",
               "the emptied room is listed again")
    late = await Client.connect(n2.ws, room=room, name="late", resume=last, epoch=epoch)
    assert late.welcome["resumed"] is True
    await read_until(late, lambda: any(e["kind"] == "clientJoined" for e in events(late)), "the join after the room emptied")
    tail = events(late)
    assert [e["kind"] for e in tail].count("presenceListed") == 1 and tail[-1]["kind"] == "clientJoined", tail
    me = late.welcome["client"]
    assert tail[-1]["client"]["id"] == me and all(number(me) >= b["from"] + b["count"] for b in evs + tail
                                                   if b["kind"] == "clientIdsReserved"), (me, tail)
    _, answer = await late.command("sync")
    await late.until_seq(answer["snapshot"]["seq"])
    frames = ([b for b in watcher.batches if b["events"][0]["seq"] > start_seq(watcher)]
              + [b for b in back[0].batches if b["events"][0]["seq"] <= last] + late.batches)
    [state] = replay_all([(frames, watcher.welcome["snapshot"])], label="across the restart")
    assert state == answer["snapshot"] and state["clients"] == [{"id": me, "name": "late"}], state
    await late.close()


# MARK: Counts that must not go stale

async def test_a_node_killed_and_started_again_at_once_has_its_earlier_count_go_to_zero(make_daemon, engine):
    """A crashed node its supervisor starts again within the liveness bound is alive by
    name, but every client it counted is gone: its share must go to 0 (as a dead node's),
    whether or not the new process ever loads the room."""
    ds, room, node_of, clients, watcher = await counted_room_of_nine(make_daemon, engine)
    ds[1].stop(signal.SIGKILL)
    node(make_daemon, engine, "n1")  # its clients do not come back to it
    killed = time.monotonic()
    await read_until(watcher, lambda: nonzero(reported(watcher)) == {"n0": 3, "n2": 3},
                     "the count of n1 (killed, started again without the room's clients) goes to 0",
                     timeout=LIVENESS + MARGIN)
    print(f"\nn1's count went to 0 {time.monotonic() - killed:.2f} s after the kill")
    assert_counted_snapshot(await sync_matches_replay(watcher), {"n0": 3, "n2": 3})
    await close_all(clients)


async def test_a_node_stopped_with_sigterm_reports_its_count_of_zero_at_once(make_daemon, engine):
    """docs/CLUSTER.md: a node stopped with SIGTERM closes its clients with 1001 and their
    leaves are published at once; in a counted room that is its count 0, even when its last
    report is younger than --presence-interval (here 10 s, longer than the liveness bound)."""
    ds = nodes(make_daemon, engine, 2, "--presence-limit", "1", "--presence-interval", "10000")
    room = room_name()
    node_of = {}
    a, b = await join(ds, room, [0, 1], node_of)  # b's join on n1 switches: n1 reports 1
    assert b.welcome["snapshot"]["nodes"] == {"n0": 1, "n1": 1}
    await read_until(a, lambda: reported(a) == {"n0": 1, "n1": 1}, "the switch")
    stopping = time.monotonic()
    # In a thread: this loop answers b's close handshake meanwhile.
    assert await asyncio.to_thread(ds[1].stop) == 0
    await read_until(a, lambda: reported(a) == {"n0": 1, "n1": 0}, "n1's count 0 at its stop", timeout=2.0)
    print(f"\nn1's count 0 came {time.monotonic() - stopping:.2f} s after its SIGTERM")
    assert_counted_snapshot(await sync_matches_replay(a), {"n0": 1})
    await a.close()


async def test_a_join_whose_count_waits_for_the_interval_is_not_lost_when_another_node_empties_the_room(
        make_daemon, engine):
    """n1 reported 0 a moment ago; a client joins n1 (its count waits for the interval);
    n0's last client leaves. The room's sum in the stream is 0, but one client is connected:
    whatever the room becomes, within the interval it counts that client (counted: n1's 1
    and n0's 0; listed: the client listed) and a later join sees it."""
    interval = 2.0
    ds = nodes(make_daemon, engine, 2, "--presence-limit", "1", "--presence-interval", str(int(interval * 1000)))
    room = room_name()
    node_of = {}
    a, b = await join(ds, room, [0, 1], node_of)  # b's join on n1 switches
    await b.close()
    await read_until(a, lambda: reported(a) == {"n0": 1, "n1": 0}, "n1's count 0 after its client left",
                     timeout=interval + MARGIN)
    c = await Client.connect(ds[1].ws, room=room, name="c")  # within n1's interval
    assert c.welcome["snapshot"]["presence"] == "counted"
    await a.close()
    _, page = await c.command("clients")
    assert [x["id"] for x in page["clients"]] == [c.welcome["client"]] and page["node"] == "n1"

    deadline = time.monotonic() + interval + MARGIN
    while not ((s := await snapshot_of(c))["clientCount"] == 1 and (
            nonzero(s.get("nodes")) == {"n1": 1} or s["clients"] == [{"id": c.welcome["client"], "name": "c"}])):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{c.welcome['client']} is connected to n1 (n1's `clients` lists it), but {interval + MARGIN} s on the "
                f"room is {s['presence']} with clientCount {s['clientCount']}, clients {s['clients']} and nodes "
                f"{s.get('nodes')}; the stream since c joined: {events(c)}")
        await asyncio.sleep(0.05)
    d = await Client.connect(ds[0].ws, room=room, name="d")
    assert d.welcome["snapshot"]["clientCount"] == 2, d.welcome["snapshot"]
    await c.until_seq(d.welcome["snapshot"]["seq"])
    assert (await sync_matches_replay(c))["clientCount"] == 2
    await close_all([c, d])
