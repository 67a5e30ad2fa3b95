"""An installed tabd: `make install`'s layout and recipe, options from TABD_* variables, and
the systemd unit (contrib/tabd.service) started with exactly its environment."""
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import websockets

from conftest import ROOT, TABD

UNIT = os.path.join(ROOT, "contrib", "tabd.service")
# The page's files as installed: web/ less package.json, which only tells node they are ES modules.
PAGE = sorted(f for f in os.listdir(os.path.join(ROOT, "web")) if f != "package.json")


def environment(**variables):
    """This process's environment without any TABD_ variable, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TABD_")}
    env.update(variables)
    return env


@pytest.fixture
def start(make_daemon):
    """A tabd started bare (no --port or --state added) from `cwd` with `env` (this
    process's environment less every TABD_ variable, unless given)."""
    def make(*args, binary=TABD, cwd=ROOT, env=None):
        return make_daemon(*args, binary=binary, cwd=cwd, env=environment() if env is None else env, bare=True)
    return make


def refused(binary, cwd, env, *args):
    """A tabd that must not start: (exit code, stdout, stderr)."""
    p = subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=30)
    return p.returncode, p.stdout, p.stderr


def make(*targets, **variables):
    """The repository's Makefile; the outer make's flags (make test) are not passed on."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, *targets, *(f"{k}={v}" for k, v in variables.items())],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def lay_out(prefix, with_page=True):
    """What `make install` does, by hand: PREFIX/bin/tabd and PREFIX/share/tabd/web/."""
    os.makedirs(prefix / "bin")
    shutil.copy2(TABD, prefix / "bin" / "tabd")
    if with_page:
        os.makedirs(prefix / "share" / "tabd" / "web")
        for f in PAGE:
            shutil.copy2(os.path.join(ROOT, "web", f), prefix / "share" / "tabd" / "web" / f)
    return str(prefix / "bin" / "tabd")


def unit_environment(text):
    """name → (value, commented) for each variable of a unit's `Environment=` and `#Environment=` lines."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^(#?)Environment=(.*)$", line)
        if m:
            for assignment in shlex.split(m.group(2)):
                name, _, value = assignment.partition("=")
                found[name] = (value, m.group(1) == "#")
    return found


# The layout an install makes

def test_an_installed_tabd_serves_the_installed_page_and_keeps_its_state_where_it_starts(start, tmp_path):
    prefix, work = tmp_path / "prefix", tmp_path / "work"
    binary = lay_out(prefix)
    installed = prefix / "share" / "tabd" / "web" / "index.html"
    installed.write_bytes(installed.read_bytes() + b"<!-- the installed copy -->\n")
    work.mkdir()
    t = start(binary=binary, cwd=work)   # no --web-root, no --state
    status, body = t.fetch("/")
    assert status == 200 and body == installed.read_bytes(), "served the installed index.html, not the checkout's"
    code = t.stop()
    err = t.stderr
    assert code == 0
    assert f"serving {prefix}/share/tabd/web," in err
    # Not in the checkout's .tabd/ nor beside the installed page: in the directory it started in.
    assert f"state in {work}/.tabd/state.sqlite" in err
    assert (work / ".tabd" / "state.sqlite").exists() and not (prefix / "share" / "tabd" / ".tabd").exists()


def test_without_a_page_the_error_names_every_place_tried_the_installed_one_too(tmp_path):
    prefix = tmp_path / "prefix"
    binary = lay_out(prefix, with_page=False)
    code, out, err = refused(binary, tmp_path, environment(), "--port", "0", "--state", ":memory:")
    assert code != 0 and "listening" not in out
    assert f"{prefix}/share/tabd/web" in err and f"{tmp_path}/web" in err and "--web-root" in err


