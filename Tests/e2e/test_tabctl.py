"""tabctl, spawned as a process against a real tabd: every subcommand, its output (text
and --json), exit statuses, help, the environment, and `watch` across a restart.

TABCTL_BIN names the binary (make test builds it beside tabd).
"""
import json
import os
import pty
import re
import resource
import select
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, TABD, WAIT, Client, Daemon

TABCTL = os.environ.get("TABCTL_BIN", os.path.join(os.path.dirname(TABD), "tabctl"))
COMMANDS = ["watch", "state", "tap", "select", "push", "pop", "pop-to-root", "scroll", "set", "add-tab",
            "update-tab", "move-tab", "remove-tab", "ping", "clients", "rooms"]


def env(**variables):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TABD_")}
    e.update(variables)
    return e


def tabctl(*args, environment=None, check=None):
    """Runs tabctl; returns (exit status, stdout, stderr). `check` asserts the status."""
    p = subprocess.run([TABCTL, *args], capture_output=True, text=True, timeout=60,
                       env=env() if environment is None else environment)
    if check is not None:
        assert p.returncode == check, (args, p.returncode, p.stdout, p.stderr)
    return p.returncode, p.stdout, p.stderr


def on(d, *args, room=None):
    """tabctl against daemon `d` (and `room`), expected to succeed; its stdout."""
    extra = ["--room", room] if room else []
    return tabctl("--url", d.http, *extra, *args, check=0)[1]


def state(d, room=None):
    return json.loads(on(d, "--json", "state", room=room))


# Help and usage

def test_help_lists_every_command_and_each_command_has_its_own_help():
    code, out, _ = tabctl("--help", check=0)
    for c in COMMANDS:
        assert re.search(rf"^  {re.escape(c)}\b", out, re.M), c
    assert "--json" in out and "TABD_TOKEN" in out and "EXIT STATUS" in out
    for c in COMMANDS:
        code, out, _ = tabctl(c, "--help", check=0)
        assert out.startswith(f"USAGE: tabctl [global options] {c}"), (c, out)
        assert "GLOBAL OPTIONS" in out, c
    assert "--tab TAB" in tabctl("push", "--help")[1]
    assert "--count N" in tabctl("watch", "--help")[1]


@pytest.mark.parametrize("args, message", [
    ([], "no command"),
    (["fly"], "unknown command 'fly'"),
    (["tap"], "usage: tabctl tap TAB"),
    (["tap", "a", "b"], "usage: tabctl tap TAB"),
    (["tap", "home", "--tab", "x"], "'tap' has no option --tab"),
    (["--bogus", "state"], "unknown option --bogus"),
    (["scroll", "far"], "OFFSET must be a number"),
    (["move-tab", "home", "x"], "INDEX must be a whole number"),
    (["add-tab", "news", "--title", "News"], "add-tab needs --icon and --color"),
    (["add-tab", "news"], "add-tab needs --title, --icon and --color"),
    (["update-tab", "news", "--badge", "1", "--no-badge"], "--badge and --no-badge exclude each other"),
    (["watch", "--count", "0"], "--count must be a whole number 1 or more"),
    (["clients", "--limit", "0"], "--limit must be 1 to 1000"),
    (["clients", "--limit", "1001"], "--limit must be 1 to 1000"),
    (["clients", "--limit", "x"], "--limit must be a whole number"),
    (["clients", "--all", "--after", "c1"], "--all and --after exclude each other"),
    (["clients", "c1"], "usage: tabctl clients"),
    (["--url", "ftp://example.com", "state"], "does not start with ws://, wss://, http:// or https://"),
    (["--url"], "--url needs a value"),
])
def test_usage_errors_exit_2_and_say_what_is_wrong(daemon, args, message):
    code, out, err = tabctl("--url", daemon.http, *args) if args[:1] != ["--url"] else tabctl(*args)
    assert code == 2, (code, out, err)
    assert message in err, err
    assert out == ""


# Commands

