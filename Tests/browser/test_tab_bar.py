"""The tab bar (seed 001): drawn from the snapshot, selection by click and keyboard, and tabs
added, renamed, moved and removed by another client."""
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

import colorsys

from browserkit import SYNC, rgb, state_of

# The unselected tabs' grey: dark enough to read on the bar (WCAG AA).
GREY = "rgb(94, 94, 99)"


def channels(css):
    """(r, g, b) of a computed-style rgb()/rgba() color."""
    return tuple(int(float(v)) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])


def same_hue(css, hex_color):
    """Whether a computed color is a shade of #RRGGBB (its hue within 6°), or both are greys."""
    a = colorsys.rgb_to_hls(*(c / 255 for c in channels(css)))
    b = colorsys.rgb_to_hls(*(int(hex_color.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)))
    if a[2] < 0.08 or b[2] < 0.08:
        return a[2] < 0.12 and b[2] < 0.12
    return min(abs(a[0] - b[0]), 1 - abs(a[0] - b[0])) * 360 <= 6


def in_its_ink(tab, hex_color):
    """The selected tab's text is the ink the bar chose: a shade of the tab's color."""
    return tab["color"] == tab["ink"] and same_hue(tab["color"], hex_color)

TABS = [
    {"id": "home", "title": "Home", "icon": "house", "color": "#FF3B30"},
    {"id": "inbox", "title": "Inbox", "icon": "envelope.fill", "color": "#af52de", "badge": "12"},
    {"id": "search", "title": "Search", "icon": "magnifyingglass", "color": "#007AFF"},
    {"id": "settings", "title": "Settings", "icon": "gearshape", "color": "#8E8E93"},
    {"id": "lab", "title": "Lab", "icon": "flask", "color": "#34C759"},
]


def test_tab_bar_matches_the_snapshot(make_daemon, tabs_file, browsers, remote):
    d = make_daemon("--tabs", tabs_file(TABS))
    b = browsers().open(d)
    r = remote(d)
    snap = r.snapshot()
    drawn = b.tabs()
    assert [t["id"] for t in drawn] == [t["id"] for t in snap["tabs"]]
    assert [t["title"] for t in drawn] == [t["title"] for t in snap["tabs"]]
    assert [t["badge"] for t in drawn] == [t["badge"] for t in snap["tabs"]] == [None, "12", None, None, None]
    # Known SF-Symbol names (and their .fill / shape variants) are SVGs; others the first letter.
    assert [t["icon"] for t in drawn] == ["svg", "svg", "svg", "svg", "letter:L"]
    assert all(t["iconAbove"] for t in drawn), "icon above title"
    # ARIA: a tablist of tabs, one selected; roving tabindex. Each panel is named by its
    # tab's title (the tabs are in the element's shadow root, out of reach of an id).
    assert b.js("return document.getElementById('tabbar').shadowRoot.querySelector('.bar').getAttribute('role')") == "tablist"
    assert [t["selected"] for t in drawn] == ["true", "false", "false", "false", "false"]
    assert b.js("return Array.from(document.querySelectorAll('.panel')).map(p => p.getAttribute('aria-label'))") == [t["title"] for t in TABS]
    assert [t["tabindex"] for t in drawn] == [0, -1, -1, -1, -1]
    b.wait_selected(snap["selected"])
    # Selected: a readable shade of its color on that color at 30%; the others grey (seed 001).
    home = drawn[0]
    assert in_its_ink(home, "#FF3B30") and home["background"] == rgb("#FF3B30", 0.3)
    assert all(t["color"] == GREY for t in drawn[1:])
    # Every tab's content is in the page, hidden but laid out; the model is the snapshot.
    assert b.js("return document.querySelectorAll('.panel').length") == 5
    b.wait_in_sync_with(r)
    # The greeting starts as state says: Home's root appeared, the others not yet.
    assert [b.greeting(t["id"]) for t in TABS] == ["On Appear"] + ["Initial"] * 4


