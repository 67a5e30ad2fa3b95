// How a developer uses tabd.js, model.js, icons.js and <tabd-tab-bar> from TypeScript.
// `tsc -p Tests/web/types` (make test-web) must compile it; each @ts-expect-error line must
// stay an error, or the check fails (so the types cannot quietly turn into `any`).
import {
  connect, endpoint, tokenExpiry, CloseCode, FoldError, TabdClient, TabdError,
  type Event, type EventOf, type Snapshot, type TabState, type Update,
} from "../../../web/tabd.js";
import { applyFrame, fromWire, toWire, MAX_CLIENTS_LISTED } from "../../../web/model.js";
import { iconKey, tabdIcon } from "../../../web/icons.js";
import { TabdTabBar } from "../../../web/tabd-tab-bar.js";

export async function drive(): Promise<number> {
  const tabd = await connect("http://127.0.0.1:8080/", { room: "main", name: "kiosk", timeout: 5000 });
  const selected: string = tabd.state.selected; // not null once connected
  const seq: number = await tabd.tap(selected);
  await tabd.push("detail", { tab: "home" });
  await tabd.set("greeting", { any: ["json"] });
  await tabd.addTab({ id: "mail", title: "Mail", icon: "envelope", color: "#FF9500" }, { index: 1 });
  await tabd.updateTab({ id: "mail", badge: null });
  const page = await tabd.clients({ limit: 10 });
  const gone: 4404 = CloseCode.roomGone;
  if (tabd.error?.closeCode === gone) return 0;
  // @ts-expect-error the codes are constants
  CloseCode.roomGone = 4405;
  const next: string | null = page.next;
  const names: string[] = page.clients.map((c) => c.name);
  const state: Snapshot = await tabd.sync();
  const ms: number = await tabd.ping();
  const raw: number = await tabd.send("moveTab", { tab: "mail", index: 0 });
  void [next, names, state, ms, raw];

  const unsubscribe = tabd.subscribe((u: Update) => {
    switch (u.type) {
      case "events":
        for (const e of u.events) describe(e, u.by, u.live);
        break;
      case "connection":
        console.log(u.connection, u.attempt, u.retryAt, u.error?.code);
        // @ts-expect-error: a connection update has no events
        console.log(u.events);
        break;
      case "snapshot":
        if (u.fresh && u.reason === "welcome") console.log(u.state.tabs.length);
        break;
      case "welcome":
        console.log(u.session.client, u.session.role, u.resumed);
        break;
      case "refused":
        console.log(u.error.seq, u.frame.by);
        break;
      case "error":
        console.log(u.error.code, u.error.ref);
        break;
    }
  });
  unsubscribe();

  try {
    await tabd.removeTab("home");
  } catch (e) {
    if (e instanceof TabdError && (e.code === "invalid" || e.code === "connection_lost")) console.log(e.message);
    if (e instanceof FoldError) console.log(e.seq);
  }
  // @ts-expect-error: tap takes a tab id, not a number
  await tabd.tap(3);
  // @ts-expect-error: push's tab is an option, not the second argument
  await tabd.push("detail", "home");
  // @ts-expect-error: updateTab needs the tab's id
  await tabd.updateTab({ title: "Mail" });
  // @ts-expect-error: the state is the client's; a page reads it
  tabd.state = state;

  const own = new TabdClient("https://tabd.example.com/", { token: "t", reconnect: false });
  const maybe: Snapshot | null = own.state;
  // @ts-expect-error: a client made with `new` has no state before its welcome
  const sure: Snapshot = own.state;
  void [maybe, sure];
  const ready = await own.ready;
  console.log(ready.state.seq, own.readOnly, own.role === "view");
  own.close();

  const where = endpoint("http://127.0.0.1:8080/?room=lobby#token=abc");
  console.log(where.url, where.room, where.tokenAsProtocol, tokenExpiry(where.token));
  return seq;
}

