// The page's fold (web/model.js) against the daemon's (Snapshot.apply in Swift).
//
// Run: node --test Tests/web/   (node's own test runner; no npm packages)
//
// Golden streams: every `*.json` file in $TABD_GOLDEN_DIR (default test-output/golden
// of the checkout), written by the Swift test that generates random sessions:
//   { "name": "…", "start": <wire snapshot>, "frames": [<events frame as sent>],
//     "end": <wire snapshot> | null, "refusedAt": <seq> | null }
// Exactly one of `end` and `refusedAt` is null. With `end`, folding `start` with every
// frame must give `end`: the state of the Swift fold after the same frames, every field
// deep-equal (`values` in any key order). `end` lists every client that fold lists, not
// capped at 100 (`Snapshot.json(capped: false)`): a capped `start` lists the first 100,
// joins append beyond them. With `refusedAt`, the fold must throw a FoldError with that
// seq. A missing or empty directory FAILS: the comparison cannot pass by having nothing
// to compare. The hand-made tests below stand on their own.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { FoldError, MAX_CLIENTS_LISTED, applyEvent, applyFrame, fromWire, toWire } from "../../web/model.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
// A relative TABD_GOLDEN_DIR is taken from the current directory, as any path argument.
const GOLDEN_DIR = process.env.TABD_GOLDEN_DIR ? resolve(process.env.TABD_GOLDEN_DIR) : join(ROOT, "test-output", "golden");

// ---------------------------------------------------------------- golden streams

function goldenFiles() {
  if (!existsSync(GOLDEN_DIR)) return [];
  return readdirSync(GOLDEN_DIR).filter((f) => f.endsWith(".json")).sort();
}

const files = goldenFiles();

test(`golden streams: ${GOLDEN_DIR} holds some`, () => {
  assert.ok(files.length > 0,
    `no golden stream (*.json) in ${GOLDEN_DIR}: run the Swift test that writes them first, or set TABD_GOLDEN_DIR`);
});

for (const file of files) {
  test(`golden stream ${file}`, () => {
    const g = JSON.parse(readFileSync(join(GOLDEN_DIR, file), "utf8"));
    assert.equal(typeof g.name, "string", "'name' is a string");
    assert.ok(Array.isArray(g.frames), "'frames' is an array");
    assert.ok(g.start && typeof g.start === "object", "'start' is a snapshot");
    assert.ok(g.end === null || typeof g.end === "object", "'end' is a snapshot or null");
    assert.ok(g.refusedAt === null || Number.isInteger(g.refusedAt), "'refusedAt' is a seq or null");
    assert.ok((g.end === null) !== (g.refusedAt === null), "exactly one of 'end' and 'refusedAt' is null");
    for (const f of g.frames) assert.equal(f.type, "events", "every frame is an events frame");

    const state = fromWire(g.start);
    const fold = () => { for (const f of g.frames) applyFrame(state, f); };
    if (g.refusedAt === null) {
      fold();
      assert.deepStrictEqual(state, g.end, `${g.name}: the fold ends where the Swift fold does`);
    } else {
      assert.throws(fold, (err) => {
        assert.ok(err instanceof FoldError, `${g.name}: a FoldError, not ${err}`);
        assert.equal(err.seq, g.refusedAt, `${g.name}: refused at seq ${g.refusedAt}, not ${err.message}`);
        // An event that does not fit is refused before it changes anything; a frame that
        // ends with the selection on a removed tab is refused at its last event.
        assert.ok(state.seq <= g.refusedAt, "nothing after the refused event is in the state");
        return true;
      }, `${g.name}: the fold refuses seq ${g.refusedAt}`);
    }
  });
}

// ---------------------------------------------------------------- hand-made

// The welcome of PROTOCOL.md's complete session (with the `presence` every tabd now sends).
function welcomeSnapshot() {
  return {
    seq: 3, selected: "home", scrollToTop: 0,
    tabs: [
      { id: "home", title: "Home", icon: "house", color: "#FF3B30", badge: null,
        stack: [{ id: "p1", route: "root", appeared: true, appearCount: 1 }], scroll: 0, values: {} },
      { id: "favorites", title: "Favorites", icon: "heart", color: "#007AFF", badge: null,
        stack: [{ id: "p2", route: "root", appeared: false, appearCount: 0 }], scroll: 0, values: {} },
      { id: "profile", title: "Profile", icon: "person", color: "#34C759", badge: null,
        stack: [{ id: "p3", route: "root", appeared: false, appearCount: 0 }], scroll: 0, values: {} },
    ],
    presence: "listed",
    clientCount: 1,
    clients: [{ id: "c1", name: "kiosk-1" }],
  };
}