def test_clicking_tabs_selects_them(make_daemon, tabs_file, browsers, remote):
    d = make_daemon("--tabs", tabs_file(TABS))
    b = browsers().open(d)
    for t in ["inbox", "lab", "search", "home", "settings"]:
        b.click_tab(t)
        b.wait_selected(t)
        tint = {x["id"]: rgb(x["color"].upper(), 0.3) for x in TABS}

        def drawn_right():  # colors may still be in their short transition
            for x in b.tabs():
                if x["id"] == t:
                    ok = (x["selected"], x["background"], x["tabindex"]) == ("true", tint[t], 0) and in_its_ink(
                        x, next(y["color"] for y in TABS if y["id"] == t))
                else:
                    ok = x["selected"] == "false" and x["color"] == GREY and x["background"] != tint[x["id"]]
                if not ok:
                    return False
            return True
        b.wait(drawn_right, message=f"{t} in a shade of its color on its color at 30%, the others grey")
        top = b.top_page(t)
        assert top["visibility"] == "visible" and top["route"] == "root" and top["appeared"]
    assert state_of(remote(d).snapshot())["selected"] == "settings"
    # Each first visit was a firstAppear: the greeting of every tab now reads "On Appear".
    assert [b.greeting(t["id"]) for t in TABS] == ["On Appear"] * 5


def test_keyboard_arrows_move_and_enter_or_space_taps(daemon, browsers):
    b = browsers().open(daemon)
    b.tab("home").click()  # focus the tab bar (home is selected: a tap scrolls to top, harmless)

    def focused():
        return b.focused_tab()

    def key(k):  # to the focused element, inside the tab bar's shadow root
        ActionChains(b.driver).send_keys(k).perform()

    key(Keys.ARROW_RIGHT)
    b.wait(lambda: focused() == "favorites", message="focus on favorites")
    assert b.tabs()[1]["tabindex"] == 0
    assert b.selected_in_dom()["tabs"] == ["home"], "arrows move focus, they do not select"
    key(Keys.ENTER)
    b.wait_selected("favorites")
    key(Keys.ARROW_RIGHT)
    b.wait(lambda: focused() == "profile", message="focus on profile")
    key(Keys.SPACE)
    b.wait_selected("profile")
    key(Keys.ARROW_RIGHT)  # wraps around
    b.wait(lambda: focused() == "home", message="focus wraps to home")
    key(Keys.ARROW_LEFT)
    b.wait(lambda: focused() == "profile", message="focus wraps back to profile")
    key(Keys.HOME)
    b.wait(lambda: focused() == "home", message="Home key")
    key(Keys.END)
    b.wait(lambda: focused() == "profile", message="End key")
    key(Keys.ARROW_LEFT)
    key(Keys.ENTER)
    b.wait_selected("favorites")
    assert focused() == "favorites"


def test_tabs_changed_by_another_client_appear_at_once(daemon, browsers, remote):
    b = browsers().open(daemon)
    r = remote(daemon)

    def ids():
        return [t["id"] for t in b.tabs()]

    r.command("addTab", tab={"id": "inbox", "title": "Inbox", "icon": "tray.fill", "color": "#ff9500", "badge": "3"}, index=1)
    b.wait(lambda: ids() == ["home", "inbox", "favorites", "profile"], SYNC, "inbox added at 1")
    inbox = b.tabs()[1]
    assert (inbox["title"], inbox["badge"], inbox["icon"], inbox["selected"]) == ("Inbox", "3", "svg", "false")

    r.command("addTab", tab={"id": "zeta", "title": "Zeta", "icon": "custom.glyph", "color": "#5856D6"})
    b.wait(lambda: ids()[-1] == "zeta", SYNC, "zeta appended")
    assert b.tabs()[-1]["icon"] == "letter:Z"

    r.command("updateTab", tab={"id": "home", "title": "Start", "badge": "9+", "color": "#5AC8FA"})
    b.wait(lambda: b.tabs()[0]["title"] == "Start" and b.tabs()[0]["badge"] == "9+", SYNC, "home renamed")
    b.wait(lambda: b.tabs()[0]["background"] == rgb("#5AC8FA", 0.3), SYNC, "new color drawn")
    assert b.greeting("home") == "On Appear"  # its content stayed

    r.command("updateTab", tab={"id": "home", "badge": None, "icon": "star"})
    b.wait(lambda: b.tabs()[0]["badge"] is None, SYNC, "badge cleared")

    r.command("moveTab", tab="home", index=4)
    b.wait(lambda: ids() == ["inbox", "favorites", "profile", "zeta", "home"], SYNC, "home moved to the end")

    r.command("removeTab", tab="favorites")
    b.wait(lambda: ids() == ["inbox", "profile", "zeta", "home"], SYNC, "favorites removed")
    assert b.js("return document.getElementById('panel-favorites')") is None

    # Removing the selected tab selects the one that took its place.
    r.command("removeTab", tab="home")
    b.wait(lambda: ids() == ["inbox", "profile", "zeta"], SYNC, "home removed")
    b.wait_selected("zeta", SYNC)
    b.wait_in_sync_with(r)
