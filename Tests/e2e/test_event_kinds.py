"""Every event kind is written once, in Swift (`EventKind`, Sources/TabdProtocol/Model/Event.swift),
and every other place that names the kinds is checked against that list here: the browser's
fold (web/model.js), its types (web/model.d.ts, the `Event` union), the page's event log
(web/page-log.js), the JSON schema (docs/schema/event.json) and PROTOCOL.md's table. A kind
added in Swift and forgotten in one of them, or a name left behind in one of them, fails
here, naming the place. (tabctl switches over the Swift `Event` itself: the compiler checks it.)
"""
import json
import os
import re

from conftest import ROOT


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def swift_kinds():
    text = read("Sources", "TabdProtocol", "Model", "Event.swift")
    body = re.search(r"public enum EventKind: String, CaseIterable, Sendable \{(.*?)\n\}", text, re.S).group(1)
    # The enum's own cases, at its first indentation (the cases of `fields`' switch are deeper).
    return [name for line in body.splitlines() if re.match(r"    case \w", line)
            for name in re.findall(r"\w+", line.strip()[len("case "):])]


def switch_cases(text, start, end):
    """The `case "name":` labels between `start` and `end` (a function's switch)."""
    segment = text[text.index(start):text.index(end, text.index(start))]
    return set(re.findall(r'case "(\w+)":', segment))


def test_every_place_that_names_event_kinds_names_exactly_the_swift_ones():
    kinds = swift_kinds()
    assert len(kinds) == len(set(kinds)) >= 19, kinds
    expected = set(kinds)
    places = {}
    model = read("web", "model.js")
    places["web/model.js (the fold's switch)"] = switch_cases(model, 'const kind = str(e, "kind", fail);', "unknown event kind")
    places["web/page-log.js (the log's lines)"] = switch_cases(read("web", "page-log.js"), "describe(e) {", "default:")
    types = read("web", "model.d.ts")
    union = re.search(r"export type Event =(.*?);", types, re.S).group(1)
    interfaces = dict(re.findall(r'export interface (\w+) extends EventBase<"(\w+)">', types))
    places["web/model.d.ts (the Event union)"] = {interfaces.get(name, f"?{name}") for name in re.findall(r"\|\s*(\w+)", union)}
    schema = json.loads(read("docs", "schema", "event.json"))
    places["docs/schema/event.json (kind's enum)"] = set(schema["properties"]["kind"]["enum"])
    protocol = read("docs", "PROTOCOL.md")
    table = protocol[protocol.index("| kind | fields | meaning |"):]
    table = table[:table.index("\n\n")]
    places["docs/PROTOCOL.md (the events table)"] = set(re.findall(r"^\| `(\w+)`", table, re.M))
    wrong = [f"{place}: missing {sorted(expected - found)}, unknown {sorted(found - expected)}"
             for place, found in places.items() if found != expected]
    assert not wrong, "\n".join(wrong)
