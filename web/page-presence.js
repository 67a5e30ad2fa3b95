// The page's "N online" button and its panel of who is connected: in a listed room the
// state's own list (it follows joins and leaves live); in a counted room (past tabd's
// --presence-limit the state lists no one) pages asked for with `clients`, and "Show more"
// while the answer has a `next`. The panel closes when the connection drops.
import { el, errorText } from "./page-dom.js";

export class PresencePanel {
  #els;
  #host;
  #pageSize;
  // The list while the panel is open (null when closed), for the room's presence when it
  // was opened: { mode, clients, ids, drawn, next, asked, node, error }. A listed room's
  // list is the state's; a counted room's is the pages answered so far (`asked`: the
  // `clients` request waiting for its answer, `next`: the cursor of the page after them,
  // null at the end).
  #roster = null;

  /** `els`: {button, panel, count, list, hint, more, close}; `host`: {state() (or null),
   * me (every client id this page had), connected(), clients({after, limit}) (a Promise of
   * a page)}. */
  constructor(els, host, { pageSize }) {
    this.#els = els;
    this.#host = host;
    this.#pageSize = pageSize;
    els.button.addEventListener("click", () => {
      if (els.panel.hidden) this.#open();
      else this.close(true);
    });
    els.more.addEventListener("click", () => {
      const r = this.#roster;
      if (!r || r.mode !== "counted" || r.next === null) return;
      this.#ask(r.next);
      this.render();
    });
    els.close.addEventListener("click", () => this.close(true));
    els.panel.addEventListener("keydown", (ev) => {
      if (ev.key !== "Escape") return;
      ev.preventDefault();
      this.close(true);
    });
    document.addEventListener("click", (ev) => {
      if (!els.panel.contains(ev.target) && !els.button.contains(ev.target)) this.close(false);
    });
  }

  /** The button for `state`'s count, shown only while live (a count from before a drop is
   * stale, and so is a list: its answers are lost). */
  show(state, live) {
    const b = this.#els.button;
    b.hidden = !live || !state;
    if (b.hidden) { this.close(false); return; }
    const n = state.clientCount;
    b.textContent = `${n} online`;
    b.setAttribute("aria-label", `${n} online: show who is connected`);
    this.render();
  }

  /** Forgets the list: answers still on their way are not news any more. */
  close(refocus) {
    const e = this.#els;
    if (e.panel.hidden) return;
    e.panel.hidden = true;
    e.button.setAttribute("aria-expanded", "false");
    this.#roster = null;
    e.list.replaceChildren();
    e.more.hidden = true;
    if (refocus) e.button.focus();
  }

  /** Draws the open panel for the room as the state has it now. A listed room's list is
   * redrawn from the state each time; a counted room's grows by the pages answered. When
   * the room changes between the two, the list starts again (counted: from the first page). */
  render() {
    const e = this.#els;
    const state = this.#host.state();
    if (e.panel.hidden || !state) return;
    if (!this.#roster || this.#roster.mode !== state.presence) {
      this.#roster = { mode: state.presence, clients: [], ids: new Set(), drawn: 0, next: null, asked: null, node: null, error: null };
      e.list.replaceChildren();
      if (this.#roster.mode === "counted") this.#ask(null);
    }
    const r = this.#roster;
    const n = state.clientCount;
    e.count.textContent = `${n} online`;
    e.panel.dataset.presence = r.mode;
    const notes = [];
    if (r.mode === "listed") {
      e.list.replaceChildren(...state.clients.map((c) => this.#row(c)));
      // An older tabd's snapshot listed its first 100 only.
      if (n > state.clients.length) notes.push(`${n - state.clients.length} more not listed`);
      else if (n === 0) notes.push("No one");
    } else {
      for (; r.drawn < r.clients.length; r.drawn++) e.list.append(this.#row(r.clients[r.drawn]));
      if (r.node) notes.push(`Connected through ${r.node}`);
      if (r.error) notes.push(r.error);
      else if (r.asked !== null) notes.push("Loading…");
      else if (r.clients.length === 0) notes.push("No one");
    }
    e.hint.textContent = notes.join(" · ");
    const more = r.mode === "counted" && r.next !== null;
    if (!more && document.activeElement === e.more) e.close.focus();
    e.more.hidden = !more;
  }

  #open() {
    const e = this.#els;
    if (!this.#host.state() || e.button.hidden) return;
    e.panel.hidden = false;
    e.button.setAttribute("aria-expanded", "true");
    this.#roster = null;
    this.render();
    e.panel.focus();
  }

  // Asks for the page after `after` (null: the first). Not connected: said in the panel.
  #ask(after) {
    const list = this.#roster;
    if (!this.#host.connected()) {
      list.asked = null;
      list.error = "Not connected: the list was not asked for.";
      return;
    }
    const asked = {};
    list.asked = asked;
    list.error = null;
    this.#host.clients({ after, limit: this.#pageSize }).then(
      (page) => this.#onPage(list, asked, page),
      (error) => this.#onRefused(list, asked, error));
  }

  // An answer to the last `clients` this panel sent (any other is stale): its clients join
  // the list (each id once), its `next` says whether there are more.
  #onPage(list, asked, f) {
    const r = this.#roster;
    if (r !== list || r.mode !== "counted" || r.asked !== asked) return;
    r.asked = null;
    for (const c of Array.isArray(f.clients) ? f.clients : []) {
      if (!c || typeof c.id !== "string" || r.ids.has(c.id)) continue;
      r.ids.add(c.id);
      r.clients.push({ id: c.id, name: typeof c.name === "string" ? c.name : c.id });
    }
    r.next = typeof f.next === "string" ? f.next : null;
    r.node = typeof f.node === "string" ? f.node : null;
    this.render();
  }

  #onRefused(list, asked, error) {
    const r = this.#roster;
    if (r !== list || r.asked !== asked) return;
    r.asked = null;
    r.error = `The list could not be read (${errorText(error)}).`;
    this.render();
  }

  #row(c) {
    const li = el("li", "presence-item");
    li.dataset.client = c.id;
    li.append(el("span", "presence-name", c.name), el("span", "presence-id", c.id));
    if (this.#host.me.has(c.id)) {
      li.dataset.me = "true";
      li.append(el("span", "presence-me", "(this window)"));
    }
    return li;
  }
}
