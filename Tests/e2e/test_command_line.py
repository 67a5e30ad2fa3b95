"""tabd's command line: help, version, bad options and a missing web root get clear answers."""
import re
import subprocess

from conftest import TABD


def run(*args):
    return subprocess.run([TABD, *args], capture_output=True, text=True, timeout=30)


def test_help_lists_every_option_and_exits_0():
    p = run("--help")
    assert p.returncode == 0
    for option in ["--host", "--port", "--web-root", "--tabs", "--state", "--resume-window", "--queue-limit",
                   "--rate-limit", "--max-clients", "--allow-origin", "--token", "--token-file", "--auth-secret-file", "--rooms",
                   "--max-rooms", "--room-idle", "--log-level", "--log-format", "--version", "TABD_TOKEN", "TABD_AUTH_SECRET", "tabd token",
                   "--request-timeout", "--event-loop", "--cluster", "--cluster-tls-ca", "--cluster-tls-cert",
                   "--cluster-tls-key", "--cluster-creds", "--cluster-user", "--cluster-password-file", "--tls-cert", "--tls-key",
                   "--trusted-proxy", "--cluster-secret-file", "--cluster-unsigned", "TABD_CLUSTER_SECRET_FILE"]:
        assert option in p.stdout, option


def test_tabd_token_has_its_own_help():
    p = run("token", "--help")
    assert p.returncode == 0
    for option in ["--secret-file", "--room", "--role", "--name", "--ttl"]:
        assert option in p.stdout, option


def test_tabd_and_tabctl_name_the_version_file_and_the_commit_they_were_built_from():
    import json
    import os
    from conftest import ROOT
    version = open(os.path.join(ROOT, "VERSION")).read().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    tabctl = os.environ.get("TABCTL_BIN", os.path.join(os.path.dirname(TABD), "tabctl"))
    for program, binary in [("tabd", TABD), ("tabctl", tabctl)]:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        m = re.fullmatch(rf"{program} (\S+) \(commit ([0-9a-f]{{12}})(-dirty)?\)\n", p.stdout)
        assert m, p.stdout
        assert m.group(1) == version, f"{program} says {m.group(1)}, VERSION says {version}"
        if head:
            assert m.group(2) == head, f"{program} was built from {m.group(2)}, the checkout is at {head}"
    # One version everywhere: the web package and the changelog's newest entry too.
    assert json.load(open(os.path.join(ROOT, "web", "package.json")))["version"] == version
    changelog = open(os.path.join(ROOT, "CHANGELOG.md")).read()
    assert re.search(r"^## (\S+)", changelog, re.M).group(1) == version, "CHANGELOG.md's newest entry is VERSION"


def test_an_unknown_option_or_bad_value_exits_2_and_says_why():
    p = run("--bogus")
    assert p.returncode == 2 and "unknown option '--bogus'" in p.stderr
    p = run("--port", "70000")
    assert p.returncode == 2 and "--port" in p.stderr
    p = run("--log-level", "loud")
    assert p.returncode == 2 and "--log-level" in p.stderr
    p = run("--event-loop", "select")
    assert p.returncode == 2 and "--event-loop must be libuv or poll, got 'select'" in p.stderr


def test_a_missing_web_root_is_named(tmp_path):
    missing = str(tmp_path / "nope")
    p = run("--port", "0", "--state", ":memory:", "--web-root", missing)
    assert p.returncode != 0 and missing in p.stderr and "listening" not in p.stdout


def test_a_bad_tabs_file_is_named(tmp_path):
    tabs = tmp_path / "tabs.json"
    tabs.write_text('[{"id": "Bad Id", "title": "x", "icon": "star", "color": "#000000"}]')
    p = run("--port", "0", "--state", ":memory:", "--tabs", str(tabs))
    assert p.returncode != 0 and str(tabs) in p.stderr and "tab 1" in p.stderr


async def test_a_tabs_file_sets_the_tabs_of_a_new_history(make_daemon, tmp_path):
    from conftest import Client
    tabs = tmp_path / "tabs.json"
    tabs.write_text('{"tabs": [{"id": "inbox", "title": "Inbox", "icon": "envelope", "color": "#ff9500", "badge": "3"},'
                    ' {"id": "me", "title": "Me", "icon": "person", "color": "#5856D6"}]}')
    d = make_daemon("--tabs", str(tabs))
    c = await Client.connect(d.ws)
    snap = c.welcome["snapshot"]
    assert [(t["id"], t["color"], t["badge"]) for t in snap["tabs"]] == [("inbox", "#FF9500", "3"), ("me", "#5856D6", None)]
    assert snap["selected"] == "inbox"


