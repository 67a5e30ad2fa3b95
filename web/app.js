// tabd's page: the demo around the tab bar. No framework, no build step (an ES module:
// index.html loads it with type="module").
//
// The connection and the state are tabd.js's (a TabdClient: the room's snapshot with every
// `events` frame folded in by model.js, reconnects with `resume`, a `sync` for any frame
// that does not fold); the tab bar is the <tabd-tab-bar> element (tabd-tab-bar.js), given
// this page's client. What is here is the page around them: one panel per tab with its
// pages (one element per page id, all of them in the page, hidden ones with
// visibility:hidden, so scroll offsets and typed text survive), the scroll reports, the
// event log, who is connected, the room's link, and the status. Everything on screen is
// derived from the client's state by render(): the page never answers an event with a
// command. What an event does beyond the state (scroll animations, the log) is here.
//
// Rooms: the page at /?room=ID is in room ID (no parameter: "main"); a room id that is not
// one ([A-Za-z0-9_-]{1,64}) is said in the status area, and the page does not connect.
//
// Roles: the welcome says what this connection may do. A `view` page only watches: it
// says so in the header, its buttons are aria-disabled (still focusable, so they can be
// read; the tab bar does the same for its tabs), and it sends nothing but `sync`, `ping`
// and `clients`. It still follows the room live. A token that runs out (close 4001, or a
// signed token past its `exp`) and a deleted room (4404) end the connection: the page says
// so and does not reconnect.
//
// Presence: the header says "N online" (the state's clientCount, listed room or counted).
// That label is a button that opens a panel of who is connected: in a listed room the
// state's own list (it follows joins and leaves live); in a counted room (past tabd's
// --presence-limit the state lists no one) pages of 100 asked for with `clients`, and
// "Show more" while the answer has a `next`. The panel closes when the connection drops.
import { TabdClient } from "./tabd.js";
import "./tabd-tab-bar.js";
import { css, fillFor, inkFor, mix, rgbOf } from "./colors.js";

