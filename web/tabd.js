// tabd's JavaScript client: an ES module with no dependencies and no build step, for
// browsers (and node, given a WebSocket class). It keeps one room's state in step with
// tabd over one WebSocket:
//
//   import { connect } from "http://127.0.0.1:8080/tabd.js";
//   const tabd = await connect("http://127.0.0.1:8080/", { room: "main" });
//   tabd.subscribe((u) => { if (u.type !== "connection") draw(tabd.state); });
//   const seq = await tabd.tap("profile");   // tabd.state.seq >= seq here
//
// docs/WEB.md is the user's guide; tabd.d.ts has the types. Every decision below is
// client-machine.js's (a value that takes frames, closes and timers and returns actions);
// this module performs them: the WebSocket, the timers, the Promises, the listeners. How
// it works:
// - `state` is the room's snapshot (PROTOCOL.md's shape) with every `events` frame folded
//   into it in seq order by model.js, the same rules as the daemon's own fold. A frame
//   whose events were all folded already is not news; any other frame the fold refuses
//   (a gap, a tab the state does not have, …) makes the client ask for a snapshot
//   (`sync`), holding the frames that come meanwhile and folding those after the snapshot
//   once it arrives. Nothing is skipped.
// - Commands are answered in the order they were sent, on the connection they were sent
//   on. A command's Promise resolves with its ack's seq once `state` holds that seq (so
//   its events are folded), and rejects with a TabdError carrying the protocol's code
//   (`unknown_tab`, `forbidden`, …) or the client's own (`connection_lost`, `closed`, …).
//   A command made while the client is not connected waits and goes out after the next
//   welcome; one in flight when the connection drops rejects with `connection_lost` (it may
//   or may not have taken effect: the events after the reconnect tell).
// - A dropped connection is opened again after a jittered backoff (250 ms doubling to 8 s,
//   ±20 %), with `resume` and `epoch`: tabd then sends only the batches missed. Until the
//   pong of a ping sent after such a welcome, the client is "catching-up" and frames are
//   replays (`live: false`). A heartbeat ping every 20 s drops a connection whose last ping
//   went unanswered. Closes that a reconnect cannot fix end the client: 4404 (the room was
//   deleted) and, without a token provider, 4001 (the token expired) and a signed token
//   past its `exp`.
// - Tokens: with `getToken` (an async function), every connection asks it for a token, and
//   a while before that token runs out the client asks again and hands tabd the new one on
//   the open connection (a `refresh` frame): a planned refresh costs no reconnect. If that
//   fails, or the connection dropped meanwhile, the client reconnects with a fresh token
//   and resumes, missing nothing.
// - Cancelling: a command's `signal` (an AbortSignal) or `timeout` withdraws it if it has
//   not gone out yet (it never will), else stops waiting for it (its events are folded all
//   the same); its Promise rejects with the signal's reason or TabdError `timed_out`.
import { FoldError } from "./model.js";
import { ClientMachine, CloseCode, TabdError, tokenAsProtocol, tokenExpiry } from "./client-machine.js";

export { CloseCode, FoldError, TabdError, tokenExpiry };

const DEFAULTS = {
  backoff: { initial: 250, max: 8000 },
  heartbeat: 20000,
  resyncRetry: 500,
  timeout: 10000,
  tokenTimeout: 10000,
};

const ROOM_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Where to connect: `url` as tabd prints it (`http://HOST:PORT/`, `https://…`, a path
 * behind a proxy such as `https://example.com/tabd/`) or a `ws://…/ws` / `wss://…/ws`
 * URL. A `room` or `token` in the URL (`?room=…`, `#token=…`, as the page's links have
 * them) is used when the options do not give one. Throws TabdError `bad_url`.
 */
