// The scripted sessions of Tests/sessions/ (frames from tabd in, what the client does out),
// run against the JavaScript client (web/tabd.js) over a scripted WebSocket. The Swift
// client runs the same files (Tests/TabdClientTests/SharedSessionTests.swift): where the two
// clients would differ, one of them fails. The steps are described there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { TabdClient } from "../../web/tabd.js";
import { transport, until } from "./scripted.mjs";

const folder = join(dirname(fileURLToPath(import.meta.url)), "..", "sessions");
const files = readdirSync(folder).filter((f) => f.endsWith(".json")).sort();

const tick = () => new Promise((r) => setImmediate(r));

class SessionRun {
  constructor() {
    this.t = transport();
    this.client = null;
    this.openedSeen = 0;
    this.refs = {}; // command id -> ref
    this.programRefs = new Set();
    this.sentSeen = 0; // frames of the program's commands already checked
    this.ownAnswered = new Set();
    this.answers = {};
    this.finished = undefined;
    this.tokenAsks = []; // the provider's asks not answered yet: {reason, resolve, reject}
    this.controllers = {}; // command id -> AbortController
  }

  get sock() { return this.t.sockets.at(-1); }

  /** Every frame sent, on every socket, in order. */
  allSent() { return this.t.sockets.flatMap((s) => s.sent); }

