// Every decision of tabd's JavaScript client as a value, as ClientMachine is the Swift
// client's: what a frame means (a welcome, a batch to fold or a gap to mend with a
// snapshot, the answer of which command), when to reconnect and whether to resume, what a
// dropped connection fails, what closing does. It takes inputs (a command, a frame, a
// close, a timer that is due) and returns actions; tabd.js performs them (the WebSocket,
// the timers, the Promises, the listeners) and decides nothing. It touches no socket, no
// timer and no global clock: time and chance come from the `clock` it is given.
//
// Commands are named by the ids the shell hands in; the machine holds no Promise.
// Connections are named by generation: input from an older one is passed over.
//
// The actions, in the order they are to be performed:
//   {do: "open", url, protocols, generation}  open a WebSocket (protocols: [] for none)
//   {do: "send", text}                        send on the current connection
//   {do: "close", code, reason}               close the current connection, forget it
//   {do: "retry", delay, generation}          call retryDue(generation) after delay ms
//   {do: "cancelRetry"}
//   {do: "heartbeat", every, generation}      call heartbeatDue(generation) every `every` ms
//   {do: "stopHeartbeat"}
//   {do: "resyncLater", delay, generation}    call resyncDue(generation) after delay ms
//   {do: "cancelResync"}
//   {do: "resolve", id, value}                the command's outcome
//   {do: "reject", id, error}
//   {do: "publish", update}                   tell every listener
//   {do: "ready"}                             the client has a state (connect() resolves)
//   {do: "failed", error}                     closed for good (connect() rejects)
//   {do: "foldHeld"}                          call foldHeld(): the frames held during a resync
//                                             are folded once the snapshot's updates are out
//   {do: "getToken", generation, reason}      call the app's token provider (reason "connect"
//                                             or "refresh"), then tokenReady(generation, token)
//                                             or tokenFailed(generation, error)
//   {do: "refreshLater", delay, generation}   call refreshDue(generation) after delay ms
//   {do: "cancelRefresh"}
import { FoldError, applyFrame, fromWire } from "./model.js";

/** Why a command or the client failed. `code` is the protocol's error code (`unknown_tab`,
 * `invalid`, `forbidden`, `rate_limited`, …) or one of the client's own (`connection_lost`,
 * `closed`, `timed_out`, `aborted`, `room_deleted`, `token_expired`, `token_failed`,
 * `wrong_room`, `bad_url`). */
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

// The answers tabd gives to a command, and the frame that is no answer.
const ANSWERS = new Set(["ack", "snapshot", "pong", "clients", "error"]);

/** How long before a token runs out the client asks for the next one: a quarter of its
 * life, at least half a second and at most a minute. */
export function refreshLead(lifetime) {
  return Math.min(60000, Math.max(500, lifetime / 4));
}

/** A token that can travel as a WebSocket subprotocol (an HTTP token, as every signed
 * token is) goes there, so no URL that tabd or a proxy logs holds it. */
export function tokenAsProtocol(token) {
  return token !== null && /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(token);
}

/**
 * One room's client as a machine. `endpoint` is tabd.js's `endpoint()`; `options`:
 * {name, backoff: {initial, max}, heartbeat, resyncRetry, reconnect, beforeEvent,
 * tokenProvider (whether the app gives tokens: getToken)}; `clock`: {now() in ms since
 * 1970, random() in [0, 1)}.
 */