const frame = (...events) => ({ type: "events", by: "c1", ref: "r", events });

// Folds `events` (seqs filled in from the state's) into a fresh welcome state.
function folded(...events) {
  const s = fromWire(welcomeSnapshot());
  for (const e of events) applyEvent(s, Object.assign({ seq: s.seq + 1 }, e));
  return s;
}

// Asserts that `event` (seq filled in) is refused and changes nothing.
function refuses(s, event, pattern) {
  const e = Object.assign({ seq: s.seq + 1 }, event);
  const before = structuredClone(s);
  assert.throws(() => applyEvent(s, e), (err) => {
    assert.ok(err instanceof FoldError, `a FoldError, not ${err}`);
    assert.equal(err.seq, Number.isInteger(e.seq) ? e.seq : s.seq + 1, "the event's seq, else the expected one");
    if (pattern) assert.match(err.message, pattern);
    return true;
  });
  assert.deepStrictEqual(s, before, "a refused event changes nothing");
}

test("the complete session of PROTOCOL.md folds to its end state", () => {
  const s = fromWire(welcomeSnapshot());
  const frames = [
    frame({ seq: 4, kind: "selected", from: "home", to: "favorites" }, { seq: 5, kind: "disappear", tab: "home", page: "p1" },
      { seq: 6, kind: "firstAppear", tab: "favorites", page: "p2" }, { seq: 7, kind: "appear", tab: "favorites", page: "p2" }),
    frame({ seq: 8, kind: "pushed", tab: "favorites", page: "p4", route: "detail" }, { seq: 9, kind: "disappear", tab: "favorites", page: "p2" },
      { seq: 10, kind: "firstAppear", tab: "favorites", page: "p4" }, { seq: 11, kind: "appear", tab: "favorites", page: "p4" }),
    frame({ seq: 12, kind: "disappear", tab: "favorites", page: "p4" }, { seq: 13, kind: "popped", tab: "favorites", pages: ["p4"] },
      { seq: 14, kind: "appear", tab: "favorites", page: "p2" }),
    frame({ seq: 15, kind: "scrollToTop", tab: "favorites", count: 1 }),
    frame({ seq: 16, kind: "valueSet", tab: "favorites", key: "greeting", value: "Tapped" }),
  ];
  for (const f of frames) assert.equal(applyFrame(s, f), s, "applyFrame returns the state it changed");
  const want = welcomeSnapshot();
  want.seq = 16;
  want.selected = "favorites";
  want.scrollToTop = 1;
  want.tabs[1].stack = [{ id: "p2", route: "root", appeared: true, appearCount: 2 }];
  want.tabs[1].values = { greeting: "Tapped" };
  assert.deepStrictEqual(toWire(s), want);
});

test("fromWire copies: the state shares nothing with the snapshot", () => {
  const wire = welcomeSnapshot();
  wire.tabs[0].values = { a: { b: [1] } };
  const s = fromWire(wire);
  assert.deepStrictEqual(s, wire);
  wire.tabs[0].values.a.b.push(2);
  wire.tabs[0].stack[0].appearCount = 9;
  wire.clients.push({ id: "c9", name: "x" });
  assert.deepStrictEqual(s.tabs[0].values, { a: { b: [1] } });
  assert.equal(s.tabs[0].stack[0].appearCount, 1);
  assert.equal(s.clients.length, 1);
  assert.throws(() => fromWire({ seq: 1 }), TypeError);
});

test("seq: only the next one; a gap or a repeat is refused", () => {
  const s = fromWire(welcomeSnapshot());
  refuses(s, { seq: 5, kind: "scrolled", tab: "home", offset: 1 }, /expected seq 4/);
  refuses(s, { seq: 3, kind: "scrolled", tab: "home", offset: 1 }, /expected seq 4/);
  refuses(s, { seq: "4", kind: "scrolled", tab: "home", offset: 1 });
  applyEvent(s, { seq: 4, kind: "scrolled", tab: "home", offset: 1 });
  assert.equal(s.seq, 4);
});

test("an event for a tab the state does not have is refused, whatever its kind", () => {
  const s = fromWire(welcomeSnapshot());
  for (const e of [
    { kind: "pushed", tab: "nope", page: "p9", route: "x" },
    { kind: "popped", tab: "nope", pages: [] },
    { kind: "scrolled", tab: "nope", offset: 3 },
    { kind: "scrollToTop", tab: "nope", count: 1 },
    { kind: "valueSet", tab: "nope", key: "k", value: 1 },
    { kind: "firstAppear", tab: "nope", page: "p1" },
    { kind: "disappear", tab: "nope", page: "p1" },
    { kind: "tabMoved", tab: "nope", index: 0 },
    { kind: "tabRemoved", tab: "nope" },
    { kind: "selected", from: "home", to: "nope" },
    { kind: "tabUpdated", tab: { id: "nope", title: "N", icon: "x", color: "#000000", badge: null,
      stack: [{ id: "p9", route: "root", appeared: false, appearCount: 0 }], scroll: 0, values: {} } },
  ]) refuses(s, e);
  refuses(s, { kind: "noSuchKind", tab: "home" }, /unknown event kind/);
  refuses(s, { kind: "pushed", tab: "home", page: "p9" }, /missing 'route'/);
});

