"""The JSON Schemas of docs/schema against a real tabd.

Every frame a tabd sends here is validated against server-frame.json and the schema of its
own type; every command sent is validated against client-frame.json. The driving produces
every server frame, every event kind, both kinds of welcome and each role, the error codes
that are cheap to provoke, and every HTTP API answer; the tests fail when one is missing, so
a broken driving cannot pass silently. Hand-made frames check that the schemas refuse what
tabd never sends (they are not vacuous), and every schema file is checked as a schema.
"""
import asyncio
import functools
import json
import os
import time
import urllib.parse

import pytest
import websockets
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from conftest import ROOT, WAIT, Client, kinds
from test_auth import KEY, claims, sign
from test_rooms import call

SCHEMA_DIR = os.path.join(ROOT, "docs", "schema")
DRAFT = "https://json-schema.org/draft/2020-12/schema"
SERVER_FRAMES = ["welcome", "events", "ack", "error", "snapshot", "pong", "clients"]
COMMANDS = ["select", "tap", "push", "pop", "popToRoot", "scroll", "set", "addTab", "updateTab", "moveTab",
            "removeTab", "sync", "ping", "clients"]
# The kinds of a listed room (the main driving) and those of a counted one (a room of more
# clients than --presence-limit).
LISTED_KINDS = ["selected", "firstAppear", "appear", "disappear", "pushed", "popped", "scrollToTop", "scrolled",
                "valueSet", "tabAdded", "tabUpdated", "tabMoved", "tabRemoved", "clientJoined", "clientLeft"]
COUNTED_KINDS = ["presenceCounted", "clientCount", "presenceListed", "clientIdsReserved"]
EVENT_KINDS = LISTED_KINDS + COUNTED_KINDS


@functools.cache
def schemas():
    """{file name: parsed schema} and a registry holding them all under their $id."""
    docs = {}
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".json"):
            with open(os.path.join(SCHEMA_DIR, name), encoding="utf-8") as f:
                docs[name] = json.load(f)
    registry = Registry().with_resources((d["$id"], DRAFT202012.create_resource(d)) for d in docs.values())
    return docs, registry


@functools.cache
def validator(name):
    """A validator for one file, or for `file#/pointer` (a $ref is resolved by the registry)."""
    _, registry = schemas()
    return Draft202012Validator({"$ref": name}, registry=registry)


def problems(name, instance):
    return list(validator(name).iter_errors(instance))


def check(name, instance):
    errors = problems(name, instance)
    assert not errors, f"{name}: {best_match(errors).message} in {json.dumps(instance)[:600]}"


class Checker:
    """Validates what a test sends and receives, and records what it has seen."""

    def __init__(self):
        self.frames = set()     # server frame types
        self.kinds = set()      # event kinds
        self.codes = set()      # error codes
        self.welcomes = set()   # (resumed, role)
        self.values = []        # values of valueSet events
        self.commands = set()   # command types sent

    def server(self, frame):
        check("server-frame.json", frame)
        check(f"{frame['type']}.json", frame)
        self.frames.add(frame["type"])
        if frame["type"] == "events":
            for e in frame["events"]:
                self.kinds.add(e["kind"])
                if e["kind"] == "valueSet":
                    self.values.append(e["value"])
        elif frame["type"] == "error":
            self.codes.add(frame["code"])
        elif frame["type"] == "welcome":
            self.welcomes.add((frame["resumed"], frame["role"]))

    def command(self, msg):
        check("client-frame.json", msg)
        self.commands.add(msg["type"])


class Checked(Client):
    """A conftest Client whose every frame, both ways, goes through a Checker."""

    checker: Checker

    @classmethod
    async def open(cls, checker, url, **params):
        query = urllib.parse.urlencode(params)
        ws = await websockets.connect(url + ("?" + query if query else ""), max_size=None)
        c = cls(ws)
        c.checker = checker
        c.welcome = await c.recv()
        assert c.welcome["type"] == "welcome", c.welcome
        return c

    async def recv(self, timeout=WAIT):
        frame = await super().recv(timeout)
        self.checker.server(frame)
        return frame

    async def send_message(self, msg):
        self.checker.command(msg)
        await super().send_message(msg)

    async def refused(self, frame, code, schema_valid):
        """Sends a frame tabd refuses (a dict, or raw text) and returns the error. A dict must
        pass client-frame.json exactly when `schema_valid`."""
        if isinstance(frame, dict):
            assert (not problems("client-frame.json", frame)) == schema_valid, frame
            frame = json.dumps(frame)
        await self.ws.send(frame)
        while True:
            f = await self.recv()
            if f["type"] in ("error", "ack", "snapshot", "pong"):
                assert f["type"] == "error" and f["code"] == code, (frame, f)
                return f

    async def until_event(self, predicate):
        """Reads until an event matching `predicate` arrived."""
        while True:
            f = await self.recv()
            if f["type"] == "events" and any(predicate(e) for e in f["events"]):
                return f