(function () {
  const PARAMS = new URLSearchParams(location.search);
  // A token comes in the fragment (`#token=…`, which browsers never send to a server, so
  // it is in no access log) or, as older links have it, in the query. The client sends a
  // token that can be a WebSocket subprotocol in the handshake, any other in the query.
  const FRAGMENT = new URLSearchParams(location.hash.replace(/^#/, ""));
  const TOKEN = FRAGMENT.get("token") || PARAMS.get("token");
  const NAME = (PARAMS.get("name") || "browser").slice(0, 64);
  const DEFAULT_ROOM = "main";
  const ROOM = PARAMS.has("room") ? PARAMS.get("room") : DEFAULT_ROOM;
  const ROOM_OK = /^[A-Za-z0-9_-]{1,64}$/.test(ROOM);
  const LOG_LIMIT = 50;
  const SCROLL_INTERVAL_MS = 250; // at most 4 scroll reports per second and tab
  const ITEMS = 20;
  const CLIENTS_PAGE = 100; // clients asked for at a time in a counted room
  const MAX_DEPTH = 64;
  const REDUCED_MOTION = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  const $ = (id) => document.getElementById(id);
  const contentEl = $("content");
  const tabbarEl = $("tabbar");
  const statusEl = $("status");
  const statusTextEl = $("status-text");
  const retryEl = $("retry");
  const presenceEl = $("presence");
  const presencePanelEl = $("presence-panel");
  const presenceCountEl = $("presence-panel-count");
  const presenceListEl = $("presence-list");
  const presenceHintEl = $("presence-hint");
  const presenceMoreEl = $("presence-more");
  const presenceCloseEl = $("presence-close");
  const logListEl = $("log-list");
  const logSeqEl = $("log-seq");
  const toastEl = $("toast");
  const statusLinkEl = $("status-link");
  const roomEl = $("room");
  const roomIdEl = $("room-id");
  const shareEl = $("share");
  const sharePanelEl = $("share-panel");
  const shareFieldEl = $("share-field");
  const shareHintEl = $("share-hint");
  const shareCloseEl = $("share-close");
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

  const logEntries = []; // newest last

  // The list of who is connected while its panel is open (null when closed), for the
  // room's presence when it was opened: { mode, clients, ids, drawn, next, asked, node, error }.
  // A listed room's list is the model's; a counted room's is the pages answered so far
  // (`asked`: the `clients` request waiting for its answer, `next`: the cursor of the page
  // after them, null at the end).
  let roster = null;

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
      beforeEvent: (e) => { said.set(e, describe(e)); },
    });
    tabbarEl.client = client;
    client.subscribe(onUpdate);
    setConn("connecting", "Connecting…");
  }

  function onUpdate(u) {
    switch (u.type) {
      case "connection": onConnection(u); break;
      case "welcome": onWelcome(u); break;
      case "snapshot": rebuild(u.state, u.fresh, u.reason); break;
      case "events": onEvents(u); break;
      case "refused":
        addLog({ seq: u.error.seq, kind: "refused" }, nameOf(u.frame && u.frame.by), { text: u.error.message, ids: "" });
        renderLog();
        break;
      case "error": showToast(errorText(u.error)); break;
      default: break;
    }
  }

  function onConnection(u) {
    stopCountdown();
    switch (u.connection) {
      case "live":
        if (connState === "catching-up") { setConn("live"); reportAllScrolls(); } else setConn("live");
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
    for (const e of u.events) {
      addLog(e, nameOf(u.by), said.get(e) || describe(e));
      effectsOf(e, u.by, u.live, effects);
    }
    render();
    for (const fx of effects) fx();
    renderLog();
  }

  // ---------------------------------------------------------------- the model

  function rebuild(state, fresh, why) {
    rebuilds += 1;
    model = state;
    if (fresh) resetDOM();
    render();
    for (const t of model.tabs) setScrollInstant(t.id, t.scroll);
    // A marker, not an event: it has no seq of its own (the snapshot's seq is its last event's).
    const selected = tabById(model.selected);
    addLog({ seq: null, kind: "rebuilt" }, null, {
      text: `${why === "welcome" ? "Started from a snapshot" : "Caught up from a fresh snapshot"}: ${model.tabs.length} tabs, ${selected ? selected.title : model.selected} selected`,
      ids: `snapshot at seq ${model.seq}`,
    });
    renderLog();
  }

  const tabById = (id) => model.tabs.find((t) => t.id === id);

  // What an event does on screen beyond the state, run after render() (the state change
  // itself is model.js's). `live`: not a replay of missed batches.
  function effectsOf(e, by, live, effects) {
    switch (e.kind) {
      case "pushed":
        if (live) effects.push(() => markPushed(e.tab, e.page));
        break;
      case "scrollToTop":
        effects.push(live ? () => scrollToTopSmooth(e.tab) : () => setScrollInstant(e.tab, 0));
        break;
      case "scrolled":
        // Our own reports already are where the list is; applying their echo would
        // drag the list back while the user keeps scrolling.
        if (!myIds.has(by)) effects.push(() => setScrollInstant(e.tab, e.offset));
        break;
      case "tabAdded":
        effects.push(() => setScrollInstant(e.tab.id, e.tab.scroll));
        break;
      default:
        break;
    }
  }

  // The greeting of seed 002, derived from state.
  function greetingOf(tab) {
    const root = tab.stack[0];
    if (Object.prototype.hasOwnProperty.call(tab.values, "greeting")) {
      const v = tab.values.greeting;
      return typeof v === "string" ? v : JSON.stringify(v);
    }
    return root && root.appeared ? "On Appear" : "Initial";
  }

  function nextRoute(depth) {
    return depth <= 1 ? "next" : "next" + depth;
  }

  // ---------------------------------------------------------------- rendering

  const panelViews = new Map(); // tab id -> { panel, pages: Map(page id -> pageView) }

  function resetDOM() {
    for (const v of panelViews.values()) v.panel.remove();
    panelViews.clear();
    scrollCtl.clear();
  }

  function render() {
    if (!model) return;
    const ph = $("placeholder");
    if (ph) ph.remove();
    renderPanels();
    renderPresence();
    const sel = tabById(model.selected);
    document.title = sel ? `${sel.title} · ${titleSuffix()}` : titleSuffix();
    logSeqEl.textContent = "#" + model.seq;
  }

  // A tab's colour on the page: as given for borders and tints, and in readable shades for
  // text on the page's surfaces (--tab-ink) and under white text (--tab-fill), for the
  // scheme in use (WCAG AA).
  const DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (DARK) DARK.addEventListener("change", () => render());

  function surface() {
    return rgbOf(getComputedStyle(document.documentElement).getPropertyValue("--surface-2").trim());
  }

  function paint(el, color) {
    const rgb = rgbOf(color);
    el.style.setProperty("--tab-color", css(rgb));
    el.style.setProperty("--tab-tint", css(rgb, 0.3));
    el.style.setProperty("--tab-soft", css(rgb, 0.14));
    el.style.setProperty("--tab-ink", css(inkFor(rgb, mix(surface(), rgb, 0.2))));
    el.style.setProperty("--tab-fill", css(fillFor(rgb)));
  }

  function renderPanels() {
    const ids = new Set(model.tabs.map((t) => t.id));
    for (const [id, v] of panelViews) {
      if (!ids.has(id)) { v.panel.remove(); panelViews.delete(id); scrollCtl.delete(id); }
    }
    for (const t of model.tabs) {
      let v = panelViews.get(t.id);
      if (!v) { v = createPanel(t); panelViews.set(t.id, v); }
      const selected = t.id === model.selected;
      v.panel.classList.toggle("is-selected", selected);
      v.panel.inert = !selected;
      v.panel.setAttribute("aria-hidden", selected ? "false" : "true");
      paint(v.panel, t.color);
      v.panel.setAttribute("aria-label", t.title);
      // Pages: one element per page id, in stack order; the top one is shown.
      const keep = new Set(t.stack.map((p) => p.id));
      for (const [pid, pv] of v.pages) {
        if (!keep.has(pid)) { pv.el.remove(); v.pages.delete(pid); }
      }
      t.stack.forEach((p, depth) => {
        let pv = v.pages.get(p.id);
        if (!pv) {
          pv = depth === 0 ? createRootPage(t, p) : createPushedPage(t, p);
          v.pages.set(p.id, pv);
          v.panel.appendChild(pv.el);
        }
        updatePage(pv, t, p, depth);
      });
    }
  }

  function createPanel(t) {
    const panel = document.createElement("section");
    panel.className = "panel";
    panel.id = "panel-" + t.id;
    panel.dataset.tab = t.id;
    panel.setAttribute("role", "tabpanel");
    // Named by its tab's title (the tab itself is in the tab bar's shadow root, which an
    // id reference cannot reach).
    panel.setAttribute("aria-label", t.title);
    contentEl.appendChild(panel);
    return { panel, pages: new Map() };
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  function actionButton(cls, text, action, tabId) {
    const b = el("button", cls, text);
    b.type = "button";
    b.dataset.action = action;
    b.dataset.tab = tabId;
    return b;
  }

  function lifecycleChips() {
    const box = el("div", "lifecycle");
    const count = el("span", "chip chip-count");
    const first = el("span", "chip chip-first");
    box.append(count, first);
    return { box, count, first };
  }

  function noteField(tabId, pageId) {
    const label = el("label", "note");
    label.append(el("span", "note-label", "Notes (kept while you switch tabs)"));
    const input = el("input", "note-input");
    input.type = "text";
    input.placeholder = "Type something…";
    input.autocomplete = "off";
    input.name = `note-${tabId}-${pageId}`;
    label.append(input);
    return label;
  }

  function createRootPage(t, p) {
    const page = el("section", "page page-root");
    page.dataset.page = p.id;
    const scroller = el("div", "scroller");
    scroller.dataset.tab = t.id;
    const inner = el("div", "page-inner");
    const title = el("h1", "large-title");
    const greeting = actionButton("greeting", "", "greeting", t.id);
    const greetingText = el("span", "greeting-text");
    // Seed 002's greeting: a value kept on the tab. Tapping stores "Tapped" in it; every
    // window shows it, and it survives push, pop and switching tabs.
    const greetingHint = el("span", "greeting-hint", "Tap to store “Tapped” on this tab: every window sees it, and it stays when you come back");
    greeting.append(greetingText, greetingHint);
    const chips = lifecycleChips();
    const push = actionButton("primary push", "Show next page", "push", t.id);
    const list = el("ol", "items");
    list.setAttribute("aria-label", "Items");
    for (let i = 0; i < ITEMS; i++) {
      const li = el("li", "item");
      li.append(el("span", "item-num", String(i)), el("span", "item-label", `Item ${i}`));
      list.append(li);
    }
    const after = actionButton("secondary push", "Show next page", "push", t.id);
    inner.append(title, greeting, chips.box, push, list, after, noteField(t.id, p.id));
    scroller.append(inner);
    page.append(scroller);
    wireScroller(t.id, scroller);
    return { el: page, root: true, title, greetingText, chips, pushButtons: [push, after], actions: [greeting, push, after], scroller };
  }

  function createPushedPage(t, p) {
    const page = el("section", "page page-pushed");
    page.dataset.page = p.id;
    const scroller = el("div", "scroller");
    const bar = el("div", "navbar");
    const back = actionButton("back", "", "back", t.id);
    back.append(el("span", "back-chevron", "‹"), el("span", "back-label", "Back"));
    const barTitle = el("span", "navbar-title");
    bar.append(back, barTitle);
    const inner = el("div", "page-inner");
    const title = el("h1", "large-title");
    const crumb = el("p", "crumb");
    const chips = lifecycleChips();
    const push = actionButton("primary push", "Show next page", "push", t.id);
    inner.append(title, crumb, chips.box, push, noteField(t.id, p.id));
    scroller.append(bar, inner);
    page.append(scroller);
    return { el: page, root: false, title, crumb, barTitle, backLabel: back.lastChild, chips, pushButtons: [push], actions: [back, push] };
  }

  function updatePage(pv, t, p, depth) {
    const top = depth === t.stack.length - 1;
    pv.el.classList.toggle("is-top", top);
    pv.el.inert = !top;
    pv.el.dataset.route = p.route;
    pv.el.dataset.appeared = p.appeared ? "true" : "false";
    pv.el.dataset.appearCount = String(p.appearCount);
    pv.chips.count.textContent = `Appeared ${p.appearCount}×`;
    pv.chips.first.textContent = p.appeared ? "First appear: done" : "First appear: not yet";
    pv.chips.first.classList.toggle("done", p.appeared);
    for (const b of pv.pushButtons) {
      b.dataset.depth = String(t.stack.length);
      b.disabled = t.stack.length >= MAX_DEPTH;
    }
    const ro = readOnly();
    for (const b of pv.actions) markReadOnly(b, ro);
    if (pv.root) {
      pv.title.textContent = t.title;
      pv.greetingText.textContent = greetingOf(t);
    } else {
      pv.title.textContent = p.route;
      pv.barTitle.textContent = p.route;
      const below = t.stack[depth - 1];
      pv.backLabel.textContent = depth === 1 ? t.title : below ? below.route : "Back";
      pv.crumb.textContent = [t.title].concat(t.stack.slice(1, depth + 1).map((q) => q.route)).join(" › ");
    }
  }

  // A control of a read-only page: still focusable and read out, marked as not usable
  // (aria-disabled, not `disabled`), with the why as its description.
  function markReadOnly(control, ro) {
    if (ro) {
      control.setAttribute("aria-disabled", "true");
      control.setAttribute("aria-describedby", "view-only-why");
    } else {
      control.removeAttribute("aria-disabled");
      control.removeAttribute("aria-describedby");
    }
  }

  function markPushed(tabId, pageId) {
    const v = panelViews.get(tabId);
    const pv = v && v.pages.get(pageId);
    if (!pv || REDUCED_MOTION) return;
    pv.el.classList.add("entering");
    pv.el.addEventListener("animationend", () => pv.el.classList.remove("entering"), { once: true });
  }

  function renderPresence() {
    const n = model.clientCount;
    presenceEl.hidden = connState !== "live";
    presenceEl.textContent = `${n} online`;
    presenceEl.setAttribute("aria-label", `${n} online: show who is connected`);
    renderRoster();
  }

  // ---------------------------------------------------------------- scrolling

  // Per tab: where we last put the list ourselves (a remote offset, maybe clamped), whether
  // a smooth scroll-to-top is running, and the throttle of our reports.
  const scrollCtl = new Map();
  function ctl(tabId) {
    let c = scrollCtl.get(tabId);
    if (!c) {
      c = { expect: null, smoothing: false, smoothTimer: null, timer: null, lastSentAt: -Infinity, lastSent: null };
      scrollCtl.set(tabId, c);
    }
    return c;
  }

  function scrollerOf(tabId) {
    const v = panelViews.get(tabId);
    if (!v) return null;
    for (const pv of v.pages.values()) if (pv.root) return pv.scroller;
    return null;
  }

  function wireScroller(tabId, scroller) {
    scroller.addEventListener("scroll", () => onListScroll(tabId, scroller), { passive: true });
    const userTookOver = () => endSmooth(tabId, true);
    for (const type of ["wheel", "touchstart", "pointerdown", "keydown"]) {
      scroller.addEventListener(type, userTookOver, { passive: true });
    }
    scroller.addEventListener("scrollend", () => {
      if (ctl(tabId).smoothing) endSmooth(tabId);
    });
  }

  function onListScroll(tabId, scroller) {
    const c = ctl(tabId);
    if (c.smoothing) return;
    const top = scroller.scrollTop;
    if (c.expect !== null) {
      if (Math.abs(top - c.expect) < 1) return; // where we put it
      c.expect = null;
    }
    scheduleReport(tabId);
  }

  function scheduleReport(tabId) {
    const c = ctl(tabId);
    if (c.timer || readOnly()) return; // read only: the list moves here only
    const wait = Math.max(0, c.lastSentAt + SCROLL_INTERVAL_MS - performance.now());
    c.timer = setTimeout(() => { c.timer = null; reportScroll(tabId); }, wait);
  }

  function reportScroll(tabId) {
    const c = ctl(tabId);
    const scroller = scrollerOf(tabId);
    const tab = model && tabById(tabId);
    if (!scroller || !tab || c.smoothing) return;
    const top = Math.round(scroller.scrollTop);
    if (c.expect !== null && Math.abs(top - c.expect) < 1) return;
    if (Math.abs(top - tab.scroll) < 1 && c.lastSent === null) return;
    if (c.lastSent !== null && Math.abs(top - c.lastSent) < 1) return;
    if (!connected()) return;
    client.scroll(top, { tab: tabId }).catch(onRefused);
    c.lastSentAt = performance.now();
    c.lastSent = top;
  }

  // After catching up, tell the others where our lists are if they moved while offline.
  function reportAllScrolls() {
    if (!model) return;
    for (const t of model.tabs) {
      const c = ctl(t.id);
      c.lastSent = null;
      const s = scrollerOf(t.id);
      if (s && Math.abs(s.scrollTop - t.scroll) >= 1 && (c.expect === null || Math.abs(s.scrollTop - c.expect) >= 1)) {
        scheduleReport(t.id);
      }
    }
  }

  function cancelReport(c) {
    clearTimeout(c.timer);
    c.timer = null;
    c.lastSent = null;
  }

  function setScrollInstant(tabId, offset) {
    const s = scrollerOf(tabId);
    if (!s) return;
    const c = ctl(tabId);
    cancelReport(c);
    endSmooth(tabId);
    s.scrollTop = Number(offset) || 0;
    c.expect = s.scrollTop; // may be clamped: this window's list can be shorter
  }

  function scrollToTopSmooth(tabId) {
    const s = scrollerOf(tabId);
    if (!s) return;
    const c = ctl(tabId);
    cancelReport(c);
    c.expect = 0;
    if (s.scrollTop <= 0 || REDUCED_MOTION) { s.scrollTop = 0; return; }
    c.smoothing = true;
    clearTimeout(c.smoothTimer);
    c.smoothTimer = setTimeout(() => endSmooth(tabId), 1500);
    s.scrollTo({ top: 0, behavior: "smooth" });
  }

  // `byUser`: the user grabbed the list mid-animation, so where it ends up is news.
  // Otherwise the animation ended (or timed out) and the list is where the state says.
  function endSmooth(tabId, byUser) {
    const c = scrollCtl.get(tabId);
    if (!c || !c.smoothing) return;
    c.smoothing = false;
    clearTimeout(c.smoothTimer);
    c.smoothTimer = null;
    const s = scrollerOf(tabId);
    if (!s) return;
    if (byUser) { c.expect = null; scheduleReport(tabId); } else c.expect = s.scrollTop;
  }

  // ---------------------------------------------------------------- status, log, toast

  function setConn(state, text) {
    connState = state;
    statusEl.dataset.state = state;
    document.body.dataset.conn = state;
    const labels = { live: "Live", connecting: "Connecting…", "catching-up": "Catching up…", reconnecting: "Reconnecting…" };
    statusTextEl.textContent = text || labels[state] || state;
    statusEl.title = client && client.clientId ? `client ${client.clientId} · epoch ${client.epoch} · ${client.connections} connection(s)` : "";
    retryEl.hidden = state !== "reconnecting";
    presenceEl.hidden = state !== "live" || !model; // a count from before the drop is stale
    if (presenceEl.hidden) closePresence(false); // and so is a list (its answers are lost)
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

  // Names for people, ids for the curious: an event as a line of names (tab titles, page
  // routes, client names) and, for the tooltip, the same with the ids the wire uses.
  function tabName(id) {
    const t = model && typeof id === "string" ? tabById(id) : null;
    return t ? t.title : String(id);
  }

  function pageName(tabId, pageId) {
    const t = model && typeof tabId === "string" ? tabById(tabId) : null;
    const p = t ? t.stack.find((x) => x.id === pageId) : null;
    if (!p) return String(pageId);
    return p.route === "root" ? `${t.title} (first page)` : `“${p.route}”`;
  }

  function nameOf(clientId) {
    if (clientId == null) return null;
    if (clientId === "tabd") return "tabd";
    if (myIds.has(clientId)) return "you";
    const c = model ? model.clients.find((x) => x.id === clientId) : null;
    return c ? c.name : clientId;
  }

  function describe(e) {
    const ids = JSON.stringify(Object.fromEntries(Object.entries(e).filter(([k]) => k !== "kind" && k !== "seq" && k !== "value")));
    let text;
    switch (e.kind) {
      case "selected": text = `${tabName(e.from)} → ${tabName(e.to)}`; break;
      case "appear": case "firstAppear": case "disappear": text = pageName(e.tab, e.page); break;
      case "pushed": text = `${tabName(e.tab)} + “${e.route}”`; break;
      case "popped": text = `${tabName(e.tab)} − ${(e.pages || []).map((p) => pageName(e.tab, p)).join(", ")}`; break;
      case "scrollToTop": text = `${tabName(e.tab)} · counter ${e.count}`; break;
      case "scrolled": text = `${tabName(e.tab)} · ${e.offset}`; break;
      case "valueSet": text = `${tabName(e.tab)} · ${e.key} = ${JSON.stringify(e.value)}`; break;
      case "tabAdded": text = `${e.tab && e.tab.title} at ${e.index}`; break;
      case "tabUpdated": text = `${tabName(e.tab && e.tab.id)} → “${e.tab && e.tab.title}”`; break;
      case "tabMoved": text = `${tabName(e.tab)} → position ${e.index}`; break;
      case "tabRemoved": text = tabName(e.tab); break;
      case "clientJoined": text = e.client ? e.client.name : ""; break;
      case "clientLeft": text = nameOf(e.client) || ""; break;
      case "presenceCounted": text = `${e.count} online: counted from here on, not listed${nodesText(e.nodes)}`; break;
      case "clientCount": {
        const total = countAfter(e);
        text = total === null ? `${e.count} online` : `${e.count} on ${e.node} · ${total} online`;
        break;
      }
      case "presenceListed": text = `listed again: ${Array.isArray(e.clients) ? e.clients.length : "?"} online${e.node != null ? ` (${e.node})` : ""}`; break;
      case "clientIdsReserved": text = `ids c${e.from}–c${e.from + e.count - 1} set aside for joins${e.node != null ? ` on ${e.node}` : ""}`; break;
      default: text = "";
    }
    return { text, ids: e.kind === "tabAdded" || e.kind === "tabUpdated" ? `tab ${e.tab && e.tab.id}` : ids };
  }

  // A presenceCounted's counts by node, as " (web1 100, web2 50)".
  function nodesText(nodes) {
    if (!nodes || typeof nodes !== "object") return "";
    return ` (${Object.entries(nodes).map(([k, v]) => `${k} ${v}`).join(", ")})`;
  }

  // The room's count after a clientCount of one node (null without a node or nodes): the
  // model's counts by node, that one replaced. Asked just before the event applies.
  function countAfter(e) {
    if (typeof e.node !== "string" || !model || !model.nodes) return null;
    let total = Number(e.count) || 0;
    for (const [k, v] of Object.entries(model.nodes)) if (k !== e.node) total += v;
    return total;
  }

  // `said`: { text, ids } (a line of names, and the ids behind it for the tooltip).
  function addLog(e, by, said) {
    logEntries.push({ seq: e.seq, kind: e.kind, text: said.text, ids: said.ids, by: by });
    if (logEntries.length > LOG_LIMIT) logEntries.splice(0, logEntries.length - LOG_LIMIT);
  }

  function renderLog() {
    const frag = document.createDocumentFragment();
    for (let i = logEntries.length - 1; i >= 0; i--) {
      const x = logEntries[i];
      const marker = x.seq == null;
      const li = el("li", "log-entry kind-" + x.kind + (marker ? " log-marker" : ""));
      if (!marker) li.dataset.seq = String(x.seq);
      li.dataset.kind = x.kind;
      if (x.ids) li.title = x.ids;
      li.append(el("span", "log-n", marker ? "" : "#" + x.seq), el("span", "log-kind", x.kind), el("span", "log-text", x.text));
      if (x.by) li.append(el("span", "log-by", x.by));
      frag.append(li);
    }
    logListEl.replaceChildren(frag);
  }

  // An error frame in plain words where there are some, else as tabd says it.
  function errorText(f) {
    if (f.code === "forbidden") return "Not done: this link lets you watch this tab bar, not change it.";
    return `${f.code}: ${f.message}`;
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

  // Copies the room's link. Where the clipboard is out of reach (a page served over plain
  // http from another host than localhost, a refused permission), shows it selected in a
  // field to copy by hand.
  async function shareRoom() {
    const link = roomLink();
    if (navigator.clipboard && typeof navigator.clipboard.writeText === "function") {
      try {
        await navigator.clipboard.writeText(link);
        closeSharePanel(false);
        showToast("Link copied");
        return;
      } catch (e) {
        // refused: the field below
      }
    }
    openSharePanel(link);
  }

  function openSharePanel(link) {
    shareFieldEl.value = link;
    sharePanelEl.hidden = false;
    shareFieldEl.focus();
    shareFieldEl.select();
    // The old way still copies where the clipboard API is missing (plain http).
    let copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    shareHintEl.textContent = copied ? "Link copied" : "Press Ctrl+C (⌘C on a Mac) to copy it";
    if (copied) showToast("Link copied");
  }

  function closeSharePanel(refocus) {
    if (sharePanelEl.hidden) return;
    sharePanelEl.hidden = true;
    if (refocus) shareEl.focus();
  }

  shareEl.addEventListener("click", shareRoom);
  shareCloseEl.addEventListener("click", () => closeSharePanel(true));
  shareFieldEl.addEventListener("focus", () => shareFieldEl.select());
  sharePanelEl.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape") return;
    ev.preventDefault();
    closeSharePanel(true);
  });
  document.addEventListener("click", (ev) => {
    if (!sharePanelEl.contains(ev.target) && !shareEl.contains(ev.target)) closeSharePanel(false);
  });

  // ---------------------------------------------------------------- who is connected

  function openPresence() {
    if (!model || presenceEl.hidden) return;
    presencePanelEl.hidden = false;
    presenceEl.setAttribute("aria-expanded", "true");
    roster = null;
    renderRoster();
    presencePanelEl.focus();
  }

  // Forgets the list: answers still on their way are not news any more.
  function closePresence(refocus) {
    if (presencePanelEl.hidden) return;
    presencePanelEl.hidden = true;
    presenceEl.setAttribute("aria-expanded", "false");
    roster = null;
    presenceListEl.replaceChildren();
    presenceMoreEl.hidden = true;
    if (refocus) presenceEl.focus();
  }

  // Asks for the page after `after` (null: the first). Not connected: said in the panel.
  function askClients(after) {
    if (!connected()) {
      roster.asked = null;
      roster.error = "Not connected: the list was not asked for.";
      return;
    }
    const asked = {};
    const list = roster;
    roster.asked = asked;
    roster.error = null;
    client.clients({ after, limit: CLIENTS_PAGE }).then(
      (page) => onClientsPage(list, asked, page),
      (error) => onClientsRefused(list, asked, error));
  }

  // An answer to the last `clients` this panel sent (any other is stale): its clients join
  // the list (each id once), its `next` says whether there are more.
  function onClientsPage(list, asked, f) {
    if (roster !== list || roster.mode !== "counted" || roster.asked !== asked) return;
    roster.asked = null;
    for (const c of Array.isArray(f.clients) ? f.clients : []) {
      if (!c || typeof c.id !== "string" || roster.ids.has(c.id)) continue;
      roster.ids.add(c.id);
      roster.clients.push({ id: c.id, name: typeof c.name === "string" ? c.name : c.id });
    }
    roster.next = typeof f.next === "string" ? f.next : null;
    roster.node = typeof f.node === "string" ? f.node : null;
    renderRoster();
  }

  function onClientsRefused(list, asked, error) {
    if (roster !== list || roster.asked !== asked) return;
    roster.asked = null;
    roster.error = `The list could not be read (${errorText(error)}).`;
    renderRoster();
  }

  function rosterRow(c) {
    const li = el("li", "presence-item");
    li.dataset.client = c.id;
    li.append(el("span", "presence-name", c.name), el("span", "presence-id", c.id));
    if (myIds.has(c.id)) {
      li.dataset.me = "true";
      li.append(el("span", "presence-me", "(this window)"));
    }
    return li;
  }

  // Draws the open panel for the room as the model has it now. A listed room's list is
  // redrawn from the model each time; a counted room's grows by the pages answered. When
  // the room changes between the two, the list starts again (counted: from the first page).
  function renderRoster() {
    if (presencePanelEl.hidden || !model) return;
    if (!roster || roster.mode !== model.presence) {
      roster = { mode: model.presence, clients: [], ids: new Set(), drawn: 0, next: null, asked: null, node: null, error: null };
      presenceListEl.replaceChildren();
      if (roster.mode === "counted") askClients(null);
    }
    const n = model.clientCount;
    presenceCountEl.textContent = `${n} online`;
    presencePanelEl.dataset.presence = roster.mode;
    const notes = [];
    if (roster.mode === "listed") {
      presenceListEl.replaceChildren(...model.clients.map(rosterRow));
      // An older tabd's snapshot listed its first 100 only.
      if (n > model.clients.length) notes.push(`${n - model.clients.length} more not listed`);
      else if (n === 0) notes.push("No one");
    } else {
      for (; roster.drawn < roster.clients.length; roster.drawn++) presenceListEl.append(rosterRow(roster.clients[roster.drawn]));
      if (roster.node) notes.push(`Connected through ${roster.node}`);
      if (roster.error) notes.push(roster.error);
      else if (roster.asked !== null) notes.push("Loading…");
      else if (roster.clients.length === 0) notes.push("No one");
    }
    presenceHintEl.textContent = notes.join(" · ");
    const more = roster.mode === "counted" && roster.next !== null;
    if (!more && document.activeElement === presenceMoreEl) presenceCloseEl.focus();
    presenceMoreEl.hidden = !more;
  }

  presenceEl.addEventListener("click", () => {
    if (presencePanelEl.hidden) openPresence();
    else closePresence(true);
  });
  presenceMoreEl.addEventListener("click", () => {
    if (!roster || roster.mode !== "counted" || roster.next === null) return;
    askClients(roster.next);
    renderRoster();
  });
  presenceCloseEl.addEventListener("click", () => closePresence(true));
  presencePanelEl.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape") return;
    ev.preventDefault();
    closePresence(true);
  });
  document.addEventListener("click", (ev) => {
    if (!presencePanelEl.contains(ev.target) && !presenceEl.contains(ev.target)) closePresence(false);
  });

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