test("selected: from the current selection to an existing tab", () => {
  const s = folded();
  refuses(s, { kind: "selected", from: "favorites", to: "profile" }, /home is selected/);
  applyEvent(s, { seq: 4, kind: "selected", from: "home", to: "profile" });
  assert.equal(s.selected, "profile");
});

test("firstAppear only of a fresh top page; appear only of the selected tab's first-appeared top", () => {
  const s = folded({ kind: "pushed", tab: "favorites", page: "p4", route: "next" });
  refuses(s, { kind: "firstAppear", tab: "favorites", page: "p2" }, /not a fresh top page/); // not the top
  refuses(s, { kind: "firstAppear", tab: "home", page: "p1" }, /not a fresh top page/); // appeared already
  refuses(s, { kind: "appear", tab: "favorites", page: "p4" }, /unselected tab/);
  refuses(s, { kind: "appear", tab: "home", page: "p9" }, /not the top/);
  applyEvent(s, { seq: 5, kind: "firstAppear", tab: "favorites", page: "p4" }); // any tab
  assert.deepStrictEqual(s.tabs[1].stack[1], { id: "p4", route: "next", appeared: true, appearCount: 0 });
  applyEvent(s, { seq: 6, kind: "appear", tab: "home", page: "p1" });
  assert.equal(s.tabs[0].stack[0].appearCount, 2);
});

test("disappear: of a page in the tab's stack, changing nothing but the seq", () => {
  const s = folded({ kind: "pushed", tab: "home", page: "p4", route: "next" });
  refuses(s, { kind: "disappear", tab: "home", page: "p2" }, /unknown page/);
  const before = structuredClone(s);
  applyEvent(s, { seq: 5, kind: "disappear", tab: "home", page: "p1" }); // below the top: still in the stack
  assert.deepStrictEqual(s, Object.assign(before, { seq: 5 }));
});

test("pushed: a page id new to the tab's stack", () => {
  const s = folded({ kind: "pushed", tab: "home", page: "p4", route: "next" });
  refuses(s, { kind: "pushed", tab: "home", page: "p4", route: "again" }, /pushed p4 twice/);
  refuses(s, { kind: "pushed", tab: "home", page: "p1", route: "root" }, /pushed p1 twice/);
  applyEvent(s, { seq: 5, kind: "pushed", tab: "favorites", page: "p9", route: "next" });
  assert.deepStrictEqual(s.tabs[1].stack.map((p) => p.id), ["p2", "p9"]);
});

test("popped: the top pages, top first, and never the root", () => {
  const s = folded(
    { kind: "pushed", tab: "home", page: "p4", route: "next" },
    { kind: "pushed", tab: "home", page: "p5", route: "next2" });
  refuses(s, { kind: "popped", tab: "home", pages: ["p4", "p5"] }, /but the top is \[p5, p4\]/); // bottom first
  refuses(s, { kind: "popped", tab: "home", pages: ["p4"] }, /popped/); // not the top
  refuses(s, { kind: "popped", tab: "home", pages: ["p5", "p4", "p1"] }, /popped/); // the root too
  refuses(s, { kind: "popped", tab: "favorites", pages: ["p5"] }, /popped/); // another tab's page
  refuses(s, { kind: "popped", tab: "home", pages: [] }, /popped/); // nothing
  applyEvent(s, { seq: 6, kind: "popped", tab: "home", pages: ["p5", "p4"] });
  assert.deepStrictEqual(s.tabs[0].stack.map((p) => p.id), ["p1"]);
});

test("scrollToTop: the scroll-to-top counter only goes up, and that tab's offset goes to 0", () => {
  const s = folded({ kind: "scrolled", tab: "profile", offset: 120.5 }, { kind: "scrolled", tab: "home", offset: 7 });
  refuses(s, { kind: "scrollToTop", tab: "profile", count: 0 }, /counter went from 0 to 0/);
  applyEvent(s, { seq: 6, kind: "scrollToTop", tab: "profile", count: 1 });
  assert.deepStrictEqual([s.scrollToTop, s.tabs[2].scroll, s.tabs[0].scroll], [1, 0, 7]);
  refuses(s, { kind: "scrollToTop", tab: "home", count: 1 }, /counter/);
});