def api(d, checker, schema, method, path, body=None, raw=None, status=200, headers=None):
    """An HTTP API call whose answer must have `status` and match `schema`."""
    if isinstance(body, dict) and path.endswith("/commands"):
        checker.command(body)
    got, answer, _ = call(d, method, path, body=body, raw=raw, headers=headers)
    assert got == status, (method, path, got, answer)
    if schema is None:
        assert answer is None
    else:
        check(schema, answer)
    return answer


async def test_every_frame_and_event_tabd_sends_matches_its_schema(daemon):
    chk = Checker()
    a = await Checked.open(chk, daemon.ws, name="schema-a")
    b = await Checked.open(chk, daemon.ws, name="schema-b")
    await a.until_seq(b.welcome["snapshot"]["seq"])  # b's clientJoined
    values = ["text", 42, 2.5, True, False, {"a": [1, None], "b": {"c": "d"}}, [1, "x", None], None]
    script = [
        ("select", {"tab": "favorites"}, ["selected", "disappear", "firstAppear", "appear"]),
        ("push", {"route": "detail"}, ["pushed", "disappear", "firstAppear", "appear"]),
        ("pop", {}, ["disappear", "popped", "appear"]),
        ("push", {"tab": "profile", "route": "elsewhere"}, ["pushed"]),
        ("push", {"route": "a"}, ["pushed", "disappear", "firstAppear", "appear"]),
        ("push", {"tab": None, "route": "b"}, ["pushed", "disappear", "firstAppear", "appear"]),
        ("popToRoot", {"tab": None}, ["disappear", "popped", "appear"]),
        ("tap", {"tab": "favorites"}, ["scrollToTop"]),
        ("scroll", {"offset": 12.5}, ["scrolled"]),
        ("scroll", {"tab": "home", "offset": 3}, ["scrolled"]),
        *[("set", {"key": f"k{i}", "value": v}, ["valueSet"]) for i, v in enumerate(values)],
        ("set", {"tab": "home", "key": "k0", "value": "other tab"}, ["valueSet"]),
        ("set", {"key": "k0", "value": None}, ["valueSet"]),
        ("addTab", {"tab": {"id": "mail", "title": "Mail", "icon": "envelope", "color": "#ff9500", "badge": "2"},
                    "index": 1}, ["tabAdded"]),
        ("addTab", {"tab": {"id": "news", "title": "News", "icon": "newspaper", "color": "#5856D6"}}, ["tabAdded"]),
        ("updateTab", {"tab": {"id": "mail", "title": "Post", "badge": None}}, ["tabUpdated"]),
        ("moveTab", {"tab": "mail", "index": 4}, ["tabMoved"]),
        ("removeTab", {"tab": "mail"}, ["tabRemoved"]),
        ("removeTab", {"tab": "news"}, ["tabRemoved"]),
        ("tap", {"tab": "profile"}, ["selected", "disappear", "firstAppear", "appear"]),
        ("removeTab", {"tab": "profile"}, ["disappear", "tabRemoved", "selected", "appear"]),
        ("select", {"tab": "home", "ref": None}, ["selected", "disappear", "appear"]),
        ("pop", {}, None),
        ("sync", {}, None),
        ("ping", {"ref": None}, None),
        ("clients", {"limit": 1}, None),
    ]
    for type_, fields, expected in script:
        events, reply = await a.command(type_, **fields)
        assert reply["type"] == {"sync": "snapshot", "ping": "pong", "clients": "clients"}.get(type_, "ack"), (type_, reply)
        assert (kinds(events) if events else None) == expected, (type_, events)
    assert chk.values[:len(values)] == values, "values come back exactly as sent"

    # Errors: a frame tabd refuses for its shape fails client-frame.json too.
    e = await a.refused("{", "bad_json", False)
    assert e["ref"] is None
    e = await a.refused("[1]", "bad_json", False)
    assert e["ref"] is None
    await a.refused({"type": "fly", "ref": "e1"}, "bad_command", False)
    await a.refused({"type": "select", "ref": "e2"}, "bad_command", False)
    await a.refused({"type": "scroll", "offset": "far", "ref": "e3"}, "bad_command", False)
    await a.refused({"type": "moveTab", "tab": "home", "index": 1.5, "ref": "e4"}, "bad_command", False)
    e = await a.refused({"type": "select", "tab": "nope", "ref": "e5"}, "unknown_tab", True)
    assert e["ref"] == "e5"
    await a.refused({"type": "push", "route": "", "ref": "e6"}, "invalid", False)
    await a.refused({"type": "push", "route": "x" * 129, "ref": "e7"}, "invalid", False)
    await a.refused({"type": "set", "key": "", "value": 1, "ref": "e8"}, "invalid", False)
    await a.refused({"type": "scroll", "offset": -1, "ref": "e9"}, "invalid", False)
    await a.refused({"type": "addTab", "tab": {"id": "Bad", "title": "T", "icon": "i", "color": "#000000"}, "ref": "e10"},
                    "invalid", False)
    await a.refused({"type": "addTab", "tab": {"id": "ok", "title": "T", "icon": "i", "color": "red"}, "ref": "e11"},
                    "invalid", False)
    await a.refused({"type": "updateTab", "tab": {"id": "home", "badge": "123456789"}, "ref": "e12"}, "invalid", False)
    await a.refused({"type": "moveTab", "tab": "home", "index": 40, "ref": "e13"}, "invalid", False)
    e = await a.refused({"type": "ping", "ref": "r" * 65}, "invalid", False)
    assert e["ref"] is None

    # The HTTP API: the answers of /commands are frames; its events reach a, by "api".
    api(daemon, chk, "api-command-answer.json", "POST", "/api/rooms/main/commands",
        {"type": "set", "key": "from-api", "value": {"n": 1}, "ref": "h1"})
    await a.until_event(lambda e: e["kind"] == "valueSet" and e["key"] == "from-api")
    assert a.batches[-1]["by"] == "api" and a.batches[-1]["ref"] == "h1"
    check("pong.json", api(daemon, chk, "api-command-answer.json", "POST", "/api/rooms/main/commands", {"type": "ping"}))
    check("snapshot.json", api(daemon, chk, "api-command-answer.json", "POST", "/api/rooms/main/commands",
                               {"type": "sync", "ref": "h2"}))
    refused = api(daemon, chk, "api-command-answer.json", "POST", "/api/rooms/main/commands",
                  {"type": "select", "tab": "nope"}, status=404)
    check("error.json", refused)
    assert refused["code"] == "unknown_tab" and refused["ref"] is None
    check("error.json", api(daemon, chk, "api-command-answer.json", "POST", "/api/rooms/main/commands", raw=b"{",
                            status=400))
    api(daemon, chk, "api-created.json", "PUT", "/api/rooms/schema-room", status=201)
    api(daemon, chk, "api-created.json", "PUT", "/api/rooms/schema-tabs",
        {"tabs": [{"id": "solo", "title": "Solo", "icon": "star", "color": "#abcdef", "badge": "new"}]}, status=201)
    room = api(daemon, chk, "api-room.json", "GET", "/api/rooms/main")
    assert room["epoch"] == a.welcome["epoch"]
    listed = api(daemon, chk, "api-rooms.json", "GET", "/api/rooms")
    assert [r["id"] for r in listed["rooms"]] == ["main", "schema-room", "schema-tabs"] and listed["next"] is None
    page = api(daemon, chk, "api-rooms.json", "GET", "/api/rooms?limit=1")
    assert page["next"] == "main"
    api_codes = set()
    for method, path, body, status in [
        ("PUT", "/api/rooms/schema-room", None, 409),
        ("GET", "/api/rooms/no-such-room", None, 404),
        ("GET", "/api/rooms/bad.id", None, 400),
        ("GET", "/api/rooms?limit=0", None, 400),
        ("POST", "/api/rooms", None, 405),
        ("GET", "/api/elsewhere", None, 404),
        ("PUT", "/api/rooms/schema-x", {"tabs": [{"id": "Bad"}]}, 400),
    ]:
        api_codes.add(api(daemon, chk, "api-error.json", method, path, body, status=status)["code"])
    api_codes.add(api(daemon, chk, "api-error.json", "PUT", "/api/rooms/schema-y", raw=b"{", status=400)["code"])
    assert api_codes == {"room_exists", "unknown_room", "invalid", "method_not_allowed", "not_found", "bad_json"}
    api(daemon, chk, None, "DELETE", "/api/rooms/schema-room", status=204)

    # Presence and resume: b leaves; it comes back with resume and gets no snapshot, only batches.
    seen, epoch, b_id = b.welcome["snapshot"]["seq"], b.welcome["epoch"], b.welcome["client"]
    await b.close()
    await a.until_event(lambda e: e["kind"] == "clientLeft" and e["client"] == b_id)
    back = await Checked.open(chk, daemon.ws, name="schema-b", resume=seen, epoch=epoch)
    assert back.welcome["resumed"] is True and "snapshot" not in back.welcome
    me = back.welcome["client"]
    await back.until_event(lambda e: e["kind"] == "clientJoined" and e["client"]["id"] == me)
    assert back.batches[0]["events"][0]["seq"] == seen + 1
    assert [f["events"] for f in back.batches[:len(a.batches) - 1]] == [f["events"] for f in a.batches[1:]]
    fresh = await Checked.open(chk, daemon.ws, resume=seen, epoch="another-epoch")
    assert fresh.welcome["resumed"] is False and fresh.welcome["client"] == fresh.welcome["snapshot"]["clients"][-1]["id"]

    assert chk.frames == set(SERVER_FRAMES)
    assert chk.kinds == set(LISTED_KINDS), set(LISTED_KINDS) - chk.kinds
    assert chk.codes == {"bad_json", "bad_command", "unknown_tab", "invalid"}
    assert chk.welcomes == {(False, "control"), (True, "control")}
    assert chk.commands == set(COMMANDS)
    for c in (a, back, fresh):
        await c.close()


