// web/tabd.js, the JavaScript client, against a scripted transport: a WebSocket class the
// test drives frame by frame (what tabd would send, when it would send it), so reconnects,
// resume, gaps and answers are each tested on purpose. Run by `make test-web`
// (node --test).
import { test } from "node:test";
import assert from "node:assert/strict";

import { CloseCode, connect, endpoint, TabdClient, TabdError, tokenExpiry } from "../../web/tabd.js";
import { transport, until } from "./scripted.mjs";

// A room of two tabs at seq 5: home selected (its root appeared), profile not visited.
function snapshot(seq = 5, extra = {}) {
  return Object.assign({
    seq, selected: "home", scrollToTop: 0,
    tabs: [
      { id: "home", title: "Home", icon: "house", color: "#FF3B30", badge: null,
        stack: [{ id: "p1", route: "root", appeared: true, appearCount: 1 }], scroll: 0, values: {} },
      { id: "profile", title: "Profile", icon: "person", color: "#007AFF", badge: null,
        stack: [{ id: "p2", route: "root", appeared: false, appearCount: 0 }], scroll: 0, values: {} },
    ],
    presence: "listed", clientCount: 1, clients: [{ id: "c1", name: "t" }],
  }, extra);
}

const welcome = (extra = {}) => Object.assign(
  { type: "welcome", protocol: 1, server: "tabd test", client: "c1", room: "main", role: "control", epoch: "e1", resumed: false, snapshot: snapshot() },
  extra);

// The events of `tap profile` from the snapshot above (seq 6…9).
const tapProfile = (ref = null, by = "c1") => ({
  type: "events", by, ref, events: [
    { seq: 6, kind: "selected", from: "home", to: "profile" },
    { seq: 7, kind: "disappear", tab: "home", page: "p1" },
    { seq: 8, kind: "firstAppear", tab: "profile", page: "p2" },
    { seq: 9, kind: "appear", tab: "profile", page: "p2" },
  ],
});

const pushed = (seq, page, route = "next", by = "c2") => ({
  type: "events", by, ref: null, events: [{ seq, kind: "pushed", tab: "home", page, route }],
});

// A client connected and welcomed (snapshot at seq 5), with its updates recorded.
async function connected(options = {}) {
  const t = transport();
  const pending = connect("http://127.0.0.1:8080/", Object.assign({ WebSocket: t.WebSocket, heartbeat: 0, backoff: { initial: 5, max: 20 } }, options));
  const sock = await until(() => t.sockets[0], "the first socket");
  sock.frame(welcome());
  const client = await pending;
  const updates = [];
  client.subscribe((u) => updates.push(u));
  return { t, sock, client, updates };
}

// ---------------------------------------------------------------- where to connect

test("endpoint: the URL tabd prints, a path behind a proxy, or the socket's own URL", () => {
  assert.equal(endpoint("http://127.0.0.1:8080/").url, "ws://127.0.0.1:8080/ws");
  assert.equal(endpoint("https://example.com/tabd/").url, "wss://example.com/tabd/ws");
  assert.equal(endpoint("https://example.com/tabd/index.html").url, "wss://example.com/tabd/ws");
  assert.equal(endpoint("wss://example.com/x/ws?room=a").url, "wss://example.com/x/ws");
  // A page link's room and fragment token are used when the options name none.
  const e = endpoint("http://h:1/?room=kitchen#token=abc.def.ghi");
  assert.deepEqual([e.room, e.token, e.tokenAsProtocol], ["kitchen", "abc.def.ghi", true]);
  assert.equal(endpoint("http://h:1/?room=kitchen", { room: "hall" }).room, "hall");
  assert.equal(endpoint("http://h:1/", { token: "has space" }).tokenAsProtocol, false);
  for (const bad of ["ftp://h/", "not a url at all", "http://h:1/?room=no%20spaces"]) {
    assert.throws(() => endpoint(bad), (e) => e instanceof TabdError && e.code === "bad_url", bad);
  }
});

