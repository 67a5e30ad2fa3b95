"""Signed tokens and roles against a real tabd: every refusal (401/403) at the upgrade, on the
HTTP API and on /metrics; what view, control and admin may do; a token that runs out (4001)
and the resume with a fresh one; the key file's checks; `tabd token`.

Tokens are signed here by Python's standard library (hmac, hashlib, base64): a signer
independent of tabd's own. Tokens minted by `tabd token` are checked too.
"""
import asyncio
import base64
import hashlib
import hmac
import json
import os
import subprocess
import time

import pytest
import websockets
import websockets.exceptions

import rawws
from conftest import TABD, WAIT, Client, Daemon
from test_rooms import call, wait_for

KEY = b"k" * 16 + os.urandom(16).hex().encode()  # 48 bytes of printable text


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(claims=None, header=None, key=KEY, raw_payload=None, raw_header=None):
    """A compact JWT: the JSON header and claims, base64url, HMAC-SHA256 under `key`."""
    h = raw_header if raw_header is not None else json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode()
    p = raw_payload if raw_payload is not None else json.dumps(claims).encode()
    signing_input = f"{b64url(h)}.{b64url(p)}"
    mac = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


def claims(room="main", role="control", ttl=600, **extra):
    return {"room": room, "role": role, "exp": int(time.time()) + ttl, **extra}


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "tabd.key"
    path.write_bytes(KEY + b"\n")  # a text key: the final line break is not part of it
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def authd(make_daemon, key_file):
    return make_daemon("--auth-secret-file", key_file)


async def refused(url, headers=None):
    """The HTTP status of a refused WebSocket upgrade."""
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        await websockets.connect(url, additional_headers=headers)
    return e.value.response.status_code


BAD_TOKENS = {
    "bad signature": lambda: sign(claims(), key=b"x" * 48),
    "alg none": lambda: sign(claims(), header={"alg": "none", "typ": "JWT"}).rsplit(".", 1)[0] + ".",
    "alg none, signed": lambda: sign(claims(), header={"alg": "none"}),
    "alg HS512": lambda: sign(claims(), header={"alg": "HS512", "typ": "JWT"}),
    "alg RS256": lambda: sign(claims(), header={"alg": "RS256"}),
    "no alg": lambda: sign(claims(), header={"typ": "JWT"}),
    "bad base64url": lambda: "e!!!." + sign(claims()).split(".", 1)[1],
    "padded base64": lambda: sign(claims()).replace(".", "=.", 1),
    "header not JSON": lambda: sign(raw_header=b"{alg:HS256}", raw_payload=b"{}"),
    "claims not JSON": lambda: sign(raw_payload=b'{"room":"main",'),
    "claims an array": lambda: sign(raw_payload=b'["main"]'),
    "two parts": lambda: ".".join(sign(claims()).split(".")[:2]),
    "missing exp": lambda: sign({"room": "main", "role": "admin"}),
    "exp a string": lambda: sign({"room": "main", "role": "admin", "exp": str(int(time.time()) + 600)}),
    "missing role": lambda: sign({"room": "main", "exp": int(time.time()) + 600}),
    "unknown role": lambda: sign(claims(role="owner")),
    "bad room claim": lambda: sign(claims(room="no spaces")),
    "expired": lambda: sign(claims(ttl=-1)),
    "not yet valid": lambda: sign(claims(nbf=int(time.time()) + 300)),
    "not a JWT": lambda: "s3cret",
    "empty": lambda: "",
}


@pytest.mark.parametrize("what", BAD_TOKENS)
async def test_every_bad_token_is_refused_with_401_everywhere(authd, what):
    token = BAD_TOKENS[what]()
    assert await refused(f"{authd.ws}?token={token}") == 401
    assert await refused(authd.ws, headers={"Authorization": f"Bearer {token}"}) == 401
    status, body, headers = call(authd, "GET", "/api/rooms/main", headers={"Authorization": f"Bearer {token}"})
    assert status == 401 and body["type"] == "error" and body["code"] == "unauthorized", body
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert authd.get(f"/metrics?token={token}")[0] == 401


