// <tabd-tab-bar>: tabd's tab bar as a custom element, for any page.
//
//   <script type="module" src="http://127.0.0.1:8080/tabd-tab-bar.js"></script>
//   <tabd-tab-bar server="http://127.0.0.1:8080/" room="main"></tabd-tab-bar>
//
// It draws the room's tabs (icon, title, badge; the selected one in its colour) in an open
// shadow root, and a click or Enter/Space on a tab sends `tap` (select it; on the selected
// tab: back to its first page, then scroll to the top). Arrow keys, Home and End move the
// focus along the bar (the selected tab is the one Tab reaches). A view token makes it read
// only: the tabs can be focused and read, and say why they do nothing.
//
// Attributes: server (tabd's URL, as for connect()), room (default "main"), token, name,
// label (the tablist's accessible name, default "Tabs"). The `getToken` property (an async
// function, as tabd.js's option) gives the element's connection fresh tokens: for each
// connection, and before a token runs out. Instead of server, a page that has its own
// client sets the `client` property; the element then follows that client and does not
// close it. The element reflects `connection` (the client's connection state) and
// `read-only` on itself, for the page's CSS.
//
// A tapped tab shows at once that its tap is on its way (aria-busy, the `pending` part),
// until tabd answers or refuses it; the tab bar follows the page's direction (right to
// left: the arrow keys follow the bar) and Windows' high-contrast (forced colours) mode.
//
// DOM events (bubbling, composed): tabd-welcome {session, client}, tabd-change {state}
// after each drawing, tabd-connection {connection, attempt, retryAt, error}, tabd-error
// {error, command?, tab?} (a tap not sent or refused, a closed client); and, with `by` (the
// client id that caused it) and `live` (false for replays after a reconnect): tabd-select
// {tab, from}, tabd-scroll-to-top {tab, count}, tabd-appear, tabd-first-appear and
// tabd-disappear {tab, page, route}.
//
// Theming: CSS custom properties on the element (or any ancestor) — see docs/WEB.md —
// and the parts bar, tab, selected, icon, title and badge.
import { TabdClient, TabdError } from "./tabd.js";
import { tabdIcon } from "./icons.js";
import { css, inkFor, luminance, mix, rgbOf } from "./colors.js";

const READ_ONLY_WHY = "You can watch this tab bar; you cannot change it.";

