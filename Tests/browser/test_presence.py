"""Presence on the page: "N online" in a listed and in a counted room (one past tabd's
--presence-limit), and the panel that lists who is connected: in a listed room from the
page's own state, in a counted room fetched page by page with the `clients` command
("Show more" while the answer has a `next`), our own row marked; keyboard and ARIA.
"""
from selenium.webdriver.common.keys import Keys

from browserkit import WAIT


def presence_text(b):
    return b.js("return document.getElementById('presence').textContent.trim()")


def listed_ids(b):
    return b.js("return Array.from(document.querySelectorAll('#presence-list li.presence-item')).map(li => li.dataset.client)")


def test_a_listed_room_shows_its_count_and_lists_everyone_from_its_state(make_daemon, browsers, remote):
    d = make_daemon("--presence-limit", "10")
    b = browsers().open(d)
    others = [remote(d, f"r{i}") for i in range(3)]
    b.wait(lambda: presence_text(b) == "4 online", message="4 online")
    button = b.driver.find_element("id", "presence")
    assert button.get_attribute("aria-expanded") == "false"
    button.click()
    b.wait(lambda: b.js("return !document.getElementById('presence-panel').hidden"), message="the panel opens")
    assert button.get_attribute("aria-expanded") == "true"
    assert b.js("return document.getElementById('presence-panel').dataset.presence") == "listed"
    me = b.js("return window.__tabd.clientId")
    b.wait(lambda: listed_ids(b) == [me] + [r.welcome["client"] for r in others], message="everyone, in join order")
    assert b.js(f"return document.querySelector('#presence-list li[data-client=\"{me}\"]').dataset.me") == "true"
    # A join shows while the panel is open.
    late = remote(d, "late")
    b.wait(lambda: listed_ids(b)[-1] == late.welcome["client"], message="a join shows in the open panel")
    b.driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    b.wait(lambda: b.js("return document.getElementById('presence-panel').hidden"), message="Escape closes it")
    assert b.driver.switch_to.active_element.get_attribute("id") == "presence"
    assert not b.console_errors()


def test_a_counted_room_shows_its_count_and_pages_through_who_is_there(make_daemon, browsers, remote):
    d = make_daemon("--presence-limit", "2", "--presence-interval", "100")
    b = browsers().open(d)
    others = [remote(d, f"r{i}") for i in range(130)]
    b.wait(lambda: presence_text(b) == "131 online", timeout=WAIT * 2, message="131 online, counted")
    assert b.model()["presence"] == "counted" and b.model()["clients"] == []
    b.driver.find_element("id", "presence").click()
    b.wait(lambda: len(listed_ids(b)) == 100, message="the first page of 100")
    assert b.js("return document.getElementById('presence-panel').dataset.presence") == "counted"
    more = b.driver.find_element("id", "presence-more")
    assert more.is_displayed()
    more.click()
    everyone = [b.js("return window.__tabd.clientId")] + [r.welcome["client"] for r in others]
    b.wait(lambda: listed_ids(b) == everyone, message="the second page: everyone once, in join order")
    b.wait(lambda: not b.driver.find_element("id", "presence-more").is_displayed(), message="no more pages")
    # Leaves show in the count (after the interval), not as events.
    for r in others[:30]:
        r.close()
    b.wait(lambda: presence_text(b) == "101 online", message="the count follows the leaves")
    assert not b.console_errors()
