// tabd's JavaScript client: an ES module with no dependencies and no build step, for
// browsers (and node, given a WebSocket class). It keeps one room's state in step with
// tabd over one WebSocket:
//
//   import { connect } from "http://127.0.0.1:8080/tabd.js";
//   const tabd = await connect("http://127.0.0.1:8080/", { room: "main" });
//   tabd.subscribe((u) => { if (u.type !== "connection") draw(tabd.state); });
//   const seq = await tabd.tap("profile");   // tabd.state.seq >= seq here
//
// docs/WEB.md is the user's guide; tabd.d.ts has the types. How it works:
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
//   deleted) and 4001 (the token expired), and a signed token past its `exp`.
import { FoldError, applyFrame, fromWire } from "./model.js";

export { FoldError };

/** Why a command or the client failed. `code` is the protocol's error code (`unknown_tab`,
 * `invalid`, `forbidden`, `rate_limited`, …) or one of the client's own (`connection_lost`,
 * `closed`, `timed_out`, `room_deleted`, `token_expired`, `wrong_room`, `bad_url`). */
export class TabdError extends Error {
  constructor(code, message, details = {}) {
    super(message);
    this.name = "TabdError";
    this.code = code;
    if (details.ref !== undefined) this.ref = details.ref;
    if (details.closeCode !== undefined) this.closeCode = details.closeCode;
  }
}

/** WebSocket close codes by name: those tabd sends (PROTOCOL.md), and `clientDrop`, the
 * code this client closes a connection with when it drops it to open another. */
export const CloseCode = Object.freeze({
  normal: 1000,
  goingAway: 1001,
  protocolError: 1002,
  unsupportedData: 1003,
  invalidPayload: 1007,
  policyViolation: 1008,
  messageTooBig: 1009,
  internalError: 1011,
  tryAgainLater: 1013,
  clientDrop: 4000,
  tokenExpired: 4001,
  roomGone: 4404,
});

const DEFAULTS = {
  backoff: { initial: 250, max: 8000 },
  heartbeat: 20000,
  timeout: 10000,
};

const ROOM_ID = /^[A-Za-z0-9_-]{1,64}$/;
// A token that can travel as a WebSocket subprotocol (an HTTP token, as every signed token
// is) goes there, so no URL that tabd or a proxy logs holds it; any other goes in the query.
const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

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
  return { url: base.href, room, token, tokenAsProtocol: token !== null && HTTP_TOKEN.test(token) };
}

/** When a signed token (three base64url parts) runs out, in ms since 1970; null for any
 * other token. Read without checking the signature, only to stop asking with it. */