export class ClientMachine {
  #endpoint;
  #options;
  #clock;
  #link = null; // the current connection: {generation, welcomed}
  #generation = 0;
  #refs = 0;
  #inFlight = []; // sent on the current connection, in order: {ref, type, id, own}
  #waiting = []; // commands made while not welcomed, sent after the next welcome: {type, fields, id}
  // Answers that came and are not settled yet, in the order they came: {seq, id, action}.
  // Each is settled once every answer before it is, no resync is out, and the state holds
  // `seq` (an ack's; 0 for any other answer): across a resync, a drop and a resume.
  #awaiting = [];
  #resync = null; // a batch did not fold; a sync of the client's own is out (or due again): {frames held meanwhile, fresh, refused}
  #held = []; // frames held during a resync, to fold after the snapshot (foldHeld)
  #catchUpRef = null; // the ping after a resumed welcome
  #untrusted = false; // tabd broke the protocol: the next connection starts from a snapshot
  #awaitingPong = false;
  #holdUntil = 0;
  #token = null; // the token the next connection (or the open one) goes with
  #tokenAt = 0; // when it came (ms), for its life
  #fetching = null; // a token asked of the provider: {generation, reason}

  /** The room's state: null until the first welcome. */
  state = null;
  /** "connecting" | "catching-up" | "live" | "reconnecting" | "closed" */
  connection = "connecting";
  /** The session of the last welcome (null before). */
  session = null;
  /** Connections opened so far that were welcomed. */
  connections = 0;
  /** Failed attempts since the last welcome. */
  attempt = 0;
  /** When the next attempt is due (ms since 1970) while reconnecting, else null. */
  retryAt = null;
  /** Why the client closed, once closed. */
  error = null;

  constructor(endpoint, options, clock) {
    this.#endpoint = endpoint;
    this.#options = options;
    this.#clock = clock;
    this.#token = endpoint.token ?? null;
    this.#tokenAt = clock.now();
  }

