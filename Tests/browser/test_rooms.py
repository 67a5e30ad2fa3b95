"""Rooms on the page: /?room=ID opens room ID (no parameter: main) and every connection of
the page, reconnects included, asks for that room; what happens in a room shows in that
room only; the page shows its room and copies its link (never the token); a room id that
is not one ([A-Za-z0-9_-]{1,64}) is said in the status area, and no WebSocket is opened.

A deleted room (close code 4404) is said in the status area and not reconnected to: a
reconnect would silently make a new, empty room of the same id.
"""
import urllib.request
from urllib.parse import parse_qs, quote, urlsplit

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from browserkit import SYNC, WAIT


def sockets(b):
    """The query of every WebSocket the page opened (record_sockets), in order."""
    return [parse_qs(urlsplit(u).query, keep_blank_values=True) for u in b.js("return window.__sockets")]


def log_kinds(b):
    return b.js("return Array.from(document.querySelectorAll('#log-list li')).map(li => li.dataset.kind)")


def toast(b):
    return b.js("const t = document.getElementById('toast'); return t.hidden ? null : t.textContent")


def test_an_action_in_a_room_shows_in_that_room_only(daemon, browsers, remote):
    """Needs rooms in the server."""
    a1 = browsers().record_sockets().open(daemon, "?room=a")
    a2 = browsers().open(daemon, "?room=a")
    b1 = browsers().record_sockets().open(daemon, "?room=b")
    ra = remote(daemon, "ra", room="a")
    rb = remote(daemon, "rb", room="b")
    assert (ra.welcome.get("room"), ra.welcome.get("role")) == ("a", "control")
    assert (rb.welcome.get("room"), rb.welcome.get("role")) == ("b", "control")

    # Each page shows its room, in the header and in the title, and was let in as control.
    for page, room in ((a1, "a"), (a2, "a"), (b1, "b")):
        assert page.room_shown() == room
        assert page.driver.title == f"Home · {room} · tabd"
        assert page.js("return [window.__tabd.room, window.__tabd.role]") == [room, "control"]
    assert [q["room"] for q in sockets(a1)] == [["a"]]
    assert [q["room"] for q in sockets(b1)] == [["b"]]

    # Presence is per room: a1, a2 and ra in a; b1 and rb in b.
    a1.wait(lambda: a1.model()["clientCount"] == 3 and a2.model()["clientCount"] == 3, message="three in room a")
    b1.wait(lambda: b1.model()["clientCount"] == 2, message="two in room b")

    # A tap, a push and a stored value in a1 show in a2...
    a1.click_tab("favorites")
    a2.wait_selected("favorites", SYNC)
    a1.in_top("favorites", ".primary.push").click()
    a2.wait_route("favorites", "next", SYNC)
    a1.click_tab("home")
    a2.wait_selected("home", SYNC)
    a1.in_top("home", ".greeting").click()
    a2.wait_greeting("home", "Tapped", SYNC)

    # ...and never in b1. Its own action in room b, later than all of them, comes back to
    # it (anything of room a sent to it would have come first) and stays out of room a.
    b1.click_tab("profile")
    b1.wait_selected("profile", SYNC)
    a1.click_tab("favorites")  # and one more in room a, after b1's
    a2.wait_selected("favorites", SYNC)
    a1.wait_selected("favorites", SYNC)

    assert b1.greeting("home") == "On Appear"
    assert b1.top_page("favorites")["route"] == "root"
    assert b1.top_page("favorites")["appearCount"] == 0, "favorites never appeared in room b"
    assert b1.model()["clientCount"] == 2
    kinds = log_kinds(b1)
    assert "pushed" not in kinds and "valueSet" not in kinds
    assert kinds.count("selected") == 1, "only b1's own tap selected anything in room b"
    assert a2.top_page("profile")["appearCount"] == 0, "profile never appeared in room a"

    # Every page holds exactly its room's state.
    snap_a = a1.wait_in_sync_with(ra)
    a2.wait_in_sync_with(ra)
    snap_b = b1.wait_in_sync_with(rb)
    assert (snap_a["selected"], snap_b["selected"]) == ("favorites", "profile")
    assert snap_a["tabs"][0]["values"] == {"greeting": "Tapped"} and snap_b["tabs"][0]["values"] == {}


def test_a_page_resumes_in_its_room(daemon, browsers, remote):
    """Needs rooms in the server."""
    b = browsers().record_sockets().open(daemon, "?room=a")
    ra = remote(daemon, "ra", room="a")
    rm = remote(daemon, "rm")  # room main
    b.wait_in_sync_with(ra)
    epoch = b.js("return window.__tabd.epoch")

    b.js("window.__tabd.disconnect(1500)")
    b.wait(lambda: b.status()[0] == "reconnecting", message="status shows the drop")
    seq = b.js("return window.__tabd.seq")
    ra.command("select", tab="profile")
    ra.command("push", tab="profile", route="while-away")
    rm.command("select", tab="favorites")  # another room: none of the page's business
    rm.command("set", tab="home", key="greeting", value="main room")

    b.wait_live(WAIT)
    assert b.js("return window.__tabd.resumed") is True, "resumed, not rebuilt"
    b.wait_selected("profile")
    b.wait_route("profile", "while-away")
    assert b.greeting("home") == "On Appear"
    b.wait_in_sync_with(ra)
    assert b.room_shown() == "a"

    # Both connections asked for room a; the second one resumed from where the first was.
    first, second = sockets(b)
    assert first["room"] == ["a"] and "resume" not in first
    assert second["room"] == ["a"]
    assert second["resume"] == [str(seq)] and second["epoch"] == [epoch]


