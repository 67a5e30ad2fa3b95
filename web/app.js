// tabd's page: the demo around the tab bar. No framework, no build step (an ES module:
// index.html loads it with type="module").
//
// The connection and the state are tabd.js's (a TabdClient: the room's snapshot with every
// `events` frame folded in by model.js, reconnects with `resume`, a `sync` for any frame
// that does not fold); the tab bar is the <tabd-tab-bar> element (tabd-tab-bar.js), given
// this page's client. The page around them is in modules by concern, and this one wires
// them to the client and says the status:
// - page-panels.js: one panel per tab with its pages (one element per page id, all of them
//   in the page, so scroll offsets and typed text survive), drawn from the state;
// - page-scroll.js: each list's scroll reports, and following the others' scrolls;
// - page-log.js: the event log, each event said with names;
// - page-presence.js: "N online" and the panel of who is connected;
// - page-share.js: the room's link;
// - page-dom.js: what they share for drawing.
// Everything on screen is derived from the client's state by render(): the page never
// answers an event with a command. What an event does beyond the state (scroll
// animations, the log) is decided here, in effectsOf.
//
// Rooms: the page at /?room=ID is in room ID (no parameter: "main"); a room id that is not
// one ([A-Za-z0-9_-]{1,64}) is said in the status area, and the page does not connect.
//
// Roles: the welcome says what this connection may do. A `view` page only watches: it
// says so in the header, its buttons are aria-disabled (still focusable, so they can be
// read; the tab bar does the same for its tabs), and it sends nothing but `sync`, `ping`
// and `clients`. It still follows the room live. A token that runs out (close 4001, or a
// signed token past its `exp`) and a deleted room (4404) end the connection: the page says
// so and does not reconnect. Unless the link names a token URL (`#tokenUrl=/path`, a path
// of this site only): the page then asks it for a token (GET, with the site's cookies;
// the body is the token) for every connection and before each token runs out, hands tabd
// the fresh one without reconnecting, and ends only when the URL has no token to give
// (401, 403 or 204).
//
// Presence: the header says "N online" (the state's clientCount, listed room or counted).
// That label is a button that opens a panel of who is connected: in a listed room the
// state's own list (it follows joins and leaves live); in a counted room (past tabd's
// --presence-limit the state lists no one) pages of 100 asked for with `clients`, and
// "Show more" while the answer has a `next`. The panel closes when the connection drops.
import { TabdClient } from "./tabd.js";
import "./tabd-tab-bar.js";
import { errorText } from "./page-dom.js";
import { EventLog, Names } from "./page-log.js";
import { Panels, greetingOf, nextRoute } from "./page-panels.js";
import { PresencePanel } from "./page-presence.js";
import { ScrollSync } from "./page-scroll.js";
import { SharePanel } from "./page-share.js";

// `text` when it is a path of this site (`/…`, not `//…`), else null.
function sameSitePath(text) {
  if (!text || !text.startsWith("/") || text.startsWith("//") || text.startsWith("/\\")) return null;
  try {
    const u = new URL(text, location.origin);
    return u.origin === location.origin ? u.pathname + u.search : null;
  } catch (e) {
    return null;
  }
}

