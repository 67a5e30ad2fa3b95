"""What a web app embedding tabd lives with for hours: a page on another site whose client
gets 3-second tokens from its getToken for a minute under a steady command load (each one
handed to tabd on the open connection before the last runs out, and the connection cut now
and then); the modules cached as a CDN would (a second load moves no module bytes, gzip
where the browser takes it); a tap shown at once on <tabd-tab-bar>; and the element clean
to axe-core in forced colours and right to left."""
import functools
import http.server
import json
import os
import re
import shutil
import subprocess

import pytest

from browserkit import TABD, WAIT
from test_accessibility import run_axe, serious
from test_embedding import CONNECTION_REFUSED, ROOM, bar_tabs, mint, open_host, site  # noqa: F401 (site: a fixture)

# The host page's run: a client on 3-second tokens it mints itself (WebCrypto HMAC under
# the test's key: in a real app, its back end), commands every 20 ms, the connection cut
# every 2.5 s in the last quarter. Returns what it saw.
RUN = """
const [tabdUrl, room, secret, seconds, done] = arguments;
(async () => {
  const tabd = await import(tabdUrl + "tabd.js");
  const enc = new TextEncoder();
  const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/=+$/, "").replace(/\\+/g, "-").replace(/\\//g, "_");
  const mint = async () => {
    const head = b64(enc.encode(JSON.stringify({ alg: "HS256", typ: "JWT" })));
    const body = b64(enc.encode(JSON.stringify({ room, role: "control", exp: Date.now() / 1000 + 3 })));
    return `${head}.${body}.${b64(await crypto.subtle.sign("HMAC", key, enc.encode(head + "." + body)))}`;
  };
  const s = { asked: { connect: 0, refresh: 0 }, acked: 0, refused: [], lostBefore: 0, lostDuring: 0, cuts: 0,
              welcomes: [], snapshots: 0, gaps: 0, duplicates: 0, closed: null, refreshFrames: 0 };
  let last = null;
  class Counting extends WebSocket {
    send(text) { if (text.startsWith('{"type":"refresh"')) s.refreshFrames += 1; super.send(text); }
  }
  const client = new tabd.TabdClient(tabdUrl, {
    room, name: "page", heartbeat: 0, WebSocket: Counting, backoff: { initial: 20, max: 200 },
    getToken: async ({ reason }) => { s.asked[reason] += 1; return mint(); },
  });
  client.subscribe((u) => {
    if (u.type === "welcome") s.welcomes.push(u.resumed);
    if (u.type === "snapshot") { s.snapshots += 1; last = u.state.seq; }
    if (u.type === "events") for (const e of u.events) {
      if (last !== null && e.seq !== last + 1) { if (e.seq <= last) s.duplicates += 1; else s.gaps += 1; }
      last = e.seq;
    }
    if (u.type === "connection" && u.connection === "closed") s.closed = u.error ? u.error.code : null;
  });
  await client.ready;
  const start = Date.now(), cutsFrom = start + seconds * 750, end = start + seconds * 1000;
  let nextCut = cutsFrom;
  while (Date.now() < end) {
    const cutting = Date.now() >= cutsFrom;
    if (cutting && Date.now() >= nextCut) { client.disconnect(); s.cuts += 1; nextCut = Date.now() + 2500; }
    try {
      await client.scroll(s.acked % 500, { tab: "home" });
      s.acked += 1;
    } catch (e) {
      if (e.code === "connection_lost") { if (cutting) s.lostDuring += 1; else s.lostBefore += 1; } else s.refused.push(e.code || String(e));
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  client.close();
  done(s);
})().catch((e) => done({ error: String(e), stack: e.stack }));
"""


