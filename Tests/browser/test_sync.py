"""Several windows stay in sync; the page reconnects and catches up after a drop and after
a daemon restart."""
from browserkit import CONNECTION_REFUSED, SYNC, WAIT

# Installed before the page's scripts run (like Browser.record_sockets): every WebSocket's
# "message" listeners go through a filter. Once window.__cutRemoval.armed is set, the next
# events frame holding a tabRemoved reaches the page cut just after that event (what
# followed it, e.g. the `selected` of a removed selected tab, is left out); the filter
# records the frame's kinds before and after, and `delivered` once the page's listener
# returned (the page handles a frame synchronously, so by then it has answered it).
CUT_AFTER_TAB_REMOVED = """
(() => {
  const cut = { armed: false, kinds: null, kept: null, delivered: false };
  Object.defineProperty(window, "__cutRemoval", { value: cut });
  window.WebSocket = new Proxy(window.WebSocket, {
    construct(target, args) {
      const sock = Reflect.construct(target, args);
      const add = sock.addEventListener.bind(sock);
      sock.addEventListener = (type, fn, ...rest) => add(type, type !== "message" ? fn : (ev) => {
        let f;
        try { f = JSON.parse(ev.data); } catch (e) { return fn(ev); }
        const i = cut.armed && f && f.type === "events" && Array.isArray(f.events)
          ? f.events.findIndex((e) => e && e.kind === "tabRemoved") : -1;
        if (i < 0) return fn(ev);
        cut.armed = false;
        cut.kinds = f.events.map((e) => e.kind);
        f.events = f.events.slice(0, i + 1);
        cut.kept = f.events.map((e) => e.kind);
        try {
          return fn(new MessageEvent("message", { data: JSON.stringify(f) }));
        } finally {
          cut.delivered = true;
        }
      }, ...rest);
      return sock;
    },
  });
})();"""


def test_two_windows_an_action_in_one_shows_in_the_other_within_a_second(daemon, browsers, remote):
    a = browsers().open(daemon)
    b = browsers().open(daemon)
    b.wait(lambda: b.model()["clientCount"] == 2 and a.model()["clientCount"] == 2, message="both present")
    b.count_sent()

    a.click_tab("favorites")
    b.wait_selected("favorites", SYNC)
    b.wait_greeting("favorites", "On Appear", SYNC)

    a.in_top("favorites", ".primary.push").click()
    b.wait_route("favorites", "next", SYNC)
    assert b.top_page("favorites")["visibility"] == "visible"

    a.in_top("favorites", ".back").click()
    b.wait_route("favorites", "root", SYNC)

    a.in_top("favorites", ".greeting").click()
    b.wait_greeting("favorites", "Tapped", SYNC)

    # A scroll in one window moves the same list in the other (visible or hidden)...
    a.scroll_to("favorites", 250)
    b.wait(lambda: b.scroll_top("favorites") == 250, SYNC, "favorites list at 250 in b")
    a.scroll_to("home", 180)  # hidden in both
    b.wait(lambda: b.scroll_top("home") == 180, SYNC, "hidden home list at 180 in b")
    # ...and the other window does not echo it back.
    assert b.sent("scroll") == 0

    # The other way round, and a tap-to-scroll-top from b scrolls a's list.
    b.click_tab("profile")
    a.wait_selected("profile", SYNC)
    b.scroll_to("profile", 300)
    a.wait(lambda: a.scroll_top("profile") == 300, SYNC, "profile list at 300 in a")
    b.click_tab("profile")
    a.wait(lambda: a.scroll_top("profile") == 0, SYNC + 1, "a scrolled to the top by b's tap")

    r = remote(daemon)
    a.wait_in_sync_with(r)
    b.wait_in_sync_with(r)


