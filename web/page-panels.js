// The page's panels: one per tab, each with its pages (one element per page id, all of
// them in the page, hidden ones with visibility:hidden, so scroll offsets and typed text
// survive), drawn from the room's state. The tab bar itself is <tabd-tab-bar>'s.
import { css, fillFor, inkFor, mix, rgbOf } from "./colors.js";
import { el, markReadOnly } from "./page-dom.js";

const ITEMS = 20; // a first page's list
const MAX_DEPTH = 64; // tabd's bound on a tab's stack: no push button past it

/** The greeting of seed 002, derived from a tab's state: the value kept under
 * `greeting`, else whether its first page has appeared. */
export function greetingOf(tab) {
  const root = tab.stack[0];
  if (Object.prototype.hasOwnProperty.call(tab.values, "greeting")) {
    const v = tab.values.greeting;
    return typeof v === "string" ? v : JSON.stringify(v);
  }
  return root && root.appeared ? "On Appear" : "Initial";
}

/** The route a push from a stack of `depth` pages names. */
export function nextRoute(depth) {
  return depth <= 1 ? "next" : "next" + depth;
}

export class Panels {
  #views = new Map(); // tab id -> { panel, pages: Map(page id -> pageView) }
  #contentEl;
  #lists;
  #reducedMotion;

  /** `lists`: {wire(tabId, scroller), forget(tabId)}, the scroll sync of each first page's
   * list. */
  constructor(contentEl, lists, { reducedMotion }) {
    this.#contentEl = contentEl;
    this.#lists = lists;
    this.#reducedMotion = reducedMotion;
  }

  /** Draws every tab's panel and pages as `state` has them. */
  render(state, readOnly) {
    const ids = new Set(state.tabs.map((t) => t.id));
    for (const [id, v] of this.#views) {
      if (!ids.has(id)) { v.panel.remove(); this.#views.delete(id); this.#lists.forget(id); }
    }
    for (const t of state.tabs) {
      let v = this.#views.get(t.id);
      if (!v) { v = this.#createPanel(t); this.#views.set(t.id, v); }
      const selected = t.id === state.selected;
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
          pv = depth === 0 ? this.#createRootPage(t, p) : createPushedPage(t, p);
          v.pages.set(p.id, pv);
          v.panel.appendChild(pv.el);
        }
        updatePage(pv, t, p, depth, readOnly);
      });
    }
  }

  /** Removes every panel (a new history: page ids from before mean nothing now). */
  reset() {
    for (const v of this.#views.values()) v.panel.remove();
    this.#views.clear();
  }

  /** The list of the tab's first page, or null. */
  scrollerOf(tabId) {
    const v = this.#views.get(tabId);
    if (!v) return null;
    for (const pv of v.pages.values()) if (pv.root) return pv.scroller;
    return null;
  }

  /** A page pushed live slides in (unless the user asked for reduced motion). */
  markPushed(tabId, pageId) {
    const v = this.#views.get(tabId);
    const pv = v && v.pages.get(pageId);
    if (!pv || this.#reducedMotion) return;
    pv.el.classList.add("entering");
    pv.el.addEventListener("animationend", () => pv.el.classList.remove("entering"), { once: true });
  }

  #createPanel(t) {
    const panel = document.createElement("section");
    panel.className = "panel";
    panel.id = "panel-" + t.id;
    panel.dataset.tab = t.id;
    panel.setAttribute("role", "tabpanel");
    // Named by its tab's title (the tab itself is in the tab bar's shadow root, which an
    // id reference cannot reach).
    panel.setAttribute("aria-label", t.title);
    this.#contentEl.appendChild(panel);
    return { panel, pages: new Map() };
  }

  #createRootPage(t, p) {
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
    this.#lists.wire(t.id, scroller);
    return { el: page, root: true, title, greetingText, chips, pushButtons: [push, after], actions: [greeting, push, after], scroller };
  }
}

// A tab's colour on the page: as given for borders and tints, and in readable shades for
// text on the page's surfaces (--tab-ink) and under white text (--tab-fill), for the
// scheme in use (WCAG AA).
function paint(element, color) {
  const rgb = rgbOf(color);
  const surface = rgbOf(getComputedStyle(document.documentElement).getPropertyValue("--surface-2").trim());
  element.style.setProperty("--tab-color", css(rgb));
  element.style.setProperty("--tab-tint", css(rgb, 0.3));
  element.style.setProperty("--tab-soft", css(rgb, 0.14));
  element.style.setProperty("--tab-ink", css(inkFor(rgb, mix(surface, rgb, 0.2))));
  element.style.setProperty("--tab-fill", css(fillFor(rgb)));
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

function updatePage(pv, t, p, depth, readOnly) {
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
  for (const b of pv.actions) markReadOnly(b, readOnly);
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