def test_state_text_and_json_show_the_room(daemon):
    s = state(daemon)
    assert s["room"] == "main" and s["epoch"]
    snap = s["snapshot"]
    assert [t["id"] for t in snap["tabs"]] == ["home", "favorites", "profile"] and snap["selected"] == "home"
    text = on(daemon, "state")
    # Each tabctl is a client: its own join moved the seq on.
    assert re.match(rf"room main  seq (\d+)  epoch {s['epoch']}  scroll-to-top count 0\n", text), text
    assert re.search(r"^clients \(1\): c\d+ \"tabctl\"$", text, re.M), text
    assert re.search(r"^● home\s+Home\s+house$", text, re.M), text
    assert re.search(r"^  favorites\s+Favorites\s+heart$", text, re.M), text
    assert "\x1b[" not in text, "no colours when stdout is not a terminal"


def test_every_command_acks_with_its_seq_and_takes_effect(daemon):
    seq = state(daemon)["snapshot"]["seq"]

    def run(*args):
        nonlocal seq
        ack = json.loads(on(daemon, "--json", *args))
        assert ack["type"] == "ack" and ack["seq"] >= seq, (args, ack)
        seq = ack["seq"]
        return ack

    run("push", "detail", "--tab", "home")
    run("push", "more")                       # the selected tab
    run("pop")
    run("tap", "profile")
    run("select", "favorites")
    run("scroll", "120.5", "--tab", "favorites")
    run("set", "cart", "[1, \"two\"]", "--tab", "favorites")
    run("set", "greeting", "Hello")           # not JSON: a string
    run("set", "flag", "true")
    run("add-tab", "news", "--title", "News", "--icon", "newspaper", "--color", "#FF9500", "--index", "1")
    run("update-tab", "news", "--badge", "3", "--title", "Latest")
    run("move-tab", "news", "3")
    run("pop-to-root", "--tab", "home")
    snap = state(daemon)["snapshot"]
    tabs = {t["id"]: t for t in snap["tabs"]}
    assert [t["id"] for t in snap["tabs"]] == ["home", "favorites", "profile", "news"]
    assert [p["route"] for p in tabs["home"]["stack"]] == ["root"]
    assert snap["selected"] == "favorites"
    assert tabs["favorites"]["scroll"] == 120.5
    assert tabs["favorites"]["values"] == {"cart": [1, "two"], "flag": True, "greeting": "Hello"}
    assert tabs["news"]["badge"] == "3" and tabs["news"]["title"] == "Latest"
    run("update-tab", "news", "--no-badge")
    assert [t for t in state(daemon)["snapshot"]["tabs"] if t["id"] == "news"][0]["badge"] is None
    run("remove-tab", "news")
    assert "news" not in [t["id"] for t in state(daemon)["snapshot"]["tabs"]]
    # Text output names the seq too.
    assert re.fullmatch(r"ok, seq \d+\n", on(daemon, "tap", "home"))
    assert re.fullmatch(r"pong in [\d.]+ ms\n", on(daemon, "ping"))
    assert json.loads(on(daemon, "--json", "ping"))["type"] == "pong"


def test_a_refused_command_exits_1_with_the_protocols_code(daemon):
    before = state(daemon)["snapshot"]
    code, out, err = tabctl("--url", daemon.http, "tap", "nope")
    assert code == 1 and out == "" and "unknown_tab" in err
    code, out, err = tabctl("--url", daemon.http, "--json", "push", "r" * 500)
    assert code == 1
    error = json.loads(out)
    assert error["type"] == "error" and error["code"] == "invalid" and error["message"]
    after = state(daemon)["snapshot"]
    # Only presence moved (each tabctl joined and left).
    assert after["tabs"] == before["tabs"] and after["selected"] == before["selected"]


def test_an_unreachable_tabd_exits_3():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # nothing listens on it
    code, out, err = tabctl("--url", f"http://127.0.0.1:{port}", "state")
    assert code == 3 and "could not reach tabd" in err, err