test("valueSet: null removes the key; any key, __proto__ included, is an own value", () => {
  const s = folded(
    { kind: "valueSet", tab: "home", key: "a", value: { x: [1, null] } },
    { kind: "valueSet", tab: "home", key: "__proto__", value: 5 },
    { kind: "valueSet", tab: "home", key: "gone", value: null });
  assert.deepStrictEqual(s.tabs[0].values, JSON.parse('{"a": {"x": [1, null]}, "__proto__": 5}'));
  assert.equal(Object.getPrototypeOf(s.tabs[0].values), Object.prototype);
  applyEvent(s, { seq: 7, kind: "valueSet", tab: "home", key: "a", value: null });
  applyEvent(s, { seq: 8, kind: "valueSet", tab: "home", key: "__proto__", value: null });
  assert.deepStrictEqual(s.tabs[0].values, {});
  refuses(s, { kind: "valueSet", tab: "home", key: "k" }, /missing 'value'/);
});

test("tabAdded at 0…count with a new id; tabUpdated changes only the tab bar's fields", () => {
  const tab = (id, extra) => Object.assign({ id, title: "T", icon: "star", color: "#123456", badge: "3",
    stack: [{ id: "p9", route: "root", appeared: false, appearCount: 0 }], scroll: 4, values: { v: 1 } }, extra);
  const s = folded();
  refuses(s, { kind: "tabAdded", tab: tab("home"), index: 0 }, /tabAdded home/);
  refuses(s, { kind: "tabAdded", tab: tab("new"), index: 4 }, /tabAdded new at 4/);
  refuses(s, { kind: "tabAdded", tab: tab("new"), index: -1 });
  refuses(s, { kind: "tabAdded", tab: tab("new", { stack: [] }), index: 0 }, /empty stack/);
  applyEvent(s, { seq: 4, kind: "tabAdded", tab: tab("new"), index: 3 });
  assert.deepStrictEqual(s.tabs[3], tab("new"));
  assert.equal(s.selected, "home", "an added tab is not selected");
  applyEvent(s, { seq: 5, kind: "tabUpdated", tab: tab("home", { title: "Start", badge: null, scroll: 99, values: {},
    stack: [{ id: "p1", route: "root", appeared: false, appearCount: 0 }] }) });
  assert.deepStrictEqual(s.tabs[0], Object.assign(welcomeSnapshot().tabs[0],
    { title: "Start", icon: "star", color: "#123456", badge: null }));
});

test("tabMoved to 0…count−1; tabRemoved of any tab but the last", () => {
  const s = folded();
  refuses(s, { kind: "tabMoved", tab: "home", index: 3 }, /tabMoved home to 3/);
  applyEvent(s, { seq: 4, kind: "tabMoved", tab: "home", index: 2 });
  assert.deepStrictEqual(s.tabs.map((t) => t.id), ["favorites", "profile", "home"]);
  applyEvent(s, { seq: 5, kind: "tabMoved", tab: "profile", index: 0 });
  assert.deepStrictEqual(s.tabs.map((t) => t.id), ["profile", "favorites", "home"]);
  // The selected tab goes; the next event names the new selection, from the removed tab.
  applyEvent(s, { seq: 6, kind: "tabRemoved", tab: "home" });
  applyEvent(s, { seq: 7, kind: "selected", from: "home", to: "favorites" });
  applyEvent(s, { seq: 8, kind: "tabRemoved", tab: "profile" });
  refuses(s, { kind: "tabRemoved", tab: "favorites" }, /tabRemoved favorites/);
});

test("presence: joins append; a leave removes, or counts down one listed beyond the cap", () => {
  const s = folded({ kind: "clientJoined", client: { id: "c2", name: "two" } });
  assert.deepStrictEqual([s.clientCount, s.clients.map((c) => c.id)], [2, ["c1", "c2"]]);
  refuses(s, { kind: "clientLeft", client: "c7" }, /unknown client c7/);
  applyEvent(s, { seq: 5, kind: "clientLeft", client: "c1" });
  assert.deepStrictEqual([s.clientCount, s.clients], [1, [{ id: "c2", name: "two" }]]);

  // A capped start: 150 connected, 100 listed.
  const wire = welcomeSnapshot();
  wire.clients = Array.from({ length: MAX_CLIENTS_LISTED }, (_, i) => ({ id: `c${i + 1}`, name: "n" }));
  wire.clientCount = 150;
  const capped = fromWire(wire);
  applyEvent(capped, { seq: 4, kind: "clientLeft", client: "c140" }); // not listed: only counted
  assert.deepStrictEqual([capped.clientCount, capped.clients.length], [149, 100]);
  applyEvent(capped, { seq: 5, kind: "clientJoined", client: { id: "c151", name: "late" } });
  assert.deepStrictEqual([capped.clientCount, capped.clients.length], [150, 101]);
  assert.deepStrictEqual(toWire(capped).clients, wire.clients, "the wire form lists the first 100");
  assert.equal(toWire(capped).clientCount, 150);
});