  get room() { return this.#endpoint.room; }

  /** Whether a command would go out now rather than wait for a welcome. */
  get welcomed() { return this.#link !== null && this.#link.welcomed && this.session !== null; }

  // ------------------------------------------------------------------ inputs

  /** The first connection. */
  start() { return this.#open(); }

  /** A command of the program's, answered as `id`. */
  request(type, fields, id) {
    if (this.connection === "closed") return [reject(id, this.error || new TabdError("closed", "the client is closed"))];
    const command = { type, fields, id };
    if (this.welcomed) return this.#transmit(command);
    this.#waiting.push(command);
    return [];
  }

  /** A message (text) of connection `generation`. */
  received(text, generation) {
    if (!this.#current(generation)) return [];
    let f;
    try { f = JSON.parse(text); } catch (e) { f = null; }
    // Not tabd's protocol: this connection cannot be trusted; a new one starts clean.
    if (!f || typeof f !== "object" || typeof f.type !== "string") return this.#violation("not a tabd frame");
    if (f.type === "welcome") {
      if (this.#link.welcomed) return this.#violation("a second welcome");
      return this.#welcome(f);
    }
    if (!this.#link.welcomed) return this.#violation("a frame before the welcome");
    if (f.type === "events") {
      if (this.#resync) { this.#resync.frames.push(f); return []; }
      return this.#fold(f, false);
    }
    if (ANSWERS.has(f.type)) return this.#answer(f);
    return []; // a frame type newer than this client
  }

  /** Connection `generation` closed with `code` (or could not be opened: no code). */
  closed(generation, code) {
    if (!this.#current(generation)) return [];
    this.#link = null;
    if (code === CloseCode.roomGone) {
      return this.#finish(new TabdError("room_deleted", `room '${this.room}' was deleted`, { closeCode: code }));
    }
    if (code === CloseCode.tokenExpired && !this.#options.tokenProvider) {
      return this.#finish(new TabdError("token_expired", "the access token has expired", { closeCode: code }));
    }
    // With a token provider, a token that ran out is a drop like any other: the next
    // connection goes with a fresh token and resumes.
    return this.#lost();
  }

  /** The token provider answered the `getToken` of `generation`. A null token means the
   * app has none to give: the client closes (`token_expired`). */
  tokenReady(generation, token) {
    const asked = this.#fetching;
    if (!asked || asked.generation !== generation || this.connection === "closed") return [];
    this.#fetching = null;
    if (token === null || token === undefined || token === "") {
      return this.#finish(new TabdError("token_expired", "the token provider has no token to give"));
    }
    if (asked.reason === "refresh") {
      if (!this.#current(generation) || !this.welcomed) return [];
      return this.#transmit({ type: "refresh", fields: { token: String(token) }, id: null, own: "refresh", token: String(token) });
    }
    this.#token = String(token);
    this.#tokenAt = this.#clock.now();
    return this.#connect();
  }

  /** The token provider failed (threw or rejected) for the `getToken` of `generation`: a
   * refresh drops the connection, which is opened again with a fresh token; a connect is
   * a failed attempt, tried again after the backoff. */
  tokenFailed(generation, error) {
    const asked = this.#fetching;
    if (!asked || asked.generation !== generation || this.connection === "closed") return [];
    this.#fetching = null;
    const failure = new TabdError("token_failed", `the token provider failed: ${error && error.message ? error.message : error}`);
    const actions = [publish({ type: "error", error: failure })];
    if (asked.reason === "refresh") return this.#current(generation) ? actions.concat(this.#drop(CloseCode.clientDrop, "token refresh failed")) : actions;
    this.#link = null;
    return actions.concat(this.#lost());
  }

  /** A token's refresh is due on connection `generation`: the provider is asked for a
   * fresh one, which goes to tabd on the open connection (`refresh`). */
  refreshDue(generation) {
    if (!this.#current(generation) || !this.welcomed || !this.#options.tokenProvider || this.#fetching) return [];
    this.#fetching = { generation, reason: "refresh" };
    return [{ do: "getToken", generation, reason: "refresh" }];
  }

  /** The program stops waiting for command `id` (an AbortSignal, a deadline): a command
   * not sent yet is withdrawn and never sent; one sent is answered all the same (its
   * events are folded) but settles nothing. Rejects it with `error`. */
  cancel(id, error) {
    const waiting = this.#waiting.findIndex((c) => c.id === id);
    if (waiting >= 0) {
      this.#waiting.splice(waiting, 1);
      return [reject(id, error)];
    }
    const sent = this.#inFlight.find((c) => c.id === id);
    const held = this.#awaiting.find((a) => a.id === id);
    if (!sent && !held) return [];
    if (sent) sent.id = null;
    if (held) { held.id = null; held.action = resolve(null, undefined); } // settles nothing, in its turn
    return [reject(id, error)];
  }

  /** The backoff after a drop is over. */
  retryDue(generation) {
    if (generation !== this.#generation || this.#link !== null || this.connection !== "reconnecting") return [];
    return this.#open();
  }

  /** A heartbeat of connection `generation`: a ping, or a drop if the last one had no pong. */
  heartbeatDue(generation) {
    if (!this.#current(generation) || !this.welcomed) return [];
    if (this.#awaitingPong) return this.#drop(CloseCode.clientDrop, "no pong");
    this.#awaitingPong = true;
    return this.#transmit({ type: "ping", fields: {}, id: null, own: "heartbeat" });
  }

  /** The delay after tabd refused the client's own sync is over: it asks again. */
  resyncDue(generation) {
    if (!this.#current(generation) || !this.#resync || !this.#resync.refused) return [];
    this.#resync.refused = false;
    return this.#transmit({ type: "sync", fields: {}, id: null, own: "resync" });
  }

  /** The program drops the connection, as a network failure would; the next attempt is not
   * before `holdMs` from now. */
  disconnect(holdMs) {
    this.#holdUntil = this.#clock.now() + (Number(holdMs) || 0);
    return this.#link ? this.#drop(CloseCode.clientDrop, "client disconnect") : [];
  }

  /** The program asks to try again now instead of waiting out the backoff. */
  reconnect() {
    if (this.#link || this.connection === "closed") return [];
    this.#holdUntil = 0;
    return [{ do: "cancelRetry" }, ...this.#open()];
  }

  /** The frames held while a resync was out, folded after its snapshot: each its own
   * update, as if it had come then (listeners heard the snapshot's state first). */
  foldHeld() {
    const held = this.#held;
    this.#held = [];
    const actions = [];
    for (const frame of held) {
      if (this.#resync) this.#resync.frames.push(frame); // one did not fold: held for the next snapshot
      else actions.push(...this.#fold(frame, true));
    }
    return actions;
  }

  /** The program closes the client for good. */
  close() {
    return this.#finish(new TabdError("closed", "closed by the client"), CloseCode.normal, "bye");
  }

  // ------------------------------------------------------------------ connections

  #current(generation) {
    return this.#link !== null && this.#link.generation === generation;
  }

  #open() {
    if (this.connection === "closed") return [];
    this.retryAt = null;
    if (this.#options.tokenProvider) {
      // Every connection goes with a fresh token: the provider is asked first.
      this.#generation += 1;
      this.#link = null;
      this.#fetching = { generation: this.#generation, reason: "connect" };
      return [...this.#cancelRefresh(), { do: "getToken", generation: this.#generation, reason: "connect" }];
    }
    const expiry = tokenExpiry(this.#token);
    if (expiry !== null && this.#clock.now() >= expiry) return this.#finish(new TabdError("token_expired", "the access token has expired"));
    return this.#connect();
  }

  #connect() {
    const q = new URLSearchParams();
    if (this.#options.name !== null) q.set("name", String(this.#options.name).slice(0, 64));
    q.set("room", this.#endpoint.room);
    if (this.state && this.session && !this.#untrusted) {
      q.set("resume", String(this.state.seq));
      q.set("epoch", this.session.epoch);
    }
    const token = this.#token;
    const asProtocol = tokenAsProtocol(token);
    if (token !== null && !asProtocol) q.set("token", token);
    if (!this.#options.tokenProvider) this.#generation += 1; // else counted when the token was asked for
    this.#link = { generation: this.#generation, welcomed: false };
    return [{
      do: "open",
      url: this.#endpoint.url + "?" + q.toString(),
      // A token that can travel as a subprotocol goes there, so no URL that tabd or a proxy
      // logs holds it.
      protocols: asProtocol ? ["tabd.v1", "tabd.token." + token] : [],
      generation: this.#generation,
    }];
  }

  // No refresh is due any more (there is one only with a token provider).
  #cancelRefresh() {
    return this.#options.tokenProvider ? [{ do: "cancelRefresh" }] : [];
  }

  // The next refresh of the connection's token, a while before it runs out (refreshLead);
  // none for a token that never does, or without a provider.
  #scheduleRefresh() {
    const expiry = tokenExpiry(this.#token);
    if (!this.#options.tokenProvider || expiry === null) return [];
    const lead = refreshLead(expiry - this.#tokenAt);
    return [{ do: "refreshLater", delay: Math.max(0, Math.round(expiry - lead - this.#clock.now())), generation: this.#generation }];
  }

  // The connection is gone (or never opened): what was in flight may or may not have taken
  // effect; the state stays, and the client tries again.
  #lost() {
    const actions = [{ do: "stopHeartbeat" }, ...this.#cancelRefresh()];
    if (this.#fetching && this.#fetching.reason === "refresh") this.#fetching = null;
    this.#catchUpRef = null;
    this.#resync = null;
    this.#held = [];
    const lost = this.#inFlight;
    this.#inFlight = [];
    for (const c of lost) {
      if (c.id !== null) actions.push(reject(c.id, new TabdError("connection_lost", `the connection dropped while '${c.type}' was in flight; it may or may not have taken effect`, { ref: c.ref })));
    }
    if (!this.#options.reconnect) return actions.concat(this.#finish(new TabdError("closed", "the connection closed")));
    const b = this.#options.backoff;
    const base = Math.min(b.max, b.initial * 2 ** Math.min(this.attempt, 30));
    const now = this.#clock.now();
    const delay = Math.max(Math.round(base * (0.8 + this.#clock.random() * 0.4)), this.#holdUntil - now);
    this.attempt += 1;
    this.retryAt = now + delay;
    actions.push({ do: "retry", delay, generation: this.#generation });
    return actions.concat(this.#setConnection("reconnecting", true));
  }

  // tabd broke the protocol: neither this connection nor the state it built can be trusted.
  // The next one starts over from a snapshot (no resume), as the Swift client does.
  #violation(reason) {
    this.#untrusted = true;
    return this.#drop(CloseCode.protocolError, `protocol violation: ${reason}`);
  }

  #drop(code, reason) {
    this.#link = null;
    return [{ do: "close", code, reason }, ...this.#lost()];
  }

  #finish(error, code = CloseCode.normal, reason = "") {
    if (this.connection === "closed") return [];
    const actions = [];
    if (this.#link) actions.push({ do: "close", code, reason });
    this.#link = null;
    actions.push({ do: "stopHeartbeat" }, { do: "cancelRetry" }, { do: "cancelResync" }, ...this.#cancelRefresh());
    this.retryAt = null;
    this.#fetching = null;
    this.error = error;
    for (const c of this.#inFlight.concat(this.#waiting)) if (c.id !== null) actions.push(reject(c.id, error));
    actions.push(...this.#settleAll(error));
    this.#inFlight = [];
    this.#waiting = [];
    actions.push(...this.#setConnection("closed", true), { do: "failed", error });
    return actions;
  }

  #setConnection(connection, always = false) {
    if (connection === this.connection && !always) return [];
    this.connection = connection;
    return [publish({ type: "connection", connection, attempt: this.attempt, retryAt: this.retryAt, error: this.error })];
  }

  #transmit(command) {
    this.#refs += 1;
    const ref = "j" + this.#refs;
    this.#inFlight.push({ ref, type: command.type, id: command.id, own: command.own ?? null, token: command.token ?? null });
    return [{ do: "send", text: JSON.stringify(Object.assign({ type: command.type, ref }, command.fields)) }];
  }

  // ------------------------------------------------------------------ frames

  #welcome(f) {
    const room = typeof f.room === "string" ? f.room : this.room; // an older tabd names none
    if (room !== this.room) return this.#finish(new TabdError("wrong_room", `tabd answered for room '${room}', not '${this.room}'`));
    const sameEpoch = this.session !== null && this.session.epoch === f.epoch;
    this.session = {
      client: f.client, room, role: typeof f.role === "string" ? f.role : null,
      epoch: f.epoch, server: f.server, resumed: !!f.resumed,
    };
    this.#link.welcomed = true;
    this.#untrusted = false;
    this.connections += 1;
    this.attempt = 0;
    this.#awaitingPong = false;
    const actions = [{ do: "stopHeartbeat" }];
    if (this.#options.heartbeat > 0) actions.push({ do: "heartbeat", every: this.#options.heartbeat, generation: this.#generation });
    actions.push(...this.#scheduleRefresh());
    actions.push(publish({ type: "welcome", session: this.session, resumed: !!f.resumed }));
    if (f.snapshot) {
      const rebuilt = this.#rebuild(f.snapshot, !sameEpoch, "welcome");
      actions.push(...rebuilt.actions);
      if (!rebuilt.ok) return actions;
      actions.push(...this.#setConnection("live"));
    } else if (f.resumed && this.state && sameEpoch) {
      // The missed batches follow as events frames: replays, until the pong of this ping.
      actions.push(...this.#setConnection("catching-up"));
      actions.push(...this.#transmit({ type: "ping", fields: {}, id: null, own: "catchUp" }));
      this.#catchUpRef = this.#inFlight.at(-1).ref;
    } else {
      actions.push(...this.#setConnection("catching-up"), ...this.#requestResync(!sameEpoch));
    }
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const c of waiting) actions.push(...this.#transmit(c));
    if (this.state) actions.push({ do: "ready" });
    return actions;
  }

  // A state from a wire snapshot; not ok (and the connection dropped) when it is not one.
  #rebuild(wire, fresh, reason) {
    let state;
    try {
      state = fromWire(wire);
    } catch (e) {
      return { ok: false, actions: this.#violation("a snapshot the client cannot read") };
    }
    const actions = [];
    // Acks of another history cannot be waited for.
    if (fresh) actions.push(...this.#settleAll(new TabdError("connection_lost", "the room's history started over")));
    this.state = state;
    actions.push(publish({ type: "snapshot", state, fresh, reason }), ...this.#settleAwaiting());
    return { ok: true, actions };
  }

  #requestResync(fresh) {
    this.#resync = { frames: [], fresh, refused: false };
    return this.#transmit({ type: "sync", fields: {}, id: null, own: "resync" });
  }

  #fold(f, replaying) {
    if (!this.state) return [];
    // Events the state holds already (a frame held while a snapshot that includes it was on
    // its way) are not news; anything else goes to the fold as one frame, which refuses
    // what does not fit (no `events` array included).
    let frame = f;
    if (Array.isArray(f.events)) {
      const seq = this.state.seq;
      const fresh = f.events.filter((e) => !(e && typeof e.seq === "number" && e.seq <= seq));
      if (fresh.length === 0) return [];
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
    const actions = [];
    const applied = frame.events ? frame.events.slice(0, this.state.seq - from) : [];
    if (applied.length > 0) {
      actions.push(publish({ type: "events", events: applied, by: f.by, ref: f.ref ?? null, live: this.connection === "live" && !replaying }));
    }
    if (refused) actions.push(publish({ type: "refused", error: refused, frame: f }), ...this.#requestResync(false));
    return actions.concat(this.#settleAwaiting());
  }

  #answer(f) {
    // Answers come in the order the commands went out; refusals before parsing
    // (rate_limited, bad_json) carry no ref and are the oldest command's. An error frame
    // that names no command of this client's (one sent on its socket behind its back) is
    // reported, not taken; any other answer to no command, or out of its turn, breaks the
    // protocol.
    const head = this.#inFlight[0];
    const named = typeof f.ref === "string" ? this.#inFlight.some((c) => c.ref === f.ref) : head !== undefined;
    if (!named && f.type === "error") return [publish({ type: "error", error: errorOf(f) })];
    if (!head) return this.#violation(`an answer to no command (ref ${f.ref ?? "null"})`);
    if (typeof f.ref === "string" && f.ref !== head.ref) return this.#violation(`an answer for ref ${f.ref} where ${head.ref} was due`);
    const c = this.#inFlight.shift();
    if (c.own === "refresh") {
      if (f.type !== "error") {
        // The connection lives as long as the new token now.
        this.#token = c.token;
        this.#tokenAt = this.#clock.now();
        return this.#scheduleRefresh();
      }
      // Refused: the connection is dropped and opened again with a fresh token, resuming.
      return [publish({ type: "error", error: errorOf(f) }), ...this.#drop(CloseCode.clientDrop, "token refresh refused")];
    }
    if (f.type === "error") {
      const actions = [];
      if (c.own === "resync" && this.#resync) {
        // Our own sync refused (rate_limited): what came meanwhile stays held; ask again
        // after a while (asking at once would be refused until the budget refills).
        this.#resync.refused = true;
        actions.push({ do: "resyncLater", delay: this.#options.resyncRetry, generation: this.#generation });
      } else if (c.own === "catchUp") {
        this.#catchUpRef = null;
        actions.push(...this.#setConnection("live"));
      }
      if (c.id !== null) actions.push(...this.#hold(0, c.id, reject(c.id, errorOf(f))));
      return actions;
    }
    switch (f.type) {
      case "snapshot": return c.own === "resync" ? this.#resynced(f) : this.#synced(c, f);
      case "pong": {
        this.#awaitingPong = false;
        const actions = [];
        if (c.ref === this.#catchUpRef) {
          this.#catchUpRef = null;
          actions.push(...this.#setConnection("live"));
        }
        if (c.id !== null) actions.push(...this.#hold(0, c.id, resolve(c.id, undefined)));
        return actions;
      }
      case "clients": {
        const page = { clients: Array.isArray(f.clients) ? f.clients : [], next: typeof f.next === "string" ? f.next : null };
        if (typeof f.node === "string") page.node = f.node;
        return this.#hold(0, c.id, resolve(c.id, page));
      }
      default: { // ack
        const seq = f.seq;
        return this.#hold(Number.isInteger(seq) ? seq : 0, c.id, resolve(c.id, seq));
      }
    }
  }

  // The snapshot of the client's own sync: the state, then the frames held meanwhile.
  #resynced(f) {
    const held = this.#resync ? this.#resync.frames : [];
    const fresh = this.#resync ? this.#resync.fresh : false;
    this.#resync = null;
    const rebuilt = this.#rebuild(f.snapshot, fresh, "resync");
    if (!rebuilt.ok) return rebuilt.actions;
    const actions = rebuilt.actions;
    if (this.connection === "catching-up" && !this.#catchUpRef) actions.push(...this.#setConnection("live"));
    actions.push({ do: "ready" });
    if (held.length > 0) {
      this.#held = held;
      actions.push({ do: "foldHeld" });
    }
    return actions;
  }

  // A sync of the user's: the server's state, in order with the frames around it. One the
  // client cannot read rejects the sync and drops the connection (a new one starts clean).
  #synced(c, f) {
    const snap = f.snapshot;
    if (snap === null || typeof snap !== "object") {
      return [
        reject(c.id, new TabdError("connection_lost", "tabd answered sync without a snapshot; reconnecting")),
        ...this.#violation("a snapshot the client cannot read"),
      ];
    }
    const actions = [];
    if (this.state === null || !(snap.seq < this.state.seq)) {
      const rebuilt = this.#rebuild(snap, false, "sync");
      if (!rebuilt.ok) return [reject(c.id, new TabdError("connection_lost", "tabd answered sync with a snapshot the client cannot read; reconnecting")), ...rebuilt.actions];
      actions.push(...rebuilt.actions);
    }
    actions.push(...this.#hold(0, c.id, resolve(c.id, this.state)));
    return actions;
  }

  // An answer to settle in its turn (see #awaiting), and what can be settled now.
  #hold(seq, id, action) {
    this.#awaiting.push({ seq, id, action });
    return this.#settleAwaiting();
  }

  // Settles the answers whose turn has come: a prefix of #awaiting.
  #settleAwaiting() {
    if (this.#awaiting.length === 0 || !this.state || this.#resync) return [];
    const seq = this.state.seq;
    let n = 0;
    while (n < this.#awaiting.length && this.#awaiting[n].seq <= seq) n += 1;
    return this.#awaiting.splice(0, n).map((a) => a.action);
  }

  // Settles every answer now: an ack whose seq the state does not hold rejects with `error`.
  #settleAll(error) {
    const seq = this.state ? this.state.seq : 0;
    const actions = this.#awaiting.map((a) => (a.seq > seq ? reject(a.id, error) : a.action));
    this.#awaiting = [];
    return actions;
  }
}

const resolve = (id, value) => ({ do: "resolve", id, value });
const reject = (id, error) => ({ do: "reject", id, error });
const publish = (update) => ({ do: "publish", update });

function errorOf(f) {
  const code = typeof f.code === "string" ? f.code : "error";
  return new TabdError(code, typeof f.message === "string" ? f.message : code, { ref: f.ref ?? null });
}