def test_make_install_puts_everything_under_prefix_and_uninstall_removes_it(start, tmp_path):
    prefix = tmp_path / "prefix"
    make("install", PREFIX=prefix, BIN_DIR=os.path.dirname(TABD))
    assert os.access(prefix / "bin" / "tabd", os.X_OK) and os.access(prefix / "bin" / "tabctl", os.X_OK)
    assert sorted(os.listdir(prefix / "share" / "tabd" / "web")) == PAGE
    for f in ["README.md", "LICENSE", "docs/PROTOCOL.md", "docs/screenshots/phone.png"]:
        assert (prefix / "share" / "doc" / "tabd" / f).is_file(), f
    unit = (prefix / "share" / "tabd" / "contrib" / "tabd.service").read_text()
    assert f"\nExecStart={prefix}/bin/tabd\n" in unit
    assert (prefix / "share" / "tabd" / "contrib" / "README.md").is_file()
    assert not (prefix / "lib").exists(), "no unit enabled or written to lib/systemd"

    t = start("--port", "0", "--state", ":memory:", binary=str(prefix / "bin" / "tabd"), cwd=prefix)
    for path, f in [("/", "index.html"), ("/app.js", "app.js"), ("/model.js", "model.js"), ("/tabd.js", "tabd.js"),
                    ("/tabd-tab-bar.js", "tabd-tab-bar.js"), ("/colors.js", "colors.js"), ("/icons.js", "icons.js")]:
        status, body = t.fetch(path)
        assert status == 200 and body == (prefix / "share" / "tabd" / "web" / f).read_bytes(), path
    # The installed tabctl drives the installed tabd.
    tap = subprocess.run([str(prefix / "bin" / "tabctl"), "--url", t.http, "--json", "tap", "profile"],
                         capture_output=True, text=True, timeout=30, cwd=prefix)
    assert tap.returncode == 0 and json.loads(tap.stdout)["type"] == "ack", tap.stdout + tap.stderr
    assert t.stop() == 0

    make("uninstall", PREFIX=prefix)
    assert not (prefix / "bin" / "tabd").exists() and not (prefix / "bin" / "tabctl").exists()
    assert not (prefix / "share" / "tabd").exists() and not (prefix / "share" / "doc" / "tabd").exists()


def test_make_install_honours_destdir(tmp_path):
    stage = tmp_path / "stage"
    make("install", DESTDIR=stage, PREFIX="/usr", INSTALL_PRODUCTS="tabd", BIN_DIR=os.path.dirname(TABD))
    assert os.access(stage / "usr" / "bin" / "tabd", os.X_OK)
    unit = (stage / "usr" / "share" / "tabd" / "contrib" / "tabd.service").read_text()
    # Paths inside files name where they will be, not the staging directory.
    assert "\nExecStart=/usr/bin/tabd\n" in unit and "file:/usr/share/doc/tabd/README.md" in unit
    assert str(stage) not in unit and "/usr/local/" not in unit
    make("uninstall", DESTDIR=stage, PREFIX="/usr", INSTALL_PRODUCTS="tabd")
    assert not (stage / "usr" / "bin" / "tabd").exists() and not (stage / "usr" / "share" / "tabd").exists()


# Options from the environment

def test_port_and_log_format_from_the_environment(start, tmp_path):
    t = start(cwd=tmp_path, env=environment(TABD_PORT="0", TABD_LOG_FORMAT="json", TABD_STATE=":memory:"))
    assert not t.host.endswith(":8080"), "TABD_PORT=0 picked a free port"
    code = t.stop()
    err = t.stderr
    records = [json.loads(line) for line in err.splitlines() if line]   # every line is one JSON object
    assert code == 0 and any(r["message"].startswith("state in memory") for r in records)


def test_the_command_line_beats_the_environment(start, tmp_path):
    env = environment(TABD_PORT="not a port", TABD_LOG_FORMAT="json", TABD_STATE=str(tmp_path / "no" / "such.sqlite"),
                      TABD_CLUSTER="nats://127.0.0.1:1")
    # --state on the command line also sets TABD_CLUSTER aside: the two exclude each other.
    t = start("--port", "0", "--log-format", "text", "--state", ":memory:", cwd=tmp_path, env=env)
    code = t.stop()
    err = t.stderr
    assert code == 0
    lines = [line for line in err.splitlines() if line]
    assert lines and all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [A-Z]+ ", line) for line in lines), lines[:3]
    assert any("state in memory" in line for line in lines)


@pytest.mark.parametrize("variables, message", [
    ({"TABD_PORT": "x"}, "TABD_PORT must be a whole number from 0 to 65535, got 'x'"),
    ({"TABD_PORT": "70000"}, "TABD_PORT must be a whole number from 0 to 65535, got '70000'"),
    ({"TABD_LOG_LEVEL": "loud"}, "TABD_LOG_LEVEL must be error, warn, info or debug, got 'loud'"),
    ({"TABD_STATE": ""}, "TABD_STATE must not be empty"),
    ({"TABD_CLUSTER": "http://x"}, "TABD_CLUSTER takes nats://HOST:PORT URLs"),
    ({"TABD_STATE": "s.sqlite", "TABD_CLUSTER": "nats://127.0.0.1:1"}, "TABD_STATE and TABD_CLUSTER exclude each other"),
])
def test_a_bad_variable_is_refused_and_named(tmp_path, variables, message):
    code, out, err = refused(TABD, tmp_path, environment(**variables))
    assert code == 2 and "listening" not in out
    assert f"tabd: {message}" in err