def test_the_page_asks_for_its_room_and_main_without_one(make_daemon, browsers):
    d = make_daemon("--token", "s3cret")
    b = browsers().record_sockets().open(d, "?token=s3cret")
    assert b.room_shown() == "main"
    assert b.js("return window.__tabd.room") == "main"
    assert b.driver.title == "Home · tabd", "no room in the title of main"
    (q,) = sockets(b)
    # s3cret is an HTTP token: offered in the handshake, in no URL.
    assert q["room"] == ["main"] and "token" not in q and q["name"] == ["browser"]
    assert b.socket_protocols() == [["tabd.v1", "tabd.token.s3cret"]]

    b.driver.get(d.http + "?room=Team_7-x&token=s3cret&name=kiosk")
    b.wait_live()
    assert b.room_shown() == "Team_7-x"
    assert b.driver.title == "Home · Team_7-x · tabd"
    q = sockets(b)[-1]
    assert q["room"] == ["Team_7-x"] and "token" not in q and q["name"] == ["kiosk"]
    assert b.socket_protocols()[-1] == ["tabd.v1", "tabd.token.s3cret"]
    b.click_tab("favorites")
    b.wait(lambda: b.driver.title == "Favorites · Team_7-x · tabd", message="title follows the selected tab")


def test_a_token_that_cannot_be_a_subprotocol_goes_in_the_query(make_daemon, browsers):
    """A subprotocol is an HTTP token; one with other characters ('/', '=', a space) goes
    in the WebSocket URL's query as before, and the page offers only tabd's subprotocol."""
    token = "s3cr/t= 7"
    d = make_daemon("--token", token)
    b = browsers().record_sockets().open(d, "?room=a#token=" + quote(token, safe=""))
    (q,) = sockets(b)
    assert q["room"] == ["a"] and q["token"] == [token]
    assert b.socket_protocols() == [[]]


def test_share_copies_the_room_link_without_the_token(make_daemon, browsers):
    d = make_daemon("--token", "s3cret")
    b = browsers().grant_clipboard(d).open(d, "?room=team-7&token=s3cret&name=kiosk")
    want = d.http + "?room=team-7"  # http://127.0.0.1:PORT/?room=team-7
    assert b.js("return window.__tabd.roomLink()") == want
    assert b.set_clipboard("before") is True
    assert b.clipboard() == "before"

    # A real button with a name, reached with the keyboard (first stop from the top of the
    # page), with a visible focus ring, and Enter copies.
    share = b.driver.find_element(By.ID, "share")
    assert share.tag_name == "button" and share.get_attribute("type") == "button"
    assert share.accessible_name == "Copy link to room team-7"
    b.driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    b.wait(lambda: b.js("return document.activeElement.id") == "share", message="Tab reaches the share button")
    ring = b.js("const cs = getComputedStyle(document.activeElement); return [cs.outlineStyle, cs.outlineWidth]")
    assert ring[0] != "none" and float(ring[1].rstrip("px")) >= 2, f"focus ring {ring}"
    b.driver.switch_to.active_element.send_keys(Keys.ENTER)
    b.wait(lambda: toast(b) == "Link copied", message="the page says the link is copied")
    b.wait(lambda: b.clipboard() == want, message=f"{want} on the clipboard")
    assert "s3cret" not in b.clipboard() and "token" not in b.clipboard() and "kiosk" not in b.clipboard()
    assert b.js("return document.getElementById('share-panel').hidden") is True

    # A click does the same.
    assert b.set_clipboard("again") is True
    share.click()
    b.wait(lambda: b.clipboard() == want, message="copied again by a click")


