"""Browser tests: a real headless Chromium (Debian's chromium + chromium-driver) drives
web/index.html against a real tabd.

Environment:
  TABD_BIN           the daemon (default: .build/debug/tabd of this checkout)
  TABD_WEB_ROOT      the web client (default: web/ of this checkout)
  TABD_TEST_OUTPUT   where screenshots go (default: test-output/ of this checkout)
  TABD_UPDATE_DOCS=1 also copy the phone and desktop screenshots to docs/screenshots/
  CHROMIUM_BIN, CHROMEDRIVER_BIN   default /usr/bin/chromium, /usr/bin/chromedriver

Every test starts its own tabd on a free port (in its own working directory) and its own
browsers; nothing is shared between tests. Waits are bounded (WebDriverWait), never bare
sleeps.
"""
import json
import os
import secrets
import time

import pytest

from browserkit import SCREENSHOTS, WAIT, Browser, Daemon, Remote, screenshots_taken


@pytest.fixture
def make_daemon(tmp_path):
    started = []

    def make(*args, port=0):
        deadline = time.monotonic() + WAIT
        while True:  # restarting on the same port: retry briefly if it is not free yet
            try:
                d = Daemon(str(tmp_path), *args, port=port)
                break
            except RuntimeError:
                if port == 0 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        started.append(d)
        return d
    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(make_daemon):
    return make_daemon()


@pytest.fixture
def key_file(tmp_path):
    """A signing key, readable by its owner only (tabd warns otherwise)."""
    path = tmp_path / "auth.key"
    path.write_text(secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)
    return str(path)


@pytest.fixture
def tabs_file(tmp_path):
    """Writes a --tabs file and returns its path."""
    def write(tabs):
        path = tmp_path / "tabs.json"
        path.write_text(json.dumps(tabs))
        return str(path)
    return write


@pytest.fixture
def remote():
    opened = []

    def make(daemon, name="remote", room=None, token=None):
        r = Remote(daemon, name, room, token)
        opened.append(r)
        return r
    yield make
    for r in opened:
        r.close()


@pytest.fixture
def browsers(request):
    """browsers(width=…, height=…) opens a browser; at teardown every one is checked for
    console errors and closed (a failing test also leaves a screenshot)."""
    opened = []

    def make(**kw):
        b = Browser(**kw)
        opened.append(b)
        return b
    yield make
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    errors = []
    for i, b in enumerate(opened):
        try:
            if failed:
                b.screenshot(f"FAILED-{request.node.name}-{i}.png")
            errors += b.console_errors()
        finally:
            b.quit()
    if not failed:
        assert errors == [], f"console errors: {errors}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def pytest_terminal_summary(terminalreporter):
    if screenshots_taken:
        terminalreporter.write_line(f"browser screenshots ({len(screenshots_taken)}) saved in {SCREENSHOTS}")
