"""docs/openapi.json, the OpenAPI 3.1 description of /api/*, held to the server: every
operation is driven against a real tabd, and each answer's status must be one the document
gives for that operation, its body valid against the schema the document names for it (the
files of docs/schema/); a method the document does not give a path is refused 405 with an
`Allow` of exactly the documented ones; and PROTOCOL.md's table of the API names the same
operations."""
import json
import os
import re
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, WAIT
from test_auth import claims, key_file, sign  # noqa: F401 (key_file: a fixture)
from sse import EventStream
from test_schema import validator

DOC = os.path.join(ROOT, "docs", "openapi.json")
METHODS = ("get", "put", "post", "delete")


def document():
    with open(DOC, encoding="utf-8") as f:
        return json.load(f)


def operations(doc):
    """(method, path template, operation) for every operation of the document."""
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


def refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def schema_name(ref):
    """`schema/api-rooms.json#/x` → `api-rooms.json#/x`, the name test_schema's validator takes."""
    assert ref.startswith("schema/"), ref
    return ref[len("schema/"):]


def test_the_document_is_openapi_3_1_and_every_ref_resolves():
    doc = document()
    assert doc["openapi"] == "3.1.0" and doc["info"]["title"] and doc["paths"]
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids)) == 8, ids
    for _, path, op in operations(doc):
        assert path.startswith("/api/"), path
        for status, response in op["responses"].items():
            assert re.fullmatch(r"[1-5][0-9][0-9]", status), (path, status)
            assert response["description"], (path, status)
    for ref in refs(doc):
        validator(schema_name(ref))  # raises when the file or the pointer is not there