async def test_the_frames_and_events_of_a_counted_room_match_their_schemas(make_daemon):
    """A room past --presence-limit: the switch, counts, reserved ids, a counted snapshot,
    pages of `clients` over the socket and the API, and the room listed again."""
    d = make_daemon("--presence-limit", "2", "--presence-interval", "50")
    chk = Checker()
    a = await Checked.open(chk, d.ws, name="watcher")
    others = [await Checked.open(chk, d.ws, name=f"v{i}") for i in range(3)]  # the second crosses
    await a.until_event(lambda e: e["kind"] == "presenceCounted")
    late = await Checked.open(chk, d.ws, name="late")
    assert late.welcome["snapshot"]["presence"] == "counted" and late.welcome["snapshot"]["clients"] == []
    await a.until_event(lambda e: e["kind"] == "clientCount" and e["count"] == 5)
    _, page = await a.command("clients", limit=2)
    assert len(page["clients"]) == 2 and page["next"] is not None
    _, rest = await a.command("clients", after=page["next"], limit=1000)
    assert rest["next"] is None and len(page["clients"]) + len(rest["clients"]) == 5
    _, sync = await a.command("sync")
    assert sync["snapshot"]["presence"] == "counted"
    listed = api(d, chk, "clients.json", "GET", "/api/rooms/main/clients?limit=3")
    assert [c["id"] for c in listed["clients"]] == [c["id"] for c in page["clients"] + rest["clients"]][:3]
    api(d, chk, "api-room.json", "GET", "/api/rooms/main")
    check("clients.json", api(d, chk, "api-command-answer.json", "POST", "/api/rooms/main/commands",
                              {"type": "clients", "after": page["next"]}))
    assert api(d, chk, "api-error.json", "GET", "/api/rooms/main/clients?limit=0", status=400)["code"] == "invalid"
    await a.refused({"type": "clients", "after": "p1", "ref": "x1"}, "invalid", False)
    seen = a.last_seq()
    for c in [a, late, *others]:
        await c.close()
    deadline = time.monotonic() + WAIT
    while call(d, "GET", "/api/rooms")[1]["rooms"][0]["clients"] > 0:  # every leave taken in
        assert time.monotonic() < deadline, "the room did not empty"
        await asyncio.sleep(0.02)
    back = await Checked.open(chk, d.ws, resume=seen, epoch=a.welcome["epoch"])
    await back.until_event(lambda e: e["kind"] == "clientJoined" and e["client"]["id"] == back.welcome["client"])
    assert "presenceListed" in [e["kind"] for f in back.batches for e in f["events"]]
    assert chk.kinds >= set(COUNTED_KINDS), set(COUNTED_KINDS) - chk.kinds
    await back.close()


