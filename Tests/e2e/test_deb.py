"""The Debian package (`make deb`, scripts/make-deb): built from the release executables
`make test` makes (the Swift runtime linked in), installed with dpkg into a throwaway root
(`dpkg --root`, its maintainer scripts run against that root), the installed tabd started
from there with no Swift on its library path: it serves the page, the API and a WebSocket
client; `dpkg --remove` leaves only the conffile and the state directory, `dpkg --purge`
nothing."""
import os
import re
import stat
import subprocess
import urllib.request

import pytest

from conftest import ROOT, WAIT, Client, Daemon

RELEASE = os.environ.get("TABD_RELEASE_BIN", os.path.join(ROOT, ".build-install", "release", "tabd"))
VERSION = open(os.path.join(ROOT, "VERSION")).read().strip()
# What the test puts in the root for dpkg and for the user's creation, not the package.
SCAFFOLD = {"var/lib/dpkg", "var/log", "etc/passwd", "etc/group", "etc/shadow", "etc/gshadow"}


def make_deb(out):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "deb", f"BIN_DIR={os.path.dirname(RELEASE)}", f"DEB_DIR={out}"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    deb = os.path.join(out, f"tabd_{VERSION}_{arch}.deb")
    assert os.path.isfile(deb), os.listdir(out)
    return deb


def throwaway_root(root):
    """An empty dpkg database and the account files useradd --prefix edits."""
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/log", "etc"]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for f in ["var/lib/dpkg/status", "var/lib/dpkg/available"]:
        open(os.path.join(root, f), "w").close()
    files = {"passwd": "root:x:0:0:root:/root:/bin/sh\n", "group": "root:x:0:\n", "shadow": "root:*:19000:0:99999:7:::\n",
             "gshadow": "root:*::\n"}
    for name, text in files.items():
        with open(os.path.join(root, "etc", name), "w") as f:
            f.write(text)


def dpkg(root, *args):
    # Dependencies are the host's (the root has no package database of its own); scripts run
    # with DPKG_ROOT set, against the root, not chrooted (the root has no shell).
    p = subprocess.run(["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends", "--no-triggers", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def left(root):
    """Every file and directory in the root, less the scaffolding and the directories that
    only lead to something."""
    out = set()
    for base, dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        for name in files + [d for d in dirs if not os.listdir(os.path.join(base, d))]:
            path = os.path.normpath(os.path.join(rel, name))
            if not any(path == s or path.startswith(s + "/") or path.startswith(s + "-") for s in SCAFFOLD):
                out.add(path)
    return out


@pytest.mark.time_limit(300)
async def test_the_package_installs_serves_without_swift_and_removes_and_purges_cleanly(tmp_path):
    assert os.access(RELEASE, os.X_OK), f"no release build at {RELEASE}: run `make test-e2e`, or set TABD_RELEASE_BIN"
    deb = make_deb(str(tmp_path / "deb"))
    info = subprocess.run(["dpkg-deb", "--field", deb], capture_output=True, text=True, check=True).stdout
    assert re.search(rf"^Version: {re.escape(VERSION)}$", info, re.M)
    depends = re.search(r"^Depends: (.+)$", info, re.M).group(1)
    for needed in ["libwebsockets", "libsqlite3", "libssl", "libnats", "libwebsockets-evlib-uv", "adduser"]:
        assert needed in depends, (needed, depends)
    assert "swift" not in depends.lower()
    conffiles = subprocess.run(["dpkg-deb", "--ctrl-tarfile", deb], capture_output=True, check=True).stdout
    assert b"conffiles" in conffiles

    root = str(tmp_path / "root")
    throwaway_root(root)
    dpkg(root, "--install", deb)
    tabd = os.path.join(root, "usr/bin/tabd")
    for path in ["usr/bin/tabd", "usr/bin/tabctl", "usr/share/tabd/web/index.html", "usr/share/tabd/web/tabd.js",
                 "lib/systemd/system/tabd.service", "etc/default/tabd", "usr/share/doc/tabd/README.md",
                 "usr/share/doc/tabd/CHANGELOG.md", "usr/share/doc/tabd/copyright", "usr/share/man/man1/tabd.1.gz",
                 "usr/share/man/man1/tabctl.1.gz"]:
        assert os.path.exists(os.path.join(root, path)), path
    unit = open(os.path.join(root, "lib/systemd/system/tabd.service")).read()
    assert "\nType=notify\n" in unit and "\nUser=tabd\n" in unit and "\nExecStart=/usr/bin/tabd\n" in unit
    assert "DynamicUser" not in unit and "EnvironmentFile=-/etc/default/tabd" in unit
    # The package's user, and its state directory, its own and closed to others.
    user = [line for line in open(os.path.join(root, "etc/passwd")) if line.startswith("tabd:")]
    assert len(user) == 1, open(os.path.join(root, "etc/passwd")).read()
    uid = int(user[0].split(":")[2])
    state = os.stat(os.path.join(root, "var/lib/tabd"))
    assert stat.S_IMODE(state.st_mode) == 0o700 and state.st_uid == uid
    # Stripped, and loading no Swift or Foundation library: the runtime is in the executable.
    needed = subprocess.run(["readelf", "-d", tabd], capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"Shared library: \[(.+?)\]", needed)
    assert not [lib for lib in libs if "swift" in lib.lower() or "Foundation" in lib], libs
    assert ".symtab" not in subprocess.run(["readelf", "-S", tabd], capture_output=True, text=True, check=True).stdout
    # No ICU: the modules link FoundationEssentials, never Foundation (61.8 MB stripped before).
    assert os.path.getsize(tabd) <= 20 * 1024 * 1024, f"the installed tabd weighs {os.path.getsize(tabd)} bytes"
    print(f"package: {os.path.getsize(deb) / 1e6:.1f} MB; installed tabd {os.path.getsize(tabd) / 1e6:.1f} MB, "
          f"tabctl {os.path.getsize(os.path.join(root, 'usr/bin/tabctl')) / 1e6:.1f} MB")

    # The installed tabd, with nothing of the toolchain on its path, finds its page by itself.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    assert subprocess.run([tabd, "--version"], capture_output=True, text=True, env=env).stdout.startswith(f"tabd {VERSION} (commit ")
    d = Daemon("--state", ":memory:", binary=tabd, env=env)
    try:
        status, page = d.get("/")
        assert status == 200 and "<title>" in page, page[:200]
        with urllib.request.urlopen(urllib.request.Request(d.http + "/api/rooms/deb", method="PUT"), timeout=WAIT) as r:
            assert r.status == 201
        c = await Client.connect(d.ws, room="deb")
        assert c.welcome["server"] == f"tabd {VERSION}"
        _, reply = await c.command("tap", tab=c.welcome["snapshot"]["tabs"][1]["id"])
        assert reply["type"] == "ack"
        await c.close()
    finally:
        assert d.stop() == 0
    tabctl = subprocess.run([os.path.join(root, "usr/bin/tabctl"), "--version"], capture_output=True, text=True, env=env)
    assert tabctl.stdout.startswith(f"tabctl {VERSION} (commit "), tabctl.stdout + tabctl.stderr

    # Removed: the conffile and the state stay. Purged: nothing, the user included.
    open(os.path.join(root, "var/lib/tabd/state.sqlite"), "w").close()
    dpkg(root, "--remove", "tabd")
    assert left(root) == {"etc/default/tabd", "var/lib/tabd/state.sqlite"}, left(root)
    dpkg(root, "--purge", "tabd")
    assert left(root) == set(), left(root)
    assert not [line for line in open(os.path.join(root, "etc/passwd")) if line.startswith("tabd:")]
