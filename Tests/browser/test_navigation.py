"""Pages, lifecycle and taps: push, back, tap-to-root and tap-to-scroll-top (seed 003), the
greeting (seed 002), content that keeps its state while hidden (seed 000), scroll reports."""


def test_seed_003_push_back_tap_to_root_then_scroll_to_top(daemon, browsers, remote):
    b = browsers().open(daemon)
    r = remote(daemon)
    root = b.top_page("home")
    assert (root["route"], root["appearCount"], root["depth"]) == ("root", 1, 1)

    # Scroll down the list to the "Show next page" button after it and press it, as in the seed.
    b.in_top("home", ".secondary.push").click()
    b.wait_route("home", "next")
    scrolled = b.scroll_top("home")
    assert scrolled > 100, "the list was scrolled to reach the button"
    b.wait(lambda: r.snapshot()["tabs"][0]["scroll"] == round(scrolled), message="scroll reported")
    page = b.top_page("home")
    assert page["visibility"] == "visible" and page["appeared"] and page["appearCount"] == 1
    assert b.in_top("home", ".crumb").text == "Home › next"

    # A pushed page pushes further and goes Back.
    b.in_top("home", ".push").click()
    b.wait_route("home", "next2")
    assert b.top_page("home")["depth"] == 3
    b.in_top("home", ".back").click()
    b.wait_route("home", "next")
    assert b.top_page("home")["appearCount"] == 2

    # First tap on the selected tab: back to the root page, whose list kept its offset.
    b.click_tab("home")
    b.wait_route("home", "root")
    root = b.top_page("home")
    assert (root["depth"], root["appearCount"]) == (1, 2)
    assert abs(b.scroll_top("home") - scrolled) < 1

    # Second tap: the scroll-to-top counter changes and the list scrolls smoothly to the top.
    b.js("""window.__scrollCalls = [];
            const orig = Element.prototype.scrollTo;
            Element.prototype.scrollTo = function (o) { window.__scrollCalls.push(o && o.behavior); return orig.apply(this, arguments); };""")
    count = b.model()["scrollToTop"]
    b.click_tab("home")
    b.wait(lambda: b.scroll_top("home") == 0, 5, "list back at the top")
    assert b.js("return window.__scrollCalls") == ["smooth"]
    assert b.model()["scrollToTop"] == count + 1
    snap = r.snapshot()
    assert snap["scrollToTop"] == count + 1 and snap["tabs"][0]["scroll"] == 0
    # It stays there: nothing reported a stale offset afterwards.
    b.wait_in_sync_with(r)
    assert b.scroll_top("home") == 0 and r.snapshot()["tabs"][0]["scroll"] == 0


def test_seed_002_greeting_initial_on_appear_tapped_persists(daemon, browsers, remote):
    b = browsers().open(daemon)
    # Favorites' root never appeared: "Initial" (its panel is in the page, hidden).
    assert b.greeting("favorites") == "Initial"
    assert b.greeting("home") == "On Appear"
    b.click_tab("favorites")
    b.wait_greeting("favorites", "On Appear")
    assert b.top_page("favorites")["appearCount"] == 1

    b.in_top("favorites", ".greeting").click()
    b.wait_greeting("favorites", "Tapped")
    assert b.greeting("home") == "On Appear", "the greeting is per tab"

    # Push and pop: the root appears again but its greeting stays "Tapped".
    b.in_top("favorites", ".primary.push").click()
    b.wait_route("favorites", "next")
    b.in_top("favorites", ".back").click()
    b.wait_route("favorites", "root")
    assert b.greeting("favorites") == "Tapped"
    assert b.top_page("favorites")["appearCount"] == 2

    # Switch tabs and back.
    b.click_tab("profile")
    b.wait_selected("profile")
    b.click_tab("favorites")
    b.wait_selected("favorites")
    assert b.greeting("favorites") == "Tapped"
    assert b.top_page("favorites")["appearCount"] == 3

    # Reload: it is stored state, so it is still there.
    b.reload()
    b.wait_selected("favorites")
    assert b.greeting("favorites") == "Tapped"
    assert (b.greeting("home"), b.greeting("profile")) == ("On Appear", "On Appear")
    assert remote(daemon).snapshot()["tabs"][1]["values"] == {"greeting": "Tapped"}


def test_hidden_tabs_keep_their_pages_scroll_and_typed_text(daemon, browsers):
    b = browsers().open(daemon)
    b.in_top("home", ".note-input").send_keys("typed on home")
    b.scroll_to("home", 300)
    b.in_top("home", ".secondary.push").click()
    b.wait_route("home", "next")
    home_scroll = b.scroll_top("home")  # the root page is hidden now; its list keeps this
    assert home_scroll > 0
    b.in_top("home", ".note-input").send_keys("typed on next")

    b.click_tab("favorites")
    b.wait_selected("favorites")
    b.in_top("favorites", ".primary.push").click()
    b.wait_route("favorites", "next")
    b.click_tab("profile")
    b.wait_selected("profile")

    b.click_tab("home")
    b.wait_selected("home")
    assert b.top_page("home")["route"] == "next"
    assert b.in_top("home", ".note-input").get_attribute("value") == "typed on next"
    assert b.top_page("favorites")["route"] == "next", "favorites kept its pushed page"
    b.in_top("home", ".back").click()
    b.wait_route("home", "root")
    assert b.in_top("home", ".note-input").get_attribute("value") == "typed on home"
    assert abs(b.scroll_top("home") - home_scroll) < 1


def test_scroll_reports_are_throttled_and_restored_on_reload(daemon, browsers, remote):
    b = browsers().open(daemon)
    r = remote(daemon)
    b.count_sent()
    # A user scrolling for about a second: 30 scroll positions, 30 ms apart.
    elapsed = b.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const s = document.querySelector('#panel-home .page-root .scroller');
        const t0 = performance.now(); let i = 0;
        const step = () => { i += 1; s.scrollTop = i * 20; if (i < 30) setTimeout(step, 30); else done(performance.now() - t0); };
        step();""")
    b.wait(lambda: r.snapshot()["tabs"][0]["scroll"] == 600, message="final offset reported")
    sent = b.sent("scroll")
    # At most 4 per second (plus the trailing report); more than one, since it is throttled, not debounced.
    assert 2 <= sent <= 2 + elapsed / 250, (sent, elapsed)

    b.reload()
    b.wait(lambda: b.scroll_top("home") == 600, message="offset restored after reload")
    b.count_sent()
    b.wait_in_sync_with(r)
    assert b.sent("scroll") == 0, "restoring an offset is not a new report"
