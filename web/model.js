// The fold of tabd's `events` frames into its snapshot: a pure ES module (no DOM, no
// build step), shared by the page (app.js) and its tests (Tests/web, run by node).
//
// The state is the wire snapshot of PROTOCOL.md, field for field:
//   { seq, selected, scrollToTop,
//     tabs: [{ id, title, icon, color, badge, stack: [{ id, route, appeared, appearCount }],
//              scroll, values }],
//     presence, clientCount, clients: [{ id, name }], nodes? }
// and the rules are exactly those of the daemon's own fold, `Snapshot.apply` in
// Sources/Coordinator/Fold/ (Snapshot+Apply.swift and the TabState, TabBar, ScrollCounter
// and Roster `apply` it calls): an event that does not fit the state (a seq
// that is not the next one, a tab or page the state does not have, …) is refused with a
// FoldError naming its seq. Nothing is skipped or repaired.
//
// Presence: `presence` is "listed" or "counted".
// - listed: clientJoined and clientLeft keep `clients` (join order) and clientCount.
// - counted (the room grew past tabd's --presence-limit): `clients` is [], clientCount is
//   the count the stream last reported, and `nodes` (a cluster's room only: node name →
//   count, clientCount their sum) is there; a state without nodes has no `nodes` member.
//   clientJoined and clientLeft are refused in a counted room.
// - presenceCounted {count, nodes?}: refused in a counted room; count an integer ≥ 0,
//   nodes (when there) integers ≥ 0 that add up to count. Counted, clients [], clientCount
//   = count, nodes = the event's (or none).
// - clientCount {node?, count}: refused in a listed room; count an integer ≥ 0. With
//   node (a string) the state must have nodes: nodes[node] = count (a node new to the map
//   is added), clientCount = their sum; without node the state must have none:
//   clientCount = count.
// - presenceListed {node?, clients}: refused in a listed room; clients {id, name}, no id
//   twice. Listed, clients = that list, clientCount = its length, nodes gone.
// - clientIdsReserved {node?, from, count}: from and count integers ≥ 1; changes nothing
//   but the seq (the ids are the server's business).
// A `node` member, where an event may have one, must be a string. Node counts and their
// sum stay within 2^53 − 1 (Limits.maxCount), else the event is refused.
//
// Promises:
// - fromWire(wire) copies a wire snapshot into a state of its own. A snapshot without
//   `presence` (an older tabd, a stored file) reads as listed; a counted one that lists
//   clients, or nodes in a listed one or not adding up to clientCount, is refused.
// - applyEvent(state, event) changes `state` in place and returns it. A refused event
//   throws FoldError and leaves `state` exactly as it was.
// - applyFrame(state, frame) applies the frame's events in order, in place, and returns
//   `state`. When one is refused it throws that FoldError, and `state` holds the events
//   before it: a consistent state, at the seq of the last event applied. At the frame's
//   end the selection must name a tab the state has (else FoldError at the last seq).
//   applyFrame(state, frame, before) also calls before(event, state) just before each event
//   is applied, with the state as it is then (the page names what an event changes, e.g.
//   a tab about to be removed); `before` only reads, and must not change the state.
// - The state never shares an object with what it was built from: pages, tabs, clients,
//   values and nodes are copied, so events and wire objects may be reused or changed
//   afterwards.
// - Like the daemon's fold, the state lists every client it has seen join (a capped start
//   snapshot of an older tabd lists only its first 100; a listed room of this one lists
//   everyone); toWire(state) gives the form the daemon sends, members in the daemon's
//   order, with at most 100 clients listed. Folding a snapshot with the frames that follow
//   it and taking toWire gives the daemon's snapshot at the last seq (`values` and `nodes`
//   keys may come in another order: the daemon sorts them, the fold keeps insertion
//   order) — presence aside when the start was capped and a listed client left: the
//   daemon then lists one the fold never heard of (the daemon's own fold has the same
//   limit).

/** The most clients a wire snapshot lists (Limits.maxClientsInSnapshot). */
export const MAX_CLIENTS_LISTED = 100;