async def test_roles_forbidden_and_rate_limited_frames_match_their_schemas(make_daemon, tmp_path):
    key = tmp_path / "tabd.key"
    key.write_bytes(KEY + b"\n")
    key.chmod(0o600)
    d = make_daemon("--auth-secret-file", str(key), "--rate-limit", "1")
    chk = Checker()
    viewer = await Checked.open(chk, d.ws, room="lobby", token=sign(claims("lobby", "view")))
    admin = await Checked.open(chk, d.ws, room="lobby", token=sign(claims("lobby", "admin", name="boss")))
    assert admin.welcome["snapshot"]["clients"][-1] == {"id": admin.welcome["client"], "name": "boss"}
    _, reply = await viewer.command("select", tab="favorites")
    assert reply["code"] == "forbidden" and reply["ref"] == "r1"
    refs = [await viewer.send("ping") for _ in range(6)]
    replies = []
    while len(replies) < len(refs):
        f = await viewer.recv()
        if f["type"] in ("pong", "error"):
            replies.append(f)
    limited = [f for f in replies if f["type"] == "error"]
    assert limited and all(f["code"] == "rate_limited" and f["ref"] is None for f in limited), replies
    assert chk.welcomes == {(False, "view"), (False, "admin")}
    assert chk.codes == {"forbidden", "rate_limited"}

    assert api(d, chk, "api-error.json", "GET", "/api/rooms", status=401)["code"] == "unauthorized"
    control = {"Authorization": "Bearer " + sign(claims("lobby", "control"))}
    assert api(d, chk, "api-error.json", "GET", "/api/rooms/lobby", status=403, headers=control)["code"] == "forbidden"
    admin_h = {"Authorization": "Bearer " + sign(claims("lobby", "admin"))}
    api(d, chk, "api-room.json", "GET", "/api/rooms/lobby", headers=admin_h)
    await viewer.close()
    await admin.close()