test("the handshake: room and name in the query, a signed token as a subprotocol, another token in the query", async () => {
  const t = transport();
  const c = new TabdClient("http://h:1/", { WebSocket: t.WebSocket, room: "r1", name: "kiosk", token: "aa.bb.cc", heartbeat: 0 });
  const s = await until(() => t.sockets[0], "a socket");
  assert.equal(s.url.pathname, "/ws");
  assert.deepEqual([s.url.searchParams.get("room"), s.url.searchParams.get("name"), s.url.searchParams.get("token")], ["r1", "kiosk", null]);
  assert.deepEqual(s.protocols, ["tabd.v1", "tabd.token.aa.bb.cc"]);
  c.close();
  const u = transport();
  const d = new TabdClient("http://h:1/", { WebSocket: u.WebSocket, token: "not an http token", heartbeat: 0 });
  const s2 = await until(() => u.sockets[0], "a socket");
  assert.equal(s2.url.searchParams.get("token"), "not an http token");
  assert.deepEqual(s2.protocols, []);
  d.close();
});

// ---------------------------------------------------------------- state and commands

test("connect() resolves once welcomed, with the snapshot as its state", async () => {
  const { client } = await connected();
  assert.equal(client.connection, "live");
  assert.deepEqual([client.state.seq, client.state.selected, client.clientId, client.role, client.epoch], [5, "home", "c1", "control", "e1"]);
  client.close();
});

test("a command resolves with its ack's seq, and the state already holds its events", async () => {
  const { sock, client, updates } = await connected();
  const tapped = client.tap("profile");
  const sent = sock.last("tap");
  assert.deepEqual([sent.tab, typeof sent.ref], ["profile", "string"]);
  sock.frame(tapProfile(sent.ref));
  sock.frame({ type: "ack", ref: sent.ref, seq: 9 });
  assert.equal(await tapped, 9);
  assert.deepEqual([client.state.seq, client.state.selected, client.state.tabs[1].stack[0].appearCount], [9, "profile", 1]);
  const ev = updates.find((u) => u.type === "events");
  assert.deepEqual([ev.events.length, ev.by, ev.live], [4, "c1", true]);
  client.close();
});

test("each command's fields: the main argument first, the tab as an option", async () => {
  const { sock, client } = await connected();
  const unanswered = [
    client.push("detail", { tab: "home" }),
    client.pop(),
    client.popToRoot({ tab: "home" }),
    client.scroll(120.5),
    client.set("greeting", "Tapped", { tab: "profile" }),
    client.addTab({ id: "x", title: "X", icon: "star", color: "#000000" }, { index: 1 }),
    client.updateTab({ id: "x", badge: null }),
    client.moveTab("x", 0),
    client.removeTab("x"),
    client.select("home"),
    client.clients({ after: "c9", limit: 10 }),
  ];
  const strip = ({ ref, ...f }) => f;
  assert.deepEqual(sock.sent.map(strip), [
    { type: "push", route: "detail", tab: "home" },
    { type: "pop" },
    { type: "popToRoot", tab: "home" },
    { type: "scroll", offset: 120.5 },
    { type: "set", key: "greeting", value: "Tapped", tab: "profile" },
    { type: "addTab", tab: { id: "x", title: "X", icon: "star", color: "#000000" }, index: 1 },
    { type: "updateTab", tab: { id: "x", badge: null } },
    { type: "moveTab", tab: "x", index: 0 },
    { type: "removeTab", tab: "x" },
    { type: "select", tab: "home" },
    { type: "clients", after: "c9", limit: 10 },
  ]);
  assert.equal(new Set(sock.sent.map((f) => f.ref)).size, sock.sent.length, "every ref is new");
  client.close();
  for (const r of await Promise.allSettled(unanswered)) assert.equal(r.reason.code, "closed");
});