const STYLE = `
:host {
  display: block;
  --_bg: var(--tabd-bar-background, transparent);
  --_hover: var(--tabd-tab-hover-background, rgba(127, 127, 127, 0.12));
  --_badge: var(--tabd-badge-background, #d70015);
  --_badge-fg: var(--tabd-badge-color, #ffffff);
  --_gap: var(--tabd-gap, 6px);
  --_radius: var(--tabd-tab-radius, 10px);
  --_max: var(--tabd-tab-max-width, 168px);
  --_font: var(--tabd-font, system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans", Arial, sans-serif);
  --_title-size: var(--tabd-title-size, 11px);
  font-family: var(--_font);
}
:host([hidden]) { display: none; }
.bar {
  display: flex;
  justify-content: center;
  gap: var(--_gap);
  max-width: var(--tabd-bar-max-width, 760px);
  margin: 0 auto;
  background: var(--_bg);
}
.tab {
  flex: 1 1 0;
  min-width: 0;
  max-width: var(--_max);
  display: flex;
  flex-direction: column;
  align-items: center;
  gap: 3px;
  padding: 7px 4px 6px;
  border: 0;
  border-radius: var(--_radius);
  background: transparent;
  color: var(--tabd-tab-color, var(--_fg-auto, #5e5e63));
  font: inherit;
  cursor: pointer;
  transition: background-color 0.12s ease, color 0.12s ease;
}
.tab:hover:not([aria-selected="true"]) { background: var(--_hover); }
.tab[aria-selected="true"] {
  color: var(--tabd-selected-color, var(--tab-ink));
  background: var(--tabd-selected-background, var(--tab-soft));
}
.tab[aria-disabled="true"] { cursor: not-allowed; }
.tab[aria-disabled="true"]:not([aria-selected="true"]) { opacity: 0.5; }
.tab[aria-disabled="true"]:hover:not([aria-selected="true"]) { background: transparent; }
:host([connection="reconnecting"]) .tab, :host([connection="connecting"]) .tab { opacity: 0.55; }
.tab:focus { outline: none; }
.tab:focus-visible { outline: 2px solid var(--tabd-focus-color, var(--tab-ink)); outline-offset: 2px; }
.icon-box { position: relative; display: block; width: 24px; height: 24px; }
.icon { display: block; width: 24px; height: 24px; }
.tab[aria-selected="true"] .icon { stroke-width: 2.2; }
.icon-letter {
  display: grid;
  place-items: center;
  box-sizing: border-box;
  border: 1.8px solid currentColor;
  border-radius: 7px;
  font-size: 13px;
  font-weight: 800;
  line-height: 1;
}
.title {
  max-width: 100%;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  font-size: var(--_title-size);
  font-weight: 600;
  letter-spacing: 0.01em;
}
.badge {
  position: absolute;
  top: -5px;
  inset-inline-start: 15px;
  min-width: 18px;
  height: 18px;
  box-sizing: border-box;
  padding: 0 5px;
  border-radius: 9px;
  background: var(--_badge);
  color: var(--_badge-fg);
  font-size: 11px;
  font-weight: 700;
  line-height: 18px;
  text-align: center;
  white-space: nowrap;
}
.badge[hidden], .why { display: none; }
@media (min-width: 720px) {
  .tab { padding: 8px 6px 7px; }
  .title { font-size: var(--tabd-title-size, 12px); }
}
/* A tap on its way to tabd: shown in the frame of the tap, until tabd answers. */
.tab[aria-busy="true"] { background: var(--tabd-pending-background, var(--tab-soft)); box-shadow: inset 0 0 0 1.5px var(--tab-soft); }
.tab[aria-busy="true"] .icon-box { transform: scale(0.92); }
.icon-box { transition: transform 0.08s ease; }
@media (prefers-reduced-motion: reduce) {
  .tab, .icon-box { transition: none; }
  .tab[aria-busy="true"] .icon-box { transform: none; }
}
/* Forced colours (Windows high contrast): the system's colours say what is selected,
   pending and disabled; nothing rests on a colour of the page's. */
@media (forced-colors: active) {
  .tab { border: 1px solid transparent; color: ButtonText; }
  .tab[aria-selected="true"] { background: Highlight; color: HighlightText; border-color: Highlight; forced-color-adjust: none; }
  .tab[aria-busy="true"] { border: 1px dashed ButtonText; box-shadow: none; }
  .tab[aria-disabled="true"]:not([aria-selected="true"]) { color: GrayText; opacity: 1; }
  .tab:focus-visible { outline: 2px solid ButtonText; }
  .badge { border: 1px solid CanvasText; forced-color-adjust: auto; }
}
`;

let shared = null; // one sheet for every bar of the page
function sheet() {
  if (!shared) {
    shared = new CSSStyleSheet();
    shared.replaceSync(STYLE);
  }
  return shared;
}

// ------------------------------------------------------------------ colour

// The colour a transparent-ish element shows: its own background and its ancestors',
// crossing shadow roots, over the scheme's canvas.
function backdropOf(el, dark) {
  const layers = [];
  for (let n = el; n; n = n.parentElement || (n.getRootNode && n.getRootNode().host) || null) {
    const m = /rgba?\(([^)]+)\)/.exec(getComputedStyle(n).backgroundColor || "");
    if (!m) continue;
    const parts = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    const alpha = parts.length > 3 ? parts[3] : 1;
    if (alpha > 0) layers.push([parts.slice(0, 3), alpha]);
    if (alpha >= 1) break;
  }
  // The canvas is dark only when the scheme is and the page says it supports dark.
  const scheme = getComputedStyle(document.documentElement).colorScheme || "";
  let color = dark && /dark/.test(scheme) ? [18, 18, 18] : [255, 255, 255];
  for (let i = layers.length - 1; i >= 0; i--) color = mix(color, layers[i][0], layers[i][1]);
  return color;
}

// ------------------------------------------------------------------ the element

export class TabdTabBar extends HTMLElement {
  static observedAttributes = ["server", "room", "token", "name", "label"];