def test_page_reconnects_after_its_socket_closes_and_catches_up(daemon, browsers, remote):
    b = browsers().open(daemon)
    r = remote(daemon)
    first_client = b.js("return window.__tabd.clientId")
    log_before = b.js("return Array.from(document.querySelectorAll('#log-list li')).map(li => Number(li.dataset.seq))")

    b.js("window.__tabd.disconnect(1500)")  # closes the socket; stays away for 1.5 s
    b.wait(lambda: b.status()[0] == "reconnecting", message="status shows the drop")
    assert b.status()[1].startswith(("Retrying in", "Reconnecting"))
    # Meanwhile another client changes things.
    r.command("select", tab="profile")
    r.command("push", tab="profile", route="while-away")
    r.command("set", tab="home", key="greeting", value="Tapped")
    r.command("scroll", tab="home", offset=222)

    b.wait_live(WAIT)
    assert b.js("return window.__tabd.connections") == 2
    assert b.js("return window.__tabd.resumed") is True, "resumed, not rebuilt"
    assert b.js("return window.__tabd.clientId") != first_client
    b.wait_selected("profile")
    b.wait_route("profile", "while-away")
    assert b.greeting("home") == "Tapped"
    b.wait(lambda: b.scroll_top("home") == 222, message="missed scroll applied")
    # Every event exactly once, in order: the model equals the daemon's state.
    b.wait_in_sync_with(r)
    seqs = b.js("return Array.from(document.querySelectorAll('#log-list li')).map(li => Number(li.dataset.seq))")
    new = [s for s in seqs if s not in log_before]
    assert new == sorted(set(new), reverse=True), "log: each event once, newest first"


def test_page_rebuilds_from_the_snapshot_after_the_daemon_restarts(make_daemon, browsers, remote):
    d1 = make_daemon()
    b = browsers().open(d1)
    b.allow_console(CONNECTION_REFUSED)  # the retries while no daemon listens
    b.in_top("home", ".greeting").click()
    b.wait_greeting("home", "Tapped")
    b.in_top("home", ".primary.push").click()
    b.wait_route("home", "next")
    epoch1 = b.js("return window.__tabd.epoch")
    rebuilds = b.js("return window.__tabd.rebuilds")

    d1.kill()
    b.wait(lambda: b.status()[0] == "reconnecting", message="status shows the drop")
    d2 = make_daemon(port=d1.port)
    r = remote(d2)

    b.wait_live(WAIT + 5)
    b.wait(lambda: b.js("return window.__tabd.epoch") == r.welcome["epoch"], message="page on the new daemon")
    if r.welcome["epoch"] != epoch1:
        # A new history: the page threw its model away and rebuilt from the snapshot.
        assert b.js("return window.__tabd.resumed") is False
        assert b.js("return window.__tabd.rebuilds") == rebuilds + 1
        b.wait_greeting("home", "On Appear")
        b.wait_route("home", "root")
        assert b.top_page("home")["depth"] == 1
    b.wait_in_sync_with(r)

    # And it is fully working again: an action goes through and comes back.
    b.click_tab("favorites")
    b.wait_selected("favorites")
    b.wait_in_sync_with(r)


def test_status_is_visible_while_the_daemon_is_away(make_daemon, browsers):
    d = make_daemon()
    b = browsers(width=390, height=844, mobile=True).open(d)
    b.allow_console(CONNECTION_REFUSED)
    assert b.driver.find_element("id", "status").is_displayed()
    assert b.status() == ("live", "Live")
    d.kill()
    b.wait(lambda: b.status()[0] == "reconnecting", message="status shows the drop")
    b.wait(lambda: b.status()[1].startswith(("Retrying in", "Reconnecting")), message="status text")
    assert b.driver.find_element("id", "status").is_displayed()
    # A few failed attempts later (the backoff grows) it is still trying and says so.
    b.wait(lambda: b.js("return window.__tabd.attempts") >= 3, WAIT, "three attempts")
    assert b.state() == "reconnecting"
    b.screenshot("phone-offline.png")
    d2 = make_daemon(port=d.port)
    b.wait_live(WAIT + 5)
    assert b.status() == ("live", "Live")
    assert b.js("return window.__tabd.connections") == 2
    assert d2.port == d.port