export function tokenExpiry(token) {
  const parts = String(token || "").split(".");
  if (parts.length !== 3) return null;
  try {
    const claims = JSON.parse(atob(parts[1].replace(/-/g, "+").replace(/_/g, "/")));
    return typeof claims.exp === "number" ? claims.exp * 1000 : null;
  } catch (e) {
    return null;
  }
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
  #endpoint;
  #options;
  #WebSocket;
  #listeners = new Set();
  #sock = null;
  #refs = 0;
  #inFlight = []; // [{ref, type, resolve, reject, internal}] sent on #sock, in order
  #waiting = []; // commands made while not welcomed: sent after the next welcome
  #awaiting = []; // acks whose seq the state has not reached yet: [{seq, resolve}]
  #resync = null; // a sync of the client's own is out: frames held meanwhile [frames]
  #catchUpRef = null; // the ping after a resumed welcome
  #untrusted = false; // tabd broke the protocol: the next connection starts from a snapshot
  #heartbeatTimer = null;
  #awaitingPong = false;
  #retryTimer = null;
  #holdUntil = 0;
  #readyResolve;
  #readyReject;

  /** The room's state: null until the first welcome. Read it; do not change it. */
  state = null;
  /** "connecting" | "catching-up" | "live" | "reconnecting" | "closed" */
  connection = "connecting";
  /** The session of the last welcome (null before): {client, room, role, epoch, server, resumed}. */
  session = null;
  /** Connections opened so far that were welcomed. */
  connections = 0;
  /** Failed attempts since the last welcome. */
  attempt = 0;
  /** When the next attempt is due (ms since 1970) while reconnecting, else null. */
  retryAt = null;
  /** Why the client closed, once closed. */
  error = null;

  constructor(url, options = {}) {
    this.#endpoint = endpoint(url, options);
    this.#options = {
      name: options.name ?? null,
      backoff: Object.assign({}, DEFAULTS.backoff, options.backoff || {}),
      heartbeat: options.heartbeat ?? DEFAULTS.heartbeat,
      reconnect: options.reconnect ?? true,
      beforeEvent: options.beforeEvent ?? null,
      random: options.random ?? Math.random,
    };
    this.#WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== "function") throw new TabdError("bad_url", "no WebSocket class: pass options.WebSocket");
    this.ready = new Promise((resolve, reject) => { this.#readyResolve = resolve; this.#readyReject = reject; });
    this.ready.catch(() => {}); // closing before the welcome is reported by connect()
    // From a microtask: listeners subscribed right after `new` hear everything, even a
    // token that has expired already.
    queueMicrotask(() => this.#open());
  }

  /** The room's id. */
  get room() { return this.#endpoint.room; }
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
   * A listener that throws does not stop the others.
   */
  subscribe(listener) {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  // ------------------------------------------------------------------ commands

  /** Selects `tab` (appear and disappear as the rules say). Resolves with the ack's seq. */
  select(tab) { return this.send("select", { tab }); }
  /** A tap on `tab`: selects it, or pops it to its first page, or scrolls it to the top. */
  tap(tab) { return this.send("tap", { tab }); }
  push(route, { tab } = {}) { return this.send("push", withTab({ route }, tab)); }
  pop({ tab } = {}) { return this.send("pop", withTab({}, tab)); }
  popToRoot({ tab } = {}) { return this.send("popToRoot", withTab({}, tab)); }
  scroll(offset, { tab } = {}) { return this.send("scroll", withTab({ offset }, tab)); }
  /** Keeps `value` (any JSON; null removes it) under `key` on the tab. */
  set(key, value, { tab } = {}) { return this.send("set", withTab({ key, value }, tab)); }
  /** Adds a tab ({id, title, icon, color, badge?}), at `index` or at the end. */
  addTab(tab, { index } = {}) { return this.send("addTab", index === undefined ? { tab } : { tab, index }); }
  /** Changes a tab's look: {id, title?, icon?, color?, badge?} (badge null clears it). */
  updateTab(tab) { return this.send("updateTab", { tab }); }
  moveTab(tab, index) { return this.send("moveTab", { tab, index }); }
  removeTab(tab) { return this.send("removeTab", { tab }); }

  /** Asks for the room's snapshot; `state` becomes it. Resolves with `state`. */
  sync() { return this.send("sync"); }
  /** Resolves with the round trip in milliseconds. */
  ping() {
    const start = now();
    return this.send("ping").then(() => now() - start);
  }
  /** A page of the room's connected clients: {clients: [{id, name}], next, node?}; `next`
   * (null at the end) is the `after` of the page that follows. */
  clients({ after, limit } = {}) {
    const fields = {};
    if (after != null) fields.after = after;
    if (limit != null) fields.limit = limit;
    return this.send("clients", fields);
  }

  /**
   * Any command by its protocol name (`type`) and fields. Resolves with the ack's seq (for
   * `sync`, the state; `ping`, nothing; `clients`, the page).
   */
  send(type, fields = {}) {
    return new Promise((resolve, reject) => {
      if (this.connection === "closed") {
        reject(this.error || new TabdError("closed", "the client is closed"));
        return;
      }
      const command = { type, fields, resolve, reject, internal: false };
      if (this.#welcomed()) this.#transmit(command);
      else this.#waiting.push(command);
    });
  }

  // ------------------------------------------------------------------ connection

  /** Drops the connection now, as a network failure would, and reconnects (with `resume`)
   * after the backoff, or not before `holdMs` milliseconds. For trying out what users see. */
  disconnect(holdMs = 0) {
    this.#holdUntil = Date.now() + (Number(holdMs) || 0);
    if (this.#sock) this.#drop(CloseCode.clientDrop, "client disconnect");
  }

  /** While reconnecting, tries again now instead of waiting out the backoff. */
  reconnect() {
    if (this.#sock || this.connection === "closed") return;
    this.#holdUntil = 0;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.#open();
  }

  /** Closes the client for good: pending commands reject with `closed`. */
  close() {
    this.#finish(new TabdError("closed", "closed by the client"), CloseCode.normal, "bye");
  }

  #welcomed() {
    return this.#sock !== null && this.session !== null && this.#sock.welcomed === true;
  }

  #open() {
    if (this.connection === "closed") return;
    const expiry = tokenExpiry(this.#endpoint.token);
    if (expiry !== null && Date.now() >= expiry) {
      this.#finish(new TabdError("token_expired", "the access token has expired"));
      return;
    }
    this.#retryTimer = null;
    this.retryAt = null;
    const q = new URLSearchParams();
    if (this.#options.name !== null) q.set("name", String(this.#options.name).slice(0, 64));
    q.set("room", this.#endpoint.room);
    if (this.state && this.session && !this.#untrusted) {
      q.set("resume", String(this.state.seq));
      q.set("epoch", this.session.epoch);
    }
    if (this.#endpoint.token !== null && !this.#endpoint.tokenAsProtocol) q.set("token", this.#endpoint.token);
    const url = this.#endpoint.url + "?" + q.toString();
    let sock;
    try {
      sock = this.#endpoint.tokenAsProtocol
        ? new this.#WebSocket(url, ["tabd.v1", "tabd.token." + this.#endpoint.token])
        : new this.#WebSocket(url);
    } catch (e) {
      this.#lost();
      return;
    }
    sock.welcomed = false;
    this.#sock = sock;
    sock.addEventListener("message", (ev) => {
      if (sock === this.#sock) this.#onFrame(ev.data);
    });
    sock.addEventListener("close", (ev) => {
      if (sock !== this.#sock) return;
      this.#sock = null;
      if (ev.code === CloseCode.roomGone) {
        this.#finish(new TabdError("room_deleted", `room '${this.room}' was deleted`, { closeCode: ev.code }));
      } else if (ev.code === CloseCode.tokenExpired) {
        this.#finish(new TabdError("token_expired", "the access token has expired", { closeCode: ev.code }));
      } else {
        this.#lost();
      }
    });
  }

  // The connection is gone (or never opened): what was in flight may or may not have taken
  // effect; the state stays, and the client tries again.
  #lost() {
    this.#stopHeartbeat();
    this.#catchUpRef = null;
    this.#resync = null;
    const lost = this.#inFlight;
    this.#inFlight = [];
    for (const c of lost) {
      if (!c.internal) c.reject(new TabdError("connection_lost", `the connection dropped while '${c.type}' was in flight; it may or may not have taken effect`, { ref: c.ref }));
    }
    if (!this.#options.reconnect) {
      this.#finish(new TabdError("closed", "the connection closed"));
      return;
    }
    const b = this.#options.backoff;
    const base = Math.min(b.max, b.initial * 2 ** Math.min(this.attempt, 30));
    const delay = Math.max(Math.round(base * (0.8 + this.#options.random() * 0.4)), this.#holdUntil - Date.now());
    this.attempt += 1;
    this.retryAt = Date.now() + delay;
    this.#retryTimer = setTimeout(() => this.#open(), delay);
    this.#setConnection("reconnecting", true);
  }

  // tabd broke the protocol: neither this connection nor the state it built can be trusted.
  // The next one starts over from a snapshot (no resume), as the Swift client does.
  #violation(reason) {
    this.#untrusted = true;
    this.#drop(CloseCode.protocolError, `protocol violation: ${reason}`);
  }

  #drop(code, reason) {
    const sock = this.#sock;
    this.#sock = null;
    try { sock.close(code, reason); } catch (e) { /* already closing */ }
    this.#lost();
  }

  #finish(error, code = CloseCode.normal, reason = "") {
    if (this.connection === "closed") return;
    const sock = this.#sock;
    this.#sock = null;
    if (sock) {
      try { sock.close(code, reason); } catch (e) { /* already closing */ }
    }
    this.#stopHeartbeat();
    clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.retryAt = null;
    this.error = error;
    const pending = this.#inFlight.concat(this.#waiting);
    this.#inFlight = [];
    this.#waiting = [];
    for (const c of pending) if (!c.internal) c.reject(error);
    const awaiting = this.#awaiting;
    this.#awaiting = [];
    for (const a of awaiting) a.reject(error);
    this.#setConnection("closed", true);
    this.#readyReject(error);
  }

  #setConnection(connection, always = false) {
    if (connection === this.connection && !always) return;
    this.connection = connection;
    this.#publish({ type: "connection", connection, attempt: this.attempt, retryAt: this.retryAt, error: this.error });
  }

  #startHeartbeat() {
    this.#stopHeartbeat();
    this.#awaitingPong = false;
    if (!(this.#options.heartbeat > 0)) return;
    this.#heartbeatTimer = setInterval(() => {
      if (!this.#welcomed()) return;
      if (this.#awaitingPong) { this.#drop(CloseCode.clientDrop, "no pong"); return; }
      this.#awaitingPong = true;
      this.#transmit({ type: "ping", fields: {}, internal: true, resolve: () => {}, reject: () => {} });
    }, this.#options.heartbeat);
  }

  #stopHeartbeat() {
    clearInterval(this.#heartbeatTimer);
    this.#heartbeatTimer = null;
  }

  #transmit(command) {
    this.#refs += 1;
    command.ref = "j" + this.#refs;
    this.#inFlight.push(command);
    this.#sock.send(JSON.stringify(Object.assign({ type: command.type, ref: command.ref }, command.fields)));
    return command.ref;
  }

  #publish(update) {
    for (const listener of Array.from(this.#listeners)) {
      try {
        listener(update);
      } catch (e) {
        // One listener's fault is its own; report it where the developer looks (the
        // console, window.onerror), as an uncaught error would be.
        if (typeof globalThis.reportError === "function") globalThis.reportError(e);
        else setTimeout(() => { throw e; });
      }
    }
  }

  // ------------------------------------------------------------------ frames

  #onFrame(text) {
    let f;
    try { f = JSON.parse(text); } catch (e) { f = null; }
    if (!f || typeof f !== "object" || typeof f.type !== "string") {
      // Not tabd's protocol: this connection cannot be trusted; a new one starts clean.
      this.#violation("not a tabd frame");
      return;
    }
    if (f.type === "welcome") {
      if (this.#sock.welcomed) { this.#violation("a second welcome"); return; }
      this.#onWelcome(f);
      return;
    }
    if (!this.#sock.welcomed) { this.#violation("a frame before the welcome"); return; }
    switch (f.type) {
      case "events": this.#onEvents(f); break;
      case "ack": case "snapshot": case "pong": case "clients": case "error": this.#onAnswer(f); break;
      default: break; // a frame type newer than this client
    }
  }

  #onWelcome(f) {
    const room = typeof f.room === "string" ? f.room : this.room; // an older tabd names none
    if (room !== this.room) {
      this.#finish(new TabdError("wrong_room", `tabd answered for room '${room}', not '${this.room}'`));
      return;
    }
    const sameEpoch = this.session !== null && this.session.epoch === f.epoch;
    this.session = {
      client: f.client, room, role: typeof f.role === "string" ? f.role : null,
      epoch: f.epoch, server: f.server, resumed: !!f.resumed,
    };
    this.#sock.welcomed = true;
    this.#untrusted = false;
    this.connections += 1;
    this.attempt = 0;
    this.#startHeartbeat();
    this.#publish({ type: "welcome", session: this.session, resumed: !!f.resumed });
    if (f.snapshot) {
      if (!this.#rebuild(f.snapshot, !sameEpoch, "welcome")) return;
      this.#setConnection("live");
    } else if (f.resumed && this.state && sameEpoch) {
      // The missed batches follow as events frames: replays, until the pong of this ping.
      this.#setConnection("catching-up");
      this.#catchUpRef = this.#transmit({ type: "ping", fields: {}, internal: true, resolve: () => {}, reject: () => {} });
    } else {
      this.#setConnection("catching-up");
      this.#requestResync(!sameEpoch);
    }
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const c of waiting) this.#transmit(c);
    if (this.state) this.#readyResolve(this);
  }

  // A state from a wire snapshot; false (and the connection dropped) when it is not one.
  #rebuild(wire, fresh, reason) {
    let state;
    try {
      state = fromWire(wire);
    } catch (e) {
      this.#violation("a snapshot the client cannot read");
      return false;
    }
    if (fresh) {
      // Acks of another history cannot be waited for.
      const awaiting = this.#awaiting;
      this.#awaiting = [];
      for (const a of awaiting) a.reject(new TabdError("connection_lost", "the room's history started over"));
    }
    this.state = state;
    this.#publish({ type: "snapshot", state, fresh, reason });
    this.#settleAwaiting();
    return true;
  }

  #requestResync(fresh) {
    this.#resync = { frames: [], fresh };
    this.#transmit({ type: "sync", fields: {}, internal: true, resync: true, resolve: () => {}, reject: () => {} });
  }

  #onEvents(f) {
    if (this.#resync) { this.#resync.frames.push(f); return; }
    this.#fold(f, false);
  }

  #fold(f, replaying) {
    if (!this.state) return;
    // Events the state holds already (a frame held while a snapshot that includes it was on
    // its way) are not news; anything else goes to the fold as one frame, which refuses
    // what does not fit (no `events` array included).
    let frame = f;
    if (Array.isArray(f.events)) {
      const seq = this.state.seq;
      const fresh = f.events.filter((e) => !(e && typeof e.seq === "number" && e.seq <= seq));
      if (fresh.length === 0) return;
      frame = Object.assign({}, f, { events: fresh });
    }
    const from = this.state.seq;
    let refused = null;
    try {
      applyFrame(this.state, frame, this.#options.beforeEvent || undefined);
    } catch (err) {
      if (!(err instanceof FoldError)) throw err;
      refused = err;
    }
    const applied = frame.events ? frame.events.slice(0, this.state.seq - from) : [];
    if (applied.length > 0) {
      this.#publish({ type: "events", events: applied, by: f.by, ref: f.ref ?? null, live: this.connection === "live" && !replaying });
    }
    if (refused) {
      this.#publish({ type: "refused", error: refused, frame: f });
      this.#requestResync(false);
    }
    this.#settleAwaiting();
  }

  #onAnswer(f) {
    // Answers come in the order the commands went out; refusals before parsing
    // (rate_limited, bad_json) carry no ref and are the oldest command's. An error frame
    // that names no command of this client's (one sent on its socket behind its back) is
    // reported, not taken; any other answer to no command, or out of its turn, breaks the
    // protocol.
    const head = this.#inFlight[0];
    const named = typeof f.ref === "string" ? this.#inFlight.some((c) => c.ref === f.ref) : head !== undefined;
    if (!named && f.type === "error") { this.#publish({ type: "error", error: errorOf(f) }); return; }
    if (!head) { this.#violation(`an answer to no command (ref ${f.ref ?? "null"})`); return; }
    if (typeof f.ref === "string" && f.ref !== head.ref) {
      this.#violation(`an answer for ref ${f.ref} where ${head.ref} was due`);
      return;
    }
    const c = this.#inFlight.shift();
    if (f.type === "error") {
      if (c.resync) {
        // Our own sync refused (rate_limited): the held frames are not folded; ask again.
        this.#requestResync(this.#resync ? this.#resync.fresh : false);
      } else if (c.internal && c.ref === this.#catchUpRef) {
        this.#catchUpRef = null;
        this.#setConnection("live");
      }
      c.reject(errorOf(f));
      return;
    }
    switch (f.type) {
      case "snapshot": this.#onSnapshot(c, f); break;
      case "pong":
        this.#awaitingPong = false;
        if (c.ref === this.#catchUpRef) {
          this.#catchUpRef = null;
          this.#setConnection("live");
        }
        c.resolve();
        break;
      case "clients": {
        const page = { clients: Array.isArray(f.clients) ? f.clients : [], next: typeof f.next === "string" ? f.next : null };
        if (typeof f.node === "string") page.node = f.node;
        c.resolve(page);
        break;
      }
      default: { // ack
        const seq = f.seq;
        if (!Number.isInteger(seq) || !this.state || this.state.seq >= seq) { c.resolve(seq); break; }
        this.#awaiting.push({ seq, resolve: c.resolve, reject: c.reject });
      }
    }
  }

  #onSnapshot(c, f) {
    if (c.resync) {
      const held = this.#resync ? this.#resync.frames : [];
      const fresh = this.#resync ? this.#resync.fresh : false;
      this.#resync = null;
      if (!this.#rebuild(f.snapshot, fresh, "resync")) return;
      if (this.connection === "catching-up" && !this.#catchUpRef) this.#setConnection("live");
      for (const frame of held) {
        if (this.#resync) this.#resync.frames.push(frame); // refused again: held for the next
        else this.#fold(frame, true);
      }
      this.#readyResolve(this);
      return;
    }
    // A sync of the user's: the server's state, in order with the frames around it. One
    // the client cannot read rejects the sync and drops the connection (a new one starts
    // clean).
    const snap = f.snapshot;
    const newer = snap !== null && typeof snap === "object" && (this.state === null || !(snap.seq < this.state.seq));
    if (newer && !this.#rebuild(snap, false, "sync")) {
      c.reject(new TabdError("connection_lost", "tabd answered sync with a snapshot the client cannot read; reconnecting"));
      return;
    }
    if (snap === null || typeof snap !== "object") {
      c.reject(new TabdError("connection_lost", "tabd answered sync without a snapshot; reconnecting"));
      this.#violation("a snapshot the client cannot read");
      return;
    }
    c.resolve(this.state);
  }

  // Hands out the acks the state has now reached.
  #settleAwaiting() {
    if (this.#awaiting.length === 0 || !this.state || this.#resync) return;
    const seq = this.state.seq;
    const due = this.#awaiting.filter((a) => a.seq <= seq);
    if (due.length === 0) return;
    this.#awaiting = this.#awaiting.filter((a) => a.seq > seq);
    for (const a of due) a.resolve(a.seq);
  }
}

function withTab(fields, tab) {
  if (tab != null) fields.tab = tab;
  return fields;
}

function errorOf(f) {
  const code = typeof f.code === "string" ? f.code : "error";
  return new TabdError(code, typeof f.message === "string" ? f.message : code, { ref: f.ref ?? null });
}

function now() {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}