test("an error frame rejects its command with the protocol's code; the others are unaffected", async () => {
  const { sock, client } = await connected();
  const bad = client.select("settings");
  const good = client.select("home");
  const [b, g] = sock.sent;
  sock.frame({ type: "error", ref: b.ref, code: "unknown_tab", message: "no tab 'settings'" });
  sock.frame({ type: "ack", ref: g.ref, seq: 5 });
  await assert.rejects(bad, (e) => e instanceof TabdError && e.code === "unknown_tab" && e.ref === b.ref && /settings/.test(e.message));
  assert.equal(await good, 5);
  // A refusal before parsing has no ref: it is the oldest command's.
  const limited = client.tap("home");
  sock.frame({ type: "error", ref: null, code: "rate_limited", message: "slow down" });
  await assert.rejects(limited, (e) => e.code === "rate_limited");
  client.close();
});

test("sync, ping and clients answer with a snapshot, a round trip and a page", async () => {
  const { sock, client } = await connected();
  const synced = client.sync();
  sock.frame({ type: "snapshot", ref: sock.last("sync").ref, snapshot: snapshot(12, { selected: "profile" }) });
  const state = await synced;
  assert.equal(state, client.state);
  assert.deepEqual([state.seq, state.selected], [12, "profile"]);
  const pinged = client.ping();
  sock.frame({ type: "pong", ref: sock.last("ping").ref });
  assert.ok((await pinged) >= 0);
  const page = client.clients({ limit: 1 });
  sock.frame({ type: "clients", ref: sock.last("clients").ref, clients: [{ id: "c1", name: "t" }], next: "c1" });
  assert.deepEqual(await page, { clients: [{ id: "c1", name: "t" }], next: "c1" });
  client.close();
});

// ---------------------------------------------------------------- a frame that does not fold

test("after a resync, listeners hear the snapshot's state first, then each held frame as its own update", async () => {
  const { sock, client } = await connected();
  const heard = [];
  client.subscribe((u) => { if (u.type === "snapshot" || u.type === "events") heard.push([u.type, client.state.seq]); });
  sock.frame(pushed(7, "p7")); // seq 6 never came
  const sync = sock.last("sync");
  sock.frame(pushed(8, "p8")); // held
  const at6 = snapshot(6);
  at6.tabs[0].stack.push({ id: "p6", route: "a", appeared: false, appearCount: 0 });
  sock.frame({ type: "snapshot", ref: sync.ref, snapshot: at6 });
  // Frame 7 came before the sync was taken: it was refused, and is not held. Frame 8 was.
  assert.deepEqual(heard, [["snapshot", 6]], "the held frame does not follow on 6: a new sync");
  const again = sock.last("sync");
  assert.notEqual(again.ref, sync.ref);
  const at8 = snapshot(8);
  at8.tabs[0].stack.push({ id: "p6", route: "a", appeared: false, appearCount: 0 }, { id: "p7", route: "b", appeared: false, appearCount: 0 });
  at8.seq = 7;
  sock.frame(pushed(8, "p8b")); // held behind the second sync
  sock.frame({ type: "snapshot", ref: again.ref, snapshot: at8 });
  assert.deepEqual(heard, [["snapshot", 6], ["snapshot", 7], ["events", 8]], "the snapshot at 7 is heard at 7, then frame 8 on its own");
  client.close();
});

test("a gap asks for a snapshot; the frames meanwhile are held, and what follows the snapshot folds on it", async () => {
  const { sock, client, updates } = await connected();
  sock.frame(pushed(7, "p7")); // seq 6 never came
  assert.equal(client.state.seq, 5, "the frame after the gap is not applied");
  const sync = sock.last("sync");
  assert.ok(sync, "the client asked for a snapshot");
  assert.equal(updates.filter((u) => u.type === "refused").length, 1);
  // A command sent meanwhile, and a frame tabd sent before it took the sync.
  const pushedByMe = client.push("mine", { tab: "home" });
  const mine = sock.last("push");
  sock.frame(pushed(8, "p8"));
  assert.equal(client.state.seq, 5, "held while the snapshot is on its way");
  // tabd answers in order: the snapshot (at seq 8: it holds 6, 7 and 8), then the push's
  // batch and ack.
  const at8 = snapshot(8);
  at8.tabs[0].stack.push({ id: "p6", route: "a", appeared: false, appearCount: 0 }, { id: "p7", route: "b", appeared: false, appearCount: 0 }, { id: "p8", route: "c", appeared: false, appearCount: 0 });
  sock.frame({ type: "snapshot", ref: sync.ref, snapshot: at8 });
  sock.frame({ type: "events", by: "c1", ref: mine.ref, events: [{ seq: 9, kind: "pushed", tab: "home", page: "p9", route: "mine" }] });
  sock.frame({ type: "ack", ref: mine.ref, seq: 9 });
  assert.equal(await pushedByMe, 9);
  assert.deepEqual(client.state.tabs[0].stack.map((p) => p.id), ["p1", "p6", "p7", "p8", "p9"]);
  const snap = updates.find((u) => u.type === "snapshot");
  assert.deepEqual([snap.reason, snap.fresh], ["resync", false]);
  assert.equal(sock.sent.filter((f) => f.type === "sync").length, 1, "one sync for the one gap");
  client.close();
});

