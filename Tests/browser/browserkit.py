"""Helpers for the browser tests: a tabd process, a plain protocol client, and a Browser
(headless Chromium) with page-reading helpers. Fixtures live in conftest.py."""
import json
import os
import queue
import re
import signal
import subprocess
import threading
from urllib.parse import quote

from selenium import webdriver
from selenium.common.exceptions import JavascriptException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from websockets.sync.client import connect as ws_connect

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABD = os.environ.get("TABD_BIN", os.path.join(ROOT, ".build", "debug", "tabd"))
WEB_ROOT = os.environ.get("TABD_WEB_ROOT", os.path.join(ROOT, "web"))
OUTPUT = os.environ.get("TABD_TEST_OUTPUT", os.path.join(ROOT, "test-output"))
SCREENSHOTS = os.path.join(OUTPUT, "screenshots")
DOCS_SCREENSHOTS = os.path.join(ROOT, "docs", "screenshots")
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")

WAIT = 10.0  # bound for anything that is not the one-second sync promise
SYNC = 1.0   # an action in one window shows in another within this
POLL = 0.02

# Selenium Manager must never go looking for drivers or browsers on the network.
os.environ.setdefault("SE_OFFLINE", "true")

# Console messages a test may expect, by name (see Browser.allow_console).
CONNECTION_REFUSED = re.compile(r"ERR_CONNECTION_REFUSED|WebSocket connection to .* failed")

screenshots_taken = []


# ---------------------------------------------------------------------------- the daemon

