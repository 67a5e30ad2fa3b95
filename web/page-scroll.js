// The page's scroll sync: each tab's list reports where the user scrolled it (at most one
// report per `interval` ms and tab), follows where others scrolled it, and scrolls to the
// top, smoothly when live. A list we moved ourselves is not news; the user grabbing a list
// mid-animation is.
export class ScrollSync {
  // Per tab: where we last put the list ourselves (a remote offset, maybe clamped), whether
  // a smooth scroll-to-top is running, and the throttle of our reports.
  #ctl = new Map();
  #host;
  #interval;
  #reducedMotion;

  /** `host`: {scrollerOf(tabId), tab(tabId) (its state, or null), mayReport() (false
   * when read only), send(tabId, top) (false when not connected)}. */
  constructor(host, { interval, reducedMotion }) {
    this.#host = host;
    this.#interval = interval;
    this.#reducedMotion = reducedMotion;
  }

  /** Follows the user's scrolling of `scroller`, tab `tabId`'s list. */
  wire(tabId, scroller) {
    scroller.addEventListener("scroll", () => this.#onScroll(tabId, scroller), { passive: true });
    const userTookOver = () => this.#endSmooth(tabId, true);
    for (const type of ["wheel", "touchstart", "pointerdown", "keydown"]) {
      scroller.addEventListener(type, userTookOver, { passive: true });
    }
    scroller.addEventListener("scrollend", () => {
      if (this.#of(tabId).smoothing) this.#endSmooth(tabId);
    });
  }

  /** The tab's list is gone. */
  forget(tabId) { this.#ctl.delete(tabId); }
  /** Every list is gone. */
  clear() { this.#ctl.clear(); }

  /** After catching up: tells the others where our lists are if they moved while offline. */
  reportAll(tabs) {
    for (const t of tabs) {
      const c = this.#of(t.id);
      c.lastSent = null;
      const s = this.#host.scrollerOf(t.id);
      if (s && Math.abs(s.scrollTop - t.scroll) >= 1 && (c.expect === null || Math.abs(s.scrollTop - c.expect) >= 1)) {
        this.#schedule(t.id);
      }
    }
  }

  /** Puts the list at `offset` at once (an offset of the state: not reported back). */
  setInstant(tabId, offset) {
    const s = this.#host.scrollerOf(tabId);
    if (!s) return;
    const c = this.#of(tabId);
    this.#cancelReport(c);
    this.#endSmooth(tabId);
    s.scrollTop = Number(offset) || 0;
    c.expect = s.scrollTop; // may be clamped: this window's list can be shorter
  }

  /** Scrolls the list to the top, smoothly unless the user asked for reduced motion. */
  toTopSmooth(tabId) {
    const s = this.#host.scrollerOf(tabId);
    if (!s) return;
    const c = this.#of(tabId);
    this.#cancelReport(c);
    c.expect = 0;
    if (s.scrollTop <= 0 || this.#reducedMotion) { s.scrollTop = 0; return; }
    c.smoothing = true;
    clearTimeout(c.smoothTimer);
    c.smoothTimer = setTimeout(() => this.#endSmooth(tabId), 1500);
    s.scrollTo({ top: 0, behavior: "smooth" });
  }

  #of(tabId) {
    let c = this.#ctl.get(tabId);
    if (!c) {
      c = { expect: null, smoothing: false, smoothTimer: null, timer: null, lastSentAt: -Infinity, lastSent: null };
      this.#ctl.set(tabId, c);
    }
    return c;
  }

  #onScroll(tabId, scroller) {
    const c = this.#of(tabId);
    if (c.smoothing) return;
    const top = scroller.scrollTop;
    if (c.expect !== null) {
      if (Math.abs(top - c.expect) < 1) return; // where we put it
      c.expect = null;
    }
    this.#schedule(tabId);
  }

  #schedule(tabId) {
    const c = this.#of(tabId);
    if (c.timer || !this.#host.mayReport()) return; // read only: the list moves here only
    const wait = Math.max(0, c.lastSentAt + this.#interval - performance.now());
    c.timer = setTimeout(() => { c.timer = null; this.#report(tabId); }, wait);
  }

  #report(tabId) {
    const c = this.#of(tabId);
    const scroller = this.#host.scrollerOf(tabId);
    const tab = this.#host.tab(tabId);
    if (!scroller || !tab || c.smoothing) return;
    const top = Math.round(scroller.scrollTop);
    if (c.expect !== null && Math.abs(top - c.expect) < 1) return;
    if (Math.abs(top - tab.scroll) < 1 && c.lastSent === null) return;
    if (c.lastSent !== null && Math.abs(top - c.lastSent) < 1) return;
    if (!this.#host.send(tabId, top)) return;
    c.lastSentAt = performance.now();
    c.lastSent = top;
  }

  #cancelReport(c) {
    clearTimeout(c.timer);
    c.timer = null;
    c.lastSent = null;
  }

  // `byUser`: the user grabbed the list mid-animation, so where it ends up is news.
  // Otherwise the animation ended (or timed out) and the list is where the state says.
  #endSmooth(tabId, byUser) {
    const c = this.#ctl.get(tabId);
    if (!c || !c.smoothing) return;
    c.smoothing = false;
    clearTimeout(c.smoothTimer);
    c.smoothTimer = null;
    const s = this.#host.scrollerOf(tabId);
    if (!s) return;
    if (byUser) { c.expect = null; this.#schedule(tabId); } else c.expect = s.scrollTop;
  }
}