def test_a_gap_in_the_stream_rebuilds_from_a_snapshot(daemon, browsers, remote):
    b = browsers().open(daemon)
    r = remote(daemon)
    b.wait_in_sync_with(r)
    rebuilds = b.js("return window.__tabd.rebuilds")
    b.js("window.__tabd.dropNextBatch()")  # this batch is lost on the way
    r.command("push", tab="home", route="lost")
    r.command("select", tab="favorites")  # the next batch reveals the gap
    b.wait_selected("favorites")
    assert b.js("return window.__tabd.rebuilds") == rebuilds + 1
    assert b.top_page("home")["route"] == "lost"
    rows = b.js("return Array.from(document.querySelectorAll('#log-list li')).map(li => [li.dataset.kind, li.querySelector('.log-text').textContent])")
    assert ["rebuilt", "Caught up from a fresh snapshot: 3 tabs, Favorites selected"] in rows
    b.wait_in_sync_with(r)


def test_the_page_passes_its_token_along(make_daemon, browsers):
    d = make_daemon("--token", "s3cret")
    b = browsers()
    b.allow_console(CONNECTION_REFUSED)  # the refused upgrade without the token
    b.driver.get(d.http)
    b.wait(lambda: b.js("return window.__tabd.attempts") >= 2, WAIT, "refused without the token")
    assert b.state() in ("connecting", "reconnecting")
    b.driver.get(d.http + "?token=s3cret")
    b.wait_live()
    assert b.tabs()[0]["id"] == "home"


def test_a_frame_that_leaves_the_selection_on_a_removed_tab_is_refused_and_the_page_syncs(daemon, browsers, remote):
    # The end-of-frame rule (model.js applyFrame): after a frame, the selected tab exists.
    # The removal of the selected tab comes as tabRemoved then selected in one frame; the
    # page gets it cut after tabRemoved, so only the rule tells it something is missing.
    b = browsers()
    b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CUT_AFTER_TAB_REMOVED})
    b.open(daemon)
    r = remote(daemon)
    before = b.wait_in_sync_with(r)
    victim = before["selected"]
    rebuilds = b.js("return window.__tabd.rebuilds")
    b.count_sent()
    b.js("window.__cutRemoval.armed = true")

    r.command("removeTab", tab=victim)
    snap = r.snapshot()
    assert snap["selected"] != victim and victim not in [t["id"] for t in snap["tabs"]]
    b.wait(lambda: b.js("return window.__cutRemoval.delivered"), WAIT, "the cut frame reached the page")
    cut = b.js("return window.__cutRemoval")
    assert cut["kinds"][:cut["kinds"].index("tabRemoved") + 1] == cut["kept"] and cut["kept"][-1] == "tabRemoved"
    assert "selected" in cut["kinds"][len(cut["kept"]):], f"the real frame reselects after the removal: {cut['kinds']}"

    # The page answered the frame while handling it: refused it (logged) and asked for a sync.
    assert b.sent("sync") == 1, f"the page took a frame ending with '{victim}' (removed) selected without asking for a sync"
    rows = b.js("return Array.from(document.querySelectorAll('#log-list li')).map(li => [li.dataset.kind, li.querySelector('.log-text').textContent])")
    assert any(kind == "refused" and text.endswith(f"after the frame, the selected tab '{victim}' does not exist")
               for kind, text in rows), rows

    # The snapshot answering it puts the page in step with tabd: model, selection and tab bar.
    b.wait(lambda: b.js("return window.__tabd.rebuilds") == rebuilds + 1, WAIT, "rebuilt from the sync's snapshot")
    b.wait_in_sync_with(r)
    b.wait_selected(snap["selected"])
    assert [t["id"] for t in b.tabs()] == [t["id"] for t in snap["tabs"]]
    assert [t["id"] for t in b.tabs() if t["selected"] == "true"] == [snap["selected"]]
    assert b.sent("sync") == 1
