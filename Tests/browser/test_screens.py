"""What a person sees: screenshots at phone and desktop width (light and dark), no console
errors, and a page that a strict Content-Security-Policy would allow."""
import os
import re
import shutil
import struct

from browserkit import DOCS_SCREENSHOTS, SCREENSHOTS, WEB_ROOT

TABS = [
    {"id": "home", "title": "Home", "icon": "house", "color": "#FF3B30"},
    {"id": "favorites", "title": "Favorites", "icon": "heart", "color": "#007AFF"},
    {"id": "messages", "title": "Messages", "icon": "message", "color": "#AF52DE", "badge": "3"},
    {"id": "profile", "title": "Profile", "icon": "person", "color": "#34C759"},
]


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def no_horizontal_overflow(b):
    return b.js("return document.documentElement.scrollWidth <= window.innerWidth")


def test_screenshots_at_phone_and_desktop_width(make_daemon, tabs_file, browsers):
    d = make_daemon("--tabs", tabs_file(TABS))

    phone = browsers(width=390, height=844, mobile=True).open(d)
    assert phone.js("return [innerWidth, innerHeight]") == [390, 844]
    assert no_horizontal_overflow(phone)
    tabs = phone.tabs()
    assert all(t["iconAbove"] for t in tabs)
    bar = phone.js("const r = document.getElementById('tabbar').getBoundingClientRect(); return [r.left, r.right, r.bottom]")
    assert bar[0] >= 0 and bar[1] <= 390 and bar[2] <= 844, "tab bar fully on screen"
    phone_path = phone.screenshot("phone.png")
    assert png_size(phone_path) == (390, 844)

    phone.viewport(390, 844, mobile=True, dark=True)
    phone.wait(lambda: phone.js("return getComputedStyle(document.body).backgroundColor") == "rgb(0, 0, 0)",
               message="dark background")
    assert phone.js("return getComputedStyle(document.body).color") == "rgb(242, 242, 247)"
    phone.screenshot("phone-dark.png")

    desktop = browsers(width=1280, height=800).open(d)
    assert desktop.js("return [innerWidth, innerHeight]") == [1280, 800]
    assert no_horizontal_overflow(desktop)
    desktop.click_tab("favorites")
    desktop.wait_selected("favorites")
    desktop.in_top("favorites", ".greeting").click()
    desktop.wait_greeting("favorites", "Tapped")
    desktop.driver.find_element("css selector", "#log summary").click()
    desktop.wait(lambda: desktop.js("return document.getElementById('log').open"), message="log open")
    rows = desktop.js("return Array.from(document.querySelectorAll('#log-list li')).map(li => [li.dataset.seq || null, li.dataset.kind, li.querySelector('.log-n').textContent, li.querySelector('.log-text').textContent, li.title])")
    assert rows[0][1] == "valueSet" and 1 < len(rows) <= 50
    events = [r for r in rows if r[1] != "rebuilt"]
    assert [int(r[0]) for r in events] == sorted((int(r[0]) for r in events), reverse=True)
    # The start from a snapshot is a marker without a seq, not an event.
    markers = [r for r in rows if r[1] == "rebuilt"]
    assert markers and all(r[0] is None and r[2] == "" for r in markers)
    # Names on the line, ids on hover: the greeting set by this window, on Favorites.
    assert rows[0][3] == 'Favorites · greeting = "Tapped"' and '"tab":"favorites"' in rows[0][4]
    desktop_path = desktop.screenshot("desktop.png")
    assert png_size(desktop_path) == (1280, 800)
    phone.wait(lambda: phone.greeting("favorites") == "Tapped", message="phone in sync")

    desktop.driver.find_element("css selector", "#log summary").click()
    desktop.in_top("favorites", ".primary.push").click()
    desktop.wait_route("favorites", "next")
    desktop.wait(lambda: desktop.js("return !document.querySelector('.page.entering')"), message="push animation done")
    desktop.screenshot("desktop-pushed.png")

    if os.environ.get("TABD_UPDATE_DOCS") == "1":
        os.makedirs(DOCS_SCREENSHOTS, exist_ok=True)
        shutil.copy(phone_path, os.path.join(DOCS_SCREENSHOTS, "phone.png"))
        shutil.copy(desktop_path, os.path.join(DOCS_SCREENSHOTS, "desktop.png"))
    print(f"screenshots in {SCREENSHOTS}")


def test_no_console_errors_or_warnings_while_using_the_page(daemon, browsers):
    b = browsers().open(daemon)
    b.click_tab("favorites")
    b.wait_selected("favorites")
    b.in_top("favorites", ".primary.push").click()
    b.wait_route("favorites", "next")
    b.in_top("favorites", ".back").click()
    b.wait_route("favorites", "root")
    b.in_top("favorites", ".greeting").click()
    b.wait_greeting("favorites", "Tapped")
    b.reload()
    b.wait_selected("favorites")
    entries = [e for e in b.read_console() if e["level"] in ("SEVERE", "WARNING")]
    assert entries == []
    # The favicon is there (a missing one is a console 404).
    assert b.js("return fetch('/favicon.svg').then(r => r.status)") == 200


def test_page_needs_no_inline_script_or_style():
    """What a strict CSP (script-src 'self'; style-src 'self') would block is not used."""
    html = open(os.path.join(WEB_ROOT, "index.html"), encoding="utf-8").read()
    # The page declares that policy itself, so every test above ran under it (a violation
    # would be a console error).
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp and "script-src 'self'" in csp.group(1) and "style-src 'self'" in csp.group(1)
    assert not re.search(r"\son[a-z]+\s*=", html, re.I), "inline event handler"
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html, re.I), "inline script"
    assert "<style" not in html.lower() and not re.search(r"\sstyle\s*=", html, re.I), "inline style"
    for name in os.listdir(WEB_ROOT):
        if name.endswith(".js"):
            js = open(os.path.join(WEB_ROOT, name), encoding="utf-8").read()
            for banned in ("eval(", "new Function", "innerHTML", 'setAttribute("style"', "document.write"):
                assert banned not in js, f"{name} uses {banned}"