class Daemon:
    """A tabd process; `port`, `http`, `ws` are known once it printed its listening line."""

    def __init__(self, workdir, *args, port=0):
        self.workdir = workdir
        self.args = args
        self.output = []
        self.proc = subprocess.Popen(
            [TABD, "--host", "127.0.0.1", "--port", str(port), "--web-root", WEB_ROOT, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workdir)
        first = queue.Queue()

        def drain():  # keep reading so the daemon never blocks on a full pipe
            announced = False
            for line in self.proc.stdout:  # stdout and stderr (logs) together
                if not announced and line.startswith("tabd listening on "):
                    announced = True
                    first.put(line)
                self.output.append(line)
                del self.output[:-200]
            first.put("")
        threading.Thread(target=drain, daemon=True).start()
        try:
            line = first.get(timeout=WAIT)
        except queue.Empty:
            line = ""
        m = re.match(r"tabd listening on (https?)://127\.0\.0\.1:(\d+)/$", line.strip())
        if not m:
            self.kill()
            raise RuntimeError(f"tabd did not start: {line!r} {''.join(self.output)}")
        self.port = int(m.group(2))
        self.http = f"{m.group(1)}://127.0.0.1:{self.port}/"
        self.ws = f"{'wss' if m.group(1) == 'https' else 'ws'}://127.0.0.1:{self.port}/ws"
        self.ssl_context = None  # what a Remote verifies an https tabd with (set by the test)

    def kill(self):
        """Stops the daemon at once (SIGKILL: no close frames, like a crash)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


# ---------------------------------------------------------------------------- a plain protocol client

class Remote:
    """Another client of the same tabd (no browser): drives commands, reads snapshots."""

    def __init__(self, daemon, name="remote", room=None, token=None):
        # Entered as a context manager (websockets >= 17.1 warns otherwise); closed by close().
        # Frames it is not asked for queue without bound: a full queue would stop it reading
        # pongs and the closing handshake.
        url = f"{daemon.ws}?name={name}" + ("" if room is None else f"&room={quote(room, safe='')}")
        url += "" if token is None else f"&token={quote(token, safe='')}"
        tls = {"ssl": daemon.ssl_context} if daemon.ssl_context else {}
        self.ws = ws_connect(url, open_timeout=WAIT, max_size=None, max_queue=None, **tls).__enter__()
        self.welcome = self._recv()
        assert self.welcome["type"] == "welcome"
        self.n = 0

    def _recv(self):
        return json.loads(self.ws.recv(timeout=WAIT))

    def command(self, type_, **fields):
        """Sends a command and returns its reply (ack, error, snapshot or pong)."""
        self.n += 1
        ref = f"x{self.n}"
        self.ws.send(json.dumps({"type": type_, "ref": ref, **fields}))
        while True:
            f = self._recv()
            if f["type"] in ("ack", "error", "snapshot", "pong", "clients") and f.get("ref") == ref:
                if f["type"] == "error":
                    raise AssertionError(f"{type_} {fields}: {f}")
                return f

    def snapshot(self):
        return self.command("sync")["snapshot"]

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass


def state_of(snap):
    """What a snapshot says about tabs (presence aside), comparable with the page's model."""
    return {
        "seq": snap["seq"], "selected": snap["selected"], "scrollToTop": snap["scrollToTop"],
        "tabs": [{"id": t["id"], "title": t["title"], "icon": t["icon"], "color": t["color"],
                  "badge": t["badge"], "scroll": float(t["scroll"]), "values": t["values"],
                  "stack": [dict(p) for p in t["stack"]]} for t in snap["tabs"]],
    }


# ---------------------------------------------------------------------------- the browser

class Browser:
    """One headless Chromium window on the page, with helpers that read the DOM."""

    def __init__(self, width=1280, height=800, mobile=False, dark=False, extra_args=()):
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--hide-scrollbars", "--no-first-run", "--no-default-browser-check",
                    "--disable-extensions", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--mute-audio",
                    # Two windows side by side must both keep running their timers.
                    "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                    "--disable-backgrounding-occluded-windows",
                    f"--window-size={max(width, 500)},{height + 200}", *extra_args):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
        self.driver.set_script_timeout(WAIT)
        self.console = []
        self.allowed = []
        self.viewport(width, height, mobile, dark)

    # -- setup
    def viewport(self, width, height, mobile=False, dark=False):
        self.width, self.height = width, height
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})

    def record_sockets(self):
        """From the next page load on, window.__sockets lists the URL of every WebSocket
        the page opens, and window.__socketProtocols, in the same order, the subprotocols
        each was opened with (the constructor's second argument as a list: a lone string
        is a list of one, none is []); window.__socketObjects holds the sockets themselves
        (what the server selected: socket_selected). Set up before any of the page's
        scripts run."""
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
            (() => {
              const urls = [], protocols = [], objects = [];
              Object.defineProperty(window, "__sockets", { value: urls });
              Object.defineProperty(window, "__socketProtocols", { value: protocols });
              Object.defineProperty(window, "__socketObjects", { value: objects });
              window.WebSocket = new Proxy(window.WebSocket, {
                construct(target, args) {
                  urls.push(String(args[0]));
                  const p = args[1];
                  protocols.push(p === undefined ? [] : typeof p === "string" ? [p] : Array.from(p, String));
                  let socket = null;  // stays null where the constructor throws
                  try {
                    socket = Reflect.construct(target, args);
                    return socket;
                  } finally {
                    objects.push(socket);
                  }
                },
              });
            })();"""})
        return self

    def socket_protocols(self):
        """The subprotocols of every WebSocket the page opened (record_sockets), in order."""
        return self.js("return window.__socketProtocols")

    def socket_selected(self):
        """The subprotocol the server selected for every WebSocket the page opened
        (record_sockets), in order ("" where none or not open yet, None where the
        constructor threw)."""
        return self.js("return window.__socketObjects.map(s => s && s.protocol)")

    def grant_clipboard(self, daemon):
        """Lets pages of this daemon read and write the clipboard without asking (reading
        needs it; writing from a click needs no grant in headless Chromium)."""
        self.driver.execute_cdp_cmd("Browser.grantPermissions", {
            "origin": daemon.http.rstrip("/"), "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        return self

    def clipboard(self):
        """The clipboard's text, read by the page (grant_clipboard first)."""
        return self.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            navigator.clipboard.readText().then(done, (e) => done({error: String(e)}));""")

    def set_clipboard(self, text):
        """Puts text on the clipboard from the page (grant_clipboard first)."""
        return self.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            navigator.clipboard.writeText(arguments[0]).then(() => done(true), (e) => done({error: String(e)}));""", text)

    def room_shown(self):
        """The room id the header shows (None while it shows none)."""
        return self.js("const r = document.getElementById('room'); return r && !r.hidden ? document.getElementById('room-id').textContent : null")

    def open(self, daemon, query=""):
        self.driver.get(daemon.http + query)
        self.wait_live()
        return self

    def reload(self):
        self.driver.refresh()
        self.wait_live()

    def quit(self):
        try:
            self.read_console()
        finally:
            self.driver.quit()

    # -- console
    def allow_console(self, pattern):
        self.allowed.append(pattern)

    def read_console(self):
        self.console += self.driver.get_log("browser")
        return self.console

    def console_errors(self):
        """SEVERE console entries that no allow_console pattern covers."""
        return [e for e in self.read_console()
                if e["level"] == "SEVERE" and not any(p.search(e["message"]) for p in self.allowed)]

    # -- waiting and scripting
    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, predicate, timeout=WAIT, message=""):
        """Waits (bounded) until predicate() is truthy and returns its value."""
        def check(_):
            try:
                return predicate()
            except JavascriptException:
                return False
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=POLL).until(check)
        except TimeoutException:
            raise AssertionError(f"not within {timeout}s: {message}") from None

    def wait_live(self, timeout=WAIT):
        self.wait(lambda: self.state() == "live", timeout, "page is live")

    def state(self):
        return self.js("return window.__tabd ? window.__tabd.state : null")

    def status(self):
        e = self.driver.find_element(By.ID, "status")
        return e.get_attribute("data-state"), e.text

    def model(self):
        return self.js("return window.__tabd.model")

    def model_state(self):
        m = self.model()
        return {"seq": m["seq"], "selected": m["selected"], "scrollToTop": m["scrollToTop"],
                "tabs": [{"id": t["id"], "title": t["title"], "icon": t["icon"], "color": t["color"],
                          "badge": t["badge"], "scroll": float(t["scroll"]), "values": t["values"],
                          "stack": t["stack"]} for t in m["tabs"]]}

    def wait_in_sync_with(self, remote, timeout=WAIT):
        """Waits until the page's model equals the daemon's snapshot (presence aside)."""
        snap = state_of(remote.snapshot())
        self.wait(lambda: self.js("return window.__tabd.seq") >= snap["seq"], timeout,
                  f"page reached seq {snap['seq']}")
        assert self.model_state() == snap
        return snap

    # -- the tab bar
    def tabs(self):
        """The tab bar as drawn (in the <tabd-tab-bar>'s shadow root): id, title, selected,
        colors (and the ink the bar chose for the selected tab), badge, icon kind, tabindex."""
        return self.js("""
            return Array.from(document.getElementById('tabbar').shadowRoot.querySelectorAll('[role=tab]')).map(b => {
              const cs = getComputedStyle(b), badge = b.querySelector('.badge');
              const icon = b.querySelector('.icon-box').firstElementChild;
              return {id: b.dataset.tab, elementId: b.id, title: b.querySelector('.title').textContent,
                      selected: b.getAttribute('aria-selected'),
                      color: cs.color, background: cs.backgroundColor, ink: b.style.getPropertyValue('--tab-ink'),
                      tabindex: b.tabIndex,
                      badge: badge.hidden ? null : badge.textContent,
                      icon: icon.tagName.toLowerCase() === 'svg' ? 'svg' : 'letter:' + icon.textContent,
                      iconAbove: icon.getBoundingClientRect().bottom <= b.querySelector('.title').getBoundingClientRect().top + 1};
            });""")

    def tab(self, tab_id):
        """A tab's button, inside the tab bar element's shadow root."""
        return self.driver.find_element(By.ID, "tabbar").shadow_root.find_element(By.CSS_SELECTOR, f"#tab-{tab_id}")

    def click_tab(self, tab_id):
        self.tab(tab_id).click()

    def focused_tab(self):
        """The id of the tab that has the focus (None when no tab has it)."""
        return self.js("const a = document.getElementById('tabbar').shadowRoot.activeElement; return a ? a.dataset.tab : null")

    def selected_in_dom(self):
        return self.js("""
            const sel = Array.from(document.getElementById('tabbar').shadowRoot.querySelectorAll('[role=tab][aria-selected=true]'));
            const panels = Array.from(document.querySelectorAll('.panel.is-selected'));
            return {tabs: sel.map(b => b.dataset.tab), panels: panels.map(p => p.dataset.tab),
                    visible: panels.filter(p => getComputedStyle(p).visibility === 'visible').map(p => p.dataset.tab)};""")

    def wait_selected(self, tab_id, timeout=WAIT):
        want = {"tabs": [tab_id], "panels": [tab_id], "visible": [tab_id]}
        self.wait(lambda: self.selected_in_dom() == want, timeout, f"{tab_id} selected in the DOM")

    # -- pages
    def top_page(self, tab_id):
        """The top page of a tab's stack as drawn (hidden tabs too)."""
        return self.js("""
            const p = document.querySelector('#panel-' + arguments[0] + ' .page.is-top');
            if (!p) return null;
            const s = p.querySelector('.scroller');
            return {id: p.dataset.page, route: p.dataset.route, appeared: p.dataset.appeared === 'true',
                    appearCount: Number(p.dataset.appearCount), visibility: getComputedStyle(p).visibility,
                    depth: document.querySelectorAll('#panel-' + arguments[0] + ' .page').length,
                    title: p.querySelector('.large-title').textContent};""", tab_id)

    def wait_route(self, tab_id, route, timeout=WAIT):
        self.wait(lambda: (self.top_page(tab_id) or {}).get("route") == route, timeout,
                  f"{tab_id} shows route {route}")

    def in_top(self, tab_id, css):
        return self.driver.find_element(By.CSS_SELECTOR, f"#panel-{tab_id} .page.is-top {css}")

    def greeting(self, tab_id):
        return self.js("""return document.querySelector('#panel-' + arguments[0] + ' .page-root .greeting-text').textContent""", tab_id)

    def wait_greeting(self, tab_id, text, timeout=WAIT):
        self.wait(lambda: self.greeting(tab_id) == text, timeout, f"{tab_id} greeting reads {text!r}")

    def scroll_top(self, tab_id):
        return self.js("return document.querySelector('#panel-' + arguments[0] + ' .page-root .scroller').scrollTop", tab_id)

    def scroll_to(self, tab_id, offset):
        """Scrolls a tab's list as a user would (the page sees a scroll event)."""
        return self.js("""const s = document.querySelector('#panel-' + arguments[0] + ' .page-root .scroller');
                          s.scrollTop = arguments[1]; return s.scrollTop;""", tab_id, offset)

    def count_sent(self):
        """From now on, counts the commands the page sends, by type (window.__sent)."""
        self.js("""
            window.__sent = {};
            if (!WebSocket.prototype.__counted) {
              const orig = WebSocket.prototype.send;
              WebSocket.prototype.send = function (data) {
                try { const t = JSON.parse(data).type; window.__sent[t] = (window.__sent[t] || 0) + 1; } catch (e) {}
                return orig.call(this, data);
              };
              WebSocket.prototype.__counted = true;
            }""")

    def sent(self, type_):
        return self.js("return (window.__sent || {})[arguments[0]] || 0", type_)

    # -- screenshots
    def screenshot(self, name):
        os.makedirs(SCREENSHOTS, exist_ok=True)
        path = os.path.join(SCREENSHOTS, name)
        self.driver.save_screenshot(path)
        screenshots_taken.append(path)
        return path


def rgb(hex_color, alpha=None):
    """The computed-style spelling of a #RRGGBB color."""
    h = hex_color.lstrip("#")
    r, g, b = int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    return f"rgb({r}, {g}, {b})" if alpha is None else f"rgba({r}, {g}, {b}, {alpha})"
