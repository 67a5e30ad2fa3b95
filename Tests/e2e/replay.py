"""An independent replay of tabd's event stream (PROTOCOL.md's event kinds) in Python,
used to check that what tabd stored and serves is exactly the replay of its events."""
import copy

DEFAULT_TABS = [("home", "Home", "house", "#FF3B30"), ("favorites", "Favorites", "heart", "#007AFF"),
                ("profile", "Profile", "person", "#34C759")]


def origin():
    """The state of a new history with the default tabs, before seq 1."""
    tabs = [{"id": i, "title": t, "icon": ic, "color": c, "badge": None,
             "stack": [{"id": f"p{n + 1}", "route": "root", "appeared": False, "appearCount": 0}],
             "scroll": 0, "values": {}} for n, (i, t, ic, c) in enumerate(DEFAULT_TABS)]
    return {"seq": 0, "selected": "home", "scrollToTop": 0, "tabs": tabs, "clientCount": 0, "clients": []}


def apply(snap, event):
    s = snap
    assert event["seq"] == s["seq"] + 1, f"gap before seq {event['seq']}"
    tab = next((t for t in s["tabs"] if t["id"] == event.get("tab")), None) if isinstance(event.get("tab"), str) else None
    kind = event["kind"]
    if kind == "selected":
        s["selected"] = event["to"]
    elif kind == "firstAppear":
        tab["stack"][-1]["appeared"] = True
    elif kind == "appear":
        tab["stack"][-1]["appearCount"] += 1
    elif kind == "pushed":
        tab["stack"].append({"id": event["page"], "route": event["route"], "appeared": False, "appearCount": 0})
    elif kind == "popped":
        assert [p["id"] for p in reversed(tab["stack"][-len(event["pages"]):])] == event["pages"]
        del tab["stack"][-len(event["pages"]):]
    elif kind == "scrollToTop":
        s["scrollToTop"] = event["count"]
        tab["scroll"] = 0
    elif kind == "scrolled":
        tab["scroll"] = event["offset"]
    elif kind == "valueSet":
        if event["value"] is None:
            tab["values"].pop(event["key"], None)
        else:
            tab["values"][event["key"]] = event["value"]
    elif kind == "tabAdded":
        s["tabs"].insert(event["index"], copy.deepcopy(event["tab"]))
    elif kind == "tabUpdated":
        t = next(t for t in s["tabs"] if t["id"] == event["tab"]["id"])
        for k in ("title", "icon", "color", "badge"):
            t[k] = event["tab"][k]
    elif kind == "tabMoved":
        t = next(t for t in s["tabs"] if t["id"] == event["tab"])
        s["tabs"].remove(t)
        s["tabs"].insert(event["index"], t)
    elif kind == "tabRemoved":
        s["tabs"] = [t for t in s["tabs"] if t["id"] != event["tab"]]
    elif kind == "clientJoined":
        s["clients"].append(event["client"])
        s["clientCount"] += 1
    elif kind == "clientLeft":
        s["clients"] = [c for c in s["clients"] if c["id"] != event["client"]]
        s["clientCount"] -= 1
    s["seq"] = event["seq"]


def replay(batches, start=None):
    snap = copy.deepcopy(start) if start else origin()
    for b in batches:
        for e in b["events"]:
            apply(snap, e)
    return snap
