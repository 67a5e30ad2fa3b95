"""Accessibility by a real checker: axe-core (Deque's engine, as PyPI's axe-selenium-python
bundles it) runs its WCAG 2 A and AA rules in Chromium over tabd's page and over
<tabd-tab-bar> on another site's page, at desktop and phone sizes, in the light and the dark
scheme, with the event log open and a pushed page. A serious or critical violation fails;
each run's full result is written to test-output/axe/."""
import json
import os
import re

import pytest

import axe_selenium_python
from browserkit import OUTPUT, SYNC, WAIT
from test_embedding import ROOM, HostSite, bar_tabs

AXE_JS = os.path.join(os.path.dirname(axe_selenium_python.__file__), "node_modules", "axe-core", "axe.min.js")
TAGS = ["wcag2a", "wcag2aa"]  # the bundled axe-core predates its wcag21 tags
SIZES = {"desktop": dict(width=1280, height=800), "phone": dict(width=390, height=844, mobile=True)}


def run_axe(b, context=None, name="axe"):
    """axe-core's WCAG A/AA rules over the document (or the elements `context` selects);
    returns the violations, after writing the whole result to test-output/axe/NAME.json."""
    if not b.js("return typeof window.axe === 'object'"):
        with open(AXE_JS) as f:
            b.js(f.read())
    result = b.driver.execute_async_script("""
        const [context, tags, done] = arguments;
        axe.run(context || document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] })
          .then((r) => done({ version: axe.version, violations: r.violations, passes: r.passes.length }),
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
    assert not bad, f"axe-core found on the page ({size}, {scheme}):\n{said}"


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
