"""Tokens and roles on the page: tabd started with --auth-secret-file, the page opened with
?room=ID&token=JWT or /?room=ID#token=JWT (minted by `tabd token`). A signed token is an
HTTP token: the page offers it as a second WebSocket subprotocol (`tabd.token.<JWT>`, tabd
selects `tabd.v1`) and puts it in no WebSocket URL; the share button never copies it.

A view token: the page says it is read-only, its tabs and buttons are aria-disabled (still
focusable), nothing the user does sends a command (only sync and ping leave the page), and
the tab bar follows what other clients do, live. A control or admin token: none of that.
A `forbidden` error is said in plain words. A token that runs out (close code 4001) is said
in the status area and not reconnected with: tabd would refuse the same token.
"""
import base64
import hashlib
import hmac
import json
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from browserkit import POLL, SYNC, TABD, WAIT

ROOM = "team-7"
VIEW_ONLY_WHY = "You can watch this tab bar; you cannot change it."
EXPIRED = "Your access token has expired. Open a fresh link to continue."


@pytest.fixture
def auth_daemon(make_daemon, key_file):
    return make_daemon("--auth-secret-file", key_file)


@pytest.fixture
def mint(key_file):
    """mint(role, ttl=…, room=…): a token from `tabd token`, signed with the daemon's key."""
    def make(role, ttl="30m", room=ROOM):
        out = subprocess.run([TABD, "token", "--secret-file", key_file, "--room", room, "--role", role, "--ttl", ttl],
                             capture_output=True, text=True, timeout=WAIT, check=True)
        token = out.stdout.strip()
        assert token.count(".") == 2, f"not a JWT: {out.stdout!r} {out.stderr!r}"
        return token
    return make


def sockets(b):
    """The query of every WebSocket the page opened (record_sockets), in order."""
    return [parse_qs(urlsplit(u).query) for u in b.js("return window.__sockets")]


def offered(token):
    """The subprotocols the page opens its WebSocket with when it holds `token` (an HTTP token)."""
    return ["tabd.v1", f"tabd.token.{token}"]


def assert_token_offered_not_in_urls(b, token):
    """Every WebSocket the page opened (record_sockets) offered `token` as its second
    subprotocol, tabd selected tabd.v1, and no WebSocket URL holds the token."""
    urls = b.js("return window.__sockets")
    assert urls, "the page opened a WebSocket"
    for url in urls:
        assert token not in url and "token" not in parse_qs(urlsplit(url).query), url
    assert b.socket_protocols() == [offered(token)] * len(urls)
    assert b.socket_selected() == ["tabd.v1"] * len(urls)


def toast(b):
    return b.js("const t = document.getElementById('toast'); return t.hidden ? null : t.textContent")


def sent(b):
    """The commands the page sent since count_sent(), by type."""
    return b.js("return window.__sent")


def controls(b):
    """Every tab and every command button of the page (hidden tabs' too): how each is marked."""
    return b.js("""
        return Array.from([...document.getElementById('tabbar').shadowRoot.querySelectorAll('[role=tab]'), ...document.querySelectorAll('#content [data-action]')]).map(e => ({
          what: e.dataset.tab + ':' + (e.dataset.action || 'tab'), ariaDisabled: e.getAttribute('aria-disabled'),
          describedBy: e.getAttribute('aria-describedby'), cursor: getComputedStyle(e).cursor,
          why: e.hasAttribute('aria-describedby') ? e.getRootNode().getElementById(e.getAttribute('aria-describedby')).textContent : null}));""")


def notice(b):
    """The view-only notice as shown (None while hidden)."""
    e = b.driver.find_element(By.ID, "view-only")
    if not e.is_displayed():
        return None
    return {"label": e.find_element(By.CSS_SELECTOR, ".view-only-label").text, "title": e.get_attribute("title"),
            "why": e.find_element(By.ID, "view-only-why").text,
            "inHeader": b.js("return !!document.getElementById('view-only').closest('header')")}


def stays(b, predicate, seconds, message):
    """Checks that predicate() holds for `seconds` (bounded): a wait for it to stop holding
    that must run out."""
    try:
        WebDriverWait(b.driver, seconds, poll_frequency=POLL).until(lambda _: not predicate())
    except TimeoutException:
        return
    raise AssertionError(message)