// Each kind's fields, by a switch on `kind`.
function describe(e: Event, by: string, live: boolean): string {
  switch (e.kind) {
    case "selected": return `${by} selected ${e.to} (was ${e.from}), live ${live}`;
    case "appear": case "firstAppear": case "disappear": return `${e.kind} ${e.tab}/${e.page}`;
    case "pushed": return `pushed ${e.route} as ${e.page} on ${e.tab}`;
    case "popped": return `popped ${e.pages.join(", ")} from ${e.tab}`;
    case "scrollToTop": return `scroll ${e.tab} to the top (${e.count})`;
    case "scrolled": return `${e.tab} at ${e.offset.toFixed(1)}`;
    case "valueSet": return `${e.tab}.${e.key} = ${JSON.stringify(e.value)}`;
    case "tabAdded": return `added ${e.tab.title} at ${e.index} with ${e.tab.stack.length} page`;
    case "tabUpdated": return `updated ${e.tab.id}: ${e.tab.badge ?? "no badge"}`;
    case "tabMoved": return `moved ${e.tab} to ${e.index}`;
    case "tabRemoved": return `removed ${e.tab}`;
    case "clientJoined": return `${e.client.name} (${e.client.id}) joined`;
    case "clientLeft": return `${e.client} left`;
    case "presenceCounted": return `${e.count} counted${e.nodes ? " by node" : ""}`;
    case "clientCount": return `${e.node ?? "the room"} has ${e.count}`;
    case "presenceListed": return `listed again (${e.clients.length})`;
    case "clientIdsReserved": return `ids c${e.from}… (${e.count}) for ${e.node ?? "the room"}`;
    default: {
      const none: never = e; // every kind is handled above
      return none;
    }
  }
}

export function wrongFields(e: Event): void {
  if (e.kind === "clientLeft") {
    // @ts-expect-error: a leave carries the client's id, not a {id, name}
    console.log(e.client.id);
  }
  if (e.kind === "appear") {
    // @ts-expect-error: an appear has no route (pushed has)
    console.log(e.route);
  }
  const pushed: EventOf<"pushed"> = { seq: 9, kind: "pushed", tab: "home", page: "p4", route: "detail" };
  // @ts-expect-error: no such kind
  const bogus: Event = { seq: 9, kind: "exploded", tab: "home" };
  void [pushed, bogus];
}

export function element(given: TabdClient): void {
  const bar = document.querySelector("tabd-tab-bar");
  if (!bar) return;
  const typed: TabdTabBar = bar;
  bar.addEventListener("tabd-select", (e) => console.log(e.detail.tab, e.detail.from, e.detail.by, e.detail.live));
  bar.addEventListener("tabd-scroll-to-top", (e) => console.log(e.detail.count));
  bar.addEventListener("tabd-appear", (e) => console.log(e.detail.route ?? "popped"));
  bar.addEventListener("tabd-error", (e) => console.log(e.detail.error.code, e.detail.command, e.detail.tab));
  bar.addEventListener("tabd-change", (e) => console.log(e.detail.state.seq));
  bar.addEventListener("tabd-welcome", (e) => console.log(e.detail.session.epoch, e.detail.client.room));
  bar.addEventListener("tabd-connection", (e) => console.log(e.detail.connection === "live"));
  // The events bubble out of the element (composed): a listener further up is typed too.
  document.addEventListener("tabd-first-appear", (e) => console.log(e.detail.page));
  // @ts-expect-error: a select event's detail has no count
  bar.addEventListener("tabd-select", (e) => console.log(e.detail.count));
  const client: TabdClient | null = bar.client;
  bar.client = given;
  // @ts-expect-error: the element follows a TabdClient, not a URL
  bar.client = "http://127.0.0.1:8080/";
  const made = document.createElement("tabd-tab-bar");
  made.setAttribute("server", "http://127.0.0.1:8080/");
  console.log(typed.tablist.children.length, made.client === client);

  const icon = tabdIcon("house.fill", "Home");
  const key: string | null = iconKey("house.fill");
  bar.append(icon);
  void key;
}

export function fold(wire: unknown): TabState[] {
  const state = fromWire(wire);
  applyFrame(state, { events: [{ seq: state.seq + 1, kind: "selected", from: "home", to: "profile" }] }, (e, s) => {
    if (e.kind === "tabRemoved") console.log(s.tabs.find((t) => t.id === e.tab)?.title);
  });
  return toWire(state).tabs.slice(0, MAX_CLIENTS_LISTED);
}

// The client's machine, driven by a client of one's own: inputs in, actions out.
import { ClientMachine, type Action } from "../../../web/client-machine.js";

export function machine(): Action[] {
  const m = new ClientMachine(endpoint("http://127.0.0.1:8080/"), {
    name: null, backoff: { initial: 250, max: 8000 }, heartbeat: 0, resyncRetry: 500, reconnect: true, beforeEvent: null,
  }, { now: () => Date.now(), random: () => 0.5 });
  const actions = m.start();
  for (const a of actions) {
    if (a.do === "open") void new URL(a.url).searchParams.get("room");
    // @ts-expect-error: an open action has no text
    if (a.do === "open") void a.text;
  }
  const seq: number | undefined = m.state?.seq; // the same state as TabdClient's
  // @ts-expect-error: the machine's state is read-only
  m.state = null;
  void seq;
  return actions.concat(m.received('{"type":"pong","ref":"j1"}', 1));
}