# MARK: The schemas refuse what tabd never sends

TAB = {"id": "home", "title": "Home", "icon": "house", "color": "#FF3B30", "badge": None,
       "stack": [{"id": "p1", "route": "root", "appeared": True, "appearCount": 1}], "scroll": 0, "values": {}}
STATE = {"seq": 3, "selected": "home", "scrollToTop": 0, "tabs": [TAB], "presence": "listed", "clientCount": 1,
         "clients": [{"id": "c1", "name": "kiosk-1"}]}
COUNTED = {**STATE, "presence": "counted", "clientCount": 150, "clients": []}
RESUMED = {"type": "welcome", "protocol": 1, "server": "tabd 0.1.0", "client": "c2", "room": "main", "role": "control",
           "epoch": "5ceaa140621e766d", "resumed": True}
FRESH = {**RESUMED, "resumed": False, "snapshot": STATE}
PUSHED = {"seq": 8, "kind": "pushed", "tab": "home", "page": "p4", "route": "detail"}
EVENTS = {"type": "events", "by": "c1", "ref": "r2", "events": [PUSHED]}
CROSSING = {"type": "events", "by": "tabd", "ref": None, "events": [
    {"seq": 9, "kind": "clientJoined", "client": {"id": "c100", "name": "n"}},
    {"seq": 10, "kind": "clientIdsReserved", "from": 101, "count": 64},
    {"seq": 11, "kind": "presenceCounted", "count": 101}]}
CLIENTS = {"type": "clients", "ref": "r3", "clients": [{"id": "c1", "name": "kiosk-1"}, {"id": "c7", "name": "c7"}],
           "next": "c7"}


def without(d, key):
    return {k: v for k, v in d.items() if k != key}


def tab(**changes):
    return {**TAB, **changes}


