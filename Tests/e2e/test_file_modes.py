"""The state file, the files SQLite makes beside it (-wal, -shm) and the directory tabd
creates for it are its user's alone (0600, 0700), whatever the umask; a file that exists
keeps the mode it has. A state file or a TLS key that every user of the machine can read
is warned of in tabd's log at start, with its mode and the chmod that fixes it."""
import os
import stat
import subprocess
import time

import pytest

from conftest import ROOT, WAIT, Daemon


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def wait_for(path):
    deadline = time.monotonic() + WAIT
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # the usual one: files 0644, directories 0755 unless asked otherwise
    yield
    os.umask(old)


def use(d):
    """tabd answers: the state file is open (and WAL mode on, which makes -wal and -shm)."""
    status, _ = d.get("/healthz")
    assert status == 200


def test_the_default_state_directory_and_files_are_private_under_umask_022(tmp_path, umask_022):
    # No --state: tabd creates .tabd/ in its current directory (the web root given elsewhere).
    d = Daemon("--port", "0", "--web-root", os.path.join(ROOT, "web"), bare=True, cwd=tmp_path)
    try:
        use(d)
        directory, state = tmp_path / ".tabd", tmp_path / ".tabd" / "state.sqlite"
        for extra in ("-wal", "-shm"):
            wait_for(str(state) + extra)
        assert mode(directory) == 0o700, oct(mode(directory))
        for path in (state, str(state) + "-wal", str(state) + "-shm"):
            assert mode(path) == 0o600, f"{path}: {oct(mode(path))}"
    finally:
        d.stop()
    assert mode(state) == 0o600


def test_a_named_state_file_is_private_and_an_existing_one_keeps_its_mode(tmp_path, umask_022):
    state = tmp_path / "state.sqlite"
    d = Daemon("--state", str(state))
    try:
        for extra in ("-wal", "-shm"):
            wait_for(str(state) + extra)
        for path in (state, str(state) + "-wal", str(state) + "-shm"):
            assert mode(path) == 0o600, f"{path}: {oct(mode(path))}"
    finally:
        d.stop()
    # An operator's choice stands: tabd neither loosens nor changes a file that exists.
    os.chmod(state, 0o640)
    d = Daemon("--state", str(state))
    try:
        use(d)
        assert mode(state) == 0o640
    finally:
        d.stop()
    assert mode(state) == 0o640


def test_a_strict_umask_still_leaves_the_state_file_writable_by_tabd(tmp_path):
    # Under umask 0277 open(…, 0600) alone would make the file 0400, and SQLite could not write it.
    old = os.umask(0o277)
    try:
        d = Daemon("--state", str(tmp_path / "state.sqlite"))
    finally:
        os.umask(old)
    try:
        use(d)
        assert mode(tmp_path / "state.sqlite") == 0o600
    finally:
        d.stop()


def warnings_of(*args):
    """The WARN lines tabd logs from its start to a SIGTERM once it listens."""
    d = Daemon(*args)
    d.stop()
    return [line for line in d.stderr.splitlines() if " WARN " in line]


def test_an_existing_state_file_every_user_can_read_is_warned_of_at_start(tmp_path, umask_022):
    state = tmp_path / "state.sqlite"
    assert warnings_of("--state", str(state)) == [], "a file tabd creates is its user's alone"
    os.chmod(state, 0o644)  # as an older tabd, or a copy made by hand, may have left it
    assert [w.split(" WARN ", 1)[1] for w in warnings_of("--state", str(state))] == [
        f"the state file '{state}' can be read by every user of this machine (mode 644); chmod 600 it "
        "(and its -wal and -shm files, if any)"]
    assert mode(state) == 0o644, "warned of, not changed"
    # Its group's access is the operator's choice: no warning.
    os.chmod(state, 0o640)
    assert warnings_of("--state", str(state)) == []


def test_a_tls_key_every_user_can_read_is_warned_of_at_start(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "30", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    os.chmod(key, 0o600)
    assert warnings_of("--tls-cert", str(cert), "--tls-key", str(key)) == []
    os.chmod(key, 0o644)
    found = warnings_of("--tls-cert", str(cert), "--tls-key", str(key))
    assert [w.split(" WARN ", 1)[1] for w in found] == [
        f"the TLS key file '{key}' can be read by every user of this machine (mode 644); chmod 600 it"], found
    # Through a link (as Let's Encrypt's live/ files are), the file's own mode is judged.
    link = tmp_path / "privkey.pem"
    os.symlink(key, link)
    os.chmod(key, 0o640)
    assert warnings_of("--tls-cert", str(cert), "--tls-key", str(link)) == []
