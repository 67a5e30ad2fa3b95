// The page's event log: each event as a line of names (tab titles, page routes, client
// names) and, for the tooltip, the same with the ids the wire uses; the last `limit`
// entries, newest first. Markers (a rebuild from a snapshot, a refused frame) have no seq.
import { el } from "./page-dom.js";

/** Names for people, read from `state` (the room's state just before the event applies)
 * and `me` (every client id this page had). */
export class Names {
  constructor(state, me) {
    this.state = state;
    this.me = me;
  }

  tab(id) {
    const t = this.state && typeof id === "string" ? this.state.tabs.find((x) => x.id === id) : null;
    return t ? t.title : String(id);
  }

  page(tabId, pageId) {
    const t = this.state && typeof tabId === "string" ? this.state.tabs.find((x) => x.id === tabId) : null;
    const p = t ? t.stack.find((x) => x.id === pageId) : null;
    if (!p) return String(pageId);
    return p.route === "root" ? `${t.title} (first page)` : `“${p.route}”`;
  }

  client(id) {
    if (id == null) return null;
    if (id === "tabd") return "tabd";
    if (this.me.has(id)) return "you";
    const c = this.state ? this.state.clients.find((x) => x.id === id) : null;
    return c ? c.name : id;
  }

  /** An event as {text, ids}: a line of names, and the ids behind it for the tooltip. */
  describe(e) {
    const ids = JSON.stringify(Object.fromEntries(Object.entries(e).filter(([k]) => k !== "kind" && k !== "seq" && k !== "value")));
    let text;
    switch (e.kind) {
      case "selected": text = `${this.tab(e.from)} → ${this.tab(e.to)}`; break;
      case "appear": case "firstAppear": case "disappear": text = this.page(e.tab, e.page); break;
      case "pushed": text = `${this.tab(e.tab)} + “${e.route}”`; break;
      case "popped": text = `${this.tab(e.tab)} − ${(e.pages || []).map((p) => this.page(e.tab, p)).join(", ")}`; break;
      case "scrollToTop": text = `${this.tab(e.tab)} · counter ${e.count}`; break;
      case "scrolled": text = `${this.tab(e.tab)} · ${e.offset}`; break;
      case "valueSet": text = `${this.tab(e.tab)} · ${e.key} = ${JSON.stringify(e.value)}`; break;
      case "tabAdded": text = `${e.tab && e.tab.title} at ${e.index}`; break;
      case "tabUpdated": text = `${this.tab(e.tab && e.tab.id)} → “${e.tab && e.tab.title}”`; break;
      case "tabMoved": text = `${this.tab(e.tab)} → position ${e.index}`; break;
      case "tabRemoved": text = this.tab(e.tab); break;
      case "clientJoined": text = e.client ? e.client.name : ""; break;
      case "clientLeft": text = this.client(e.client) || ""; break;
      case "presenceCounted": text = `${e.count} online: counted from here on, not listed${nodesText(e.nodes)}`; break;
      case "clientCount": {
        const total = this.#countAfter(e);
        text = total === null ? `${e.count} online` : `${e.count} on ${e.node} · ${total} online`;
        break;
      }
      case "presenceListed": text = `listed again: ${Array.isArray(e.clients) ? e.clients.length : "?"} online${e.node != null ? ` (${e.node})` : ""}`; break;
      case "clientIdsReserved": text = `ids c${e.from}–c${e.from + e.count - 1} set aside for joins${e.node != null ? ` on ${e.node}` : ""}`; break;
      default: text = "";
    }
    return { text, ids: e.kind === "tabAdded" || e.kind === "tabUpdated" ? `tab ${e.tab && e.tab.id}` : ids };
  }

  // The room's count after a clientCount of one node (null without a node or nodes): the
  // state's counts by node, that one replaced.
  #countAfter(e) {
    if (typeof e.node !== "string" || !this.state || !this.state.nodes) return null;
    let total = Number(e.count) || 0;
    for (const [k, v] of Object.entries(this.state.nodes)) if (k !== e.node) total += v;
    return total;
  }
}

// A presenceCounted's counts by node, as " (web1 100, web2 50)".
function nodesText(nodes) {
  if (!nodes || typeof nodes !== "object") return "";
  return ` (${Object.entries(nodes).map(([k, v]) => `${k} ${v}`).join(", ")})`;
}

/** The log's entries and its list element. */
export class EventLog {
  #entries = []; // newest last
  #listEl;
  #limit;

  constructor(listEl, limit) {
    this.#listEl = listEl;
    this.#limit = limit;
  }

  /** `said`: {text, ids}; `by`: who caused it, as a name (null for a marker). */
  add(e, by, said) {
    this.#entries.push({ seq: e.seq, kind: e.kind, text: said.text, ids: said.ids, by });
    if (this.#entries.length > this.#limit) this.#entries.splice(0, this.#entries.length - this.#limit);
  }

  render() {
    const frag = document.createDocumentFragment();
    for (let i = this.#entries.length - 1; i >= 0; i--) {
      const x = this.#entries[i];
      const marker = x.seq == null;
      const li = el("li", "log-entry kind-" + x.kind + (marker ? " log-marker" : ""));
      if (!marker) li.dataset.seq = String(x.seq);
      li.dataset.kind = x.kind;
      if (x.ids) li.title = x.ids;
      li.append(el("span", "log-n", marker ? "" : "#" + x.seq), el("span", "log-kind", x.kind), el("span", "log-text", x.text));
      if (x.by) li.append(el("span", "log-by", x.by));
      frag.append(li);
    }
    this.#listEl.replaceChildren(frag);
  }
}