test("a frame that does not fit the state (an unknown tab) is refused the same way", async () => {
  const { sock, client } = await connected();
  sock.frame({ type: "events", by: "c2", ref: null, events: [{ seq: 6, kind: "scrolled", tab: "nope", offset: 3 }] });
  assert.equal(client.state.seq, 5);
  assert.ok(sock.last("sync"));
  client.close();
});

test("frames the state holds already are not news", async () => {
  const { sock, client, updates } = await connected();
  sock.frame(pushed(5, "p5")); // seq 5 is in the snapshot
  assert.equal(updates.length, 0);
  assert.equal(sock.last("sync"), undefined);
  client.close();
});

// ---------------------------------------------------------------- reconnects

test("a dropped connection: in-flight commands reject, the client reconnects with resume, replays are not live", async () => {
  const { t, sock, client, updates } = await connected();
  const lost = client.tap("profile");
  sock.drop(1006);
  await assert.rejects(lost, (e) => e.code === "connection_lost");
  assert.equal(client.connection, "reconnecting");
  // A command made while reconnecting waits for the next welcome.
  const later = client.select("home");
  const again = await until(() => t.sockets[1], "a second socket");
  assert.deepEqual([again.url.searchParams.get("resume"), again.url.searchParams.get("epoch")], ["5", "e1"]);
  assert.equal(again.sent.length, 0, "nothing is sent before the welcome");
  again.frame(welcome({ client: "c3", resumed: true, snapshot: undefined }));
  assert.equal(client.connection, "catching-up");
  const [ping, select] = again.sent;
  assert.deepEqual([ping.type, select.type], ["ping", "select"]);
  again.frame(tapProfile(null, "c2")); // missed while away
  again.frame({ type: "pong", ref: ping.ref });
  assert.equal(client.connection, "live");
  again.frame({ type: "events", by: "c3", ref: select.ref, events: [
    { seq: 10, kind: "selected", from: "profile", to: "home" },
    { seq: 11, kind: "disappear", tab: "profile", page: "p2" },
    { seq: 12, kind: "appear", tab: "home", page: "p1" }] });
  again.frame({ type: "ack", ref: select.ref, seq: 12 });
  assert.equal(await later, 12);
  const events = updates.filter((u) => u.type === "events");
  assert.deepEqual(events.map((u) => u.live), [false, true]);
  assert.deepEqual(updates.filter((u) => u.type === "connection").map((u) => u.connection), ["reconnecting", "catching-up", "live"]);
  assert.equal(client.clientId, "c3");
  assert.equal(client.connections, 2);
  client.close();
});

test("a welcome of another epoch starts the history over (fresh)", async () => {
  const { t, sock, client, updates } = await connected();
  sock.drop();
  const again = await until(() => t.sockets[1], "a second socket");
  again.frame(welcome({ epoch: "e2", snapshot: snapshot(2) }));
  const snap = updates.find((u) => u.type === "snapshot");
  assert.deepEqual([snap.fresh, snap.reason, client.state.seq, client.epoch], [true, "welcome", 2, "e2"]);
  client.close();
});