/** An event that does not fit the state it is applied to: the stream is broken. */
export class FoldError extends Error {
  constructor(seq, message) {
    super(`fold refused seq ${seq}: ${message}`);
    this.name = "FoldError";
    /** The seq of the refused event (the expected seq when the event has none). */
    this.seq = seq;
  }
}

// ---------------------------------------------------------------- shapes

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

// Sets an own data property, also for keys such as "__proto__" (plain assignment would
// change the object's prototype instead).
function define(o, k, v) {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

// A deep copy of a JSON value.
function copyJSON(v) {
  if (Array.isArray(v)) return v.map(copyJSON);
  if (isObject(v)) {
    const o = {};
    for (const k of Object.keys(v)) define(o, k, copyJSON(v[k]));
    return o;
  }
  return v;
}

// Readers of PROTOCOL.md's shapes (Wire.swift's decoders): each returns a fresh copy or
// throws bad(message).
function field(o, k, bad) {
  if (!isObject(o) || !own(o, k)) throw bad(`missing '${k}'`);
  return o[k];
}
function str(o, k, bad) {
  const v = field(o, k, bad);
  if (typeof v !== "string") throw bad(`'${k}' is not a string`);
  return v;
}
function int(o, k, bad) {
  const v = field(o, k, bad);
  if (!Number.isInteger(v)) throw bad(`'${k}' is not an integer`);
  return v;
}
function num(o, k, bad) {
  const v = field(o, k, bad);
  if (typeof v !== "number" || !Number.isFinite(v)) throw bad(`'${k}' is not a number`);
  return v;
}

function readClient(j, bad) {
  return { id: str(j, "id", bad), name: str(j, "name", bad) };
}

// A list of clients, each id once.
function readClients(j, k, bad) {
  const list = field(j, k, bad);
  if (!Array.isArray(list)) throw bad(`'${k}' is not an array`);
  const clients = list.map((c) => readClient(c, bad));
  const ids = new Set(clients.map((c) => c.id));
  if (ids.size !== clients.length) throw bad(`'${k}' lists a client twice`);
  return clients;
}

// A cluster's counts by node (name → integer ≥ 0), copied, and their sum: every count and
// the sum within Limits.maxCount, as the daemon's Roster.sum has them.
function readNodes(v, bad) {
  if (!isObject(v)) throw bad("'nodes' is not an object");
  const nodes = {};
  let sum = 0;
  for (const k of Object.keys(v)) {
    const n = v[k];
    if (!Number.isInteger(n) || n < 0) throw bad(`node '${k}' has no count (an integer >= 0)`);
    if (n > Number.MAX_SAFE_INTEGER - sum) throw bad("node counts out of range");
    sum += n;
    define(nodes, k, n);
  }
  return { nodes, sum };
}

// An optional `node` member: absent, or a string.
function optionalNode(e, bad) {
  return own(e, "node") ? str(e, "node", bad) : null;
}

function readPage(j, bad) {
  const appeared = field(j, "appeared", bad);
  if (typeof appeared !== "boolean") throw bad("'appeared' is not a boolean");
  return { id: str(j, "id", bad), route: str(j, "route", bad), appeared, appearCount: int(j, "appearCount", bad) };
}

function readInfo(j, bad) {
  const badge = field(j, "badge", bad);
  if (badge !== null && typeof badge !== "string") throw bad("'badge' is not a string or null");
  return { id: str(j, "id", bad), title: str(j, "title", bad), icon: str(j, "icon", bad), color: str(j, "color", bad), badge };
}

function readTab(j, bad) {
  const info = readInfo(j, bad);
  const stack = field(j, "stack", bad);
  if (!Array.isArray(stack)) throw bad("'stack' is not an array");
  if (stack.length === 0) throw bad(`tab '${info.id}' has an empty stack`);
  const values = field(j, "values", bad);
  if (!isObject(values)) throw bad("'values' is not an object");
  return Object.assign(info, {
    stack: stack.map((p) => readPage(p, bad)),
    scroll: num(j, "scroll", bad),
    values: copyJSON(values),
  });
}

/**
 * A state of its own from a wire snapshot (`welcome.snapshot`, a `sync` answer, or a
 * golden file). Throws TypeError when `wire` does not have the snapshot's shape (its
 * presence members included: see the header).
 */
export function fromWire(wire) {
  const bad = (m) => new TypeError(`snapshot: ${m}`);
  const tabs = field(wire, "tabs", bad);
  if (!Array.isArray(tabs)) throw bad("'tabs' is not an array");
  const clients = field(wire, "clients", bad);
  if (!Array.isArray(clients)) throw bad("'clients' is not an array");
  const presence = own(wire, "presence") ? str(wire, "presence", bad) : "listed";
  if (presence !== "listed" && presence !== "counted") throw bad(`'presence' is neither "listed" nor "counted"`);
  const state = {
    seq: int(wire, "seq", bad),
    selected: str(wire, "selected", bad),
    scrollToTop: int(wire, "scrollToTop", bad),
    tabs: tabs.map((t) => readTab(t, bad)),
    presence,
    clientCount: int(wire, "clientCount", bad),
    clients: clients.map((c) => readClient(c, bad)),
  };
  // As the daemon's Snapshot(json:): a counted room lists no one, and only a counted room
  // has nodes, which add up to its count.
  if (presence === "counted" && state.clients.length > 0) throw bad("a counted snapshot lists clients");
  if (own(wire, "nodes")) {
    const shares = readNodes(wire.nodes, bad);
    if (presence !== "counted") throw bad("a listed snapshot has 'nodes'");
    if (shares.sum !== state.clientCount) throw bad("'nodes' do not add up to 'clientCount'");
    state.nodes = shares.nodes;
  }
  return state;
}

/**
 * The snapshot the daemon would send for `state`: the same fields, in the daemon's order,
 * with at most 100 clients listed (`nodes` only when the state has them). A new object;
 * its tabs are `state`'s own (do not change them).
 */
export function toWire(state) {
  const wire = {
    seq: state.seq,
    selected: state.selected,
    scrollToTop: state.scrollToTop,
    tabs: state.tabs,
    presence: state.presence,
    clientCount: state.clientCount,
    clients: state.clients.slice(0, MAX_CLIENTS_LISTED),
  };
  if (own(state, "nodes")) wire.nodes = copyJSON(state.nodes);
  return wire;
}

// ---------------------------------------------------------------- the fold

/**
 * Applies one event of an `events` frame (`{seq, kind, …}`) to `state`, in place, and
 * returns `state`. Its seq must be `state.seq + 1`. Throws FoldError (and changes
 * nothing) when the event does not fit the state.
 */
export function applyEvent(state, e) {
  const expected = state.seq + 1;
  const seq = isObject(e) && Number.isInteger(e.seq) ? e.seq : expected;
  const fail = (m) => new FoldError(seq, m);
  if (!isObject(e)) throw fail("the event is not an object");
  int(e, "seq", fail);
  const kind = str(e, "kind", fail);
  if (seq !== expected) throw fail(`expected seq ${expected}`);

  const tabAt = (id) => state.tabs.findIndex((t) => t.id === id);
  const withTab = (id) => {
    const i = tabAt(id);
    if (i < 0) throw fail(`no tab '${id}'`);
    return state.tabs[i];
  };
  const topOf = (tab) => tab.stack[tab.stack.length - 1];

  // Every case checks first and changes the state only once nothing can be refused.
  switch (kind) {
    case "selected": {
      const from = str(e, "from", fail), to = str(e, "to", fail);
      if (from !== state.selected || tabAt(to) < 0) {
        throw fail(`selected from ${from} to ${to}, but ${state.selected} is selected`);
      }
      state.selected = to;
      break;
    }
    case "firstAppear": {
      const t = str(e, "tab", fail), p = str(e, "page", fail);
      const top = topOf(withTab(t));
      if (top.id !== p || top.appeared) throw fail(`firstAppear of ${p} which is not a fresh top page`);
      top.appeared = true;
      break;
    }
    case "appear": {
      const t = str(e, "tab", fail), p = str(e, "page", fail);
      if (t !== state.selected) throw fail(`appear on unselected tab ${t}`);
      const top = topOf(withTab(t));
      if (top.id !== p || !top.appeared) throw fail(`appear of ${p} which is not the top or never first-appeared`);
      top.appearCount += 1;
      break;
    }
    case "disappear": {
      // It changes no state; its place in the batch is the lifecycle order, which the
      // page does not check.
      const t = str(e, "tab", fail), p = str(e, "page", fail);
      const i = tabAt(t);
      if (i < 0 || !state.tabs[i].stack.some((q) => q.id === p)) throw fail(`disappear of unknown page ${p}`);
      break;
    }
    case "pushed": {
      const t = str(e, "tab", fail), p = str(e, "page", fail), route = str(e, "route", fail);
      const tab = withTab(t);
      if (tab.stack.some((q) => q.id === p)) throw fail(`pushed ${p} twice on '${t}'`);
      tab.stack.push({ id: p, route, appeared: false, appearCount: 0 });
      break;
    }
    case "popped": {
      // One page or more, top first, never the root.
      const t = str(e, "tab", fail);
      const pages = field(e, "pages", fail);
      if (!Array.isArray(pages)) throw fail("'pages' is not an array");
      if (pages.some((p) => typeof p !== "string")) throw fail("'pages' holds a non-string");
      const tab = withTab(t);
      const top = tab.stack.slice(tab.stack.length - pages.length).reverse().map((q) => q.id);
      if (pages.length === 0 || !(pages.length < tab.stack.length) || top.some((id, k) => id !== pages[k])) {
        throw fail(`popped [${pages.join(", ")}] but the top is [${top.join(", ")}]`);
      }
      tab.stack.length -= pages.length;
      break;
    }
    case "scrollToTop": {
      const t = str(e, "tab", fail), count = int(e, "count", fail);
      if (!(count > state.scrollToTop)) throw fail(`counter went from ${state.scrollToTop} to ${count}`);
      const tab = withTab(t);
      state.scrollToTop = count;
      tab.scroll = 0;
      break;
    }
    case "scrolled": {
      const t = str(e, "tab", fail), offset = num(e, "offset", fail);
      withTab(t).scroll = offset;
      break;
    }
    case "valueSet": {
      const t = str(e, "tab", fail), key = str(e, "key", fail), value = field(e, "value", fail);
      const tab = withTab(t);
      if (value === null) delete tab.values[key];
      else define(tab.values, key, copyJSON(value));
      break;
    }
    case "tabAdded": {
      const tab = readTab(field(e, "tab", fail), fail), index = int(e, "index", fail);
      if (tabAt(tab.id) >= 0 || index < 0 || index > state.tabs.length) throw fail(`tabAdded ${tab.id} at ${index}`);
      state.tabs.splice(index, 0, tab);
      break;
    }
    case "tabUpdated": {
      // Only what the tab bar shows changes; the event's stack, scroll and values are
      // what the daemon has, and so already what the state has.
      const updated = readTab(field(e, "tab", fail), fail);
      const tab = withTab(updated.id);
      tab.title = updated.title;
      tab.icon = updated.icon;
      tab.color = updated.color;
      tab.badge = updated.badge;
      break;
    }
    case "tabMoved": {
      const t = str(e, "tab", fail), index = int(e, "index", fail);
      const from = tabAt(t);
      if (from < 0 || index < 0 || index >= state.tabs.length) throw fail(`tabMoved ${t} to ${index}`);
      state.tabs.splice(index, 0, state.tabs.splice(from, 1)[0]);
      break;
    }
    case "tabRemoved": {
      // When it was the selected tab, the batch's next event (`selected`) names the new
      // selection; until then `selected` names the removed tab, as in the daemon's fold.
      const t = str(e, "tab", fail);
      const i = tabAt(t);
      if (i < 0 || state.tabs.length <= 1) throw fail(`tabRemoved ${t}`);
      state.tabs.splice(i, 1);
      break;
    }
    case "clientJoined": {
      const client = readClient(field(e, "client", fail), fail);
      if (state.presence === "counted") throw fail("clientJoined in a counted room");
      state.clients.push(client);
      state.clientCount += 1;
      break;
    }
    case "clientLeft": {
      const id = str(e, "client", fail);
      if (state.presence === "counted") throw fail("clientLeft in a counted room");
      const i = state.clients.findIndex((c) => c.id === id);
      if (i >= 0) {
        state.clients.splice(i, 1);
        state.clientCount -= 1;
      } else if (state.clientCount > state.clients.length) {
        state.clientCount -= 1; // listed beyond the cap of a capped snapshot
      } else {
        throw fail(`clientLeft of unknown client ${id}`);
      }
      break;
    }
    case "presenceCounted": {
      const count = int(e, "count", fail);
      const shares = own(e, "nodes") ? readNodes(e.nodes, fail) : null;
      if (state.presence === "counted") throw fail("presenceCounted in a counted room");
      if (count < 0) throw fail("presenceCounted with a negative count");
      if (shares && shares.sum !== count) throw fail(`presenceCounted's nodes do not add up to its count ${count}`);
      state.presence = "counted";
      state.clients = [];
      state.clientCount = count;
      if (shares) state.nodes = shares.nodes;
      else delete state.nodes;
      break;
    }
    case "clientCount": {
      const node = optionalNode(e, fail), count = int(e, "count", fail);
      if (state.presence !== "counted") throw fail("clientCount in a listed room");
      if (count < 0) throw fail("clientCount with a negative count");
      const hasNodes = own(state, "nodes");
      if (node !== null) {
        if (!hasNodes) throw fail(`clientCount of node '${node}' in a room not counted by node`);
        const next = copyJSON(state.nodes);
        define(next, node, count);
        const shares = readNodes(next, fail);
        state.nodes = shares.nodes;
        state.clientCount = shares.sum;
      } else {
        if (hasNodes) throw fail("clientCount without a node in a room counted by node");
        state.clientCount = count;
      }
      break;
    }
    case "presenceListed": {
      optionalNode(e, fail);
      const clients = readClients(e, "clients", fail);
      if (state.presence !== "counted") throw fail("presenceListed in a listed room");
      state.presence = "listed";
      state.clients = clients;
      state.clientCount = clients.length;
      delete state.nodes;
      break;
    }
    case "clientIdsReserved": {
      // The ids are the server's counter's; the snapshot does not change.
      optionalNode(e, fail);
      const from = int(e, "from", fail), count = int(e, "count", fail);
      if (from < 1 || count < 1) throw fail(`clientIdsReserved of an empty or negative block (from ${from}, count ${count})`);
      break;
    }
    default:
      throw fail(`unknown event kind '${kind}'`);
  }
  state.seq = seq;
  return state;
}

/**
 * Applies every event of one `events` frame (`{type: "events", by, ref, events}`) in
 * order, in place, and returns `state`. On a refused event it throws that FoldError;
 * `state` then holds the events before it (its seq is the last one applied). `before`,
 * when given, is called as before(event, state) just before each event is applied
 * (also before the one refused); it must not change `state`.
 */
export function applyFrame(state, frame, before) {
  if (!isObject(frame) || !Array.isArray(frame.events)) {
    throw new FoldError(state.seq + 1, "not an events frame (no 'events' array)");
  }
  for (const e of frame.events) {
    if (before) before(e, state);
    applyEvent(state, e);
  }
  // Within a frame the selection may name a removed tab (until the `selected` that
  // follows); at its end it must name a tab the state has.
  if (!state.tabs.some((t) => t.id === state.selected)) {
    throw new FoldError(state.seq, `after the frame, the selected tab '${state.selected}' does not exist`);
  }
  return state;
}