def test_rooms_lists_shows_creates_and_deletes(daemon):
    on(daemon, "tap", "profile", room="kiosk")
    out = on(daemon, "rooms", "create", "lobby")
    assert out.startswith("created room lobby, epoch ")
    code, _, err = tabctl("--url", daemon.http, "rooms", "create", "lobby")
    assert code == 1 and "room_exists" in err
    lines = [json.loads(l) for l in on(daemon, "--json", "rooms").splitlines()]
    assert [r["id"] for r in lines] == ["kiosk", "lobby"]
    assert all(set(r) == {"id", "clients", "seq", "loaded"} for r in lines)
    text = on(daemon, "rooms", "list")
    assert text.splitlines()[0].split() == ["ROOM", "CLIENTS", "SEQ", "LOADED"]
    assert re.search(r"^kiosk\s+0\s+\d+\s+yes$", text, re.M), text
    shown = json.loads(on(daemon, "--json", "rooms", "show", "kiosk"))
    assert shown["room"] == "kiosk" and shown["snapshot"]["selected"] == "profile"
    assert on(daemon, "rooms", "delete", "lobby") == "deleted room lobby\n"
    code, _, err = tabctl("--url", daemon.http, "rooms", "show", "lobby")
    assert code == 1 and "unknown_room" in err


def test_the_token_comes_from_the_option_or_TABD_TOKEN(make_daemon, tmp_path):
    key = tmp_path / "key"
    key.write_text("k" * 40)
    d = make_daemon("--auth-secret-file", str(key))
    view = subprocess.run([TABD, "token", "--secret-file", str(key), "--room", "main", "--role", "view"],
                          capture_output=True, text=True, check=True).stdout.strip()
    admin = subprocess.run([TABD, "token", "--secret-file", str(key), "--room", "*", "--role", "admin"],
                           capture_output=True, text=True, check=True).stdout.strip()
    code, _, err = tabctl("--url", d.http, "state")
    assert code == 3 and "HTTP 401" in err
    code, out, _ = tabctl("--url", d.http, "--token", view, "state", check=0)
    code, _, err = tabctl("state", environment=env(TABD_URL=d.http, TABD_TOKEN=view), check=0)
    code, _, err = tabctl("tap", "profile", environment=env(TABD_URL=d.http, TABD_TOKEN=view))
    assert code == 1 and "forbidden" in err
    tabctl("tap", "profile", environment=env(TABD_URL=d.http, TABD_TOKEN=admin), check=0)
    code, _, err = tabctl("--url", d.http, "rooms")
    assert code == 1 and "unauthorized" in err
    assert "main" in tabctl("--url", d.http, "--token", admin, "rooms", check=0)[1]
    # TABD_ROOM picks the room; --room wins over it.
    tabctl("tap", "favorites", environment=env(TABD_URL=d.http, TABD_TOKEN=admin, TABD_ROOM="other"), check=0)
    s = json.loads(tabctl("--json", "--room", "main", "state", environment=env(TABD_URL=d.http, TABD_TOKEN=admin, TABD_ROOM="other"),
                          check=0)[1])
    assert s["room"] == "main" and s["snapshot"]["selected"] == "profile"


# watch