test("the backoff doubles from its start to its cap, jittered within ±20 %", async () => {
  const t = transport();
  const randoms = [0, 1, 0.5, 0, 1, 0.5];
  const client = new TabdClient("http://h:1/", { WebSocket: t.WebSocket, heartbeat: 0, backoff: { initial: 10, max: 40 }, random: () => randoms.shift() ?? 0.5 });
  const delays = [];
  client.subscribe((u) => { if (u.type === "connection" && u.connection === "reconnecting") delays.push(u.retryAt - Date.now()); });
  for (let i = 0; i < 5; i++) {
    const s = await until(() => t.sockets[i], `socket ${i}`);
    s.drop();
  }
  client.close();
  // base 10, 20, 40, 40, 40 times 0.8, 1.2, 1.0, 0.8, 1.2 (a millisecond of slack each)
  const want = [8, 24, 40, 32, 48];
  assert.equal(delays.length, 5);
  delays.forEach((d, i) => assert.ok(Math.abs(d - want[i]) <= 2, `delay ${i}: ${d} ms, want ${want[i]}`));
});

test("a heartbeat without a pong drops the connection and reconnects", async () => {
  const { t, sock, client } = await connected({ heartbeat: 10 });
  const ping = await until(() => sock.last("ping"), "a heartbeat ping");
  // No pong: the next beat gives up on this connection.
  await until(() => sock.closed, "the silent connection closed");
  assert.ok(ping);
  await until(() => t.sockets[1], "a new connection");
  client.close();
});

test("a frame that is not JSON drops the connection (1002) and a new one starts", async () => {
  const { t, sock, client } = await connected();
  sock.frame("<html>");
  assert.equal(sock.closed.code, 1002);
  await until(() => t.sockets[1], "a new connection");
  client.close();
});

// ---------------------------------------------------------------- the end

test("the named close codes are the protocol's", () => {
  assert.deepEqual([CloseCode.normal, CloseCode.protocolError, CloseCode.policyViolation, CloseCode.tokenExpired, CloseCode.roomGone],
                   [1000, 1002, 1008, 4001, 4404]);
  assert.ok(Object.isFrozen(CloseCode));
});

test("4404 (room deleted) and 4001 (token expired) close the client for good", async () => {
  for (const [code, why] of [[4404, "room_deleted"], [4001, "token_expired"]]) {
    const { t, sock, client } = await connected();
    const pending = client.tap("profile");
    sock.drop(code);
    await assert.rejects(pending, (e) => e.code === why);
    assert.deepEqual([client.connection, client.error.code, client.error.closeCode], ["closed", why, code]);
    await assert.rejects(client.tap("home"), (e) => e.code === why, "a later command is refused at once");
    await new Promise((r) => setTimeout(r, 30));
    assert.equal(t.sockets.length, 1, "no reconnect");
  }
});

test("a signed token past its exp is not offered: the client closes without a socket", async () => {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const token = `${b64({ alg: "HS256" })}.${b64({ exp: Math.floor(Date.now() / 1000) - 5 })}.sig`;
  assert.ok(tokenExpiry(token) < Date.now());
  const t = transport();
  await assert.rejects(connect("http://h:1/", { WebSocket: t.WebSocket, token }), (e) => e.code === "token_expired");
  assert.equal(t.sockets.length, 0);
});

test("a welcome for another room closes the client (wrong_room)", async () => {
  const t = transport();
  const pending = connect("http://h:1/", { WebSocket: t.WebSocket, room: "a", heartbeat: 0 });
  (await until(() => t.sockets[0], "a socket")).frame(welcome({ room: "b" }));
  await assert.rejects(pending, (e) => e.code === "wrong_room");
});

test("connect() times out when no welcome comes", async () => {
  const t = transport();
  await assert.rejects(connect("http://h:1/", { WebSocket: t.WebSocket, timeout: 20, heartbeat: 0 }), (e) => e.code === "timed_out");
  assert.ok(t.sockets[0].closed, "the socket was closed");
});

test("close() rejects what is pending with `closed` and sends nothing more", async () => {
  const { sock, client } = await connected();
  const pending = client.tap("profile");
  client.close();
  await assert.rejects(pending, (e) => e.code === "closed");
  assert.equal(sock.closed.code, 1000);
  assert.equal(client.connection, "closed");
});

