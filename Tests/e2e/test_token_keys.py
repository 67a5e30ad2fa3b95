"""Key sets and fresh tokens against a real tabd: ES256 and RS256 tokens of keys an identity
provider would hold (signed here by the openssl command, a signer independent of tabd),
`kid`, `iss`, `aud` and the clock leeway; keys rotated by SIGHUP under load without closing
a live connection; the `refresh` frame that extends a connection's life without a reconnect.
"""
import asyncio
import base64
import json
import os
import signal
import subprocess
import time

import pytest
import websockets
import websockets.exceptions

from conftest import TABD, WAIT, Client
from test_auth import KEY, b64url, claims, key_file, refused, sign  # noqa: F401 (key_file: a fixture)


def der_to_rs(der):
    """An ECDSA-Sig-Value (DER SEQUENCE of two INTEGERs) as JWS's r‖s, 32 bytes each."""
    assert der[0] == 0x30
    at = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert der[at] == 0x02
        n = der[at + 1]
        value = der[at + 2:at + 2 + n].lstrip(b"\x00")
        out += value.rjust(32, b"\x00")
        at += 2 + n
    return out


def openssl_sign(claims_, private_key, alg, kid=None):
    """A compact JWT signed by `openssl dgst -sha256 -sign` (ES256: DER turned into r‖s)."""
    header = {"alg": alg, "typ": "JWT"}
    if kid is not None:
        header["kid"] = kid
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims_).encode())}"
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", private_key], input=signing_input.encode(),
                               capture_output=True, check=True).stdout
    if alg == "ES256":
        signature = der_to_rs(signature)
    return f"{signing_input}.{b64url(signature)}"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """An EC P-256 pair (and a second private key), an RSA 2048 pair, an EC P-384 pair (a curve ES256 does not take)
    and two HS256 secrets, as files."""
    d = tmp_path_factory.mktemp("keys")
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(d / "ec.pem"))
    run("pkey", "-in", str(d / "ec.pem"), "-pubout", "-out", str(d / "ec.pub"))
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(d / "ec2.pem"))
    run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(d / "rsa.pem"))
    run("pkey", "-in", str(d / "rsa.pem"), "-pubout", "-out", str(d / "rsa.pub"))
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", str(d / "p384.pem"))
    run("pkey", "-in", str(d / "p384.pem"), "-pubout", "-out", str(d / "p384.pub"))
    for name, key in (("one.key", KEY), ("two.key", os.urandom(24).hex().encode())):
        (d / name).write_bytes(key + b"\n")
        (d / name).chmod(0o600)
    return d


def write_set(path, entries):
    path.write_text(json.dumps({"keys": entries}))
    return str(path)


def status_of(d, token, path="/api/rooms/main"):
    return d.fetch(path, headers={"Authorization": f"Bearer {token}"})[0]