// ---------------------------------------------------------------- big-room presence

// A counted room's state, from a wire snapshot: `nodes` for a cluster's room.
function counted(count, nodes) {
  const wire = Object.assign(welcomeSnapshot(), { presence: "counted", clientCount: count, clients: [] });
  if (nodes) wire.nodes = nodes;
  return fromWire(wire);
}

test("presence: the crossing, in one batch: joins while listed, the ids reserved, then counted", () => {
  const s = fromWire(welcomeSnapshot());
  applyFrame(s, { type: "events", by: "tabd", ref: null, events: [
    { seq: 4, kind: "clientJoined", client: { id: "c2", name: "two" } },
    { seq: 5, kind: "clientJoined", client: { id: "c3", name: "three" } },
    { seq: 6, kind: "clientIdsReserved", from: 4, count: 2 },
    { seq: 7, kind: "presenceCounted", count: 5 },
  ] });
  const want = Object.assign(welcomeSnapshot(), { seq: 7, presence: "counted", clientCount: 5, clients: [] });
  assert.deepStrictEqual(s, want);
  assert.equal("nodes" in s, false, "no nodes outside a cluster");
  assert.deepStrictEqual(toWire(s), want);

  // In a cluster: the reservation names its node, the count comes with every node's share.
  const c = fromWire(welcomeSnapshot());
  applyFrame(c, { type: "events", by: "tabd", ref: null, events: [
    { seq: 4, kind: "clientJoined", client: { id: "c2", name: "two" } },
    { seq: 5, kind: "clientIdsReserved", node: "n2", from: 3, count: 100 },
    { seq: 6, kind: "presenceCounted", count: 4, nodes: { n1: 2, n2: 2 } },
  ] });
  assert.deepStrictEqual([c.seq, c.presence, c.clientCount, c.clients, c.nodes], [6, "counted", 4, [], { n1: 2, n2: 2 }]);
});

test("presence: clientIdsReserved changes nothing but the seq, listed or counted", () => {
  for (const s of [folded(), counted(150), counted(150, { n1: 150 })]) {
    const before = structuredClone(s);
    applyEvent(s, { seq: 4, kind: "clientIdsReserved", from: 7, count: 1 });
    applyEvent(s, { seq: 5, kind: "clientIdsReserved", node: "n1", from: 8, count: 1000 });
    assert.deepStrictEqual(s, Object.assign(before, { seq: 5 }));
  }
});

test("presence: clientCount replaces a counted room's count, or one node's share of it", () => {
  const s = counted(150);
  applyEvent(s, { seq: 4, kind: "clientCount", count: 180 });
  assert.deepStrictEqual([s.clientCount, s.presence, s.clients], [180, "counted", []]);
  applyEvent(s, { seq: 5, kind: "clientCount", count: 0 }); // still counted until presenceListed
  assert.deepStrictEqual([s.clientCount, s.presence], [0, "counted"]);

  const c = counted(150, { n1: 100, n2: 50 });
  applyEvent(c, { seq: 4, kind: "clientCount", node: "n2", count: 70 });
  assert.deepStrictEqual([c.nodes, c.clientCount], [{ n1: 100, n2: 70 }, 170]);
  applyEvent(c, { seq: 5, kind: "clientCount", node: "n1", count: 0 });
  assert.deepStrictEqual([c.nodes, c.clientCount], [{ n1: 0, n2: 70 }, 70]);
  applyEvent(c, { seq: 6, kind: "clientCount", node: "n3", count: 5 }); // a node new to the map
  assert.deepStrictEqual([c.nodes, c.clientCount], [{ n1: 0, n2: 70, n3: 5 }, 75]);
  applyEvent(c, { seq: 7, kind: "clientCount", node: "__proto__", count: 1 }); // an own key like any other
  assert.deepStrictEqual([Object.keys(c.nodes), c.nodes.__proto__, c.clientCount], [["n1", "n2", "n3", "__proto__"], 1, 76]);
  assert.equal(Object.getPrototypeOf(c.nodes), Object.prototype);
});