CASES = [
    # (schema, instance, valid, what)
    ("welcome.json", RESUMED, True, "a resumed welcome"),
    ("welcome.json", FRESH, True, "a fresh welcome"),
    ("welcome.json", {**RESUMED, "snapshot": STATE}, False, "a resumed welcome with a snapshot"),
    ("welcome.json", without(FRESH, "snapshot"), False, "a fresh welcome without a snapshot"),
    ("welcome.json", without(FRESH, "epoch"), False, "a welcome without epoch"),
    ("welcome.json", {**FRESH, "role": "owner"}, False, "an unknown role"),
    ("welcome.json", {**FRESH, "room": "a room"}, False, "a room id with a space"),
    ("welcome.json", {**FRESH, "room": "r" * 65}, False, "a room id of 65 characters"),
    ("events.json", EVENTS, True, "an events frame"),
    ("events.json", without(EVENTS, "by"), False, "an events frame without by"),
    ("events.json", {**EVENTS, "events": []}, False, "an events frame without events"),
    ("events.json", {**EVENTS, "ref": None, "by": "tabd"}, True, "a presence batch"),
    ("event.json", PUSHED, True, "pushed"),
    ("event.json", without(PUSHED, "route"), False, "pushed without route"),
    ("event.json", {**PUSHED, "extra": 1}, False, "an event with a member tabd never sends"),
    ("event.json", {"seq": 5, "kind": "teleported", "tab": "home"}, False, "an unknown event kind"),
    ("event.json", {"seq": 0, "kind": "tabRemoved", "tab": "home"}, False, "an event at seq 0"),
    ("event.json", {"seq": 5, "kind": "clientJoined", "client": {"id": "c3", "name": "x"}}, True, "clientJoined"),
    ("event.json", {"seq": 5, "kind": "clientJoined", "client": "c3"}, False, "clientJoined with an id"),
    ("event.json", {"seq": 5, "kind": "clientLeft", "client": "c3"}, True, "clientLeft"),
    ("event.json", {"seq": 5, "kind": "clientLeft", "client": {"id": "c3", "name": "x"}}, False, "clientLeft with an object"),
    ("event.json", {"seq": 5, "kind": "valueSet", "tab": "home", "key": "k", "value": None}, True, "valueSet null"),
    ("event.json", {"seq": 5, "kind": "valueSet", "tab": "home", "key": "k"}, False, "valueSet without value"),
    ("event.json", {"seq": 5, "kind": "popped", "tab": "home", "pages": []}, False, "popped nothing"),
    ("event.json", {"seq": 5, "kind": "scrolled", "tab": "home", "offset": -1}, False, "a negative offset"),
    ("event.json", {"seq": 5, "kind": "tabMoved", "tab": "home", "index": 32}, False, "a 33rd position"),
    ("event.json", {"seq": 5, "kind": "tabAdded", "tab": TAB, "index": 0}, False, "an added tab that already appeared"),
    ("tab.json", tab(stack=[{**TAB["stack"][0], "route": "start"}]), False, "a root page not named root"),
    ("tab.json", tab(stack=TAB["stack"] * 65), False, "a stack deeper than 64"),
    ("tab.json", tab(color="#ff3b30"), False, "a color tabd did not upper-case"),
    ("tab.json", tab(badge="123456789"), False, "a badge of 9 characters"),
    ("tab.json", tab(values={"": 1}), False, "an empty key"),
    ("state.json", {**STATE, "tabs": [TAB] * 33}, False, "33 tabs"),
    ("state.json", {**STATE, "seq": -1}, False, "a negative seq"),
    ("state.json", {**STATE, "clientCount": -1}, False, "a negative clientCount"),
    ("state.json", {**STATE, "clientCount": 101, "clients": [{"id": f"c{i}", "name": "n"} for i in range(1, 102)]},
     False, "101 clients in a frame's snapshot"),
    ("state.json#/$defs/full", {**STATE, "clientCount": 101,
                                "clients": [{"id": f"c{i}", "name": "n"} for i in range(1, 102)]},
     True, "101 clients in the API's uncapped snapshot"),
    # Big-room presence: the events, the counted snapshot, the clients command and its answer.
    ("events.json", CROSSING, True, "a presence batch that crosses --presence-limit"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150}, True, "presenceCounted"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "nodes": {"n1": 100, "n2": 50}}, True,
     "presenceCounted in a cluster"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": -1}, False, "presenceCounted of a negative count"),
    ("event.json", {"seq": 5, "kind": "presenceCounted"}, False, "presenceCounted without count"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "nodes": {}}, False, "presenceCounted of no node"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "nodes": {"n1": -1}}, False,
     "a node's negative count"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "nodes": {"n1": 1.5}}, False,
     "a node's fractional count"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "nodes": {"": 150}}, False, "a node without a name"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "nodes": [150]}, False, "nodes as an array"),
    ("event.json", {"seq": 5, "kind": "presenceCounted", "count": 150, "clients": []}, False,
     "presenceCounted with a member tabd never sends"),
    ("event.json", {"seq": 5, "kind": "clientCount", "count": 0}, True, "clientCount"),
    ("event.json", {"seq": 5, "kind": "clientCount", "node": "web1", "count": 70}, True, "clientCount of a node"),
    ("event.json", {"seq": 5, "kind": "clientCount", "node": 1, "count": 70}, False, "a node that is not a string"),
    ("event.json", {"seq": 5, "kind": "clientCount", "count": "70"}, False, "clientCount as a string"),
    ("event.json", {"seq": 5, "kind": "clientCount", "node": "web1"}, False, "clientCount without count"),
    ("event.json", {"seq": 5, "kind": "presenceListed", "clients": []}, True, "presenceListed"),
    ("event.json", {"seq": 5, "kind": "presenceListed", "node": "web1", "clients": [{"id": "c9", "name": "x"}]}, True,
     "presenceListed of a node"),
    ("event.json", {"seq": 5, "kind": "presenceListed"}, False, "presenceListed without clients"),
    ("event.json", {"seq": 5, "kind": "presenceListed", "clients": ["c9"]}, False, "presenceListed of ids"),
    ("event.json", {"seq": 5, "kind": "presenceListed", "clients": [], "count": 0}, False,
     "presenceListed with a count"),
    ("event.json", {"seq": 5, "kind": "clientIdsReserved", "from": 101, "count": 64}, True, "clientIdsReserved"),
    ("event.json", {"seq": 5, "kind": "clientIdsReserved", "node": "web1", "from": 1, "count": 1}, True,
     "clientIdsReserved by a node"),
    ("event.json", {"seq": 5, "kind": "clientIdsReserved", "from": 0, "count": 64}, False, "ids reserved from c0"),
    ("event.json", {"seq": 5, "kind": "clientIdsReserved", "from": 101, "count": 0}, False, "no id reserved"),
    ("event.json", {"seq": 5, "kind": "clientIdsReserved", "from": "c101", "count": 64}, False, "from as an id"),
    ("event.json", {"seq": 5, "kind": "clientIdsReserved", "count": 64}, False, "clientIdsReserved without from"),
    ("state.json", COUNTED, True, "a counted snapshot"),
    ("state.json", {**COUNTED, "nodes": {"n1": 100, "n2": 50}}, True, "a cluster's counted snapshot"),
    ("state.json#/$defs/full", {**COUNTED, "nodes": {"n1": 150}}, True, "a counted room in the API's snapshot"),
    ("state.json", without(STATE, "presence"), False, "a snapshot without presence"),
    ("state.json", {**STATE, "presence": "capped"}, False, "an unknown presence"),
    ("state.json", {**COUNTED, "clients": STATE["clients"]}, False, "a counted snapshot that lists a client"),
    ("state.json#/$defs/full", {**COUNTED, "clients": STATE["clients"]}, False,
     "a counted room in the API's snapshot that lists a client"),
    ("state.json", {**STATE, "nodes": {"n1": 1}}, False, "a listed snapshot with nodes"),
    ("state.json", {**COUNTED, "nodes": {"n1": -1}}, False, "a snapshot's negative node count"),
    ("state.json", {**COUNTED, "nodes": {}}, False, "a snapshot's nodes naming no node"),
    ("welcome.json", {**FRESH, "snapshot": COUNTED}, True, "a welcome into a counted room"),
    ("snapshot.json", {"type": "snapshot", "ref": "r1", "snapshot": COUNTED}, True, "a sync answer of a counted room"),
    ("snapshot.json", {"type": "snapshot", "ref": "r1", "snapshot": without(STATE, "presence")}, False,
     "a sync answer without presence"),
    ("clients.json", CLIENTS, True, "a page of clients"),
    ("clients.json", {**CLIENTS, "next": None}, True, "the last page of clients"),
    ("clients.json", {**CLIENTS, "clients": [], "next": None}, True, "no clients"),
    ("clients.json", {"type": "clients", "ref": None, "node": "web1", "clients": [], "next": None}, True,
     "a node's page of clients"),
    ("clients.json", without(CLIENTS, "next"), False, "a page of clients without next"),
    ("clients.json", without(CLIENTS, "ref"), False, "a page of clients without ref"),
    ("clients.json", {**CLIENTS, "next": 7}, False, "a next that is no client id"),
    ("clients.json", {**CLIENTS, "clients": ["c1"]}, False, "a page of client ids"),
    ("clients.json", {**CLIENTS, "clients": [{"id": f"c{i}", "name": "n"} for i in range(1, 1002)]}, False,
     "a page of 1001 clients"),
    ("clients.json", {**CLIENTS, "clientCount": 2}, False, "a page of clients with a member tabd never sends"),
    ("server-frame.json", CLIENTS, True, "a clients frame"),
    ("server-frame.json", {**CLIENTS, "type": "client"}, False, "a clients frame of another type"),
    ("api-command-answer.json", CLIENTS, True, "a clients frame as the API's answer"),
    ("client-frame.json", {"type": "clients"}, True, "a clients command"),
    ("client-frame.json", {"type": "clients", "ref": "r3", "after": "c7", "limit": 1000}, True,
     "a clients command for the next page"),
    ("client-frame.json", {"type": "clients", "limit": 0}, False, "clients of limit 0"),
    ("client-frame.json", {"type": "clients", "limit": 1001}, False, "clients of limit 1001"),
    ("client-frame.json", {"type": "clients", "limit": 2.5}, False, "a fractional limit"),
    ("client-frame.json", {"type": "clients", "after": 7}, False, "an after that is not a string"),
    ("client-frame.json", {"type": "clients", "after": None, "limit": None}, True, "a clients command of nulls"),
    ("client-frame.json", {"type": "clients", "after": "7"}, False, "an after that is no cursor"),
    ("client-frame.json", {"type": "clients", "ref": 7}, False, "a clients command of a ref that is not a string"),
    ("error.json", {"type": "error", "ref": "r1", "code": "unknown_tab", "message": "no tab 'x'"}, True, "an error"),
    ("error.json", {"type": "error", "ref": "r1", "code": "rate_limited", "message": "slow down"}, False,
     "rate_limited with a ref"),
    ("error.json", {"type": "error", "ref": None, "code": "oops", "message": "?"}, False, "an unknown error code"),
    ("ack.json", {"type": "ack", "ref": "r" * 65, "seq": 3}, False, "a ref of 65 characters"),
    ("ack.json", {"type": "ack", "ref": None, "seq": 2.5}, False, "a fractional seq"),
    ("server-frame.json", {"type": "hello"}, False, "an unknown frame type"),
    ("server-frame.json", {"type": "pong", "ref": None}, True, "a pong"),
    ("client-frame.json", {"type": "select", "tab": "home"}, True, "a select"),
    ("client-frame.json", {"type": "ping", "whatever": [1]}, True, "a member tabd ignores"),
    ("client-frame.json", {"type": "fly"}, False, "an unknown command type"),
    ("client-frame.json", {"tab": "home"}, False, "a command without type"),
    ("client-frame.json", {"type": "set", "key": "k"}, False, "set without value"),
    ("client-frame.json", {"type": "ping", "ref": 7}, False, "a ref that is not a string"),
    ("api-error.json", {"type": "error", "code": "room_exists", "message": "room 'x' exists"}, True, "an API error"),
    ("api-error.json", {"type": "error", "code": "room_exists", "message": "m", "ref": None}, False,
     "an API error with a ref"),
]