def test_a_page_on_three_second_tokens_runs_a_minute_without_a_reconnect_for_a_refresh(make_daemon, site, key_file, browsers):
    seconds = float(os.environ.get("TABD_TOKEN_RUN_SECONDS", "60"))
    d = make_daemon("--allow-origin", site.origin, "--auth-secret-file", key_file)
    b = browsers()
    b.allow_console(CONNECTION_REFUSED)
    open_host(b, site.page("run.html", d, mint(key_file, "control")))
    b.driver.set_script_timeout(seconds + 60)
    secret = open(key_file).read().strip()
    s = b.driver.execute_async_script(RUN, d.http, ROOM, secret, seconds)
    assert "error" not in s, s
    print("page fresh tokens run:", json.dumps(s))
    lifetimes = int(seconds * 0.75 / 3)
    assert s["acked"] > 0 and s["refused"] == [], s
    assert s["lostBefore"] == 0, "no command failed while tokens were refreshed on the open connection"
    assert s["refreshFrames"] >= lifetimes, f"{s['refreshFrames']} refreshes for {lifetimes} token lifetimes"
    # The first welcome, then one per cut: a refresh never reconnected, and every reconnect resumed.
    assert s["welcomes"][0] is False and len(s["welcomes"]) == 1 + s["cuts"], s
    assert all(s["welcomes"][1:]), "every reconnect resumed"
    assert s["snapshots"] == 1, "only the first welcome's snapshot"
    assert s["gaps"] == 0 and s["duplicates"] == 0, s
    assert s["asked"]["connect"] == 1 + s["cuts"], "each connection went with a fresh token"
    assert s["closed"] == "closed"


def module_loads(b):
    """The page's module requests (resource timing: the host page's origin is allowed to see
    them): name, bytes of body moved, and the encoding's effect."""
    return b.js("""
        return performance.getEntriesByType('resource').filter((e) => e.name.includes('.js'))
          .map((e) => ({ name: e.name, body: e.encodedBodySize, decoded: e.decodedBodySize, transfer: e.transferSize,
                         status: e.responseStatus }));""")


def test_a_second_load_of_an_embedding_page_moves_no_module_bytes_and_the_first_is_gzipped(make_daemon, site, key_file, browsers):
    d = make_daemon("--allow-origin", site.origin, "--auth-secret-file", key_file)
    b = browsers()
    url = site.page("cached.html", d, mint(key_file, "control"))
    open_host(b, url)
    first = module_loads(b)
    assert len(first) >= 5, first  # tabd.js, tabd-tab-bar.js and what they import
    assert all(e["status"] == 200 for e in first), first
    assert sum(e["transfer"] for e in first) < sum(e["decoded"] for e in first) / 2, f"gzipped: {first}"
    # Another visit (a new navigation, not a reload): every module is revalidated (304).
    b.driver.get("about:blank")
    open_host(b, url)
    second = module_loads(b)
    assert len(second) == len(first)
    # Revalidated: a 304 moves its head only (Chromium counts a revalidation as 300 bytes),
    # never a module's body, so the module bytes moved are none.
    assert all(e["transfer"] < 1024 and e["transfer"] < e["body"] for e in second), second
    assert sum(e["transfer"] for e in second) < sum(e["transfer"] for e in first) / 4, (first, second)


def test_a_tap_shows_at_once_and_clears_on_the_answer(make_daemon, site, key_file, browsers):
    d = make_daemon("--allow-origin", site.origin, "--auth-secret-file", key_file)
    b = browsers()
    open_host(b, site.page("tap.html", d, mint(key_file, "control")))
    other = next(t["id"] for t in bar_tabs(b) if t["selected"] != "true")
    # In the same task as the click, before any frame is drawn or tabd answers.
    shown = b.js("""
        const btn = document.getElementById('bar').shadowRoot.querySelector('#tab-' + arguments[0]);
        btn.click();
        return [btn.getAttribute('aria-busy'), btn.getAttribute('part'), btn.getAttribute('aria-selected')];""", other)
    assert shown == ["true", "tab pending", "false"], shown
    b.wait(lambda: b.js("""
        const btn = document.getElementById('bar').shadowRoot.querySelector('#tab-' + arguments[0]);
        return btn.getAttribute('aria-selected') === 'true' && !btn.hasAttribute('aria-busy');""", other),
        WAIT, "the tap answered: selected, no longer pending")