async def test_no_token_is_401_and_the_page_and_healthz_stay_open(authd):
    assert await refused(authd.ws) == 401
    assert call(authd, "GET", "/api/rooms")[0] == 401
    assert authd.get("/metrics")[0] == 401
    assert authd.get("/healthz")[0] == 200
    status, page = authd.get("/")
    assert status == 200 and "<html" in page.lower()


async def test_a_token_for_another_room_is_403(authd):
    token = sign(claims(room="lobby", role="admin"))
    assert await refused(f"{authd.ws}?room=stage&token={token}") == 403
    assert await refused(f"{authd.ws}?token={token}") == 403  # no room: main
    status, body, _ = call(authd, "GET", f"/api/rooms/stage?token={token}")
    assert status == 403 and body["code"] == "forbidden"
    no_room = sign({"role": "admin", "exp": int(time.time()) + 600})
    assert await refused(f"{authd.ws}?token={no_room}") == 403
    assert call(authd, "GET", f"/api/rooms/main?token={no_room}")[0] == 403
    assert authd.get(f"/metrics?token={no_room}")[0] == 403
    c = await Client.connect(authd.ws, room="lobby", token=token)
    assert c.welcome["room"] == "lobby" and c.welcome["role"] == "admin"
    await c.close()


async def test_a_view_client_receives_everything_and_may_only_sync_and_ping(authd):
    viewer = await Client.connect(authd.ws, room="r", token=sign(claims("r", "view")))
    actor = await Client.connect(authd.ws, room="r", token=sign(claims("r", "control")))
    assert viewer.welcome["role"] == "view" and actor.welcome["role"] == "control"
    await viewer.until_seq(actor.welcome["snapshot"]["seq"])
    for type_, fields in [("select", {"tab": "profile"}), ("push", {"tab": "home", "route": "a"}),
                          ("pop", {"tab": "home"}), ("tap", {"tab": "home"}), ("scroll", {"tab": "home", "offset": 5}),
                          ("set", {"tab": "home", "key": "k", "value": 1}), ("select", {"tab": "no-such-tab"})]:
        _, reply = await viewer.command(type_, **fields)
        assert reply["type"] == "error" and reply["code"] == "forbidden", (type_, reply)
    _, snap = await viewer.command("sync")
    assert snap["type"] == "snapshot"
    _, pong = await viewer.command("ping")
    assert pong["type"] == "pong"
    # Precedence: bad_json and bad_command come before forbidden.
    await viewer.ws.send("{")
    assert (await viewer.recv())["code"] == "bad_json"
    _, reply = await viewer.command("fly")
    assert reply["code"] == "bad_command"
    # Nothing the viewer sent changed the room; what the actor does reaches the viewer.
    assert viewer.last_seq() == actor.welcome["snapshot"]["seq"]
    events, ack = await actor.command("select", tab="favorites")
    assert ack["type"] == "ack"
    await viewer.until_seq(ack["seq"])
    assert viewer.batches[-1]["events"] == events["events"]
    await viewer.close()
    await actor.close()


async def test_control_may_command_its_room_but_not_use_the_api_or_metrics(authd):
    token = sign(claims("r", "control"))
    c = await Client.connect(authd.ws, room="r", token=token)
    _, ack = await c.command("push", tab="home", route="detail")
    assert ack["type"] == "ack"
    for method, path in [("GET", "/api/rooms/r"), ("DELETE", "/api/rooms/r"), ("GET", "/api/rooms")]:
        status, body, _ = call(authd, method, path, headers={"Authorization": f"Bearer {token}"})
        assert status == 403 and body["code"] == "forbidden", (method, path, body)
    status, body, _ = call(authd, "POST", "/api/rooms/r/commands", body={"type": "pop", "tab": "home"},
                           headers={"Authorization": f"Bearer {token}"})
    assert status == 403
    assert authd.get(f"/metrics?token={token}")[0] == 403
    await c.close()