def test_es256_and_rs256_tokens_of_a_key_set_are_taken_and_forgeries_refused(make_daemon, keys, tmp_path):
    key_set = write_set(tmp_path / "keys.json", [
        {"kid": "ec-1", "alg": "ES256", "public_key_file": str(keys / "ec.pub")},
        {"kid": "rsa-1", "alg": "RS256", "public_key": (keys / "rsa.pub").read_text()},
        {"kid": "hs-1", "alg": "HS256", "secret_file": str(keys / "two.key")},
    ])
    d = make_daemon("--auth-keys", key_set)
    admin = claims(role="admin")
    es = openssl_sign(admin, keys / "ec.pem", "ES256", kid="ec-1")
    rs = openssl_sign(admin, keys / "rsa.pem", "RS256", kid="rsa-1")
    # Existing room: 200 once authenticated (main is made by a join; the API answers 404 without it).
    assert status_of(d, es) in (200, 404) and status_of(d, es) != 401
    assert status_of(d, rs) not in (401, 403)
    # Without kid: tried against every key of its algorithm.
    assert status_of(d, openssl_sign(admin, keys / "ec.pem", "ES256")) not in (401, 403)
    forged = {
        "ES256 signed by another P-256 key": openssl_sign(admin, keys / "ec2.pem", "ES256", kid="ec-1"),
        "kid of an ES256 key, alg RS256": openssl_sign(admin, keys / "rsa.pem", "RS256", kid="ec-1"),
        "unknown kid": openssl_sign(admin, keys / "ec.pem", "ES256", kid="nobody"),
        "ES256 claims changed after signing": (lambda t: t.split(".")[0] + "." + b64url(json.dumps(claims(role="admin", room="*")).encode()) + "." + t.split(".")[2])(es),
        "RS256 signature of other claims": (lambda t: t.split(".")[0] + "." + b64url(json.dumps(claims(role="admin", room="*")).encode()) + "." + t.split(".")[2])(rs),
        "ES256 signature cut short": es[:-4],
        "HS256 under the RSA public key's PEM (key confusion)": sign(admin, key=(keys / "rsa.pub").read_bytes(), header={"alg": "HS256", "kid": "rsa-1"}),
        "HS256 of a secret not in the set": sign(admin, key=b"z" * 48, header={"alg": "HS256", "kid": "hs-1"}),
        "alg none with a kid": sign(admin, header={"alg": "none", "kid": "ec-1"}).rsplit(".", 1)[0] + ".",
        "expired ES256": openssl_sign(claims(role="admin", ttl=-5), keys / "ec.pem", "ES256", kid="ec-1"),
    }
    for what, token in forged.items():
        assert status_of(d, token) == 401, what
    # The HS256 key of the set signs with its kid, and tabd token signs ES256 itself.
    assert status_of(d, sign(admin, key=(keys / "two.key").read_bytes().strip(), header={"alg": "HS256", "kid": "hs-1"})) not in (401, 403)
    minted = subprocess.run([TABD, "token", "--private-key", str(keys / "ec.pem"), "--kid", "ec-1", "--room", "main", "--role", "admin"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert json.loads(base64.urlsafe_b64decode(minted.split(".")[0] + "==")) == {"alg": "ES256", "typ": "JWT", "kid": "ec-1"}
    assert status_of(d, minted) not in (401, 403)
    minted_rs = subprocess.run([TABD, "token", "--private-key", str(keys / "rsa.pem"), "--kid", "rsa-1", "--room", "main", "--role", "admin"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert status_of(d, minted_rs) not in (401, 403)


def test_a_key_set_that_is_wrong_stops_tabd_naming_the_file(keys, tmp_path):
    cases = {
        "curve": ([{"kid": "a", "alg": "ES256", "public_key_file": str(keys / "p384.pub")}], "P-256"),
        "declared": ([{"kid": "a", "alg": "ES256", "public_key_file": str(keys / "rsa.pub")}], "declared ES256"),
        "duplicate": ([{"kid": "a", "alg": "HS256", "secret_file": str(keys / "one.key")},
                       {"kid": "a", "alg": "HS256", "secret_file": str(keys / "two.key")}], "two keys have the kid"),
        "typo": ([{"kid": "a", "alg": "ES256", "public_key_fil": str(keys / "ec.pub")}], "unknown member"),
        "no kid": ([{"alg": "ES256", "public_key_file": str(keys / "ec.pub")}], "no \"kid\""),
        "alg": ([{"kid": "a", "alg": "HS512", "secret_file": str(keys / "one.key")}], "alg must be"),
        "secret for ES256": ([{"kid": "a", "alg": "ES256", "secret_file": str(keys / "one.key")}], "not a secret"),
        "private key as public": ([{"kid": "a", "alg": "ES256", "public_key_file": str(keys / "ec.pem")}], "no PEM public key"),
    }
    for what, (entries, expected) in cases.items():
        path = write_set(tmp_path / f"{what}.json", entries)
        r = subprocess.run([TABD, "--port", "0", "--state", ":memory:", "--auth-keys", path], capture_output=True, text=True, timeout=WAIT)
        assert r.returncode == 1, (what, r.stderr)  # as for a secret file that cannot be used
        assert path in r.stderr and expected in r.stderr, (what, r.stderr)


def test_iss_aud_and_the_clock_leeway(make_daemon, keys, tmp_path):
    key_set = write_set(tmp_path / "keys.json", [
        {"kid": "idp", "alg": "ES256", "public_key_file": str(keys / "ec.pub"), "iss": "https://id.example", "aud": "kiosk"},
        {"kid": "app", "alg": "HS256", "secret_file": str(keys / "two.key")},
    ])
    d = make_daemon("--auth-keys", key_set, "--auth-audience", "tabd", "--auth-leeway", "5")
    secret = (keys / "two.key").read_bytes().strip()
    def idp(**extra):
        return openssl_sign(claims(role="admin", **extra), keys / "ec.pem", "ES256", kid="idp")
    def app(**extra):
        return sign(claims(role="admin", **extra), key=secret, header={"alg": "HS256", "kid": "app"})
    assert status_of(d, idp(iss="https://id.example", aud="kiosk")) not in (401, 403)
    assert status_of(d, idp(iss="https://id.example", aud=["other", "kiosk"])) not in (401, 403)
    assert status_of(d, idp(iss="https://id.example.evil", aud="kiosk")) == 401
    assert status_of(d, idp(aud="kiosk")) == 401
    assert status_of(d, idp(iss="https://id.example", aud="tabd")) == 401  # the key names its own audience
    assert status_of(d, app(aud="tabd")) not in (401, 403)  # the option's audience for a key without one
    assert status_of(d, app()) == 401
    # Leeway: 2 s past exp is taken with --auth-leeway 5; 8 s past is not.
    late = {"room": "main", "role": "admin", "aud": "tabd", "exp": int(time.time()) - 2}
    assert status_of(d, sign(late, key=secret, header={"alg": "HS256", "kid": "app"})) not in (401, 403)
    late["exp"] = int(time.time()) - 8
    assert status_of(d, sign(late, key=secret, header={"alg": "HS256", "kid": "app"})) == 401
    early = {"room": "main", "role": "admin", "aud": "tabd", "exp": int(time.time()) + 60, "nbf": int(time.time()) + 2}
    assert status_of(d, sign(early, key=secret, header={"alg": "HS256", "kid": "app"})) not in (401, 403)
    # Without leeway the same late token is refused.
    strict = make_daemon("--auth-keys", key_set, "--auth-audience", "tabd")
    late["exp"] = int(time.time()) - 2
    assert status_of(strict, sign(late, key=secret, header={"alg": "HS256", "kid": "app"})) == 401


async def ws_connect(d, token, room="main", **params):
    query = "&".join([f"room={room}"] + [f"{k}={v}" for k, v in params.items()])
    ws = await websockets.connect(f"{d.ws}?{query}", additional_headers={"Authorization": f"Bearer {token}"}, max_size=None)
    c = Client(ws)
    c.welcome = await c.recv()
    assert c.welcome["type"] == "welcome", c.welcome
    return c


async def test_keys_rotate_by_sighup_under_load_without_closing_a_live_connection(make_daemon, keys, tmp_path):
    one = {"kid": "one", "alg": "HS256", "secret_file": str(keys / "one.key")}
    two = {"kid": "two", "alg": "ES256", "public_key_file": str(keys / "ec.pub")}
    path = tmp_path / "keys.json"
    write_set(path, [one])
    d = make_daemon("--auth-keys", str(path))
    by_one = sign(claims(ttl=600), header={"alg": "HS256", "kid": "one"})
    by_two = openssl_sign(claims(ttl=600), keys / "ec.pem", "ES256", kid="two")
    live = [await ws_connect(d, by_one, name=f"old{i}") for i in range(5)]
    assert await refused(f"{d.ws}?room=main", {"Authorization": f"Bearer {by_two}"}) == 401
    writer = await ws_connect(d, by_one, name="writer")
    stop = asyncio.Event()
    acked = []

    async def load():
        n = 0
        while not stop.is_set():
            n += 1
            _, reply = await writer.command("scroll", tab="home", offset=n)
            assert reply["type"] == "ack", reply
            acked.append(reply["seq"])
    task = asyncio.create_task(load())
    try:
        write_set(path, [one, two])
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("token keys read again; 2 in use")
        second = await ws_connect(d, by_two, name="new")
        assert (await ws_connect(d, by_one, name="still")).welcome["role"] == "control"
        write_set(path, [two])
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("token keys read again; 1 in use")
        assert await refused(f"{d.ws}?room=main", {"Authorization": f"Bearer {by_one}"}) == 401
        assert (await ws_connect(d, by_two, name="after")).welcome["type"] == "welcome"
        # A key set that cannot be read keeps the keys in use.
        path.write_text("{")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("the token keys in use stay")
        assert (await ws_connect(d, by_two, name="kept")).welcome["type"] == "welcome"
        await asyncio.sleep(0)  # let the load run on between the checks
        seen = len(acked)
        deadline = time.monotonic() + WAIT
        while len(acked) < seen + 20:
            assert time.monotonic() < deadline, "the load stalled"
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await task
    # Every live connection of the removed key is open and has every batch.
    last = acked[-1]
    for c in live + [second]:
        await c.until_seq(last)
        assert c.ws.close_code is None
    assert "closing with 4001" not in d.log_so_far()


async def test_refresh_extends_a_connection_and_refuses_what_does_not_fit(make_daemon, key_file):
    d = make_daemon("--auth-secret-file", key_file)
    c = await ws_connect(d, sign(claims(ttl=2)), name="kiosk")
    _, reply = await c.command("refresh", token=sign(claims(ttl=6)))
    assert reply["type"] == "ack" and isinstance(reply["seq"], int), reply
    # Refusals keep the connection and its token.
    for token, code in ((sign(claims(ttl=-1)), "unauthorized"), (sign(claims(), key=b"x" * 48), "unauthorized"),
                        (sign(claims(role="admin")), "forbidden"), (sign(claims(role="view")), "forbidden"),
                        (sign(claims(room="other")), "forbidden")):
        _, reply = await c.command("refresh", token=token)
        assert reply["type"] == "error" and reply["code"] == code, (token, reply)
    _, reply = await c.command("refresh")
    assert reply["code"] == "bad_command"
    _, reply = await c.command("refresh", token=7)
    assert reply["code"] == "bad_command"
    # Past the first token's end (2 s), the connection lives on the refreshed one.
    await asyncio.sleep(3)
    _, reply = await c.command("tap", tab="home")
    assert reply["type"] == "ack"
    # A view connection refreshes with a view token.
    v = await ws_connect(d, sign(claims(role="view", ttl=60)))
    _, reply = await v.command("refresh", token=sign(claims(role="view", ttl=120)))
    assert reply["type"] == "ack"
    # The refreshed token runs out in its turn: 4001.
    with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
        while True:
            await c.recv(timeout=WAIT)
    assert closed.value.rcvd.code == 4001
    metrics = d.fetch("/metrics", headers={"Authorization": f"Bearer {sign(claims(role='admin', room='*'))}"})[1].decode()
    assert 'tabd_token_refreshes_total{result="accepted"} 2' in metrics
    assert 'tabd_token_refreshes_total{result="refused"} 5' in metrics


async def test_a_flood_of_forged_refreshes_against_the_costliest_key_set_leaves_other_clients_served(make_daemon, keys, tmp_path):
    """The worst a peer can ask of the key checks: 64 ES256 keys, and refresh frames whose
    ES256 tokens name no kid, sent as fast as a socket takes them. Such a token is refused
    unchecked (trying all 64 keys for each one stalled the service thread: 1.3 s for the
    other client before), one that names a key costs one check, the connection's rate limit
    refuses the rest before any check; another client's commands are answered all along."""
    pub = str(keys / "ec.pub")
    key_set = write_set(tmp_path / "keys.json", [{"kid": f"k{i}", "alg": "ES256", "public_key_file": pub} for i in range(64)])
    d = make_daemon("--auth-keys", key_set)
    good = openssl_sign(claims(ttl=600), keys / "ec.pem", "ES256", kid="k0")
    unnamed = openssl_sign(claims(ttl=600), keys / "ec2.pem", "ES256")  # another key, no kid
    named = openssl_sign(claims(ttl=600), keys / "ec2.pem", "ES256", kid="k63")  # another key, a kid: one check
    hostile = await ws_connect(d, good, name="hostile")
    victim = await ws_connect(d, good, name="victim")
    frames = [json.dumps({"type": "refresh", "token": unnamed if i % 2 else named, "ref": f"f{i}"}) for i in range(3000)]

    async def flood():
        for f in frames:
            await hostile.ws.send(f)
    flooding = asyncio.create_task(flood())
    latencies = []
    for n in range(30):
        start = time.monotonic()
        _, reply = await victim.command("scroll", tab="home", offset=n)
        assert reply["type"] == "ack", reply
        latencies.append(time.monotonic() - start)
    await flooding
    codes = {}
    while sum(codes.values()) < len(frames):
        f = await hostile.recv()
        if f["type"] == "error":
            codes[f["code"]] = codes.get(f["code"], 0) + 1
    assert set(codes) == {"unauthorized", "rate_limited"} and codes["rate_limited"] > codes["unauthorized"], codes
    assert max(latencies) < 1.0, f"the victim waited {max(latencies):.2f} s"
    print(f"forged refreshes: {codes}; the other client's slowest answer {max(latencies) * 1000:.0f} ms")