def test_a_view_token_watches_and_sends_nothing(auth_daemon, mint, browsers, remote):
    token = mint("view")
    view = browsers().record_sockets().open(auth_daemon, f"?room={ROOM}&token={token}")
    ctl = remote(auth_daemon, "ctl", room=ROOM, token=mint("control"))
    assert ctl.welcome["role"] == "control"
    assert view.js("return [window.__tabd.role, window.__tabd.readOnly]") == ["view", True]
    # A signed token is an HTTP token: it goes in the handshake, not in the WebSocket URL.
    (q,) = sockets(view)
    assert q["room"] == [ROOM] and "token" not in q
    assert_token_offered_not_in_urls(view, token)

    # Said in the header, with the why (also its tooltip, and the tabs' description).
    assert notice(view) == {"label": "View only", "title": "You can watch this tab bar; you cannot change it",
                            "why": VIEW_ONLY_WHY, "inHeader": True}
    # Every tab and button is marked, described by the why, and looks off; the tabs stay
    # buttons that can take the focus (aria-disabled, not disabled).
    marked = controls(view)
    assert {c["what"] for c in marked} >= {"home:tab", "favorites:tab", "home:greeting", "home:push"}
    for c in marked:
        assert (c["ariaDisabled"], c["why"], c["cursor"]) == ("true", VIEW_ONLY_WHY, "not-allowed"), c
    assert view.js("return Array.from(document.getElementById('tabbar').shadowRoot.querySelectorAll('[role=tab]')).every(b => !b.disabled)")
    # The selected tab keeps its highlight; the others fade.
    tabs = {t["id"]: t for t in view.tabs()}
    assert tabs["home"]["selected"] == "true" and tabs["home"]["background"] != "rgba(0, 0, 0, 0)"
    opacity = view.js("return Object.fromEntries(Array.from(document.getElementById('tabbar').shadowRoot.querySelectorAll('[role=tab]')).map(b => [b.dataset.tab, getComputedStyle(b).opacity]))")
    assert opacity["home"] == "1" and float(opacity["favorites"]) < 1
    view.screenshot("view-only.png")

    # Nothing the user does goes out: scrolling the list, a tap on another tab and on the
    # selected one (scroll to top), the keyboard, the greeting and the push buttons.
    view.count_sent()
    model_before = view.model_state()
    view.scroll_to("home", 300)
    view.click_tab("favorites")
    view.click_tab("home")
    view.click_tab("home")
    view.tab("home").send_keys(Keys.ARROW_RIGHT)
    view.wait(lambda: view.focused_tab() == "favorites", message="the focus moves along the tabs")
    ActionChains(view.driver).send_keys(Keys.ENTER).send_keys(Keys.SPACE).perform()
    view.in_top("home", ".greeting").click()
    view.in_top("home", ".primary.push").click()
    assert set(sent(view)) <= {"sync", "ping"}, sent(view)
    stays(view, lambda: set(sent(view)) <= {"sync", "ping"}, 0.6, f"the page sent {sent(view)}")
    assert view.model_state() == model_before
    view.wait_selected("home")
    assert view.top_page("home")["route"] == "root" and view.greeting("home") == "On Appear"
    assert toast(view) is None

    # Meanwhile the bar follows the room: another client selects, pushes, sets a badge.
    ctl.command("select", tab="favorites")
    view.wait_selected("favorites", SYNC)
    ctl.command("push", tab="favorites", route="inbox")
    view.wait_route("favorites", "inbox", SYNC)
    ctl.command("updateTab", tab={"id": "home", "badge": "4"})
    view.wait(lambda: {t["id"]: t["badge"] for t in view.tabs()}["home"] == "4", SYNC, "the badge shows")
    ctl.command("set", tab="home", key="greeting", value="from ctl")
    view.wait_greeting("home", "from ctl", SYNC)

    # What came since is read-only too: the pushed page's Back and push buttons do nothing.
    assert all(c["ariaDisabled"] == "true" for c in controls(view))
    view.in_top("favorites", ".back").click()
    view.in_top("favorites", ".primary.push").click()
    view.wait_in_sync_with(ctl)
    assert view.top_page("favorites")["route"] == "inbox"
    assert set(sent(view)) <= {"sync", "ping"}, sent(view)
    assert toast(view) is None
    assert view.js("return [window.__tabd.connections, window.__tabd.state]") == [1, "live"]
    assert len(sockets(view)) == 1

    # On a small phone the notice takes a row of its own under the top bar: all of it shows.
    view.viewport(320, 640, mobile=True)
    view.wait(lambda: view.js("return innerWidth") == 320, message="phone width")
    assert notice(view)["label"] == "View only"
    assert view.js("return document.documentElement.scrollWidth <= innerWidth"), "no horizontal overflow"
    box = view.js("""const r = (id) => document.getElementById(id).getBoundingClientRect();
        return {notice: [r('view-only').left, r('view-only').right], status: r('status').width, top: r('status').bottom <= r('view-only').top}""")
    assert box["notice"][0] >= 0 and box["notice"][1] <= 320 and box["top"], box
    assert box["status"] > 40, f"the status still shows: {box}"
    view.screenshot("view-only-phone.png")