(function () {
  const PARAMS = new URLSearchParams(location.search);
  // A token comes in the fragment (`#token=…`, which browsers never send to a server, so
  // it is in no access log) or, as older links have it, in the query. The client sends a
  // token that can be a WebSocket subprotocol in the handshake, any other in the query.
  const FRAGMENT = new URLSearchParams(location.hash.replace(/^#/, ""));
  const TOKEN = FRAGMENT.get("token") || PARAMS.get("token");
  // Where fresh tokens come from: a path of this site (never another site's URL, which a
  // crafted link could name).
  const TOKEN_URL = sameSitePath(FRAGMENT.get("tokenUrl") || PARAMS.get("tokenUrl"));
  const NAME = (PARAMS.get("name") || "browser").slice(0, 64);
  const DEFAULT_ROOM = "main";
  const ROOM = PARAMS.has("room") ? PARAMS.get("room") : DEFAULT_ROOM;
  const ROOM_OK = /^[A-Za-z0-9_-]{1,64}$/.test(ROOM);
  const LOG_LIMIT = 50;
  const SCROLL_INTERVAL_MS = 250; // at most 4 scroll reports per second and tab
  const CLIENTS_PAGE = 100; // clients asked for at a time in a counted room
  const REDUCED_MOTION = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  const $ = (id) => document.getElementById(id);
  const contentEl = $("content");
  const tabbarEl = $("tabbar");
  const statusEl = $("status");
  const statusTextEl = $("status-text");
  const retryEl = $("retry");
  const logSeqEl = $("log-seq");
  const toastEl = $("toast");
  const statusLinkEl = $("status-link");
  const roomEl = $("room");
  const roomIdEl = $("room-id");
  const shareEl = $("share");
  const viewOnlyEl = $("view-only");

  // ---------------------------------------------------------------- state

  let client = null; // the room's TabdClient (null when the room id is not one)
  let model = null; // client.state: the snapshot with every event folded in
  let fatal = null; // why the page does not connect: it stays so
  const myIds = new Set(); // every client id this page had (one per connection)

  let connState = "connecting"; // connecting | catching-up | live | reconnecting | error
  let countdownTimer = null;
  let toastTimer = null;
  let lastResumed = null; // whether the last welcome resumed (true) or brought a snapshot
  let rebuilds = 0;
  let dropBatches = 0; // tests: events frames to lose on purpose (see __tabd.dropNextBatch)
  const said = new WeakMap(); // event -> how the log says it, asked just before it applies

  // The page's parts, each in its module.
  const log = new EventLog($("log-list"), LOG_LIMIT);
  const scroll = new ScrollSync({
    scrollerOf: (tabId) => panels.scrollerOf(tabId),
    tab: (tabId) => (model ? tabById(tabId) : null),
    mayReport: () => !readOnly(),
    send: (tabId, top) => {
      if (!connected()) return false;
      client.scroll(top, { tab: tabId }).catch(onRefused);
      return true;
    },
  }, { interval: SCROLL_INTERVAL_MS, reducedMotion: REDUCED_MOTION });
  const panels = new Panels(contentEl, scroll, { reducedMotion: REDUCED_MOTION });
  const presence = new PresencePanel({
    button: $("presence"), panel: $("presence-panel"), count: $("presence-panel-count"), list: $("presence-list"),
    hint: $("presence-hint"), more: $("presence-more"), close: $("presence-close"),
  }, {
    state: () => model, me: myIds, connected,
    clients: (query) => client.clients(query),
  }, { pageSize: CLIENTS_PAGE });
  new SharePanel({ button: shareEl, panel: $("share-panel"), field: $("share-field"), hint: $("share-hint"), close: $("share-close") },
    roomLink, showToast);
  const names = () => new Names(model, myIds);

  // ---------------------------------------------------------------- connection

  const EXPIRED = "Your access token has expired. Open a fresh link to continue.";

  // The page's WebSocket: the browser's, with one thing for tests (__tabd.dropNextBatch):
  // losing an events frame on purpose, as a network that dropped one would.
  class PageSocket extends WebSocket {
    addEventListener(type, listener, ...rest) {
      if (type !== "message") return super.addEventListener(type, listener, ...rest);
      return super.addEventListener(type, (ev) => {
        if (dropBatches > 0 && typeof ev.data === "string" && ev.data.startsWith('{"type":"events"')) {
          dropBatches -= 1;
          return;
        }
        listener(ev);
      }, ...rest);
    }
  }

  function start() {
    client = new TabdClient(location.href, {
      room: ROOM, token: TOKEN, name: NAME, WebSocket: PageSocket,
      getToken: TOKEN_URL ? fetchToken : null,
      beforeEvent: (e, state) => { said.set(e, new Names(state, myIds).describe(e)); },
    });
    tabbarEl.client = client;
    client.subscribe(onUpdate);
    setConn("connecting", "Connecting…");
  }

  // A fresh token from TOKEN_URL; null when it has none to give (the page then ends).
  async function fetchToken() {
    const r = await fetch(TOKEN_URL, { credentials: "same-origin", cache: "no-store" });
    if (r.status === 401 || r.status === 403 || r.status === 204) return null;
    if (!r.ok) throw new Error(`the token URL answered ${r.status}`);
    return (await r.text()).trim() || null;
  }

  function onUpdate(u) {
    switch (u.type) {
      case "connection": onConnection(u); break;
      case "welcome": onWelcome(u); break;
      case "snapshot": rebuild(u.state, u.fresh, u.reason); break;
      case "events": onEvents(u); break;
      case "refused":
        log.add({ seq: u.error.seq, kind: "refused" }, names().client(u.frame && u.frame.by), { text: u.error.message, ids: "" });
        log.render();
        break;
      case "error": showToast(errorText(u.error)); break;
      default: break;
    }
  }

  function onConnection(u) {
    stopCountdown();
    switch (u.connection) {
      case "live":
        if (connState === "catching-up") { setConn("live"); if (model) scroll.reportAll(model.tabs); } else setConn("live");
        break;
      case "catching-up": setConn("catching-up", lastResumed ? "Catching up…" : "Syncing…"); break;
      case "reconnecting": startCountdown(); break;
      case "closed": onClosed(u.error); break;
      default: setConn(u.connection); break;
    }
  }

  function onClosed(error) {
    const code = error && error.code;
    if (code === "room_deleted") {
      // Reconnecting would make a new, empty room of the same id.
      stop(`Room '${shown(ROOM)}' was deleted.`, { href: location.href, text: "Open it again" });
    } else if (code === "token_expired") {
      // tabd refuses it from now on (401): only a fresh link helps.
      stop(EXPIRED);
    } else if (code === "wrong_room") {
      stop(error.message, { href: location.href, text: "Reload" });
    } else if (!fatal) {
      stop(error ? error.message : "Not connected.");
    }
  }

  function onWelcome(u) {
    showRole();
    myIds.add(u.session.client);
    lastResumed = u.resumed;
  }

  function readOnly() {
    return !!(client && client.readOnly);
  }

  // A user's action. Read only, it does nothing: the header and the controls say why.
  function command(type, fields) {
    if (readOnly()) return;
    if (!connected()) { showToast("Not connected: the action was not sent."); return; }
    client.send(type, fields).catch(onRefused);
  }

  // Whether a command would go out now (not wait for a later connection).
  function connected() {
    return client !== null && (client.connection === "live" || client.connection === "catching-up");
  }

  // A command tabd said no to (its code is the protocol's); a command lost with the
  // connection is not news (what happened is in the events after the reconnect).
  function onRefused(error) {
    if (error && error.code !== "connection_lost" && error.code !== "closed") showToast(errorText(error));
  }

  // ---------------------------------------------------------------- events

  function onEvents(u) {
    const effects = [];
    const by = names().client(u.by);
    for (const e of u.events) {
      log.add(e, by, said.get(e) || names().describe(e));
      effectsOf(e, u.by, u.live, effects);
    }
    render();
    for (const fx of effects) fx();
    log.render();
  }

  // ---------------------------------------------------------------- the model

  function rebuild(state, fresh, why) {
    rebuilds += 1;
    model = state;
    if (fresh) { panels.reset(); scroll.clear(); }
    render();
    for (const t of model.tabs) scroll.setInstant(t.id, t.scroll);
    // A marker, not an event: it has no seq of its own (the snapshot's seq is its last event's).
    const selected = tabById(model.selected);
    log.add({ seq: null, kind: "rebuilt" }, null, {
      text: `${why === "welcome" ? "Started from a snapshot" : "Caught up from a fresh snapshot"}: ${model.tabs.length} tabs, ${selected ? selected.title : model.selected} selected`,
      ids: `snapshot at seq ${model.seq}`,
    });
    log.render();
  }

  const tabById = (id) => model.tabs.find((t) => t.id === id);

  // What an event does on screen beyond the state, run after render() (the state change
  // itself is model.js's). `live`: not a replay of missed batches.
  function effectsOf(e, by, live, effects) {
    switch (e.kind) {
      case "pushed":
        if (live) effects.push(() => panels.markPushed(e.tab, e.page));
        break;
      case "scrollToTop":
        effects.push(live ? () => scroll.toTopSmooth(e.tab) : () => scroll.setInstant(e.tab, 0));
        break;
      case "scrolled":
        // Our own reports already are where the list is; applying their echo would
        // drag the list back while the user keeps scrolling.
        if (!myIds.has(by)) effects.push(() => scroll.setInstant(e.tab, e.offset));
        break;
      case "tabAdded":
        effects.push(() => scroll.setInstant(e.tab.id, e.tab.scroll));
        break;
      default:
        break;
    }
  }

  // ---------------------------------------------------------------- rendering

  function render() {
    if (!model) return;
    const ph = $("placeholder");
    if (ph) ph.remove();
    panels.render(model, readOnly());
    presence.show(model, connState === "live");
    const sel = tabById(model.selected);
    document.title = sel ? `${sel.title} · ${titleSuffix()}` : titleSuffix();
    logSeqEl.textContent = "#" + model.seq;
  }

  // A tab's colours follow the scheme in use (page-panels.js paints them).
  const DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (DARK) DARK.addEventListener("change", () => render());

  // ---------------------------------------------------------------- status, log, toast

  function setConn(state, text) {
    connState = state;
    statusEl.dataset.state = state;
    document.body.dataset.conn = state;
    const labels = { live: "Live", connecting: "Connecting…", "catching-up": "Catching up…", reconnecting: "Reconnecting…" };
    statusTextEl.textContent = text || labels[state] || state;
    statusEl.title = client && client.clientId ? `client ${client.clientId} · epoch ${client.epoch} · ${client.connections} connection(s)` : "";
    retryEl.hidden = state !== "reconnecting";
    presence.show(model, state === "live");
  }

  function startCountdown() {
    stopCountdown();
    const tick = () => {
      const s = Math.max(0, Math.ceil(((client.retryAt || 0) - Date.now()) / 1000));
      setConn("reconnecting", s > 0 ? `Retrying in ${s}s` : "Reconnecting…");
    };
    tick();
    countdownTimer = setInterval(tick, 500);
  }

  function stopCountdown() {
    clearInterval(countdownTimer);
    countdownTimer = null;
  }

  function showToast(text) {
    toastEl.textContent = text;
    toastEl.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { toastEl.hidden = true; }, 4000);
  }

  // ---------------------------------------------------------------- the room

  // A room id as said in a message: a long one cut (it can be anything the URL held).
  function shown(id) {
    return id.length > 80 ? id.slice(0, 79) + "…" : id;
  }

  function titleSuffix() {
    return ROOM === DEFAULT_ROOM ? "tabd" : `${ROOM} · tabd`;
  }

  // The page gives up for good (a reload starts over) and says why in the status area,
  // with a way out when there is one.
  function stop(message, link) {
    fatal = message;
    if (client && client.connection !== "closed") client.close();
    stopCountdown();
    setConn("error", message);
    statusEl.title = message;
    if (link) {
      statusLinkEl.href = link.href;
      statusLinkEl.textContent = link.text;
      statusLinkEl.hidden = false;
    }
    const ph = $("placeholder");
    if (ph) ph.textContent = "Not connected.";
    document.title = "Not connected · tabd";
  }

  function showRoom() {
    roomIdEl.textContent = ROOM;
    roomEl.title = `Room ${ROOM}`;
    shareEl.setAttribute("aria-label", `Copy link to room ${ROOM}`);
    shareEl.title = `Copy a link to room ${ROOM}`;
    roomEl.hidden = false;
    document.title = titleSuffix();
  }

  // What the welcome's role means on screen: the view-only notice, and every control drawn
  // enabled or not (render() asks readOnly() for each). A later welcome may say otherwise.
  function showRole() {
    viewOnlyEl.hidden = !readOnly();
    if (model) render();
  }

  // What to share: this room on this server, never the token (nor the name).
  function roomLink() {
    return location.origin + "/?room=" + encodeURIComponent(ROOM);
  }

  // ---------------------------------------------------------------- input

  // A tap the tab bar could not send (not connected, or refused): said in the toast.
  tabbarEl.addEventListener("tabd-error", (ev) => {
    const error = ev.detail.error;
    if (error.code === "not_connected") showToast("Not connected: the action was not sent.");
    else onRefused(error);
  });

  contentEl.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-action]");
    if (!b || !contentEl.contains(b) || !model) return;
    const tabId = b.dataset.tab;
    const tab = tabById(tabId);
    if (!tab) return;
    switch (b.dataset.action) {
      case "greeting": command("set", { tab: tabId, key: "greeting", value: "Tapped" }); break;
      case "push": command("push", { tab: tabId, route: nextRoute(tab.stack.length) }); break;
      case "back": command("pop", { tab: tabId }); break;
      default: break;
    }
  });

  function retryNow() {
    if (client && !fatal) client.reconnect();
  }

  retryEl.addEventListener("click", retryNow);
  window.addEventListener("online", retryNow);

  // Hooks for tests and for poking around in the console.
  window.__tabd = {
    room: ROOM,
    get role() { return client ? client.role : null; },
    get readOnly() { return readOnly(); },
    roomLink,
    get model() { return model; },
    get epoch() { return client ? client.epoch : null; },
    get clientId() { return client ? client.clientId : null; },
    get state() { return connState; },
    get connections() { return client ? client.connections : 0; },
    get seq() { return model ? model.seq : null; },
    get resumed() { return lastResumed; },
    get rebuilds() { return rebuilds; },
    get attempts() { return client ? client.attempt : 0; },
    // Closes the socket from the page's side; the page reconnects with `resume` as after
    // any drop, but not before `holdMs` milliseconds (default: the normal backoff).
    disconnect(holdMs) {
      if (client) client.disconnect(holdMs);
    },
    // Loses the next events frame as if it never arrived: the one after it shows a gap.
    dropNextBatch() { dropBatches += 1; },
    retryNow,
    greetingOf,
  };

  if (ROOM_OK) {
    showRoom();
    start();
  } else {
    const away = new URL(location.href);
    away.searchParams.delete("room");
    stop(`'${shown(ROOM)}' is not a room id: use 1–64 letters, digits, '-' or '_'`,
      { href: away.pathname + away.search + away.hash, text: "Open the main room" });
  }
})();