export function endpoint(url, options = {}) {
  let u;
  try {
    const base = typeof location !== "undefined" ? location.href : undefined;
    u = new URL(String(url), base);
  } catch (e) {
    throw new TabdError("bad_url", `not a URL: ${url}`);
  }
  const fragment = new URLSearchParams(u.hash.replace(/^#/, ""));
  const room = options.room ?? u.searchParams.get("room") ?? "main";
  const token = options.token ?? (fragment.get("token") || u.searchParams.get("token") || null);
  if (!ROOM_ID.test(room)) throw new TabdError("bad_url", `'${room}' is not a room id (1–64 of A–Z a–z 0–9 - _)`);
  const scheme = { "http:": "ws:", "https:": "wss:", "ws:": "ws:", "wss:": "wss:" }[u.protocol];
  if (!scheme) throw new TabdError("bad_url", `${u.protocol} is not http, https, ws or wss`);
  let path = u.pathname;
  if (u.protocol === "http:" || u.protocol === "https:") {
    // The page's address: the socket is `ws` beside it (a file name such as index.html
    // is dropped).
    path = path.replace(/[^/]*$/, "") + "ws";
  }
  const base = new URL(u.href);
  base.protocol = scheme;
  base.pathname = path;
  base.search = "";
  base.hash = "";
  return { url: base.href, room, token, tokenAsProtocol: tokenAsProtocol(token) };
}

/**
 * Connects and resolves once tabd has welcomed the client (its `state` is then the room's),
 * or rejects with a TabdError: `timed_out` when no welcome came within `options.timeout`
 * ms (default 10 s; attempts are retried with backoff meanwhile), or why the client closed.
 */
export function connect(url, options = {}) {
  let client;
  try {
    client = new TabdClient(url, options);
  } catch (e) {
    return Promise.reject(e);
  }
  const timeout = options.timeout ?? DEFAULTS.timeout;
  return new Promise((resolve, reject) => {
    const timer = timeout > 0
      ? setTimeout(() => {
        client.close();
        reject(new TabdError("timed_out", `no welcome from tabd within ${timeout} ms`));
      }, timeout)
      : null;
    client.ready.then(
      () => { clearTimeout(timer); resolve(client); },
      (e) => { clearTimeout(timer); reject(e); },
    );
  });
}

/** One room's client. `connect()` makes one and waits for its welcome; `new TabdClient`
 * starts connecting at once and gives the client before any welcome (state null). */
export class TabdClient {
  #machine;
  #WebSocket;
  #listeners = new Set();
  #sock = null; // {socket, generation}
  #pending = new Map(); // request id -> {resolve, reject}
  #ids = 0;
  #queue = []; // actions not performed yet, in the machine's order
  #performing = false;
  #timers = { retry: null, resync: null, refresh: null }; // the machine's one-shot timers, by name
  #getToken = null;
  #tokenTimeout;
  #commandTimeout;
  #heartbeatTimer = null;
  #readyResolve;
  #readyReject;

  constructor(url, options = {}) {
    const where = endpoint(url, options);
    this.#WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== "function") throw new TabdError("bad_url", "no WebSocket class: pass options.WebSocket");
    if (options.getToken != null && typeof options.getToken !== "function") throw new TabdError("bad_url", "getToken must be a function");
    this.#getToken = options.getToken ?? null;
    this.#tokenTimeout = options.tokenTimeout ?? DEFAULTS.tokenTimeout;
    this.#commandTimeout = options.commandTimeout ?? 0;
    this.#machine = new ClientMachine(where, {
      name: options.name ?? null,
      backoff: Object.assign({}, DEFAULTS.backoff, options.backoff || {}),
      heartbeat: options.heartbeat ?? DEFAULTS.heartbeat,
      resyncRetry: options.resyncRetry ?? DEFAULTS.resyncRetry,
      reconnect: options.reconnect ?? true,
      tokenProvider: this.#getToken !== null,
      // A beforeEvent that throws is reported, as a listener's fault is: it cannot stop a fold
      // half-way.
      beforeEvent: options.beforeEvent ? (e, state) => { try { options.beforeEvent(e, state); } catch (err) { report(err); } } : null,
    }, { now: () => Date.now(), random: options.random ?? Math.random });
    this.ready = new Promise((resolve, reject) => { this.#readyResolve = resolve; this.#readyReject = reject; });
    this.ready.catch(() => {}); // closing before the welcome is reported by connect()
    // From a microtask: listeners subscribed right after `new` hear everything, even a
    // token that has expired already.
    queueMicrotask(() => this.#perform(this.#machine.start()));
  }

  /** The room's state: null until the first welcome. Read it; do not change it. */
  get state() { return this.#machine.state; }
  /** "connecting" | "catching-up" | "live" | "reconnecting" | "closed" */
  get connection() { return this.#machine.connection; }
  /** The session of the last welcome (null before): {client, room, role, epoch, server, resumed}. */
  get session() { return this.#machine.session; }
  /** Connections opened so far that were welcomed. */
  get connections() { return this.#machine.connections; }
  /** Failed attempts since the last welcome. */
  get attempt() { return this.#machine.attempt; }
  /** When the next attempt is due (ms since 1970) while reconnecting, else null. */
  get retryAt() { return this.#machine.retryAt; }
  /** Why the client closed, once closed. */
  get error() { return this.#machine.error; }
  /** The room's id. */
  get room() { return this.#machine.room; }
  /** This connection's client id, from the last welcome. */
  get clientId() { return this.session ? this.session.client : null; }
  /** "view", "control" or "admin" (null before the welcome or from an older tabd). */
  get role() { return this.session ? this.session.role : null; }
  /** The epoch of the state's history. */
  get epoch() { return this.session ? this.session.epoch : null; }
  /** A view token: the client may read (`sync`, `clients`, `ping`) and not command. */
  get readOnly() { return this.role === "view"; }

  /**
   * Calls listener(update) on every change, until the returned function is called:
   * - {type: "connection", connection, attempt, retryAt, error} when `connection` changes
   *   (and on each attempt while reconnecting);
   * - {type: "welcome", session, resumed};
   * - {type: "snapshot", state, fresh, reason}: `state` was replaced ("welcome", "sync",
   *   "resync"); `fresh` when the history is a new one (another epoch): page ids and seqs
   *   from before mean nothing now;
   * - {type: "events", events, by, ref, live}: events folded into `state` (a frame's, or
   *   the part of it not folded before); `live` false for replays after a resume;
   * - {type: "refused", error, frame}: a frame the fold refused (a FoldError); a snapshot
   *   follows;
   * - {type: "error", error}: an error frame no pending command was waiting for.
   * Listeners hear a frame's updates once the client has taken in the whole frame: `state`
   * is then the state after it. A listener that throws does not stop the others.
   */
  subscribe(listener) {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  // ------------------------------------------------------------------ commands

  // Every command takes, last, `{signal, timeout}` (with the others of its options): an
  // AbortSignal and a deadline in ms (default: the client's `commandTimeout`, 0 for none).

  /** Selects `tab` (appear and disappear as the rules say). Resolves with the ack's seq. */
  select(tab, options) { return this.send("select", { tab }, options); }
  /** A tap on `tab`: selects it, or pops it to its first page, or scrolls it to the top. */
  tap(tab, options) { return this.send("tap", { tab }, options); }
  push(route, options = {}) { return this.send("push", withTab({ route }, options.tab), options); }
  pop(options = {}) { return this.send("pop", withTab({}, options.tab), options); }
  popToRoot(options = {}) { return this.send("popToRoot", withTab({}, options.tab), options); }
  scroll(offset, options = {}) { return this.send("scroll", withTab({ offset }, options.tab), options); }
  /** Keeps `value` (any JSON; null removes it) under `key` on the tab. */
  set(key, value, options = {}) { return this.send("set", withTab({ key, value }, options.tab), options); }
  /** Adds a tab ({id, title, icon, color, badge?}), at `index` or at the end. */
  addTab(tab, options = {}) { return this.send("addTab", options.index === undefined ? { tab } : { tab, index: options.index }, options); }
  /** Changes a tab's look: {id, title?, icon?, color?, badge?} (badge null clears it). */
  updateTab(tab, options) { return this.send("updateTab", { tab }, options); }
  moveTab(tab, index, options) { return this.send("moveTab", { tab, index }, options); }
  removeTab(tab, options) { return this.send("removeTab", { tab }, options); }

  /** Asks for the room's snapshot; `state` becomes it. Resolves with `state`. */
  sync(options) { return this.send("sync", {}, options); }
  /** Resolves with the round trip in milliseconds. */
  ping(options) {
    const start = now();
    return this.send("ping", {}, options).then(() => now() - start);
  }
  /** A page of the room's connected clients: {clients: [{id, name}], next, node?}; `next`
   * (null at the end) is the `after` of the page that follows. */
  clients(options = {}) {
    const fields = {};
    if (options.after != null) fields.after = options.after;
    if (options.limit != null) fields.limit = options.limit;
    return this.send("clients", fields, options);
  }

  /**
   * Any command by its protocol name (`type`) and fields. Resolves with the ack's seq (for
   * `sync`, the state; `ping`, nothing; `clients`, the page). `options.signal` (an
   * AbortSignal) and `options.timeout` (ms) stop waiting: a command not sent yet is
   * withdrawn and never sent; one sent has its outcome folded all the same.
   */
  send(type, fields = {}, options = {}) {
    const signal = options?.signal ?? null;
    const timeout = options?.timeout ?? this.#commandTimeout;
    if (signal && signal.aborted) return Promise.reject(abortReason(signal));
    return new Promise((resolve, reject) => {
      this.#ids += 1;
      const id = this.#ids;
      let timer = null;
      const onAbort = () => this.#perform(this.#machine.cancel(id, abortReason(signal)));
      const done = () => {
        if (timer !== null) clearTimeout(timer);
        if (signal) signal.removeEventListener("abort", onAbort);
      };
      this.#pending.set(id, { resolve: (v) => { done(); resolve(v); }, reject: (e) => { done(); reject(e); } });
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
      if (timeout > 0) {
        timer = setTimeout(() => this.#perform(this.#machine.cancel(id, new TabdError("timed_out", `'${type}' had no answer within ${timeout} ms`))), timeout);
      }
      this.#perform(this.#machine.request(type, fields, id));
    });
  }

  // ------------------------------------------------------------------ connection

  /** Drops the connection now, as a network failure would, and reconnects (with `resume`)
   * after the backoff, or not before `holdMs` milliseconds. For trying out what users see. */
  disconnect(holdMs = 0) { this.#perform(this.#machine.disconnect(holdMs)); }

  /** While reconnecting, tries again now instead of waiting out the backoff. */
  reconnect() { this.#perform(this.#machine.reconnect()); }

  /** Asks `getToken` for a fresh token now and hands it to tabd on the open connection, as
   * the client does on its own before a token runs out. Without getToken, or while not
   * connected, it does nothing. */
  refreshToken() { this.#perform(this.#machine.refreshDue(this.#sock ? this.#sock.generation : -1)); }

  /** Closes the client for good: pending commands reject with `closed`. */
  close() { this.#perform(this.#machine.close()); }

  // ------------------------------------------------------------------ performing

  // Performs the machine's actions in its order. An input made while performing (a
  // listener that sends a command) is the machine's at once; its actions wait for those
  // of the input before it, so frames go out in the order the machine numbered them.
  #perform(actions) {
    this.#queue.push(...actions);
    if (this.#performing) return;
    this.#performing = true;
    try {
      while (this.#queue.length > 0) this.#do(this.#queue.shift());
    } finally {
      this.#performing = false;
    }
  }

  #do(a) {
    switch (a.do) {
      case "open": this.#open(a.url, a.protocols, a.generation); break;
      case "send": this.#sock.socket.send(a.text); break;
      case "close": {
        const sock = this.#sock;
        this.#sock = null;
        try { sock.socket.close(a.code, a.reason); } catch (e) { /* already closing */ }
        break;
      }
      case "retry": this.#after("retry", a.delay, () => this.#machine.retryDue(a.generation)); break;
      case "cancelRetry": this.#cancel("retry"); break;
      case "heartbeat":
        clearInterval(this.#heartbeatTimer);
        this.#heartbeatTimer = setInterval(() => this.#perform(this.#machine.heartbeatDue(a.generation)), a.every);
        break;
      case "resyncLater": this.#after("resync", a.delay, () => this.#machine.resyncDue(a.generation)); break;
      case "cancelResync": this.#cancel("resync"); break;
      case "stopHeartbeat":
        clearInterval(this.#heartbeatTimer);
        this.#heartbeatTimer = null;
        break;
      // An answer to one of the client's own commands (id null) settles nothing.
      case "resolve": this.#settle(a.id)?.resolve(a.value); break;
      case "reject": this.#settle(a.id)?.reject(a.error); break;
      case "publish": this.#publish(a.update); break;
      // A listener may have closed the client since the machine said ready.
      case "ready": if (this.connection !== "closed") this.#readyResolve(this); break;
      case "failed": this.#readyReject(a.error); break;
      case "foldHeld": this.#queue.push(...this.#machine.foldHeld()); break;
      case "getToken": this.#fetchToken(a.generation, a.reason); break;
      case "refreshLater": this.#after("refresh", a.delay, () => this.#machine.refreshDue(a.generation)); break;
      case "cancelRefresh": this.#cancel("refresh"); break;
      default: throw new Error(`tabd.js: an action it does not know: ${a.do}`);
    }
  }

  // Arms the one-shot timer `name` (replacing it): after `delay` ms, performs what the
  // machine's input `due()` returns.
  #after(name, delay, due) {
    this.#cancel(name);
    this.#timers[name] = setTimeout(() => { this.#timers[name] = null; this.#perform(due()); }, delay);
  }

  #cancel(name) {
    clearTimeout(this.#timers[name]);
    this.#timers[name] = null;
  }

  #open(url, protocols, generation) {
    let socket;
    try {
      socket = protocols.length > 0 ? new this.#WebSocket(url, protocols) : new this.#WebSocket(url);
    } catch (e) {
      this.#perform(this.#machine.closed(generation, undefined));
      return;
    }
    const sock = { socket, generation };
    this.#sock = sock;
    socket.addEventListener("message", (ev) => this.#perform(this.#machine.received(ev.data, generation)));
    socket.addEventListener("close", (ev) => {
      if (this.#sock === sock) this.#sock = null;
      this.#perform(this.#machine.closed(generation, ev.code));
    });
  }

  // Asks the app's getToken, bounded by `tokenTimeout`; the answer goes to the machine.
  #fetchToken(generation, reason) {
    let timer = null;
    const bounded = new Promise((resolve, reject) => {
      if (this.#tokenTimeout > 0) timer = setTimeout(() => reject(new Error(`no token within ${this.#tokenTimeout} ms`)), this.#tokenTimeout);
      Promise.resolve().then(() => this.#getToken({ room: this.room, reason })).then(resolve, reject);
    });
    bounded.then(
      (token) => { clearTimeout(timer); this.#perform(this.#machine.tokenReady(generation, token)); },
      (error) => { clearTimeout(timer); this.#perform(this.#machine.tokenFailed(generation, error)); },
    );
  }

  #settle(id) {
    if (id === null) return undefined;
    const p = this.#pending.get(id);
    this.#pending.delete(id);
    return p;
  }

  #publish(update) {
    for (const listener of Array.from(this.#listeners)) {
      try {
        listener(update);
      } catch (e) {
        report(e);
      }
    }
  }
}

// One listener's fault is its own; report it where the developer looks (the console,
// window.onerror), as an uncaught error would be.
function report(e) {
  if (typeof globalThis.reportError === "function") globalThis.reportError(e);
  else setTimeout(() => { throw e; });
}

// What an aborted signal rejects with: its reason, as fetch() does.
function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  return new TabdError("aborted", "the command was aborted");
}

function withTab(fields, tab) {
  if (tab != null) fields.tab = tab;
  return fields;
}

function now() {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}
