"""Accessibility by a real checker: axe-core (Deque's engine, as PyPI's axe-selenium-python
bundles it) runs its WCAG 2 A and AA rules in Chromium over tabd's page and over
<tabd-tab-bar> on another site's page, at desktop and phone sizes, in the light and the dark
scheme, with a pushed page and the event log open, then closed again (on a phone the open
log covers the page, and axe-core cannot judge text it cannot see). A serious or critical
violation fails; each run's full result is written to test-output/axe/."""
import json
import os
import re

import pytest

import axe_selenium_python
from browserkit import OUTPUT, SYNC, WAIT
from test_embedding import ROOM, HostSite, bar_tabs

AXE_JS = os.path.join(os.path.dirname(axe_selenium_python.__file__), "node_modules", "axe-core", "axe.min.js")
# WCAG 2.0 and 2.1, A and AA. The bundled axe-core (3.1) has no rule tagged wcag21a, and
# axe.run refuses a tag it has no rule for: run_axe asks only for the tags the engine has
# rules for, and records the others in its result ("tagsUnknown").
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
SIZES = {"desktop": dict(width=1280, height=800), "phone": dict(width=390, height=844, mobile=True)}


def run_axe(b, context=None, name="axe"):
    """axe-core's WCAG A/AA rules over the document (or the elements the CSS selector
    `context` selects; axe-core looks into open shadow roots itself); returns the
    violations, after writing the whole result to test-output/axe/NAME.json. `b` is a
    Browser or a Selenium WebDriver."""
    driver = getattr(b, "driver", b)
    if not driver.execute_script("return typeof window.axe === 'object'"):
        with open(AXE_JS) as f:
            driver.execute_script(f.read())
    result = driver.execute_async_script("""
        const [context, wanted, done] = arguments;
        const tags = wanted.filter((t) => axe.getRules([t]).length > 0);
        axe.run(context || document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] })
          .then((r) => done({ version: axe.version, url: r.url, context: context, tags: tags,
                              tagsUnknown: wanted.filter((t) => !tags.includes(t)),
                              violations: r.violations, incomplete: r.incomplete, passes: r.passes.length }),
                (e) => done({ error: String(e) }));""", context, TAGS)
    assert "error" not in result, result
    out = os.path.join(OUTPUT, "axe")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    return result["violations"]


def serious(violations):
    """The serious and critical violations, said so that a reader sees what is wrong."""
    bad = [v for v in violations if v.get("impact") in ("serious", "critical")]
    lines = []
    for v in bad:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"][:4]:
            summary = (node.get("failureSummary") or "").replace("\n", " ")
            lines.append(f"    {node['target']}: {summary[:240]}")
    return bad, "\n".join(lines)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", list(SIZES))
def test_the_page_passes_wcag_a_and_aa(daemon, browsers, remote, size, scheme):
    b = browsers(dark=scheme == "dark", **SIZES[size])
    b.open(daemon)
    r = remote(daemon)
    # A room with a history: another client's commands in the log, a pushed page, a badge.
    r.command("set", tab="home", key="greeting", value="Tapped")
    r.command("updateTab", tab={"id": "favorites", "badge": "3"})
    r.command("push", tab="home", route="next")
    b.wait_route("home", "next", SYNC)
    b.js("document.getElementById('log').open = true")
    b.wait(lambda: b.js("return document.querySelectorAll('#log-list li').length") >= 3, WAIT, "the log lists events")
    bad, said = serious(run_axe(b, name=f"page-{size}-{scheme}"))
    assert not bad, f"axe-core found on the page ({size}, {scheme}, log open):\n{said}"
    assert b.js("const log = document.getElementById('log'); log.open = false; return log.open") is False
    bad, said = serious(run_axe(b, name=f"page-{size}-{scheme}-log-closed"))
    assert not bad, f"axe-core found on the page ({size}, {scheme}, log closed):\n{said}"


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", list(SIZES))
def test_the_element_on_another_site_passes_wcag_a_and_aa(make_daemon, tmp_path, browsers, remote, size, scheme):
    root = tmp_path / "site"
    root.mkdir()
    site = HostSite(root)
    try:
        d = make_daemon("--allow-origin", site.origin)
        b = browsers(dark=scheme == "dark", **SIZES[size])
        b.driver.get(site.page("index.html", d))
        b.wait(lambda: bar_tabs(b), WAIT, "the element drew the room's tabs")
        remote(d, room=ROOM).command("updateTab", tab={"id": "profile", "badge": "12"})
        b.wait(lambda: b.js("return !document.getElementById('bar').shadowRoot.querySelector('#tab-profile .badge').hidden"),
               SYNC, "the badge drawn")
        bad, said = serious(run_axe(b, name=f"element-{size}-{scheme}"))
        assert not bad, f"axe-core found on the element ({size}, {scheme}):\n{said}"
    finally:
        site.close()


def test_the_checker_finds_what_it_should(daemon, browsers):
    """The check can fail: grey text on a grey page is found as a contrast violation."""
    b = browsers().open(daemon)
    b.js("""const p = document.createElement('p'); p.id = 'faint'; p.textContent = 'Hard to read';
            p.style.color = '#bbbbbb'; p.style.background = '#ffffff'; document.body.append(p);""")
    bad, said = serious(run_axe(b, name="negative-control"))
    assert any(v["id"] == "color-contrast" and any(re.search("faint", str(n["target"])) for n in v["nodes"]) for v in bad), said


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_connection_status_reads_while_reconnecting(daemon, browsers, scheme):
    """The status in its other colours: the header's "Retrying in …" (only the status: while
    offline the page dims its controls on purpose)."""
    b = browsers(dark=scheme == "dark").open(daemon)
    b.js("window.__tabd.disconnect(arguments[0])", int(WAIT * 1000))  # stays away while axe runs
    b.wait(lambda: b.status()[0] == "reconnecting", WAIT, "the status shows the drop")
    bad, said = serious(run_axe(b, "#status", name=f"status-reconnecting-{scheme}"))
    assert not bad, f"axe-core found in the connection status ({scheme}, reconnecting):\n{said}"