@pytest.mark.parametrize("role", ["control", "admin"])
def test_a_control_or_admin_token_may_do_everything(auth_daemon, mint, browsers, remote, role):
    b = browsers().open(auth_daemon, f"?room={ROOM}&token={mint(role)}")
    ctl = remote(auth_daemon, "ctl", room=ROOM, token=mint("control"))
    assert b.js("return [window.__tabd.role, window.__tabd.readOnly]") == [role, False]
    assert notice(b) is None
    for c in controls(b):
        assert (c["ariaDisabled"], c["describedBy"], c["cursor"]) == (None, None, "pointer"), c

    b.count_sent()
    b.click_tab("favorites")
    b.wait_selected("favorites", SYNC)
    b.in_top("favorites", ".primary.push").click()
    b.wait_route("favorites", "next", SYNC)
    b.in_top("favorites", ".back").click()
    b.wait_route("favorites", "root", SYNC)
    b.in_top("favorites", ".greeting").click()
    b.wait_greeting("favorites", "Tapped", SYNC)
    assert [sent(b).get(t) for t in ("tap", "push", "pop", "set")] == [1, 1, 1, 1]
    snap = b.wait_in_sync_with(ctl)
    assert snap["selected"] == "favorites"
    assert toast(b) is None


def test_a_forbidden_error_is_said_in_plain_words(auth_daemon, mint, browsers, remote):
    """The page never sends what its role forbids; here a command goes out behind its back."""
    b = browsers()
    b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        window.WebSocket = new Proxy(window.WebSocket, {
          construct(target, args) { const s = Reflect.construct(target, args); window.__lastSocket = s; return s; },
        });"""})
    b.open(auth_daemon, f"?room={ROOM}&token={mint('view')}")
    ctl = remote(auth_daemon, "ctl", room=ROOM, token=mint("control"))
    b.js("window.__lastSocket.send(JSON.stringify({type: 'tap', tab: 'favorites', ref: 'sneaky'}))")
    b.wait(lambda: toast(b) == "Not done: this link lets you watch this tab bar, not change it.",
           message="the refusal is said")
    assert ctl.snapshot()["selected"] == "home", "nothing changed"
    b.wait_selected("home")
    assert b.state() == "live"


def test_a_page_enabled_again_when_a_later_welcome_is_not_view(daemon, browsers):
    """Whatever the server: the page's first welcome is rewritten to role view, the next one
    (after a reconnect) is as tabd sent it (control, no credentials configured)."""
    b = browsers()
    b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        (() => {
          let first = true;
          const rewritten = new WeakMap(); // each frame rewritten once, whoever listens
          const add = WebSocket.prototype.addEventListener;
          WebSocket.prototype.addEventListener = function (type, fn, opts) {
            if (type !== "message") return add.call(this, type, fn, opts);
            return add.call(this, type, (ev) => {
              if (!rewritten.has(ev)) {
                const f = JSON.parse(ev.data);
                if (f.type === "welcome" && first) { first = false; f.role = "view"; }
                rewritten.set(ev, JSON.stringify(f));
              }
              fn({ data: rewritten.get(ev) });
            }, opts);
          };
        })();"""})
    b.open(daemon)
    assert b.js("return [window.__tabd.role, window.__tabd.readOnly]") == ["view", True]
    assert notice(b) is not None
    assert all(c["ariaDisabled"] == "true" for c in controls(b))
    b.count_sent()
    b.click_tab("favorites")
    assert sent(b).get("tap") is None

    b.js("window.__tabd.disconnect()")
    b.wait(lambda: b.js("return window.__tabd.connections") == 2, message="reconnected")
    b.wait_live()
    assert b.js("return [window.__tabd.role, window.__tabd.readOnly]") == ["control", False]
    assert notice(b) is None
    assert all(c["ariaDisabled"] is None and c["describedBy"] is None for c in controls(b))
    b.click_tab("favorites")
    b.wait_selected("favorites", SYNC)
    assert sent(b).get("tap") == 1


def test_an_expired_token_is_said_and_not_reconnected_with(auth_daemon, mint, browsers):
    b = browsers().record_sockets()  # the browser first: the token's seconds start at minting
    # 5 s (not less): exp is a whole second, and the page must be live well before it.
    token = mint("control", ttl="5s")
    minted = time.monotonic()
    b.open(auth_daemon, f"?room={ROOM}&token={token}")
    assert time.monotonic() - minted < 4, "live before the token ran out"

    b.wait(lambda: b.status()[0] == "error", 15, "the expiry shown")
    assert b.driver.find_element(By.ID, "status-text").text == EXPIRED
    assert b.driver.find_element(By.ID, "status").get_attribute("title") == EXPIRED
    assert not b.driver.find_element(By.ID, "status-link").is_displayed()
    assert not b.driver.find_element(By.ID, "retry").is_displayed()
    assert token not in b.driver.find_element(By.TAG_NAME, "body").text
    # It does not try again: not by itself (the first retry would come within 0.3 s), not
    # when the network comes back, not by the retry hook.
    stays(b, lambda: len(sockets(b)) == 1, 1.5, "the page reconnected with an expired token")
    b.js("window.dispatchEvent(new Event('online')); window.__tabd.retryNow()")
    stays(b, lambda: len(sockets(b)) == 1, 0.5, "the page reconnected with an expired token")
    assert b.js("return [window.__tabd.state, window.__tabd.attempts, window.__tabd.connections]") == ["error", 0, 1]
    assert b.driver.title == "Not connected · tabd"
    # What it showed stays on screen.
    assert b.js("return document.getElementById('tabbar').shadowRoot.querySelectorAll('[role=tab]').length") > 0