  substituted(v) {
    if (typeof v === "string" && v.startsWith("@")) return this.refs[v.slice(1)] ?? v;
    if (Array.isArray(v)) return v.map((x) => this.substituted(x));
    if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.substituted(x)]));
    return v;
  }

  // The ref a command got: the last frame sent by the program's `send`, once it went out.
  noteRefs() {
    for (const f of this.allSent()) {
      if (this.pendingIds.length === 0) break;
      if (["sync", "ping", "refresh"].includes(f.type) || this.programRefs.has(f.ref) || this.ownRefs().has(f.ref)) continue;
      const id = this.pendingIds.shift();
      this.refs[id] = f.ref;
      this.programRefs.add(f.ref);
    }
  }

  /** The frames the client sent on its own on this connection that tabd has not answered. */
  ownUnanswered(types = ["sync", "ping"]) {
    return this.sock.sent.filter((f) => types.includes(f.type) && !this.ownAnswered.has(f.ref) && !this.programRefs.has(f.ref));
  }

  ownRefs() { return new Set(this.allSent().filter((f) => ["sync", "ping", "refresh"].includes(f.type)).map((f) => f.ref)); }

  async step(step, place) {
    if (step.tabd) {
      this.sock.frame(this.substituted(step.tabd));
    } else if (step.expect) {
      await this.expect(step.expect, place);
    } else if (step.do === "connect") {
      this.pendingIds = [];
      this.client = new TabdClient("http://127.0.0.1:8080/", {
        WebSocket: this.t.WebSocket, name: "t", heartbeat: 0, backoff: { initial: 1, max: 2 }, resyncRetry: 1, random: () => 0.5,
        getToken: this.tokenProvider
          ? ({ reason }) => new Promise((resolve, reject) => this.tokenAsks.push({ reason, resolve, reject }))
          : null,
      });
      this.client.subscribe((u) => {
        if (u.type === "connection" && u.connection === "closed") this.finished = u.error?.closeCode ?? null;
      });
    } else if (step.do === "command") {
      assert.ok(!["sync", "ping", "clients"].includes(step.command.type), `${place}: a session's own query would be taken for the client's`);
      const { type, ...fields } = step.command;
      const id = step.id;
      this.pendingIds.push(id);
      this.controllers[id] = new AbortController();
      this.client.send(type, fields, { signal: this.controllers[id].signal }).then(
        (seq) => { this.answers[id] = { ack: seq }; },
        (e) => {
          this.answers[id] = e.name === "AbortError" ? { cancelled: true }
            : e.code === "connection_lost" || e.closeCode !== undefined || e.code === "closed" ? { failed: true } : { refused: e.code };
        });
    } else if (step.do === "cancel") {
      if (this.refs[step.id] === undefined) this.pendingIds = this.pendingIds.filter((id) => id !== step.id); // withdrawn: never sent
      this.controllers[step.id].abort();
    } else if (step.do === "giveToken") {
      (await until(() => this.tokenAsks.length > 0 && this.tokenAsks, `${place}: a token asked for`)).shift().resolve(step.token);
    } else if (step.do === "failToken") {
      (await until(() => this.tokenAsks.length > 0 && this.tokenAsks, `${place}: a token asked for`)).shift().reject(new Error("the session's provider failed"));
    } else if (step.do === "refreshToken") {
      this.client.refreshToken();
    } else if (step.do === "answerRefresh") {
      for (const f of this.ownUnanswered(["refresh"])) {
        this.ownAnswered.add(f.ref);
        this.sock.frame(step.code
          ? { type: "error", ref: f.ref, code: step.code, message: `refused: ${step.code}` }
          : { type: "ack", ref: f.ref, seq: this.client.state.seq });
      }
    } else if (step.do === "drop") {
      // The next connection checked is the one after this drop.
      this.openedSeen = this.t.sockets.length;
      this.sock.drop(step.code);
    } else if (step.do === "answerOwn") {
      for (const f of this.ownUnanswered()) {
        this.ownAnswered.add(f.ref);
        this.sock.frame(f.type === "sync" ? { type: "snapshot", ref: f.ref, snapshot: step.snapshot } : { type: "pong", ref: f.ref });
      }
    } else if (step.do === "refuseOwn") {
      // Refused before parsing (rate_limited): the error carries no ref.
      for (const f of this.ownUnanswered()) {
        this.ownAnswered.add(f.ref);
        this.sock.frame({ type: "error", ref: null, code: step.code, message: `refused: ${step.code}` });
      }
    } else {
      assert.fail(`${place}: a step this runner does not know: ${JSON.stringify(step)}`);
    }
    for (let i = 0; i < 4; i += 1) await tick(); // a token goes through a few Promises
    this.noteRefs();
  }

  async expect(e, place) {
    if (e.tokenAsked) {
      await until(() => this.tokenAsks.length > 0, `${place}: a token asked for`);
      assert.equal(this.tokenAsks[0].reason, e.tokenAsked, `${place}: the provider was asked`);
    }
    if (e.opened) {
      const s = await until(() => this.t.sockets.length > this.openedSeen && this.t.sockets.at(-1), `${place}: a connection opened`);
      this.openedSeen = this.t.sockets.length;
      const resume = s.url.searchParams.get("resume");
      assert.equal(resume === null ? null : Number(resume), e.opened.resume, `${place}: opened ${s.url}`);
      if (e.opened.token !== undefined) {
        const asProtocol = s.protocols.find((p) => p.startsWith("tabd.token."));
        const token = asProtocol ? asProtocol.slice("tabd.token.".length) : s.url.searchParams.get("token");
        assert.equal(token, e.opened.token, `${place}: the connection's token`);
      }
    }
    if (e.refreshSent !== undefined) {
      const refresh = this.allSent().filter((f) => f.type === "refresh").at(-1);
      assert.equal(refresh ? refresh.token : null, e.refreshSent, `${place}: refresh sent`);
    }
    if (e.connections !== undefined) assert.equal(this.t.sockets.length, e.connections, `${place}: connections opened`);
    if (e.sent) {
      const program = this.allSent().filter((f) => this.programRefs.has(f.ref));
      const fresh = program.slice(this.sentSeen).map(({ ref, ...f }) => f);
      this.sentSeen = program.length;
      assert.deepEqual(fresh, e.sent, `${place}: sent`);
    }
    for (const [id, answer] of Object.entries(e.answers ?? {})) {
      if (answer === "pending") assert.equal(this.answers[id], undefined, `${place}: ${id} answered`);
      else assert.deepEqual(this.answers[id], answer, `${place}: ${id}`);
    }
    if (e.state) {
      if (e.state.seq !== undefined) assert.equal(this.client.state.seq, e.state.seq, `${place}: state`);
      if (e.state.selected !== undefined) assert.equal(this.client.state.selected, e.state.selected, `${place}: selected`);
    }
    if (e.ownPending !== undefined) {
      // A sync the client asks for again after a refusal goes out once its timer is due.
      await until(() => this.ownUnanswered().length === e.ownPending, `${place}: ${e.ownPending} own frames unanswered`)
        .catch(() => assert.equal(this.ownUnanswered().length, e.ownPending, `${place}: own frames unanswered`));
    }
    if (e.finished) assert.equal(this.finished, e.finished.code, `${place}: finished`);
  }
}

test("Tests/sessions/ holds the sessions both clients run", () => {
  assert.ok(files.length >= 5, `${files.length} sessions`);
});

for (const file of files) {
  test(`session ${file}`, async () => {
    const session = JSON.parse(readFileSync(join(folder, file), "utf8"));
    const run = new SessionRun();
    run.tokenProvider = session.tokenProvider === true;
    try {
      for (const [n, step] of session.steps.entries()) await run.step(step, `${file} step ${n + 1}`);
    } finally {
      run.client?.close();
    }
  });
}