def test_a_refused_tap_clears_its_pending_mark(make_daemon, site, key_file, browsers):
    # One command a second (bursts of two): of six quick taps, some are refused (rate_limited).
    d = make_daemon("--allow-origin", site.origin, "--auth-secret-file", key_file, "--rate-limit", "1")
    b = browsers()
    b.allow_console(re.compile("rate_limited|more than 1 commands"))
    open_host(b, site.page("refused.html", d, mint(key_file, "control")))
    other = next(t["id"] for t in bar_tabs(b) if t["selected"] != "true")
    b.js("""
        const btn = document.getElementById('bar').shadowRoot.querySelector('#tab-' + arguments[0]);
        for (let i = 0; i < 6; i++) btn.click();""", other)
    b.wait(lambda: b.js("return window.__host.events.some((e) => e.type === 'tabd-error' && e.detail.error.code === 'rate_limited')"),
           WAIT, "a refusal said")
    b.wait(lambda: b.js("""
        return !document.getElementById('bar').shadowRoot.querySelector('#tab-' + arguments[0]).hasAttribute('aria-busy');""", other),
           WAIT, "no tap pending once every one was answered or refused")


@pytest.mark.parametrize("mode", ["forced-colors", "rtl"])
def test_the_element_passes_wcag_a_and_aa_in_forced_colours_and_right_to_left(make_daemon, site, key_file, browsers, mode):
    d = make_daemon("--allow-origin", site.origin, "--auth-secret-file", key_file)
    b = browsers()
    if mode == "forced-colors":
        b.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "forced-colors", "value": "active"}]})
    open_host(b, site.page(f"{mode}.html", d, mint(key_file, "control")))
    if mode == "rtl":
        b.js("document.documentElement.dir = 'rtl'; document.documentElement.lang = 'ar';")
        # The arrow keys follow the bar: ArrowLeft goes to the next tab, right to left.
        order = b.js("""
            const tabs = Array.from(document.getElementById('bar').shadowRoot.querySelectorAll('[role=tab]'));
            tabs[0].focus();
            tabs[0].dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowLeft', bubbles: true, composed: true }));
            const rects = tabs.map((t) => t.getBoundingClientRect().left);
            return [document.getElementById('bar').shadowRoot.activeElement === tabs[1], rects[0] > rects[1]];""")
        assert order == [True, True], order
    else:
        assert b.js("return matchMedia('(forced-colors: active)').matches") is True
        # The selected tab is told by the system's colours, not the page's.
        colors = b.js("""
            const sel = document.getElementById('bar').shadowRoot.querySelector('[aria-selected=true]');
            const other = document.getElementById('bar').shadowRoot.querySelector('[aria-selected=false]');
            return [getComputedStyle(sel).backgroundColor, getComputedStyle(other).backgroundColor];""")
        assert colors[0] != colors[1], colors
    bad, said = serious(run_axe(b, "#bar", name=f"element-{mode}"))
    assert not bad, f"axe-core found on the element ({mode}):\n{said}"