class Watch:
    """`tabctl watch` running in the background; its stderr notices read as they come."""

    def __init__(self, *args, tty=False):
        self.master = None
        stdout = subprocess.PIPE
        if tty:
            self.master, slave = pty.openpty()
            stdout = slave
        self.proc = subprocess.Popen([TABCTL, "watch", *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env())
        if tty:
            os.close(slave)
        self.notices = []

    def wait_for_notice(self, text, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                line = self.proc.stderr.readline()
                if not line:
                    break
                self.notices.append(line)
                if text in line:
                    return line
        raise AssertionError(f"no notice {text!r}; saw {self.notices}")

    def finish(self, timeout=WAIT):
        """Waits for it to exit (it stops after --count events); its stdout."""
        if self.master is not None:
            out = b""
            deadline = time.monotonic() + timeout
            # Until the terminal's other end is closed (EIO once tabctl exited and all is read).
            while time.monotonic() < deadline:
                ready, _, _ = select.select([self.master], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(self.master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    out += chunk
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            os.close(self.master)
            return out.decode()
        out, _ = self.proc.communicate(timeout=timeout)
        return out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_watch_json_prints_one_line_per_event_with_by_and_ref(daemon):
    w = Watch("--url", daemon.http, "--room", "kiosk", "--json", "--count", "6")
    try:
        w.wait_for_notice("connected to room kiosk")
        on(daemon, "select", "profile", room="kiosk")    # selected, disappear, firstAppear, appear
        on(daemon, "push", "detail", room="kiosk")       # pushed, disappear, ...
        lines = [json.loads(l) for l in w.finish().splitlines()]
    finally:
        w.kill()
    assert w.proc.returncode == 0
    kinds = [e["kind"] for e in lines]
    # The other tabctl's join, its select's four events, its leave: six lines, in seq order.
    assert kinds == ["clientJoined", "selected", "disappear", "firstAppear", "appear", "clientLeft"], kinds
    seqs = [e["seq"] for e in lines]
    assert seqs == list(range(seqs[0], seqs[0] + 6))
    assert lines[1]["from"] == "home" and lines[1]["to"] == "profile"
    assert lines[1]["by"] == lines[0]["client"]["id"] and lines[1]["ref"] is not None
    assert lines[0]["by"] == "tabd" and lines[0]["ref"] is None, "presence is the daemon's batch"
    assert lines[5]["client"] == lines[0]["client"]["id"], "clientLeft names the id only"


def test_watch_state_prints_the_state_then_exactly_the_events_after_it(daemon):
    on(daemon, "push", "detail")                        # a state that is not the template's
    w = Watch("--url", daemon.http, "--json", "--state", "--count", "2")
    try:
        w.wait_for_notice("connected to room main")
        on(daemon, "tap", "profile")
        first, *events = [json.loads(l) for l in w.finish().splitlines()]
    finally:
        w.kill()
    assert w.proc.returncode == 0
    assert set(first) == {"room", "epoch", "snapshot"} and first["room"] == "main"
    snapshot = first["snapshot"]
    home = next(t for t in snapshot["tabs"] if t["id"] == "home")
    assert [p["route"] for p in home["stack"]] == ["root", "detail"]
    assert len(snapshot["clients"]) == 1, "the state already holds the watcher's own join"
    # The events continue the state: the next seq, no gap, none before it.
    assert [e["seq"] for e in events] == [snapshot["seq"] + 1, snapshot["seq"] + 2]
    assert [e["kind"] for e in events] == ["clientJoined", "selected"]
    # In text, the state block comes first, then the event lines.
    w = Watch("--url", daemon.http, "--state", "--count", "1")
    try:
        w.wait_for_notice("connected to room main")
        on(daemon, "tap", "home")
        lines = w.finish().splitlines()
    finally:
        w.kill()
    assert re.fullmatch(r"room main  seq (\d+)  epoch \S+  scroll-to-top count 0", lines[0]), lines
    assert lines[-2].startswith("clients (1): ") and "clientJoined" in lines[-1], lines


def test_watch_text_is_readable_and_coloured_on_a_terminal(daemon):
    plain = Watch("--url", daemon.http, "--count", "3")
    coloured = None
    try:
        plain.wait_for_notice("connected to room main")
        coloured = Watch("--url", daemon.http, "--count", "2", tty=True)   # plain sees it join
        coloured.wait_for_notice("connected to room main")
        on(daemon, "select", "favorites")   # its client's join, then `selected`, ...
        text, tty_text = plain.finish(), coloured.finish()
    finally:
        plain.kill()
        if coloured:
            coloured.kill()
    lines = text.splitlines()
    assert len(lines) == 3, text
    for line in lines[:2]:
        assert re.fullmatch(r"\s*\d+  clientJoined\s+c\d+ \"tabctl\"  by tabd", line), lines
    assert re.fullmatch(r"\s*\d+  selected\s+home → favorites  by c\d+ ref \S+", lines[2]), lines
    assert "\x1b[" not in text
    # On a terminal: the same words, kinds in bold, tab ids in their tab's colour (#FF3B30 home).
    assert "\x1b[1mselected" in tty_text and "\x1b[1;38;2;255;59;48mhome\x1b[0m" in tty_text, repr(tty_text)


def test_watch_follows_tabd_across_a_restart_missing_nothing(tmp_path):
    state_file = str(tmp_path / "state.sqlite")
    first = Daemon("--state", state_file)
    port = first.host.split(":")[1]
    w = Watch("--url", first.http, "--json", "--count", "8")
    second = None
    try:
        w.wait_for_notice("connected to room main")
        on(first, "select", "profile")                   # join + 4 events + leave = 6 lines
        first.stop()
        w.wait_for_notice("disconnected")
        second = Daemon("--state", state_file, "--port", port)
        w.wait_for_notice("resumed")
        on(second, "push", "x")
        lines = [json.loads(l) for l in w.finish().splitlines()]
    finally:
        w.kill()
        first.stop()
        if second:
            second.stop()
    seqs = [e["seq"] for e in lines]
    assert seqs == list(range(seqs[0], seqs[0] + 8)), "one gap-free stream across the restart"
    kinds = [e["kind"] for e in lines]
    assert kinds[:6] == ["clientJoined", "selected", "disappear", "firstAppear", "appear", "clientLeft"], kinds
    assert "clientLeft" in kinds[6:] or "clientJoined" in kinds[6:], kinds


def test_watch_ends_when_its_reader_goes_away(daemon):
    """`tabctl watch | head -1`: once the pipe's reader is gone, the next event ends it."""
    w = Watch("--url", daemon.http)
    try:
        w.wait_for_notice("connected to room main")
        on(daemon, "tap", "home")          # at least one line
        assert w.proc.stdout.readline()
        w.proc.stdout.close()              # the reader goes away
        on(daemon, "tap", "home")          # more events to write
        assert w.proc.wait(timeout=WAIT) == 0
    finally:
        w.kill()


# clients (presence in big rooms)

MASSCLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "massclient.py")


async def test_clients_lists_each_connected_client_one_per_line_tabctl_among_them(daemon):
    others = [await Client.connect(daemon.ws, name="alice"), await Client.connect(daemon.ws, name="bob"),
              await Client.connect(daemon.ws)]                       # no name: its id is its name
    ids = [c.welcome["client"] for c in others]
    lines = on(daemon, "clients").splitlines()
    assert lines[:3] == [f'{ids[0]} "alice"', f'{ids[1]} "bob"', ids[2]], lines
    assert len(lines) == 4 and re.fullmatch(r'c(\d+) "tabctl"', lines[3]), lines
    assert int(lines[3].split()[0][1:]) > int(ids[2][1:]), "in join order: tabctl joined last"
    rows = [json.loads(l) for l in on(daemon, "--json", "clients").splitlines()]
    assert rows[:3] == [{"id": ids[0], "name": "alice"}, {"id": ids[1], "name": "bob"}, {"id": ids[2], "name": ids[2]}]
    assert len(rows) == 4 and rows[3]["name"] == "tabctl" and list(rows[3]) == ["id", "name"], rows
    for c in others:
        await c.close()


async def test_clients_pages_with_limit_and_after(daemon):
    others = [await Client.connect(daemon.ws, name=n) for n in ("alice", "bob", "carol")]
    ids = [c.welcome["client"] for c in others]
    assert on(daemon, "clients", "--limit", "2").splitlines() == [
        f'{ids[0]} "alice"', f'{ids[1]} "bob"', f"more: tabctl clients --after {ids[1]}"]
    lines = on(daemon, "clients", "--after", ids[1]).splitlines()
    assert lines[0] == f'{ids[2]} "carol"' and len(lines) == 2 and re.fullmatch(r'c\d+ "tabctl"', lines[1]), lines
    lines = on(daemon, "clients", "--after", ids[1], "--limit", "1").splitlines()
    assert lines == [f'{ids[2]} "carol"', f"more: tabctl clients --after {ids[2]}"], lines
    rows = [json.loads(l) for l in on(daemon, "--json", "clients", "--limit", "2").splitlines()]
    assert rows == [{"id": ids[0], "name": "alice"}, {"id": ids[1], "name": "bob"}, {"next": ids[1]}], rows
    code, out, err = tabctl("--url", daemon.http, "clients", "--after", "p1")
    assert code == 1 and out == "" and "invalid" in err, (code, out, err)
    for c in others:
        await c.close()


def test_clients_all_lists_everyone_across_pages(make_daemon):
    n = 1001  # past one page of 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 200:  # the crowd's sockets, in a child that inherits this limit
        if hard < n + 200:
            pytest.skip(f"{n + 200} open files needed; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 200, hard))
    d = make_daemon("--presence-limit", "5", "--log-level", "warn")  # stderr is not read: a line per join would fill it
    crowd = subprocess.Popen([sys.executable, MASSCLIENT, d.host, "--clients", str(n), "--rooms", "1", "--step", str(2 * n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Its one line (a step past N: no progress lines): `ready N` once all are welcomed
        # (room r0), or `done ...` if some failed.
        ready, _, _ = select.select([crowd.stdout], [], [], 60)
        line = crowd.stdout.readline().strip() if ready else "(nothing within 60 s)"
        assert line == f"ready {n}", (line, crowd.stderr.read()[-500:] if crowd.poll() is not None else "")
        out = on(d, "clients", "--all", room="r0").splitlines()
        assert len(out) == n + 1 and not [l for l in out if l.startswith("more:")], out[-3:]
        ids = [int(l.split()[0][1:]) for l in out]
        assert ids == sorted(set(ids)), "each client once, in join order"
        assert {l.split()[1] for l in out[:-1]} == {f'"m{i}"' for i in range(n)} and out[-1].endswith('"tabctl"')
        rows = [json.loads(l) for l in on(d, "--json", "clients", "--all", room="r0").splitlines()]
        assert len(rows) == n + 1 and all(list(r) == ["id", "name"] for r in rows), rows[-2:]
        state = json.loads(on(d, "--json", "state", room="r0"))["snapshot"]
        assert state["presence"] == "counted" and state["clients"] == []
    finally:
        crowd.stdin.close()  # the end of its stdin ends it
        try:
            crowd.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            crowd.kill()
            crowd.wait()
        crowd.stdout.close()
        crowd.stderr.close()


async def test_state_of_a_counted_room_prints_the_count(make_daemon):
    d = make_daemon("--presence-limit", "1", "--presence-interval", "3600000")  # no count reported after the switch
    others = [await Client.connect(d.ws, name="alice"), await Client.connect(d.ws, name="bob")]  # bob: counted, 2
    text = on(d, "state")
    assert text.splitlines()[-1] == "clients: 2 online (counted; 'tabctl clients' lists them)", text
    snap = json.loads(on(d, "--json", "state"))["snapshot"]
    assert snap["presence"] == "counted" and snap["clientCount"] == 2 and snap["clients"] == [], snap
    # Listed, as before.
    text = on(d, "state", room="small")
    assert re.search(r'^clients \(1\): c\d+ "tabctl"$', text, re.M), text
    for c in others:
        await c.close()


async def test_watch_prints_the_presence_events_of_a_counted_room(make_daemon):
    d = make_daemon("--presence-limit", "2", "--presence-interval", "50")
    plain = Watch("--url", d.http, "--count", "4")
    as_json = None
    others = []
    try:
        plain.wait_for_notice("connected to room main")
        as_json = Watch("--url", d.http, "--json", "--count", "3")
        as_json.wait_for_notice("connected to room main")
        others.append(await Client.connect(d.ws, name="alice"))  # the 3rd: the room counts
        others.append(await Client.connect(d.ws, name="bob"))    # counted, reported 50 ms after
        text, rows = plain.finish(), [json.loads(l) for l in as_json.finish().splitlines()]
    finally:
        plain.kill()
        if as_json:
            as_json.kill()
    assert plain.proc.returncode == 0 and as_json.proc.returncode == 0
    lines = text.splitlines()
    assert len(lines) == 4 and re.fullmatch(r'\s*\d+  clientJoined\s+c\d+ "tabctl"  by tabd', lines[0]), lines
    m = re.fullmatch(r"\s*\d+  clientIdsReserved c(\d+)…c(\d+)  by tabd", lines[1])
    assert m and int(m.group(2)) - int(m.group(1)) == 999 and f"c{m.group(1)}" == others[0].welcome["client"], lines
    assert re.fullmatch(r"\s*\d+  presenceCounted 3 online, counted from here on  by tabd", lines[2]), lines
    assert re.fullmatch(r"\s*\d+  clientCount  4 online  by tabd", lines[3]), lines
    reserved = {"kind": "clientIdsReserved", "from": int(m.group(1)), "count": 1000, "by": "tabd", "ref": None}
    assert [{k: v for k, v in r.items() if k != "seq"} for r in rows] == [
        reserved, {"kind": "presenceCounted", "count": 3, "by": "tabd", "ref": None},
        {"kind": "clientCount", "count": 4, "by": "tabd", "ref": None}], rows
    assert [list(r) for r in rows] == [["seq", "kind", "from", "count", "by", "ref"], ["seq", "kind", "count", "by", "ref"],
                                       ["seq", "kind", "count", "by", "ref"]]
    for c in others:
        await c.close()