@pytest.mark.parametrize("schema,instance,valid,what", CASES, ids=[c[3] for c in CASES])
def test_the_schemas_accept_and_refuse(schema, instance, valid, what):
    assert (not problems(schema, instance)) == valid, what


# MARK: The files themselves

def refs(node):
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for v in node.values():
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def test_every_schema_file_is_a_valid_2020_12_schema_whose_refs_resolve():
    names = sorted(n for n in os.listdir(SCHEMA_DIR) if not n.startswith("."))
    assert all(n.endswith(".json") for n in names), names
    docs, registry = schemas()
    expected = {f"{t}.json" for t in SERVER_FRAMES} | {
        "server-frame.json", "client-frame.json", "commands.json", "event.json", "state.json", "tab.json", "page.json",
        "client.json", "common.json", "api-rooms.json", "api-room.json", "api-created.json", "api-error.json",
        "api-command-answer.json", "refresh.json", "outbox-event.json", "room-stream-event.json"}
    assert set(docs) == expected
    for name, doc in docs.items():
        assert doc["$schema"] == DRAFT and doc["$id"] == name, name
        Draft202012Validator.check_schema(doc)
        resolver = registry.resolver(base_uri=doc["$id"])
        for r in refs(doc):
            resolver.lookup(r)  # raises when it does not resolve
    server = docs["server-frame.json"]
    assert server["properties"]["type"]["enum"] == SERVER_FRAMES
    assert server["oneOf"] == [{"$ref": f"{t}.json"} for t in SERVER_FRAMES]
    commands = docs["commands.json"]
    assert commands["properties"]["type"]["enum"] == COMMANDS == list(commands["$defs"])
    assert all(commands["$defs"][t]["properties"]["type"] == {"const": t} for t in COMMANDS)
    event = docs["event.json"]
    assert event["properties"]["kind"]["enum"] == EVENT_KINDS == list(event["$defs"])
    assert all(event["$defs"][k]["properties"]["kind"] == {"const": k} for k in EVENT_KINDS)
    assert all(event["$defs"][k]["additionalProperties"] is False for k in EVENT_KINDS)