test("a listener that throws does not stop the others", async () => {
  const { sock, client } = await connected();
  const seen = [];
  const reported = [];
  const before = globalThis.reportError;
  globalThis.reportError = (e) => reported.push(e); // as a browser's would
  try {
    const unsubscribe = client.subscribe(() => { throw new Error("listener bug"); });
    client.subscribe((u) => seen.push(u.type));
    sock.frame(tapProfile());
    unsubscribe();
  } finally {
    globalThis.reportError = before;
  }
  assert.deepEqual(reported.map((e) => e.message), ["listener bug"]);
  assert.deepEqual(seen, ["events"]);
  assert.equal(client.state.seq, 9);
  client.close();
});

test("a sync answered with a snapshot the client cannot read rejects, and a new connection starts", async () => {
  for (const bad of [null, { seq: 9 }]) {
    const { t, sock, client } = await connected();
    const synced = client.sync();
    sock.frame({ type: "snapshot", ref: sock.last("sync").ref, snapshot: bad });
    await assert.rejects(synced, (e) => e.code === "connection_lost");
    assert.equal(sock.closed.code, 1002);
    assert.equal(client.state.seq, 5, "the state stays as it was");
    await until(() => t.sockets[1], "a new connection");
    client.close();
  }
});

// ---------------------------------------------------------------- cancelling and tokens

test("a command whose signal is aborted already is refused at once and never sent", async () => {
  const { sock, client } = await connected();
  const controller = new AbortController();
  controller.abort(new Error("gone"));
  await assert.rejects(client.tap("profile", { signal: controller.signal }), /gone/);
  assert.equal(sock.sent.filter((f) => f.type === "tap").length, 0, "nothing went out");
  client.close();
});

test("a command past its deadline rejects with timed_out and the answer that comes later settles nothing", async () => {
  const { sock, client } = await connected();
  const tap = client.tap("profile", { timeout: 20 });
  await assert.rejects(tap, (e) => e instanceof TabdError && e.code === "timed_out");
  const sent = sock.last("tap");
  sock.frame(tapProfile(sent.ref));
  sock.frame({ type: "ack", ref: sent.ref, seq: 9 });
  // The events are folded all the same, and the next command is answered in its turn.
  const next = client.pop();
  const pop = await until(() => sock.last("pop"), "the pop sent");
  sock.frame({ type: "ack", ref: pop.ref, seq: 9 });
  assert.equal(await next, 9);
  assert.equal(client.state.selected, "profile");
  client.close();
});

test("a signed token is refreshed on the open connection a quarter of its life before it runs out", async () => {
  const t = transport();
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const jwt = (name, seconds) => `${b64({ alg: "HS256" })}.${b64({ exp: Date.now() / 1000 + seconds, sub: name })}.sig`;
  const asked = [];
  const tokens = [jwt("t1", 2), jwt("t2", 2)];
  const pending = connect("http://127.0.0.1:8080/", {
    WebSocket: t.WebSocket, heartbeat: 0,
    getToken: async ({ reason }) => { asked.push(reason); return tokens.shift(); },
  });
  const sock = await until(() => t.sockets[0], "the first socket");
  const first = sock.protocols[1].slice("tabd.token.".length);
  assert.equal(JSON.parse(Buffer.from(first.split(".")[1], "base64url")).sub, "t1", "the connection went with the provider's token");
  sock.frame(welcome());
  const client = await pending;
  // 2 s of life: the refresh goes half a second before the end (the lead is at least 0.5 s).
  const refresh = await until(() => sock.last("refresh"), "a refresh frame", 3000);
  assert.deepEqual(asked, ["connect", "refresh"]);
  assert.equal(JSON.parse(Buffer.from(refresh.token.split(".")[1], "base64url")).sub, "t2");
  sock.frame({ type: "ack", ref: refresh.ref, seq: 5 });
  assert.equal(t.sockets.length, 1, "no reconnect for a planned refresh");
  client.close();
});
