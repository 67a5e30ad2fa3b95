"""tabd in another site's page: a page served from another origin (its own small server on a
free port) imports tabd.js and tabd-tab-bar.js from tabd, as docs/WEB.md shows, and shows
<tabd-tab-bar>. tabd names that origin with --allow-origin; a page from any other origin
cannot import the modules."""
import functools
import http.server
import json
import os
import re
import statistics
import subprocess
import threading

import pytest
from selenium.webdriver.common.by import By

from browserkit import OUTPUT, SYNC, TABD, WAIT

ROOM = "embed"
CONNECTION_REFUSED = re.compile(r"ERR_CONNECTION_REFUSED|WebSocket connection to .* failed")
# Every event the element dispatches, recorded by the host page (detail made JSON-safe).
ELEMENT_EVENTS = ["tabd-welcome", "tabd-select", "tabd-scroll-to-top", "tabd-appear", "tabd-first-appear",
                  "tabd-disappear", "tabd-connection", "tabd-error"]

HOST_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Another site</title><link rel="icon" href="data:,"></head>
<body>
<main>
  <h1>A page on another site</h1>
  <p>Its tab bar comes from tabd.</p>
  <tabd-tab-bar id="bar" server="{tabd}" room="{room}" token="{token}" label="Rooms"></tabd-tab-bar>
</main>
<script type="module">
  const host = window.__host = {{ events: [], welcomedAt: null, paintedAt: null, ready: false }};
  const bar = document.getElementById("bar");
  const safe = (d) => {{
    const o = {{}};
    for (const [k, v] of Object.entries(d || {{}})) {{
      if (k === "client") continue;
      o[k] = v instanceof Error ? {{ code: v.code, message: v.message }} : v;
    }}
    return o;
  }};
  for (const type of {events}) bar.addEventListener(type, (e) => host.events.push({{ type, detail: safe(e.detail) }}));
  // The first paint after the welcome: the frame after the element first drew the room.
  bar.addEventListener("tabd-welcome", () => {{ if (host.welcomedAt === null) host.welcomedAt = performance.now(); }});
  bar.addEventListener("tabd-change", () => {{
    if (host.welcomedAt !== null && host.paintedAt === null) requestAnimationFrame(() => {{ host.paintedAt ??= performance.now(); }});
  }});
  const tabd = await import("{tabd}tabd.js");
  await import("{tabd}tabd-tab-bar.js");
  host.connect = tabd.connect;
  host.ready = true;
</script>
</body>
</html>
"""


class HostSite:
    """A small web server on a free port: the other site, serving one page."""

    def __init__(self, directory):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.directory = directory
        self.origin = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, name, tabd, token=""):
        (self.directory / name).write_text(HOST_PAGE.format(tabd=tabd.http, room=ROOM, token=token,
                                                            events=json.dumps(ELEMENT_EVENTS)))
        return f"{self.origin}/{name}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    s = HostSite(root)
    yield s
    s.close()


def mint(key_file, role):
    out = subprocess.run([TABD, "token", "--secret-file", key_file, "--room", ROOM, "--role", role, "--ttl", "30m"],
                         capture_output=True, text=True, timeout=WAIT, check=True)
    return out.stdout.strip()


def bar_tabs(b):
    """The element's tabs as drawn: id, aria-selected, aria-disabled."""
    return b.js("""
        const bar = document.getElementById('bar');
        if (!bar || !bar.shadowRoot) return null;
        return Array.from(bar.shadowRoot.querySelectorAll('[role=tab]')).map(t => ({
          id: t.dataset.tab, selected: t.getAttribute('aria-selected'), disabled: t.getAttribute('aria-disabled')}));""")


def selected_in_bar(b):
    return next((t["id"] for t in bar_tabs(b) or [] if t["selected"] == "true"), None)


def click_in_bar(b, tab_id):
    b.driver.find_element(By.ID, "bar").shadow_root.find_element(By.CSS_SELECTOR, f"#tab-{tab_id}").click()


def open_host(b, url):
    b.driver.get(url)
    b.wait(lambda: b.js("return !!(window.__host && window.__host.ready)"), WAIT, "the modules imported from tabd")
    b.wait(lambda: bar_tabs(b), WAIT, "the element drew the room's tabs")