test("presence: presenceListed lists the room again; joins and leaves are events again", () => {
  const s = counted(150);
  applyEvent(s, { seq: 4, kind: "clientCount", count: 0 });
  applyEvent(s, { seq: 5, kind: "presenceListed", clients: [] });
  assert.deepStrictEqual([s.presence, s.clientCount, s.clients], ["listed", 0, []]);
  applyEvent(s, { seq: 6, kind: "clientJoined", client: { id: "c400", name: "back" } });
  applyEvent(s, { seq: 7, kind: "clientJoined", client: { id: "c401", name: "again" } });
  applyEvent(s, { seq: 8, kind: "clientLeft", client: "c400" });
  assert.deepStrictEqual([s.presence, s.clientCount, s.clients], ["listed", 1, [{ id: "c401", name: "again" }]]);
  assert.deepStrictEqual(toWire(s), Object.assign(welcomeSnapshot(), { seq: 8, clientCount: 1, clients: [{ id: "c401", name: "again" }] }));

  // In a cluster it names a node, and the nodes go; a list that is not empty is taken as is.
  const c = counted(150, { n1: 100, n2: 50 });
  const list = [{ id: "c7", name: "seven" }, { id: "c9", name: "nine" }];
  applyEvent(c, { seq: 4, kind: "presenceListed", node: "n2", clients: list });
  assert.deepStrictEqual(c, Object.assign(welcomeSnapshot(), { seq: 4, clientCount: 2, clients: list }));
  assert.equal("nodes" in c, false);
  list[0].name = "changed";
  assert.equal(c.clients[0].name, "seven", "the event's clients are copied");
  applyEvent(c, { seq: 5, kind: "presenceCounted", count: 3 }); // and it may cross again
  assert.deepStrictEqual([c.presence, c.clientCount, c.clients], ["counted", 3, []]);
});

test("presence: what a counted room refuses", () => {
  const s = counted(150);
  refuses(s, { kind: "clientJoined", client: { id: "c151", name: "x" } }, /clientJoined in a counted room/);
  refuses(s, { kind: "clientLeft", client: "c1" }, /clientLeft in a counted room/);
  refuses(s, { kind: "clientLeft", client: "c9" }, /clientLeft in a counted room/);
  refuses(s, { kind: "presenceCounted", count: 150 }, /presenceCounted in a counted room/);
  refuses(s, { kind: "presenceCounted", count: 150, nodes: { n1: 150 } }, /presenceCounted in a counted room/);
  refuses(s, { kind: "clientCount", node: "n1", count: 3 }, /clientCount of node 'n1' in a room not counted by node/);
  refuses(s, { kind: "clientCount", count: -1 }, /negative count/);
  refuses(s, { kind: "clientCount", count: 1.5 }, /'count' is not an integer/);
  refuses(s, { kind: "clientCount", count: "3" }, /'count' is not an integer/);
  refuses(s, { kind: "clientCount" }, /missing 'count'/);
  refuses(s, { kind: "presenceListed", clients: [{ id: "c1", name: "a" }, { id: "c1", name: "b" }] }, /lists a client twice/);
  refuses(s, { kind: "presenceListed", clients: [{ id: "c1" }] }, /missing 'name'/);
  refuses(s, { kind: "presenceListed", clients: "c1" }, /'clients' is not an array/);
  refuses(s, { kind: "presenceListed" }, /missing 'clients'/);
  refuses(s, { kind: "presenceListed", node: 2, clients: [] }, /'node' is not a string/);

  const c = counted(150, { n1: 100, n2: 50 });
  refuses(c, { kind: "clientCount", count: 3 }, /clientCount without a node in a room counted by node/);
  refuses(c, { kind: "clientCount", node: null, count: 3 }, /'node' is not a string/);
  refuses(c, { kind: "clientCount", node: "n1", count: -2 }, /negative count/);
  refuses(c, { kind: "clientCount", node: "n1", count: Number.MAX_SAFE_INTEGER }, /node counts out of range/);
  refuses(c, { kind: "clientJoined", client: { id: "c151", name: "x" } }, /clientJoined in a counted room/);
});

