// What the client tests share: a WebSocket class a test drives frame by frame (what tabd
// would send, when it would send it), and a bounded wait.
import assert from "node:assert/strict";

/** Every socket the client opened, in order; each one records what the client sent. */
export function transport() {
  const sockets = [];
  class ScriptedSocket {
    constructor(url, protocols) {
      this.url = new URL(url);
      this.protocols = protocols ?? [];
      this.sent = [];
      this.closed = null; // {code, reason} once the client closed it
      this.listeners = { message: [], close: [] };
      sockets.push(this);
    }
    addEventListener(type, fn) { (this.listeners[type] ??= []).push(fn); }
    send(text) {
      assert.equal(this.closed, null, "the client sent on a socket it had closed");
      this.sent.push(JSON.parse(text));
    }
    close(code, reason) { this.closed = { code, reason }; }
    // tabd's side
    frame(f) { for (const fn of this.listeners.message) fn({ data: typeof f === "string" ? f : JSON.stringify(f) }); }
    drop(code = 1006) { for (const fn of this.listeners.close) fn({ code, reason: "" }); }
    last(type) { return this.sent.filter((f) => f.type === type).at(-1); }
  }
  return { sockets, WebSocket: ScriptedSocket };
}

/** Waits (bounded) until `check()` is truthy, and returns it. */
export async function until(check, what, ms = 2000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}