def events_of(b, type_):
    return [e["detail"] for e in b.js("return window.__host.events") if e["type"] == type_]


def connect_and_tap(b, tabd, token, tab):
    """connect() from the host page, one tap, and what the state held when its Promise resolved."""
    return b.driver.execute_async_script("""
        const [url, room, token, tab, done] = arguments;
        (async () => {
          const c = await window.__host.connect(url, { room, token, name: 'script' });
          const seq = await c.tap(tab);
          const at = { seq, stateSeq: c.state.seq, selected: c.state.selected };
          c.close();
          done(at);
        })().catch((e) => done({ error: String(e), code: e.code }));""", tabd.http, ROOM, token, tab)


def test_another_origin_imports_the_modules_and_shows_a_live_tab_bar(make_daemon, site, key_file, browsers, remote, tmp_path):
    state = str(tmp_path / "state.db")
    args = ("--allow-origin", site.origin, "--auth-secret-file", key_file, "--state", state)
    d = make_daemon(*args)
    control = mint(key_file, "control")
    b = browsers()
    b.allow_console(CONNECTION_REFUSED)  # the retries while tabd restarts, below
    open_host(b, site.page("index.html", d, control))
    r = remote(d, "other", room=ROOM, token=mint(key_file, "control"))
    snap = r.snapshot()

    # It draws the room's tabs, the selected one selected, in its own shadow root.
    assert [t["id"] for t in bar_tabs(b)] == [t["id"] for t in snap["tabs"]]
    assert selected_in_bar(b) == snap["selected"]
    assert b.js("return document.getElementById('bar').shadowRoot.querySelector('[role=tablist]').getAttribute('aria-label')") == "Rooms"
    (welcome,) = events_of(b, "tabd-welcome")
    assert (welcome["session"]["room"], welcome["session"]["role"]) == (ROOM, "control")

    # A click selects on the server, and the host page hears of it.
    other = next(t["id"] for t in snap["tabs"] if t["id"] != snap["selected"])
    click_in_bar(b, other)
    b.wait(lambda: r.snapshot()["selected"] == other, SYNC, f"{other} selected on the server")
    b.wait(lambda: any(e["tab"] == other for e in events_of(b, "tabd-select")), SYNC, "tabd-select dispatched")
    assert any(e["tab"] == other for e in events_of(b, "tabd-first-appear"))

    # A command from another client moves it.
    r.command("select", tab=snap["selected"])
    b.wait(lambda: selected_in_bar(b) == snap["selected"], SYNC, "the bar follows another client")
    sel = [e for e in events_of(b, "tabd-select") if e["tab"] == snap["selected"]][-1]
    assert sel["live"] is True and sel["from"] == other

    # connect()'s tap() resolves to the ack's seq, with the state already holding it.
    at = connect_and_tap(b, d, control, other)
    assert "error" not in at, at
    assert at["seq"] == at["stateSeq"] and at["selected"] == other, at
    assert r.snapshot()["seq"] >= at["seq"]

    # tabd restarts on the same state: the element reconnects with resume and goes on.
    before = b.js("return document.getElementById('bar').client.state.seq")
    d.kill()
    b.wait(lambda: b.js("return document.getElementById('bar').getAttribute('connection')") == "reconnecting",
           SYNC, "the element shows the drop")
    d2 = make_daemon(*args, port=d.port)
    b.wait(lambda: b.js("return document.getElementById('bar').getAttribute('connection')") == "live",
           WAIT + 10, "the element is live again")
    assert b.js("return document.getElementById('bar').client.session.resumed") is True, "it resumed, no snapshot"
    assert b.js("return document.getElementById('bar').client.state.seq") >= before
    r2 = remote(d2, "after", room=ROOM, token=mint(key_file, "control"))
    r2.command("select", tab=snap["selected"])
    b.wait(lambda: selected_in_bar(b) == snap["selected"], SYNC, "the bar follows the restarted tabd")
    assert [e["connection"] for e in events_of(b, "tabd-connection")][-1] == "live"
    assert events_of(b, "tabd-error") == []