async def test_an_admin_of_one_room_has_the_api_for_that_room_only(authd):
    token = sign(claims("r", "admin"))
    auth = {"Authorization": f"Bearer {token}"}
    c = await Client.connect(authd.ws, room="r", token=token)
    assert c.welcome["role"] == "admin"
    status, body, _ = call(authd, "POST", "/api/rooms/r/commands", body={"type": "select", "tab": "profile"}, headers=auth)
    assert status == 200 and body["type"] == "ack"
    await c.until_seq(body["seq"])
    assert c.batches[-1]["by"] == "api"
    assert call(authd, "GET", "/api/rooms/r", headers=auth)[0] == 200
    assert call(authd, "GET", "/api/rooms/other", headers=auth)[0] == 403
    assert call(authd, "POST", "/api/rooms/other/commands", body={"type": "ping"}, headers=auth)[0] == 403
    assert call(authd, "GET", "/api/rooms", headers=auth)[0] == 403, "listing needs room \"*\""
    assert call(authd, "PUT", "/api/rooms/r2", headers=auth)[0] == 403, "creating needs room \"*\""
    assert authd.get(f"/metrics?token={token}")[0] == 200
    assert call(authd, "DELETE", "/api/rooms/r", headers=auth)[0] == 204
    await c.close()


async def test_an_admin_of_every_room_lists_creates_and_deletes(authd):
    auth = {"Authorization": f"Bearer {sign(claims('*', 'admin'))}"}
    assert call(authd, "PUT", "/api/rooms/a", headers=auth)[0] == 201
    assert call(authd, "PUT", "/api/rooms/b", headers=auth)[0] == 201
    status, body, _ = call(authd, "GET", "/api/rooms", headers=auth)
    assert status == 200 and [r["id"] for r in body["rooms"]] == ["a", "b"]
    assert call(authd, "DELETE", "/api/rooms/a", headers=auth)[0] == 204
    # A view or control token for every room joins any room, with that role.
    v = await Client.connect(authd.ws, room="b", token=sign(claims("*", "view")))
    assert v.welcome["role"] == "view"
    await v.close()


def name_of(client):
    return next(c["name"] for c in client.welcome["snapshot"]["clients"] if c["id"] == client.welcome["client"])


async def test_frames_of_a_connection_whose_token_ran_out_are_not_read(authd):
    watcher = await Client.connect(authd.ws, room="r", token=sign(claims("r", "view")))
    # A raw client that ignores tabd's close and goes on sending commands.
    raw = rawws.connect(authd.host, f"/ws?room=r&token={sign(claims('r', 'control', ttl=2))}")
    opcode, welcome = rawws.recv_frame(raw)
    assert opcode == 1 and json.loads(welcome)["type"] == "welcome"
    await watcher.until_seq(json.loads(welcome)["snapshot"]["seq"])
    before = watcher.last_seq()
    raw.settimeout(WAIT)
    while True:
        opcode, payload = await asyncio.to_thread(rawws.recv_frame, raw)
        if opcode == 8:
            break
    assert int.from_bytes(payload[:2], "big") == 4001
    try:  # tabd may already have dropped the TCP connection: then nothing can arrive anyway
        for n in range(5):
            rawws.send_text(raw, json.dumps({"type": "push", "tab": "home", "route": f"late{n}"}).encode())
    except (BrokenPipeError, ConnectionResetError):
        pass
    raw.close()
    events = []
    while not any(e["kind"] == "clientLeft" for e in events):
        f = await watcher.recv()
        if f["type"] == "events":
            events += f["events"]
    assert [e["kind"] for e in events] == ["clientLeft"] and events[0]["seq"] == before + 1
    _, pong = await watcher.command("ping")  # nothing else is on its way
    assert watcher.last_seq() == before + 1
    await watcher.close()