def test_share_shows_the_link_to_copy_when_the_clipboard_refuses(make_daemon, browsers):
    d = make_daemon("--token", "s3cret")
    b = browsers().grant_clipboard(d).open(d, "?room=team-7&token=s3cret")
    want = d.http + "?room=team-7"
    assert b.set_clipboard("before") is True
    b.js("navigator.clipboard.writeText = () => Promise.reject(new DOMException('refused', 'NotAllowedError'))")
    b.driver.find_element(By.ID, "share").click()

    # The link, selected in a labelled field that has the focus, with a word on what to do.
    b.wait(lambda: b.js("return !document.getElementById('share-panel').hidden"), message="the link is shown")
    field = b.js("""const f = document.getElementById('share-field');
        return {value: f.value, readOnly: f.readOnly, focused: document.activeElement === f,
                selected: f.value.substring(f.selectionStart, f.selectionEnd),
                label: f.labels.length ? f.labels[0].textContent : null,
                hint: document.getElementById('share-hint').textContent}""")
    assert field["value"] == want and "s3cret" not in field["value"]
    assert field["readOnly"] and field["focused"] and field["selected"] == want
    assert field["label"] == "Link to this room"
    assert b.driver.find_element(By.ID, "share-field").is_displayed()
    # The page also tries the old way (document.execCommand, which headless Chromium
    # allows); it says "Link copied" only when that put the link on the clipboard.
    if field["hint"] == "Link copied":
        assert b.clipboard() == want
        assert toast(b) == "Link copied"
    else:
        assert field["hint"] == "Press Ctrl+C (⌘C on a Mac) to copy it"
        assert b.clipboard() == "before"

    # Escape closes it and gives the focus back to the button.
    b.driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    b.wait(lambda: b.js("return document.getElementById('share-panel').hidden"), message="closed by Escape")
    assert b.js("return document.activeElement.id") == "share"

    # Open again, then a click elsewhere closes it.
    b.driver.find_element(By.ID, "share").click()
    b.wait(lambda: b.js("return !document.getElementById('share-panel').hidden"), message="shown again")
    b.driver.find_element(By.CSS_SELECTOR, "#panel-home .page-root .large-title").click()
    b.wait(lambda: b.js("return document.getElementById('share-panel').hidden"), message="closed by a click elsewhere")


def test_a_room_id_that_is_not_one_is_said_and_never_connected_to(daemon, browsers):
    b = browsers().record_sockets()
    bad = [("bad%20id", "bad id"), ("", ""), ("x" * 65, "x" * 65), ("caf%C3%A9", "café"),
           ("a%2Fb", "a/b"), ("a.b", "a.b")]
    for raw, room in bad:
        b.driver.get(daemon.http + "?room=" + raw)
        b.wait(lambda: b.status()[0] == "error", message=f"error shown for room {room!r}")
        status = b.driver.find_element(By.ID, "status")
        assert status.is_displayed()
        text = b.driver.find_element(By.ID, "status-text").text
        assert text == f"'{room}' is not a room id: use 1–64 letters, digits, '-' or '_'"
        link = b.driver.find_element(By.ID, "status-link")
        assert link.is_displayed() and link.text == "Open the main room"
        assert link.get_attribute("href") == daemon.http, "the page without the room parameter"
        assert b.js("return window.__sockets") == [], f"no WebSocket for room {room!r}"
        assert b.js("return [window.__tabd.state, window.__tabd.attempts, window.__tabd.model]") == ["error", 0, None]
        assert b.room_shown() is None
        assert not b.driver.find_element(By.ID, "share").is_displayed()
        assert b.js("return document.documentElement.scrollWidth <= innerWidth"), "no horizontal overflow"

    # Coming back online does not make it try either.
    b.js("window.dispatchEvent(new Event('online')); window.__tabd.retryNow()")
    assert b.js("return window.__sockets") == []
    b.screenshot("room-error.png")

    # The link leads to the main room.
    b.driver.find_element(By.ID, "status-link").click()
    b.wait_live()
    assert b.room_shown() == "main"
    assert [q["room"] for q in sockets(b)] == [["main"]]


def test_a_welcome_for_another_room_is_refused(daemon, browsers):
    """Whatever the server: the page's socket sees every welcome as one for room 'other'."""
    b = browsers().record_sockets()
    b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        (() => {
          const add = WebSocket.prototype.addEventListener;
          WebSocket.prototype.addEventListener = function (type, fn, opts) {
            window.__lastSocket = this;
            if (type !== "message") return add.call(this, type, fn, opts);
            return add.call(this, type, (ev) => {
              const f = JSON.parse(ev.data);
              if (f.type === "welcome") f.room = "other";
              fn({ data: JSON.stringify(f) });
            }, opts);
          };
        })();"""})
    b.driver.get(daemon.http + "?room=a")
    b.wait(lambda: b.status()[0] == "error", message="the page refuses the welcome")
    assert b.driver.find_element(By.ID, "status-text").text == "tabd answered for room 'other', not 'a'"
    assert b.js("return [window.__tabd.model, window.__tabd.connections, window.__tabd.clientId]") == [None, 0, None]
    # It closed its socket and does not try again.
    b.wait(lambda: b.js("return window.__lastSocket.readyState === WebSocket.CLOSED"), message="socket closed")
    assert b.js("return window.__tabd.state") == "error" and len(b.js("return window.__sockets")) == 1
    b.js("window.__tabd.retryNow()")
    assert len(b.js("return window.__sockets")) == 1
    assert b.driver.find_element(By.ID, "status-link").text == "Reload"


def test_a_deleted_room_is_said_and_not_reconnected_to(daemon, browsers):
    b = browsers().record_sockets().open(daemon, "?room=doomed")
    req = urllib.request.Request(daemon.http + "api/rooms/doomed", method="DELETE")
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        assert r.status == 204
    b.wait(lambda: b.status()[0] == "error", message="the deletion shown")
    assert b.driver.find_element(By.ID, "status-text").text == "Room 'doomed' was deleted."
    b.js("window.dispatchEvent(new Event('online')); window.__tabd.retryNow()")
    assert len(sockets(b)) == 1, "no reconnect to a deleted room"