def test_a_view_token_makes_the_element_read_only(make_daemon, site, key_file, browsers, remote):
    d = make_daemon("--allow-origin", site.origin, "--auth-secret-file", key_file)
    b = browsers()
    open_host(b, site.page("view.html", d, mint(key_file, "view")))
    r = remote(d, "ctl", room=ROOM, token=mint(key_file, "control"))
    snap = r.snapshot()
    tabs = bar_tabs(b)
    assert all(t["disabled"] == "true" for t in tabs), tabs
    assert b.js("return document.getElementById('bar').hasAttribute('read-only')")
    why = b.js("""const t = document.getElementById('bar').shadowRoot.querySelector('[role=tab]');
                  return t.getRootNode().getElementById(t.getAttribute('aria-describedby')).textContent""")
    assert why == "You can watch this tab bar; you cannot change it."
    other = next(t["id"] for t in snap["tabs"] if t["id"] != snap["selected"])
    b.count_sent()
    click_in_bar(b, other)
    # Nothing went out; the bar still follows the room: another client's command moves it.
    r.command("select", tab=other)
    b.wait(lambda: selected_in_bar(b) == other, SYNC, "the read-only bar still follows the room")
    assert b.sent("tap") == 0
    assert [e["by"] for e in events_of(b, "tabd-select")] == [r.welcome["client"]]


def test_a_page_from_an_origin_not_allowed_cannot_import_the_modules(make_daemon, site, browsers):
    d = make_daemon("--allow-origin", "http://elsewhere.example")
    b = browsers()
    b.allow_console(re.compile(r"CORS|Access-Control-Allow-Origin|tabd\.js|Failed to fetch"))
    b.driver.get(site.page("index.html", d))
    result = b.driver.execute_async_script("""
        const [url, done] = arguments;
        fetch(url + 'tabd.js').then((r) => done('fetched ' + r.status), (e) => done('refused: ' + e.name));""", d.http)
    assert result == "refused: TypeError"
    assert b.js("return !!(window.__host && window.__host.ready)") is False


def test_first_paint_after_the_welcome(make_daemon, site, browsers):
    """Records (does not assert) how long the element takes from its welcome to its first
    painted frame, and the modules' sizes, for docs/WEB.md."""
    d = make_daemon("--allow-origin", site.origin)
    url = site.page("index.html", d)
    b = browsers()
    samples = []
    for _ in range(5):
        open_host(b, url)
        b.wait(lambda: b.js("return window.__host.paintedAt !== null"), WAIT, "a frame painted after the welcome")
        samples.append(b.js("return window.__host.paintedAt - window.__host.welcomedAt"))
    report = {"first_paint_after_welcome_ms": {"samples": samples, "median": statistics.median(samples)}}
    os.makedirs(OUTPUT, exist_ok=True)
    with open(os.path.join(OUTPUT, "web-element.json"), "w") as f:
        f.write(json.dumps(report, indent=2) + "\n")
    assert all(s >= 0 for s in samples)


def test_the_element_opens_one_connection_and_follows_its_attributes(make_daemon, site, browsers, remote):
    d = make_daemon("--allow-origin", site.origin)
    b = browsers().record_sockets()
    open_host(b, site.page("index.html", d))
    # Upgrading the element sets its attributes one by one: still one connection.
    assert len(b.js("return window.__sockets")) == 1
    # Another room: the element leaves the first and draws the other.
    remote(d, room="second").command("addTab", tab={"id": "only", "title": "Only here", "icon": "star", "color": "#5856D6"})
    b.js("document.getElementById('bar').setAttribute('room', 'second')")
    b.wait(lambda: "only" in [t["id"] for t in bar_tabs(b) or []], SYNC, "the other room's tabs drawn")
    assert b.js("return document.getElementById('bar').client.room") == "second"
    assert len(b.js("return window.__sockets")) == 2
    # Taken out of the page, it closes its connection; put back, it opens one again.
    b.js("window.__bar = document.getElementById('bar'); window.__bar.remove()")
    b.wait(lambda: b.js("return window.__socketObjects[1].readyState") == 3, SYNC, "its socket closed")
    b.js("document.querySelector('main').append(window.__bar)")
    b.wait(lambda: len(b.js("return window.__sockets")) == 3, SYNC, "a new connection")
    b.wait(lambda: b.js("return window.__bar.getAttribute('connection')") == "live", SYNC, "live again")