def test_help_states_the_rule_and_the_two_credential_variables():
    code, out, _ = refused(TABD, ROOT, environment(TABD_PORT="x"), "--help")   # help despite a bad variable
    assert code == 0
    for text in ["TABD_PORT", "TABD_ALLOW_ORIGIN", "comma-separated", "The command line wins", "TABD_TOKEN ",
                 "TABD_AUTH_SECRET ", "share/tabd/web"]:
        assert text in out, text


async def test_allow_origin_takes_a_comma_separated_list(start, tmp_path):
    t = start("--port", "0", "--state", ":memory:",
              env=environment(TABD_ALLOW_ORIGIN="http://a.example, http://b.example:3000"))
    for origin in ["http://a.example", "http://b.example:3000"]:
        async with websockets.connect(t.ws, origin=origin) as ws:
            assert json.loads(await ws.recv())["type"] == "welcome"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refusal:
        await websockets.connect(t.ws, origin="http://c.example")
    assert refusal.value.response.status_code == 403
    # On the command line, --allow-origin replaces the variable's list.
    u = start("--port", "0", "--state", ":memory:", "--allow-origin", "http://c.example",
              env=environment(TABD_ALLOW_ORIGIN="http://a.example"))
    async with websockets.connect(u.ws, origin="http://c.example") as ws:
        assert json.loads(await ws.recv())["type"] == "welcome"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refusal:
        await websockets.connect(u.ws, origin="http://a.example")
    assert refusal.value.response.status_code == 403


def test_token_file_from_the_environment(start, tmp_path):
    token = tmp_path / "token"
    token.write_text("fr0m-a-file\n")
    token.chmod(0o600)
    t = start("--port", "0", "--state", ":memory:", env=environment(TABD_TOKEN_FILE=str(token)))
    assert t.get("/metrics")[0] == 401
    assert t.get("/metrics", {"Authorization": "Bearer fr0m-a-file"})[0] == 200


# The systemd unit

def test_the_unit_names_only_variables_tabd_reads_and_starts_with_exactly_them(start, tmp_path):
    text = open(UNIT).read()
    variables = unit_environment(text)
    assert {"TABD_STATE", "TABD_HOST", "TABD_LOG_FORMAT"} <= set(variables)
    _, help_text, _ = refused(TABD, ROOT, environment(), "--help")
    for name in variables:   # commented ones too: they are the credentials' recipe
        option = "--" + name[len("TABD_"):].lower().replace("_", "-")
        assert name in ("TABD_TOKEN", "TABD_AUTH_SECRET") or re.search(rf"^\s+{option}(\s|$)", help_text, re.M), name
    # The state goes where the unit's StateDirectory is; the executable is where make install puts it.
    state_dir = re.search(r"^StateDirectory=(\S+)$", text, re.M).group(1)
    assert variables["TABD_STATE"][0].startswith(f"/var/lib/{state_dir}/")
    assert re.search(r"^ExecStart=/usr/local/bin/tabd$", text, re.M)
    # A reload is a SIGHUP to tabd itself, which tabd survives (test_forwarding's SIGHUP test).
    assert re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", text, re.M)

    live = {name: value for name, (value, commented) in variables.items() if not commented}
    live.update(TABD_STATE=str(tmp_path / "state.sqlite"), TABD_PORT="0")   # a place of the test's own, a free port
    t = start(cwd="/", env=environment(**live))
    assert t.host.startswith(live["TABD_HOST"] + ":")
    code = t.stop()
    err = t.stderr
    records = [json.loads(line) for line in err.splitlines() if line]
    assert code == 0, err   # SIGTERM, the unit's KillSignal, stops tabd with 0
    assert any(r["message"].startswith(f"state in {tmp_path}/state.sqlite") for r in records)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verifies_the_unit(tmp_path):
    # verify also wants ExecStart to exist: the same unit with this build's tabd.
    unit = tmp_path / "tabd.service"
    unit.write_text(open(UNIT).read().replace("ExecStart=/usr/local/bin/tabd", f"ExecStart={TABD}"))
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