def test_a_state_file_in_a_missing_directory_is_refused_and_named(tmp_path):
    # Only the default place (.tabd/) is created; a directory given with --state must exist.
    missing = tmp_path / "no" / "such"
    p = run("--port", "0", "--state", str(missing / "state.sqlite"))
    assert p.returncode != 0 and "listening" not in p.stdout
    assert str(missing) in p.stderr and "does not exist" in p.stderr
    assert not (tmp_path / "no").exists(), "nothing was created"


def test_a_number_out_of_range_says_the_range_allowed():
    p = run("--rate-limit", "-1")
    assert p.returncode == 2 and "--rate-limit must be a whole number from 0 to 1000000, got '-1'" in p.stderr
    p = run("--ping-interval", "0")
    assert p.returncode == 2 and "--ping-interval must be a whole number from 1 to 3600, got '0'" in p.stderr
    p = run("--queue-limit", "many")
    assert p.returncode == 2 and "--queue-limit must be a whole number from 1 to 1000000, got 'many'" in p.stderr


def stderr_of_a_run(*args):
    """What tabd writes to stderr from its start to a SIGTERM once it listens."""
    proc = subprocess.Popen([TABD, "--port", "0", "--state", ":memory:", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("tabd listening on ")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return err


def test_libwebsockets_logs_through_tabds_logger():
    # Every stderr line, libwebsockets' own included, has tabd's timestamp and level.
    err = stderr_of_a_run("--log-level", "debug")
    lines = [l for l in err.splitlines() if l]
    line_format = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (ERROR|WARN|INFO|DEBUG) \S")
    assert all(line_format.match(l) for l in lines), [l for l in lines if not line_format.match(l)][:5]
    assert any(" DEBUG libwebsockets: " in l for l in lines)


def test_log_format_json_writes_one_object_per_line():
    import json
    err = stderr_of_a_run("--log-format", "json", "--log-level", "debug")
    records = [json.loads(l) for l in err.splitlines() if l]  # every line is one JSON object
    assert records and all(set(r) == {"time", "level", "message"} for r in records)
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", r["time"]) for r in records)
    assert {r["level"] for r in records} <= {"error", "warn", "info", "debug"}
    assert any(r["message"].startswith("state in memory") for r in records)
    assert any(r["message"].startswith("libwebsockets: ") for r in records)
    assert any(r["message"].startswith("received signal 15") for r in records)
    p = run("--log-format", "xml")
    assert p.returncode == 2 and "--log-format must be text or json, got 'xml'" in p.stderr


def test_a_stop_signal_at_any_moment_of_the_start_is_never_lost():
    """SIGTERM or SIGINT sent while tabd starts, at 40 moments spread over its start, four
    tabds at a time. Before tabd has set its handler the signal ends it as by default;
    from then on tabd must stop cleanly, having said so. No run may ignore the signal: a
    Dispatch signal source, registered later on another thread, used to lose it."""
    import random
    import signal
    import time
    from concurrent.futures import ThreadPoolExecutor

    def one(n):
        rng = random.Random(n)
        proc = subprocess.Popen([TABD, "--port", "0", "--state", ":memory:"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0, 0.04))  # the moment the signal is sent, not a wait for anything
        sig = signal.SIGTERM if n % 2 else signal.SIGINT
        proc.send_signal(sig)
        try:
            # Generous: a lost signal never ends, so the bound costs time only on failure.
            _, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            return f"run {n}: {sig.name} ignored; tabd wrote:\n{proc.communicate()[1]}"
        if proc.returncode == -sig:
            return None  # before the handler was set
        if proc.returncode != 0 or f"received signal {int(sig)}, stopping" not in err or "stopped" not in err:
            return f"run {n}: {sig.name} gave exit {proc.returncode}; tabd wrote:\n{err}"
        return None

    # tabd inherits what this process ignores until it sets its own handler, and a shell
    # starts a background job with SIGINT ignored: a signal that early would be dropped
    # by that inheritance, not by tabd. A handler here is reset to the default in tabd.
    ignored = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) == signal.SIG_IGN]
    for s in ignored:
        signal.signal(s, lambda *_: None)
    try:
        with ThreadPoolExecutor(4) as pool:
            failures = [f for f in pool.map(one, range(40)) if f]
    finally:
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)
    assert not failures, "\n\n".join(failures)


async def test_tabd_says_which_event_loop_it_runs_and_serves_on_either(make_daemon):
    from conftest import Client
    for loop, named in (("libuv", "network: libuv (epoll) event loop"), ("poll", "network: poll() (libwebsockets' own loop) event loop")):
        d = make_daemon("--event-loop", loop)
        c = await Client.connect(d.ws)
        _, pong = await c.command("ping")
        assert pong["type"] == "pong"
        await c.close()
        assert d.stop() == 0
        assert named in d.stderr, d.stderr