@pytest.mark.parametrize("variable", ["TABD_TOKEN", "TABD_AUTH_SECRET"])
def test_a_credential_variable_set_but_empty_stops_tabd(variable):
    os.environ[variable] = ""
    try:
        with pytest.raises(RuntimeError) as e:
            Daemon()
    finally:
        del os.environ[variable]
    assert f"{variable} is set but empty" in str(e.value)


async def test_the_name_claim_wins_over_the_name_parameter(authd):
    c = await Client.connect(authd.ws, token=sign(claims(name="Ada")), name="Mallory")
    assert name_of(c) == "Ada"
    d = await Client.connect(authd.ws, token=sign(claims()), name="Bob")
    assert name_of(d) == "Bob"
    await c.close()
    await d.close()


async def test_the_admin_token_still_works_beside_signed_tokens(make_daemon, key_file):
    d = make_daemon("--auth-secret-file", key_file, "--token", "op3rator")
    c = await Client.connect(d.ws, room="any", token="op3rator")
    assert c.welcome["role"] == "admin"
    assert call(d, "GET", "/api/rooms", headers={"Authorization": "Bearer op3rator"})[0] == 200
    v = await Client.connect(d.ws, room="any", token=sign(claims("any", "view")))
    assert v.welcome["role"] == "view"
    assert await refused(f"{d.ws}?token=op3rator-") == 401
    await c.close()
    await v.close()


async def test_without_auth_every_client_is_control(daemon):
    c = await Client.connect(daemon.ws)
    assert c.welcome["role"] == "control"
    await c.close()


async def test_an_expired_token_closes_the_connection_with_4001_and_a_fresh_one_resumes(authd):
    actor = await Client.connect(authd.ws, room="r", token=sign(claims("r", "control")))
    viewer = await Client.connect(authd.ws, room="r", token=sign(claims("r", "view", ttl=2)))
    epoch = viewer.welcome["epoch"]
    _, ack = await actor.command("push", tab="home", route="before")
    await viewer.until_seq(ack["seq"])
    seen = viewer.last_seq()
    # The close comes when the token runs out, with nothing sent by the viewer.
    with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
        while True:
            await viewer.recv(timeout=WAIT)
    assert closed.value.rcvd.code == 4001 and closed.value.rcvd.reason == "token expired"
    assert await refused(f"{authd.ws}?room=r&token={sign(claims('r', 'view', ttl=-1))}") == 401
    # What happens meanwhile is not lost: the fresh token resumes from what it saw.
    missed = []
    for route in ("x", "y", "z"):
        events, _ = await actor.command("push", tab="home", route=route)
        missed.append(events)
    back = await Client.connect(authd.ws, room="r", token=sign(claims("r", "view")), resume=seen, epoch=epoch)
    assert back.welcome["resumed"] is True and back.welcome["role"] == "view"
    await back.until_seq(missed[-1]["events"][-1]["seq"])
    got = [e for b in back.batches for e in b["events"] if b["by"] == actor.welcome["client"]]
    assert got == [e for b in missed for e in b["events"]]
    seqs = [e["seq"] for b in back.batches for e in b["events"]]
    assert seqs == list(range(seen + 1, seqs[-1] + 1)), "gap-free from where it left"
    assert "tabd_tokens_expired_total 1" in authd.get(f"/metrics?token={sign(claims('*', 'admin'))}")[1]
    await back.close()
    await actor.close()


async def test_tokens_minted_by_tabd_token_are_accepted(authd, key_file):
    def mint(*args):
        out = subprocess.run([TABD, "token", "--secret-file", key_file, *args], capture_output=True, text=True, timeout=WAIT)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()
    c = await Client.connect(authd.ws, room="show", token=mint("--room", "show", "--role", "view", "--name", "Kiosk 1", "--ttl", "5m"))
    assert c.welcome["role"] == "view" and name_of(c) == "Kiosk 1"
    header, payload, _ = mint("--room", "*", "--role", "admin", "--ttl", "7d").split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["alg"] == "HS256"
    assert body["room"] == "*" and body["role"] == "admin" and 7 * 86400 - 60 <= body["exp"] - time.time() <= 7 * 86400
    default_ttl = json.loads(base64.urlsafe_b64decode((p := mint("--room", "a", "--role", "view").split(".")[1]) + "=" * (-len(p) % 4)))
    assert 3500 <= default_ttl["exp"] - time.time() <= 3600
    await c.close()