  #client = null;
  #own = false; // the element made #client (and closes it)
  #startedWith = null; // the attributes #client was made from
  #restartQueued = false;
  #unsubscribe = null;
  #views = new Map(); // tab id -> {btn, iconBox, iconSig, title, badge}
  #bar;
  #why;
  #dark;
  #getToken = null;
  #pending = new Map(); // tab id -> taps on their way

  constructor() {
    super();
    const root = this.attachShadow({ mode: "open" });
    this.#bar = document.createElement("div");
    this.#bar.className = "bar";
    this.#bar.setAttribute("part", "bar");
    this.#bar.setAttribute("role", "tablist");
    this.#why = document.createElement("span");
    this.#why.className = "why";
    this.#why.id = "why";
    this.#why.textContent = READ_ONLY_WHY;
    // A constructed style sheet: a page whose Content-Security-Policy allows no inline
    // styles (tabd's own page among them) still styles the bar.
    if ("adoptedStyleSheets" in root && typeof CSSStyleSheet === "function" && "replaceSync" in CSSStyleSheet.prototype) {
      root.adoptedStyleSheets = [sheet()];
    } else {
      const style = document.createElement("style");
      style.textContent = STYLE;
      root.append(style);
    }
    root.append(this.#bar, this.#why);
    this.#bar.addEventListener("click", (ev) => this.#onClick(ev));
    this.#bar.addEventListener("keydown", (ev) => this.#onKey(ev));
    this.#dark = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
    if (this.#dark) this.#dark.addEventListener("change", () => this.#render());
  }

  /** The TabdClient the element follows (its own, or the one a page gave it). */
  get client() { return this.#client; }
  set client(client) {
    this.#detach();
    this.#own = false;
    this.#attach(client || null);
  }

  /** The tab buttons' tablist (in the shadow root), for tests and for focus. */
  get tablist() { return this.#bar; }

  /** The element's token provider (see tabd.js's getToken): set it before the element
   * connects, or it reconnects with it. */
  get getToken() { return this.#getToken; }
  set getToken(provider) {
    this.#getToken = typeof provider === "function" ? provider : null;
    if (this.#own && this.isConnected && this.hasAttribute("server")) {
      this.#detach();
      this.#start();
    }
  }

  connectedCallback() {
    this.#bar.setAttribute("aria-label", this.getAttribute("label") || "Tabs");
    if (!this.#client && this.hasAttribute("server")) this.#start();
    this.#render();
  }

  disconnectedCallback() {
    if (this.#own) {
      this.#detach();
      this.#own = false;
    }
  }

  attributeChangedCallback(name, before, after) {
    if (before === after) return;
    if (name === "label") { this.#bar.setAttribute("aria-label", after || "Tabs"); return; }
    // Another server, room, token or name: a new connection of the element's own, once
    // every attribute of this change is set (an upgrade sets them one by one).
    if (this.#restartQueued) return;
    this.#restartQueued = true;
    queueMicrotask(() => {
      this.#restartQueued = false;
      if (!this.isConnected || (this.#client && !this.#own) || !this.hasAttribute("server")) return;
      if (this.#client && this.#startedWith === this.#key()) return;
      this.#detach();
      this.#start();
    });
  }

  // What the element's own connection is made from.
  #key() {
    return ["server", "room", "token", "name"].map((a) => this.getAttribute(a)).join("\u0000");
  }

  #start() {
    this.#startedWith = this.#key();
    let client;
    try {
      client = new TabdClient(this.getAttribute("server"), {
        room: this.getAttribute("room") || undefined,
        token: this.getAttribute("token") || undefined,
        name: this.getAttribute("name") || "tab bar",
        getToken: this.#getToken || undefined,
      });
    } catch (error) {
      this.#emit("tabd-error", { error });
      return;
    }
    this.#own = true;
    this.#attach(client);
  }

  #attach(client) {
    this.#client = client;
    if (!client) { this.#render(); return; }
    this.#unsubscribe = client.subscribe((u) => this.#onUpdate(u));
    this.setAttribute("connection", client.connection);
    this.#render();
  }

  #detach() {
    if (this.#unsubscribe) this.#unsubscribe();
    this.#unsubscribe = null;
    if (this.#own && this.#client) this.#client.close();
    this.#client = null;
    for (const v of this.#views.values()) v.btn.remove();
    this.#views.clear();
    this.#pending.clear();
  }

  #emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }

  #onUpdate(u) {
    switch (u.type) {
      case "connection":
        this.setAttribute("connection", u.connection);
        this.#emit("tabd-connection", { connection: u.connection, attempt: u.attempt, retryAt: u.retryAt, error: u.error });
        if (u.connection === "closed" && u.error && u.error.code !== "closed") this.#emit("tabd-error", { error: u.error });
        break;
      case "welcome":
        this.toggleAttribute("read-only", this.#client.readOnly);
        this.#emit("tabd-welcome", { session: u.session, client: this.#client });
        break;
      case "snapshot":
        this.#render();
        break;
      case "events":
        this.#render();
        for (const e of u.events) this.#announce(e, u.by, u.live);
        break;
      default:
        break;
    }
  }

  #announce(e, by, live) {
    const route = (tab, page) => {
      const t = this.#client.state.tabs.find((x) => x.id === tab);
      const p = t && t.stack.find((q) => q.id === page);
      return p ? p.route : null;
    };
    switch (e.kind) {
      case "selected": this.#emit("tabd-select", { tab: e.to, from: e.from, by, live }); break;
      case "scrollToTop": this.#emit("tabd-scroll-to-top", { tab: e.tab, count: e.count, by, live }); break;
      case "appear": this.#emit("tabd-appear", { tab: e.tab, page: e.page, route: route(e.tab, e.page), by, live }); break;
      case "firstAppear": this.#emit("tabd-first-appear", { tab: e.tab, page: e.page, route: route(e.tab, e.page), by, live }); break;
      // A page that disappears by a pop is gone from the state already: no route then.
      case "disappear": this.#emit("tabd-disappear", { tab: e.tab, page: e.page, route: route(e.tab, e.page), by, live }); break;
      default: break;
    }
  }

  #readOnly() {
    return !!(this.#client && this.#client.readOnly);
  }

  #render() {
    const state = this.#client && this.#client.state;
    if (!state) {
      this.#bar.setAttribute("aria-busy", "true");
      return;
    }
    this.#bar.removeAttribute("aria-busy");
    const ro = this.#readOnly();
    this.toggleAttribute("read-only", ro);
    const ids = new Set(state.tabs.map((t) => t.id));
    const root = this.shadowRoot;
    const focused = root.activeElement && root.activeElement.dataset ? root.activeElement.dataset.tab : null;
    for (const [id, v] of this.#views) {
      if (!ids.has(id)) { v.btn.remove(); this.#views.delete(id); }
    }
    const dark = !!(this.#dark && this.#dark.matches);
    const under = backdropOf(this.#bar, dark);
    // The unselected tabs' grey, for what is behind the bar (a page may keep a light
    // background in dark mode).
    this.#bar.style.setProperty("--_fg-auto", luminance(under) > 0.18 ? "#5e5e63" : "#aeaeb2");
    state.tabs.forEach((t, i) => {
      let v = this.#views.get(t.id);
      if (!v) { v = this.#button(t); this.#views.set(t.id, v); }
      const selected = t.id === state.selected;
      const sig = t.icon + "\u0000" + t.title;
      if (v.iconSig !== sig) {
        v.iconBox.replaceChild(tabdIcon(t.icon, t.title), v.iconBox.firstChild);
        v.iconSig = sig;
      }
      v.title.textContent = t.title;
      v.badge.hidden = t.badge == null;
      v.badge.textContent = t.badge == null ? "" : t.badge;
      v.btn.setAttribute("aria-label", t.badge == null ? t.title : `${t.title}, ${t.badge}`);
      v.btn.setAttribute("aria-selected", selected ? "true" : "false");
      const pending = this.#pending.has(t.id);
      if (pending) v.btn.setAttribute("aria-busy", "true"); else v.btn.removeAttribute("aria-busy");
      v.btn.setAttribute("part", (selected ? "tab selected" : "tab") + (pending ? " pending" : ""));
      v.btn.classList.toggle("is-selected", selected);
      v.btn.dataset.color = t.color;
      if (ro) {
        v.btn.setAttribute("aria-disabled", "true");
        v.btn.setAttribute("aria-describedby", "why");
        v.btn.title = READ_ONLY_WHY;
      } else {
        v.btn.removeAttribute("aria-disabled");
        v.btn.removeAttribute("aria-describedby");
        v.btn.removeAttribute("title");
      }
      const rgb = rgbOf(t.color);
      const soft = mix(under, rgb, 0.3);
      v.btn.style.setProperty("--tab-color", css(rgb));
      v.btn.style.setProperty("--tab-soft", css(rgb, 0.3));
      v.btn.style.setProperty("--tab-ink", css(inkFor(rgb, soft)));
      if (this.#bar.children[i] !== v.btn) this.#bar.insertBefore(v.btn, this.#bar.children[i] || null);
    });
    // Roving tabindex: the focused tab while the bar has the focus, else the selected one.
    const rover = focused && ids.has(focused) ? focused : state.selected;
    for (const [id, v] of this.#views) v.btn.tabIndex = id === rover ? 0 : -1;
    if (focused && this.#views.has(focused) && root.activeElement !== this.#views.get(focused).btn) {
      this.#views.get(focused).btn.focus();
    }
    this.#emit("tabd-change", { state });
  }

  #button(t) {
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "tab";
    btn.id = "tab-" + t.id;
    btn.dataset.tab = t.id;
    btn.setAttribute("role", "tab");
    const iconBox = document.createElement("span");
    iconBox.className = "icon-box";
    iconBox.setAttribute("part", "icon");
    iconBox.appendChild(document.createElement("span"));
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.setAttribute("part", "badge");
    badge.setAttribute("aria-hidden", "true");
    const title = document.createElement("span");
    title.className = "title";
    title.setAttribute("part", "title");
    iconBox.appendChild(badge);
    btn.append(iconBox, title);
    return { btn, iconBox, iconSig: null, title, badge };
  }

  #onClick(ev) {
    const btn = ev.target.closest("[role=tab]");
    if (!btn || !this.#client || this.#readOnly()) return;
    if (this.#client.connection !== "live" && this.#client.connection !== "catching-up") {
      // A tap is for now: it is not kept for a later connection.
      const error = new TabdError("not_connected", "not connected: the tap was not sent");
      this.#emit("tabd-error", { error, command: "tap", tab: btn.dataset.tab });
      return;
    }
    const tab = btn.dataset.tab;
    const client = this.#client;
    // Shown now, in this frame: the tap is on its way (a native bar reacts at once).
    this.#markPending(tab, +1);
    client.tap(tab).catch((error) => {
      // Not connected, or tabd said no: the page may say so; nothing changed.
      if (client === this.#client) this.#emit("tabd-error", { error, command: "tap", tab });
    }).finally(() => { if (client === this.#client) this.#markPending(tab, -1); });
  }

  // One more (or one fewer) tap of `tab` on its way; the tab shows it while there is one.
  #markPending(tab, delta) {
    const n = (this.#pending.get(tab) || 0) + delta;
    if (n > 0) this.#pending.set(tab, n); else this.#pending.delete(tab);
    const v = this.#views.get(tab);
    if (!v) return;
    const selected = v.btn.getAttribute("aria-selected") === "true";
    if (n > 0) v.btn.setAttribute("aria-busy", "true"); else v.btn.removeAttribute("aria-busy");
    v.btn.setAttribute("part", (selected ? "tab selected" : "tab") + (n > 0 ? " pending" : ""));
  }

  #onKey(ev) {
    const btns = Array.from(this.#bar.querySelectorAll("[role=tab]"));
    const i = btns.indexOf(this.shadowRoot.activeElement);
    if (i < 0) return;
    let j = null;
    // Right to left, the bar runs from the right: the arrows follow what the eye sees.
    const rtl = getComputedStyle(this).direction === "rtl";
    const next = rtl ? "ArrowLeft" : "ArrowRight";
    const previous = rtl ? "ArrowRight" : "ArrowLeft";
    if (ev.key === next || ev.key === "ArrowDown") j = (i + 1) % btns.length;
    else if (ev.key === previous || ev.key === "ArrowUp") j = (i - 1 + btns.length) % btns.length;
    else if (ev.key === "Home") j = 0;
    else if (ev.key === "End") j = btns.length - 1;
    if (j === null) return;
    ev.preventDefault();
    btns.forEach((b, k) => { b.tabIndex = k === j ? 0 : -1; });
    btns[j].focus();
  }
}

if (!customElements.get("tabd-tab-bar")) customElements.define("tabd-tab-bar", TabdTabBar);