def refused(*args, env=None):
    """(exit status, stderr) of a tabd that is expected to refuse its options at once; a tabd
    that starts listening instead is stopped and the test fails."""
    import os
    from conftest import ROOT
    proc = subprocess.Popen([TABD, "--port", "0", "--state", ":memory:", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"tabd {' '.join(args)} {env or ''} started instead of refusing: {out!r} {err!r}")
    assert "listening" not in out, (args, env, out)
    return proc.returncode, err


def test_an_allow_origin_that_is_not_an_origin_is_refused_naming_the_option_and_the_value():
    # 'null' is what sandboxed frames and data: pages send: allowing it would allow every site.
    for value, why in (("null", "'null' is the origin of sandboxed frames"),
                       ("https://app.example/", "an origin has no path, not even a trailing /"),
                       ("app.example", "it has no http:// or https://"),
                       ("https://app.example:0", "its port must be a number from 1 to 65535")):
        code, err = refused("--allow-origin", value)
        assert code == 2, (value, code, err)
        assert f"tabd: --allow-origin takes an origin, http(s)://HOST[:PORT] as browsers send it" in err, err
        assert f"got '{value}': {why}" in err, err
    code, err = refused(env={"TABD_ALLOW_ORIGIN": "https://ok.example,null"})
    assert code == 2 and "tabd: TABD_ALLOW_ORIGIN takes an origin" in err and "got 'null'" in err, err
    code, err = refused("--allow-origin", "https://user:hunter2@app.example")
    assert code == 2 and "got 'https://***@app.example': an origin has no user or password" in err, err
    assert "hunter2" not in err


def test_credentials_in_a_cluster_url_are_refused_and_never_repeated():
    # As --cluster-password is: a password on the command line or in the environment is seen
    # by every user (ps, /proc) and, in a URL, was written to the log when the node started.
    import os
    from conftest import ROOT, cluster_secret_file
    how = ("give the engine's user with --cluster-user NAME and its password in a file with --cluster-password-file FILE, "
           "or a NATS credentials file with --cluster-creds FILE")
    for args, env, name, shown in (
            (("--cluster", "nats://tabd:hunter2@127.0.0.1:1"), None, "--cluster", "nats://***@127.0.0.1:1"),
            (("--cluster", "nats://127.0.0.1:1,tls://hunter2@127.0.0.1:2"), None, "--cluster", "tls://***@127.0.0.1:2"),
            ((), {"TABD_CLUSTER": "nats://tabd:hunter2@127.0.0.1:1"}, "TABD_CLUSTER", "nats://***@127.0.0.1:1")):
        proc = subprocess.run([TABD, "--port", "0", "--cluster-secret-file", cluster_secret_file(), *args], capture_output=True,
                              text=True, timeout=30, cwd=ROOT, env={**os.environ, **(env or {})})
        assert proc.returncode == 2, (args, env, proc.returncode, proc.stderr)
        assert f"tabd: {name} takes URLs without credentials, got '{shown}': {how}" in proc.stderr, proc.stderr
        assert "hunter2" not in proc.stderr + proc.stdout


def test_a_number_past_its_options_bound_is_refused_instead_of_trapping():
    # Each of these used to be taken, then trap (an arithmetic overflow, exit by SIGILL or
    # SIGTRAP) at start or on the first broadcast, or be kept as a bound nothing can reach.
    big = str(2 ** 63 - 1)
    for option, value, shown in (("--max-room-bytes", big, "from 16384 to 268435456"),
                                 ("--max-room-bytes", str(2 ** 62), "from 16384 to 268435456"),
                                 ("--queue-limit", big, "from 1 to 1000000"),
                                 ("--max-clients", big, "from 1 to 1000000"),
                                 ("--resume-window", big, "from 0 to 1000000"),
                                 ("--queue-bytes", big, "from 65536 to 1099511627776"),
                                 ("--queue-bytes-total", big, "from 65536 to 1099511627776"),
                                 ("--rate-limit", big, "from 0 to 1000000"),
                                 ("--rate-limit-bytes", big, "from 0 to 1073741824"),
                                 ("--max-rooms", big, "from 1 to 10000000")):
        code, err = refused(option, value)
        assert code == 2 and f"tabd: {option} must be a whole number {shown}, got '{value}'" in err, (option, code, err)
        variable = "TABD_" + option[2:].upper().replace("-", "_")
        code, err = refused(env={variable: value})
        assert code == 2 and f"tabd: {variable} must be a whole number {shown}, got '{value}'" in err, (variable, code, err)
    # The bounds themselves are taken, all at once.
    bounds = ["--max-room-bytes", "268435456", "--queue-bytes", "1099511627776", "--queue-bytes-total", "1099511627776",
              "--queue-limit", "1000000", "--resume-window", "1000000", "--rate-limit", "1000000",
              "--rate-limit-bytes", "1073741824", "--max-rooms", "10000000"]
    assert stderr_of_a_run(*bounds) is not None
    p = run("--help")
    assert "(default 10000; 1 to 1000000)" in " ".join(p.stdout.split()), "--help gives the range"