@pytest.mark.parametrize("args, message", [
    (["--room", "a", "--role", "owner"], "--role must be view, control or admin"),
    (["--room", "a b", "--role", "view"], "--room must be a room id"),
    (["--room", "a", "--role", "view", "--ttl", "10y"], "--ttl must be a duration"),
    (["--room", "a", "--role", "view", "--ttl", "0s"], "--ttl must be a duration"),
    (["--role", "view"], "--room is required"),
])
def test_tabd_token_refuses_bad_options(key_file, args, message):
    out = subprocess.run([TABD, "token", "--secret-file", key_file, *args], capture_output=True, text=True, timeout=WAIT)
    assert out.returncode == 2 and message in out.stderr and out.stdout == ""


def test_tabd_token_needs_a_usable_key(tmp_path):
    out = subprocess.run([TABD, "token", "--room", "a", "--role", "view"], capture_output=True, text=True, timeout=WAIT,
                         env={k: v for k, v in os.environ.items() if k != "TABD_AUTH_SECRET"})
    assert out.returncode == 2 and "--secret-file or --private-key is required" in out.stderr


@pytest.mark.parametrize("content", [b"too short\n", b"x" * 31, b""])
def test_a_short_key_stops_tabd_and_names_the_file(tmp_path, content):
    path = tmp_path / "short.key"
    path.write_bytes(content)
    with pytest.raises(RuntimeError) as e:
        Daemon("--auth-secret-file", str(path))
    assert str(path) in str(e.value) and "at least 32" in str(e.value)


def test_an_unreadable_key_stops_tabd_and_names_the_file(tmp_path):
    missing = tmp_path / "missing.key"
    with pytest.raises(RuntimeError) as e:
        Daemon("--auth-secret-file", str(missing))
    assert str(missing) in str(e.value)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    with pytest.raises(RuntimeError) as e:
        Daemon("--auth-secret-file", str(directory))
    assert str(directory) in str(e.value)


async def test_the_admin_token_can_come_from_a_file_or_the_environment(tmp_path, make_daemon):
    path = tmp_path / "token"
    path.write_text("fr0m-file\n")
    d = make_daemon("--token-file", str(path))
    c = await Client.connect(d.ws, token="fr0m-file")
    assert c.welcome["role"] == "admin"
    assert await refused(f"{d.ws}?token=fr0m-fil") == 401
    await c.close()
    os.environ["TABD_TOKEN"] = "fr0m-env"
    try:
        e = make_daemon()
    finally:
        del os.environ["TABD_TOKEN"]
    assert await refused(e.ws) == 401
    c = await Client.connect(e.ws, token="fr0m-env")
    assert c.welcome["role"] == "admin"
    await c.close()
    with pytest.raises(RuntimeError) as err:
        Daemon("--token", "a", "--token-file", str(path))
    assert "not both" in str(err.value)


async def test_the_signing_key_can_come_from_the_environment(make_daemon):
    os.environ["TABD_AUTH_SECRET"] = KEY.decode()
    try:
        d = make_daemon()
    finally:
        del os.environ["TABD_AUTH_SECRET"]
    c = await Client.connect(d.ws, token=sign(claims(role="view")))
    assert c.welcome["role"] == "view"
    await c.close()


async def test_refusals_are_counted_in_metrics(authd):
    await refused(authd.ws)
    await refused(f"{authd.ws}?room=b&token={sign(claims('a'))}")
    body = authd.get(f"/metrics?token={sign(claims('*', 'admin'))}")[1]
    assert 'tabd_auth_refused_total{status="401"} 1' in body
    assert 'tabd_auth_refused_total{status="403"} 1' in body