def test_the_web_guides_examples_run_in_a_page_on_another_site(make_daemon, site, key_file, browsers):
    """Every JavaScript example of docs/WEB.md, run as written in a page on another site
    (tabd's address put in for `https://tabd.example.com/`; a block that uses `tabd` without
    making it gets a connected client first). The site answers `/api/tabd-token`, as the
    token provider's example asks it to. An example that throws, or leaves a Promise
    rejected, fails (the browser's console is checked)."""
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "WEB.md")).read()
    blocks = re.findall(r"```js\n(.*?)```", text, re.S)
    assert len(blocks) >= 5, "the guide's JavaScript examples"
    # As the guide's first example has it, tabd asks for no credentials; a token the
    # examples get from their provider is then taken and changes nothing.
    d = make_daemon("--allow-origin", site.origin)
    token = subprocess.run([TABD, "token", "--secret-file", key_file, "--room", "*", "--role", "control", "--ttl", "30m"],
                           capture_output=True, text=True, timeout=WAIT, check=True).stdout.strip()
    (site.directory / "api").mkdir()
    (site.directory / "api" / "tabd-token").write_text(token)
    b = browsers()
    open_host(b, site.page("examples.html", d, token))
    b.driver.set_script_timeout(WAIT * 3)
    for n, block in enumerate(blocks):
        code = block.replace('"https://tabd.example.com/tabd.js"', "TABD + 'tabd.js'").replace('"https://tabd.example.com/"', "TABD")
        code = re.sub(r"^import \{ (\w+) \} from (.+);$", r"const { \1 } = await import(\2);", code, flags=re.M)
        prelude = "const load = () => {};\n"
        if "connect(" in code and "import(" not in code:
            prelude += "const { connect } = await import(TABD + 'tabd.js');\n"
        if "tabd." in code and "const tabd" not in code:
            prelude += "const tabd = await (await import(TABD + 'tabd.js')).connect(TABD, { room: 'main', token: TOKEN });\n"
        outcome = b.driver.execute_async_script(
            "const [TABD, TOKEN, done] = arguments;\n"
            "(async () => {\n" + prelude + code + "\nreturn 'ran';\n})().then(done, (e) => done('threw: ' + e));",
            d.http, token)
        assert outcome == "ran", f"docs/WEB.md's example {n + 1}:\n{block}\n{outcome}"
    # What the examples started settles without a rejection (the console is checked at the end).
    b.wait(lambda: b.js("return document.getElementById('bar').getAttribute('connection')") == "live", WAIT, "the element live again")


def test_the_page_takes_its_tokens_from_a_token_url_of_its_own_site(make_daemon, key_file, browsers, tmp_path):
    """tabd's page with `#tokenUrl=/path` and no token: it asks that path of its own site
    for a token (here a file beside the page) and connects with it."""
    web = tmp_path / "web"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "..", "..", "web"), web)
    token = subprocess.run([TABD, "token", "--secret-file", key_file, "--room", "tokens", "--role", "control", "--ttl", "30m"],
                           capture_output=True, text=True, timeout=WAIT, check=True).stdout.strip()
    (web / "tabd-token").write_text(token)
    d = make_daemon("--web-root", str(web), "--auth-secret-file", key_file)
    b = browsers()
    b.driver.get(d.http + "?room=tokens#tokenUrl=/tabd-token")
    b.wait_live()
    assert b.js("return window.__tabd.role") == "control"


def test_the_page_never_asks_another_site_for_a_token(make_daemon, key_file, browsers, site):
    """A crafted link naming another site's URL as the token URL (`//host/…`, `http://…`,
    `/\\host/…`): the page asks none of them, and stays without credentials. Two fences
    hold it: the page keeps only paths of its own site, and its policy (`connect-src 'self'`)
    would refuse the request; without the first, the second's refusal shows in the console,
    which the browsers fixture fails on (tried: this test then errs)."""
    asked = []
    site.server.RequestHandlerClass = functools.partial(_Counting, asked, directory=str(site.directory))
    d = make_daemon("--auth-secret-file", key_file)
    b = browsers()
    b.allow_console(re.compile("WebSocket connection to .* failed|401"))
    other = site.origin.split("//", 1)[1]
    for link in (f"//{other}/token", f"{site.origin}/token", f"/\\{other}/token"):
        b.driver.get(d.http + "?room=tokens#tokenUrl=" + link)
        b.wait(lambda: b.js("return window.__tabd && window.__tabd.attempts >= 1"), WAIT, "the page tried to connect")
        assert b.js("return window.__tabd.state") != "live"
    assert asked == [], f"the page asked another site: {asked}"


class _Counting(http.server.SimpleHTTPRequestHandler):
    def __init__(self, asked, *args, **kwargs):
        self.asked = asked
        super().__init__(*args, **kwargs)

    def do_GET(self):
        self.asked.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass
