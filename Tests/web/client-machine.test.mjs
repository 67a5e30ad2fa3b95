// web/client-machine.js, the JavaScript client's decisions, as a value: inputs in, actions
// out, with no socket, no timer and a clock the test sets. And the one duty of its shell
// (tabd.js) that is more than performing: actions go out in the machine's order even when
// a listener makes a command while the shell is performing.
import { test } from "node:test";
import assert from "node:assert/strict";

import { ClientMachine, CloseCode } from "../../web/client-machine.js";
import { TabdClient, endpoint } from "../../web/tabd.js";
import { transport, until } from "./scripted.mjs";

const snapshot = (seq = 5) => ({
  seq, selected: "home", scrollToTop: 0,
  tabs: [{ id: "home", title: "Home", icon: "house", color: "#FF3B30", badge: null,
    stack: [{ id: "p1", route: "root", appeared: true, appearCount: 1 }], scroll: 0, values: {} }],
  presence: "listed", clientCount: 1, clients: [{ id: "c1", name: "t" }],
});
const welcome = (extra = {}) => JSON.stringify(Object.assign(
  { type: "welcome", protocol: 1, server: "tabd test", client: "c1", room: "main", role: "control", epoch: "e1", resumed: false, snapshot: snapshot() },
  extra));

function machine({ now = 1_000_000, random = 0.5, token, heartbeat = 20000 } = {}) {
  const clock = { now: () => clock.at, random: () => random, at: now };
  const m = new ClientMachine(endpoint("http://h:1/", { token }), {
    name: "t", backoff: { initial: 100, max: 800 }, heartbeat, resyncRetry: 300, reconnect: true, beforeEvent: null,
  }, clock);
  return { m, clock };
}

const kinds = (actions) => actions.map((a) => a.do === "publish" ? `publish:${a.update.type}` : a.do);

test("a welcome's actions, in order: the heartbeat, the updates, the commands that waited, ready", () => {
  const { m } = machine();
  const [open] = m.start();
  assert.deepEqual([open.do, open.generation, new URL(open.url).searchParams.get("room")], ["open", 1, "main"]);
  assert.deepEqual(m.request("tap", { tab: "home" }, 7), [], "no welcome yet: the command waits");
  const actions = m.received(welcome(), 1);
  assert.deepEqual(kinds(actions), ["stopHeartbeat", "heartbeat", "publish:welcome", "publish:snapshot", "publish:connection", "send", "ready"]);
  assert.deepEqual(JSON.parse(actions.find((a) => a.do === "send").text), { type: "tap", ref: "j1", tab: "home" });
  assert.equal(m.connection, "live");
  // The ack resolves the command once the state holds its seq; here it already does.
  assert.deepEqual(m.received(JSON.stringify({ type: "ack", ref: "j1", seq: 5 }), 1), [{ do: "resolve", id: 7, value: 5 }]);
});

test("a drop rejects what was in flight and asks for a retry after the backoff the clock's chance gives", () => {
  const { m, clock } = machine({ random: 0 });
  m.start();
  m.received(welcome(), 1);
  m.request("tap", { tab: "home" }, 1);
  const actions = m.closed(1, 1006);
  assert.deepEqual(kinds(actions), ["stopHeartbeat", "reject", "retry", "publish:connection"]);
  assert.equal(actions[1].error.code, "connection_lost");
  // random 0: 20 % under the first step of 100 ms.
  assert.deepEqual(actions[2], { do: "retry", delay: 80, generation: 1 });
  assert.equal(m.retryAt, clock.at + 80);
  // A retry of another generation, or a close of the old connection, is passed over.
  assert.deepEqual(m.retryDue(0), []);
  assert.deepEqual(m.closed(1, 1006), []);
  const [open] = m.retryDue(1);
  assert.equal(open.generation, 2);
  assert.equal(new URL(open.url).searchParams.get("resume"), "5", "resumes where its state is");
  // The next failure doubles the step.
  assert.equal(m.closed(2, 1006).find((a) => a.do === "retry").delay, 160);
});

test("input of an older connection changes nothing", () => {
  const { m } = machine();
  m.start();
  m.received(welcome(), 1);
  m.disconnect(0);
  m.retryDue(1);
  assert.deepEqual(m.received(JSON.stringify({ type: "pong", ref: "j9" }), 1), [], "a frame of generation 1");
  assert.deepEqual(m.heartbeatDue(1), []);
  assert.equal(m.connection, "reconnecting");
});

test("a token past its exp by the machine's clock ends the client before any connection", () => {
  const payload = Buffer.from(JSON.stringify({ exp: 2000 })).toString("base64url");
  const { m } = machine({ token: `h.${payload}.s`, now: 2_000_000 });
  const actions = m.start();
  assert.ok(!actions.some((a) => a.do === "open"), JSON.stringify(actions));
  assert.equal(actions.at(-1).do, "failed");
  assert.equal(m.error.code, "token_expired");
});

test("a heartbeat without a pong drops the connection (clientDrop) and reconnects", () => {
  const { m } = machine();
  m.start();
  m.received(welcome(), 1);
  assert.deepEqual(JSON.parse(m.heartbeatDue(1)[0].text).type, "ping");
  const actions = m.heartbeatDue(1);
  assert.deepEqual(actions[0], { do: "close", code: CloseCode.clientDrop, reason: "no pong" });
  assert.ok(actions.some((a) => a.do === "retry"));
});

test("a refused resync asks again once its delay is over, holding what came meanwhile; closing cancels it", () => {
  const { m } = machine();
  m.start();
  m.received(welcome(), 1);
  const gap = JSON.stringify({ type: "events", by: "c2", ref: null, events: [{ seq: 8, kind: "scrolled", tab: "home", offset: 3 }] });
  const asked = m.received(gap, 1).find((a) => a.do === "send");
  assert.equal(JSON.parse(asked.text).type, "sync");
  const refused = m.received(JSON.stringify({ type: "error", ref: null, code: "rate_limited", message: "slow down" }), 1);
  assert.deepEqual(refused, [{ do: "resyncLater", delay: 300, generation: 1 }], "not at once: tabd would refuse it again");
  assert.deepEqual(m.received(gap, 1), [], "a batch that does not fold meanwhile asks nothing");
  assert.deepEqual(m.resyncDue(0), [], "a delay of another connection");
  const again = m.resyncDue(1);
  assert.equal(again.length, 1);
  assert.equal(JSON.parse(again[0].text).type, "sync");
  assert.deepEqual(m.resyncDue(1), [], "asked once");
  m.received(JSON.stringify({ type: "error", ref: null, code: "rate_limited", message: "slow down" }), 1);
  assert.ok(kinds(m.close()).includes("cancelResync"));
});

test("the shell sends in the machine's order when a listener commands while it performs", async () => {
  const t = transport();
  const client = new TabdClient("http://127.0.0.1:8080/", { WebSocket: t.WebSocket, heartbeat: 0 });
  // Two commands wait for the welcome; a listener commands on hearing it.
  const first = client.tap("home");
  const second = client.select("home");
  let third = null;
  client.subscribe((u) => { if (u.type === "welcome") third = client.ping(); });
  const sock = await until(() => t.sockets[0], "a socket");
  sock.frame(welcome());
  assert.deepEqual(sock.sent.map((f) => f.ref), ["j1", "j2", "j3"], "numbered and sent in one order");
  // tabd answers in the order it received them; each goes to its own command.
  sock.frame({ type: "ack", ref: "j1", seq: 5 });
  sock.frame({ type: "ack", ref: "j2", seq: 5 });
  sock.frame({ type: "pong", ref: "j3" });
  assert.deepEqual([await first, await second, typeof (await third)], [5, 5, "number"]);
  assert.equal(client.connection, "live");
  client.close();
});