def test_a_link_whose_token_has_already_expired_is_said_without_connecting(auth_daemon, key_file, browsers):
    # tabd refuses such a token at the upgrade (401), which a page cannot tell from a
    # network error: it reads the token's exp itself and says so instead of retrying.
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    key = open(key_file, "rb").read().rstrip(b"\n")
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"room": ROOM, "role": "view", "exp": int(time.time()) - 5}).encode())
    token = f"{head}.{body}." + b64(hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest())
    b = browsers().record_sockets()
    b.driver.get(auth_daemon.http + f"?room={ROOM}&token={token}")
    b.wait(lambda: b.status()[0] == "error", WAIT, "the expiry shown")
    assert b.driver.find_element(By.ID, "status-text").text == EXPIRED
    stays(b, lambda: len(sockets(b)) == 0, 0.5, "the page connected with an expired token")


def test_a_token_in_the_fragment_is_used_and_kept_out_of_every_url(auth_daemon, mint, browsers, remote):
    """/?room=R#token=JWT (the fragment never reaches a server): the page connects with that
    token as it does with ?token=, offers it in the handshake only, and never shares it."""
    token = mint("view")
    view = browsers().record_sockets().grant_clipboard(auth_daemon)
    view.open(auth_daemon, f"?room={ROOM}#token={token}")
    ctl = remote(auth_daemon, "ctl", room=ROOM, token=mint("control"))
    # Read-only, as with ?token=: said so, the tabs marked, a click sends nothing.
    assert view.js("return [window.__tabd.role, window.__tabd.readOnly]") == ["view", True]
    assert notice(view)["label"] == "View only"
    assert all(c["ariaDisabled"] == "true" for c in controls(view))
    view.count_sent()
    view.click_tab("favorites")
    stays(view, lambda: "tap" not in sent(view), 0.3, f"the page sent {sent(view)}")
    view.wait_selected("home")
    (q,) = sockets(view)
    assert q["room"] == [ROOM] and "token" not in q
    assert_token_offered_not_in_urls(view, token)
    # It follows the room live.
    ctl.command("select", tab="favorites")
    view.wait_selected("favorites", SYNC)

    # A reconnect (with resume) offers the token the same way, and puts it in no URL either.
    view.js("window.__tabd.disconnect()")
    view.wait(lambda: view.js("return window.__tabd.connections") == 2, message="reconnected")
    view.wait_live()
    first, second = sockets(view)
    assert "resume" in second and "token" not in second
    assert_token_offered_not_in_urls(view, token)
    assert view.js("return window.__tabd.role") == "view"

    # The share button copies the room's link: no token in its query nor its fragment.
    assert view.set_clipboard("before") is True
    view.driver.find_element(By.ID, "share").click()
    want = auth_daemon.http + f"?room={ROOM}"
    view.wait(lambda: view.clipboard() != "before", message="the link copied")
    link = view.clipboard()
    parts = urlsplit(link)
    assert "token" not in parse_qs(parts.query) and "token" not in parse_qs(parts.fragment), link
    assert token not in link and link == want
    assert token not in view.driver.find_element(By.TAG_NAME, "body").text


def test_a_control_token_in_the_fragment_sends_commands(auth_daemon, mint, browsers, remote):
    token = mint("control")
    b = browsers().record_sockets().open(auth_daemon, f"?room={ROOM}#token={token}")
    ctl = remote(auth_daemon, "ctl", room=ROOM, token=mint("control"))
    assert b.js("return [window.__tabd.role, window.__tabd.readOnly]") == ["control", False]
    assert notice(b) is None
    assert_token_offered_not_in_urls(b, token)
    assert ctl.snapshot()["selected"] == "home"
    b.count_sent()
    b.click_tab("favorites")
    b.wait(lambda: ctl.snapshot()["selected"] == "favorites", SYNC, "another client sees the selection")
    b.wait_selected("favorites", SYNC)
    assert sent(b).get("tap") == 1
    assert toast(b) is None