test("presence: what a listed room refuses", () => {
  const s = folded();
  refuses(s, { kind: "clientCount", count: 3 }, /clientCount in a listed room/);
  refuses(s, { kind: "clientCount", node: "n1", count: 3 }, /clientCount in a listed room/);
  refuses(s, { kind: "presenceListed", clients: [] }, /presenceListed in a listed room/);
  refuses(s, { kind: "presenceListed", node: "n1", clients: [] }, /presenceListed in a listed room/);
  refuses(s, { kind: "presenceCounted", count: 5, nodes: { n1: 2, n2: 2 } }, /do not add up to its count 5/);
  refuses(s, { kind: "presenceCounted", count: 3, nodes: {} }, /do not add up to its count 3/);
  refuses(s, { kind: "presenceCounted", count: 4, nodes: { n1: 5, n2: -1 } }, /node 'n2' has no count/);
  refuses(s, { kind: "presenceCounted", count: 4, nodes: { n1: 2, n2: 2.0001 } }, /node 'n2' has no count/);
  refuses(s, { kind: "presenceCounted", count: 4, nodes: { n1: "4" } }, /node 'n1' has no count/);
  refuses(s, { kind: "presenceCounted", count: 4, nodes: [4] }, /'nodes' is not an object/);
  refuses(s, { kind: "presenceCounted", count: 4, nodes: null }, /'nodes' is not an object/);
  refuses(s, { kind: "presenceCounted", count: Number.MAX_SAFE_INTEGER, nodes: { n1: Number.MAX_SAFE_INTEGER, n2: 1 } },
    /node counts out of range/);
  refuses(s, { kind: "presenceCounted", count: -1 }, /negative count/);
  refuses(s, { kind: "presenceCounted", count: 2.5 }, /'count' is not an integer/);
  refuses(s, { kind: "presenceCounted" }, /missing 'count'/);
  // A block of ids: from ≥ 1, count ≥ 1, both integers.
  refuses(s, { kind: "clientIdsReserved", from: 0, count: 1 }, /empty or negative block/);
  refuses(s, { kind: "clientIdsReserved", from: -3, count: 1 }, /empty or negative block/);
  refuses(s, { kind: "clientIdsReserved", from: 4, count: 0 }, /empty or negative block/);
  refuses(s, { kind: "clientIdsReserved", from: 4, count: -1 }, /empty or negative block/);
  refuses(s, { kind: "clientIdsReserved", from: "4", count: 1 }, /'from' is not an integer/);
  refuses(s, { kind: "clientIdsReserved", from: 4, count: 1.5 }, /'count' is not an integer/);
  refuses(s, { kind: "clientIdsReserved", from: 4 }, /missing 'count'/);
  refuses(s, { kind: "clientIdsReserved", node: 1, from: 4, count: 1 }, /'node' is not a string/);
  // Counted with nodes whose sum is the count is fine: 0 clients on no node included.
  applyEvent(s, { seq: 4, kind: "presenceCounted", count: 0, nodes: {} });
  assert.deepStrictEqual([s.presence, s.clientCount, s.nodes], ["counted", 0, {}]);
});

test("presence: a frame refused at a presence event keeps the events before it, and nothing of that one", () => {
  const s = folded();
  const f = { type: "events", by: "tabd", ref: null, events: [
    { seq: 4, kind: "clientJoined", client: { id: "c2", name: "two" } },
    { seq: 5, kind: "presenceCounted", count: 3, nodes: { n1: 1, n2: 1 } }, // 2, not 3
    { seq: 6, kind: "clientCount", node: "n1", count: 2 },
  ] };
  assert.throws(() => applyFrame(s, f), (err) => err instanceof FoldError && err.seq === 5);
  assert.deepStrictEqual(s, Object.assign(welcomeSnapshot(), { seq: 4, clientCount: 2,
    clients: [{ id: "c1", name: "kiosk-1" }, { id: "c2", name: "two" }] }));
});

test("presence: counted snapshots come back from toWire as they went into fromWire", () => {
  for (const nodes of [undefined, { n1: 100, n2: 50 }]) {
    const wire = Object.assign(welcomeSnapshot(), { seq: 9, presence: "counted", clientCount: 150, clients: [] });
    if (nodes) wire.nodes = nodes;
    const s = fromWire(wire);
    assert.deepStrictEqual(s, wire);
    const back = toWire(s);
    assert.deepStrictEqual(back, wire);
    // The daemon's member order: nodes last, and only when there are some.
    assert.deepStrictEqual(Object.keys(back),
      ["seq", "selected", "scrollToTop", "tabs", "presence", "clientCount", "clients"].concat(nodes ? ["nodes"] : []));
    assert.equal(JSON.stringify(back), JSON.stringify(wire));
    if (nodes) {
      wire.nodes.n1 = 7;
      back.nodes.n2 = 8;
      assert.deepStrictEqual(s.nodes, { n1: 100, n2: 50 }, "nodes are copied both ways");
    }
  }
  // A listed snapshot writes its presence too, and no nodes.
  const listed = toWire(folded());
  assert.deepStrictEqual(Object.keys(listed), ["seq", "selected", "scrollToTop", "tabs", "presence", "clientCount", "clients"]);
  assert.equal(listed.presence, "listed");
});