class API:
    """Calls on a daemon: (status, headers, JSON body or None)."""

    def __init__(self, daemon, token):
        self.daemon, self.token = daemon, token

    def call(self, method, path, body=None, token=True, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {self.token if token is True else token}"
        req = urllib.request.Request(self.daemon.http.rstrip("/") + path, data=data, method=method.upper(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=WAIT) as r:
                status, head, text = r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            status, head, text = e.code, dict(e.headers), e.read()
        return status, head, json.loads(text) if text else None


def stream(d, path, token):
    """(status, headers, the first event's data or the error's JSON) of a stream's GET."""
    s = EventStream(d.http, path, {"Authorization": f"Bearer {token}"} if token else {})
    try:
        body = s.next_event()["data"] if s.status == 200 else (json.loads(s.body) if s.body else None)
        return s.status, s.headers, body
    finally:
        s.close()


class Conformance:
    """Checks each answer against the document, and records what was seen."""

    def __init__(self, doc):
        self.doc = doc
        self.seen = set()  # (operationId, status)

    def check(self, method, template, answer):
        status, headers, body = answer
        op = self.doc["paths"][template][method]
        responses = op["responses"]
        assert str(status) in responses, f"{method.upper()} {template} answered {status}, which the document does not give: {body}"
        content = responses[str(status)].get("content")
        if content and "text/event-stream" in content:
            assert headers.get("content-type", "").startswith("text/event-stream")
            errors = list(validator(schema_name(content["text/event-stream"]["schema"]["$ref"])).iter_errors(body))
            assert not errors, f"{method.upper()} {template} {status}: {errors[0].message} in {json.dumps(body)[:400]}"
        elif content:
            assert headers.get("Content-Type", headers.get("content-type", "")).startswith("application/json")
            errors = list(validator(schema_name(content["application/json"]["schema"]["$ref"])).iter_errors(body))
            assert not errors, f"{method.upper()} {template} {status}: {errors[0].message} in {json.dumps(body)[:400]}"
        else:
            assert body is None, f"{method.upper()} {template} {status} has a body the document does not give"
        self.seen.add((op["operationId"], status))
        return answer


def test_every_operation_answers_as_the_document_says(make_daemon, key_file):
    doc = document()
    d = make_daemon("--auth-secret-file", key_file, "--webhook-events", "roomCreated")
    api = API(d, sign(claims(room="*", role="admin")))
    room_admin = sign(claims(room="r1", role="admin"))
    seen = Conformance(doc)
    c = seen.check

    c("get", "/api/rooms", api.call("get", "/api/rooms"))
    c("get", "/api/rooms", api.call("get", "/api/rooms?limit=0"))
    c("get", "/api/rooms", api.call("get", "/api/rooms", token=False))
    c("get", "/api/rooms", api.call("get", "/api/rooms", token=room_admin))
    c("put", "/api/rooms/{id}", api.call("put", "/api/rooms/r1"))
    c("put", "/api/rooms/{id}", api.call("put", "/api/rooms/r1"))
    c("put", "/api/rooms/{id}", api.call("put", "/api/rooms/r2", {"tabs": [{"id": "a", "title": "A", "icon": "house", "color": "#112233"}]}))
    c("put", "/api/rooms/{id}", api.call("put", "/api/rooms/r3", raw=b"{not json"))
    c("put", "/api/rooms/{id}", api.call("put", "/api/rooms/r3", raw=b" " * 70_000))
    c("get", "/api/rooms/{id}", api.call("get", "/api/rooms/r1"))
    c("get", "/api/rooms/{id}", api.call("get", "/api/rooms/nobody"))
    c("get", "/api/rooms/{id}", api.call("get", "/api/rooms/bad!id"))
    c("get", "/api/rooms/{id}", api.call("get", "/api/rooms/r1", token=sign(claims(room="r1", role="control"))))
    c("get", "/api/rooms/{id}/clients", api.call("get", "/api/rooms/r1/clients"))
    c("get", "/api/rooms/{id}/clients", api.call("get", "/api/rooms/r1/clients?limit=0"))
    c("get", "/api/rooms/{id}/clients", api.call("get", "/api/rooms/nobody/clients"))
    for command in ({"type": "tap", "tab": "profile"}, {"type": "sync"}, {"type": "ping"}, {"type": "clients"}):
        status, _, body = c("post", "/api/rooms/{id}/commands", api.call("post", "/api/rooms/r1/commands", command))
        assert status == 200, body
    c("post", "/api/rooms/{id}/commands", api.call("post", "/api/rooms/r1/commands", raw=b"{not json"))
    c("post", "/api/rooms/{id}/commands", api.call("post", "/api/rooms/r1/commands", {"type": "tap", "tab": "nope"}))
    c("post", "/api/rooms/{id}/commands", api.call("post", "/api/rooms/r1/commands", raw=b" " * 70_000))
    c("delete", "/api/rooms/{id}", api.call("delete", "/api/rooms/r2"))
    c("delete", "/api/rooms/{id}", api.call("delete", "/api/rooms/r2"))
    # The two streams: the first event's data against the document's schema, or the refusal.
    for template, path in (("/api/rooms/{id}/events", "/api/rooms/r1/events"), ("/api/rooms/{id}/events", "/api/rooms/r1/events?after=x"),
                           ("/api/rooms/{id}/events", "/api/rooms/nobody/events"), ("/api/events", "/api/events?after=0"),
                           ("/api/events", "/api/events?after=-1")):
        for token in (True, False, room_admin if template == "/api/events" else sign(claims(room="r1", role="view"))):
            c("get", template, stream(d, path, api.token if token is True else token))

    # Each operation's success, and its refusals of a bad request, a missing or a weak credential.
    # Each operation's success, and its refusals of a bad request, a missing or a weak credential.
    for op, status in [("listRooms", 200), ("listRooms", 400), ("listRooms", 401), ("listRooms", 403), ("createRoom", 201),
                       ("createRoom", 409), ("createRoom", 400), ("createRoom", 413), ("readRoom", 200), ("readRoom", 404),
                       ("readRoom", 400), ("readRoom", 403), ("readClients", 200), ("readClients", 400), ("readClients", 404),
                       ("postCommand", 200), ("postCommand", 400), ("postCommand", 404), ("postCommand", 413),
                       ("deleteRoom", 204), ("deleteRoom", 404), ("followRoom", 200), ("followRoom", 400), ("followRoom", 401),
                       ("followRoom", 403), ("followRoom", 404), ("followEvents", 200), ("followEvents", 400),
                       ("followEvents", 401), ("followEvents", 403)]:
        assert (op, status) in seen.seen, f"{op} never answered {status}"


def test_a_room_past_its_api_budget_is_answered_as_documented(make_daemon):
    doc = document()
    seen = Conformance(doc)
    d = make_daemon("--token", "t0ken-for-the-api", "--rate-limit", "1")
    api = API(d, "t0ken-for-the-api")
    api.call("put", "/api/rooms/busy")
    statuses = set()
    for _ in range(6):
        statuses.add(seen.check("post", "/api/rooms/{id}/commands", api.call("post", "/api/rooms/busy/commands", {"type": "ping"}))[0])
        statuses.add(seen.check("get", "/api/rooms/{id}", api.call("get", "/api/rooms/busy"))[0])
    assert 429 in statuses, statuses


def test_a_method_the_document_does_not_give_is_refused_with_the_documented_ones(daemon):
    doc = document()
    api = API(daemon, None)
    concrete = {"/api/rooms": "/api/rooms", "/api/rooms/{id}": "/api/rooms/r1", "/api/rooms/{id}/clients": "/api/rooms/r1/clients",
                "/api/rooms/{id}/commands": "/api/rooms/r1/commands", "/api/rooms/{id}/events": "/api/rooms/r1/events",
                "/api/events": "/api/events"}
    assert set(concrete) == set(doc["paths"]), "a path of the document this test does not try"
    for template, path in concrete.items():
        documented = {m.upper() for m in METHODS if m in doc["paths"][template]}
        for method in ["GET", "PUT", "POST", "DELETE", "PATCH"]:
            if method in documented:
                continue
            status, headers, body = api.call(method, path, token=False, raw=b"{}" if method in ("PUT", "POST", "PATCH") else None)
            assert status == 405 and body["code"] == "method_not_allowed", (method, path, status, body)
            allowed = {m.strip() for m in headers.get("Allow", headers.get("allow", "")).split(",")} - {"HEAD"}
            assert allowed == documented, (path, allowed, documented)


def test_protocol_md_names_the_same_operations():
    doc = document()
    text = open(os.path.join(ROOT, "docs", "PROTOCOL.md"), encoding="utf-8").read()
    section = text.split("## HTTP API", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for method, path in re.findall(r"^\| `(GET|PUT|POST|DELETE) (/api/[^` ?]+)", section, re.M):
        rows.add((method.lower(), path.replace("ID", "{id}")))
    assert rows == {(m, p) for m, p, _ in operations(doc)}, rows