test("presence: a snapshot without presence is listed; a bad presence or nodes is refused", () => {
  const old = welcomeSnapshot();
  delete old.presence;
  const s = fromWire(old);
  assert.equal(s.presence, "listed");
  assert.deepStrictEqual(toWire(s), welcomeSnapshot());
  applyEvent(s, { seq: 4, kind: "clientJoined", client: { id: "c2", name: "two" } }); // as any listed room
  assert.equal(s.clientCount, 2);

  for (const presence of ["capped", "Listed", "", null, 1, true]) {
    assert.throws(() => fromWire(Object.assign(welcomeSnapshot(), { presence })), TypeError, `presence ${JSON.stringify(presence)}`);
  }
  for (const nodes of [null, [], [1], "n1", 3, { n1: -1 }, { n1: 1.5 }, { n1: "1" }, { n1: null },
    { n1: Number.MAX_SAFE_INTEGER, n2: 1 }]) {
    const wire = Object.assign(welcomeSnapshot(), { presence: "counted", clientCount: 1, clients: [], nodes });
    assert.throws(() => fromWire(wire), TypeError, `nodes ${JSON.stringify(nodes)}`);
  }
  const zero = fromWire(Object.assign(welcomeSnapshot(), { presence: "counted", clientCount: 0, clients: [], nodes: { n1: 0 } }));
  assert.deepStrictEqual(zero.nodes, { n1: 0 });
  // What the daemon's own reader refuses too: a counted room that lists someone, nodes in a
  // listed room, nodes that do not add up to the count.
  assert.throws(() => fromWire(Object.assign(welcomeSnapshot(), { presence: "counted" })), /counted snapshot lists clients/);
  assert.throws(() => fromWire(Object.assign(welcomeSnapshot(), { nodes: { n1: 1 } })), /listed snapshot has 'nodes'/);
  assert.throws(() => fromWire(Object.assign(old, { nodes: { n1: 1 } })), /listed snapshot has 'nodes'/);
  assert.throws(() => fromWire(Object.assign(welcomeSnapshot(), { presence: "counted", clientCount: 150, clients: [],
    nodes: { n1: 100, n2: 49 } })), /do not add up to 'clientCount'/);
});

test("applyFrame: a refused event leaves the events before it applied", () => {
  const s = folded();
  const f = frame(
    { seq: 4, kind: "scrolled", tab: "home", offset: 10 },
    { seq: 5, kind: "pushed", tab: "home", page: "p4", route: "next" },
    { seq: 6, kind: "popped", tab: "home", pages: ["p1"] }, // the root
    { seq: 7, kind: "scrolled", tab: "home", offset: 20 });
  assert.throws(() => applyFrame(s, f), (err) => err instanceof FoldError && err.seq === 6);
  assert.equal(s.seq, 5);
  assert.equal(s.tabs[0].scroll, 10);
  assert.equal(s.tabs[0].stack.length, 2);
  assert.throws(() => applyFrame(s, { type: "events" }), (err) => err instanceof FoldError && err.seq === 6);
  assert.throws(() => applyEvent(s, null), (err) => err instanceof FoldError && err.seq === 6);
});

test("applyFrame: a frame that ends with the selection on a removed tab is refused at its last seq", () => {
  const s = folded();
  assert.throws(() => applyFrame(s, frame({ seq: 4, kind: "tabRemoved", tab: "home" })),
    (err) => err instanceof FoldError && err.seq === 4 && /selected tab 'home' does not exist/.test(err.message));
  assert.equal(s.seq, 4, "the frame's events are applied");
  const t = folded();
  applyFrame(t, frame({ seq: 4, kind: "tabRemoved", tab: "home" }, { seq: 5, kind: "selected", from: "home", to: "favorites" }));
  assert.equal(t.selected, "favorites", "the selection may name a removed tab within the frame");
});

test("applyFrame's `before` sees each event, the refused one included, with the state just before it", () => {
  const s = folded();
  const seen = [];
  const f = frame(
    { seq: 4, kind: "pushed", tab: "home", page: "p4", route: "next" },
    { seq: 5, kind: "popped", tab: "home", pages: ["p4"] },
    { seq: 6, kind: "popped", tab: "home", pages: ["p1"] }, // the root: refused
    { seq: 7, kind: "scrolled", tab: "home", offset: 20 });
  const before = (e, state) => {
    assert.equal(state, s, "the state being folded");
    seen.push([e.seq, state.seq, state.tabs[0].stack.map((p) => p.id).join(",")]);
  };
  assert.throws(() => applyFrame(s, f, before), (err) => err instanceof FoldError && err.seq === 6);
  assert.deepStrictEqual(seen, [[4, 3, "p1"], [5, 4, "p1,p4"], [6, 5, "p1"]]);
  const all = [];
  applyFrame(folded(), frame({ seq: 4, kind: "scrolled", tab: "home", offset: 1 }), (e) => all.push(e.seq));
  assert.deepStrictEqual(all, [4]);
});
