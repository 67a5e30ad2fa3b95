// How a developer uses tabd.js and <tabd-tab-bar> from TypeScript. `tsc -p Tests/web/types`
// (make test-web) must compile it; each @ts-expect-error line must stay an error, or the
// check fails (so the types cannot quietly turn into `any`).
import { connect, TabdClient, TabdError, type Update } from "../../../web/tabd.js";
import { applyFrame, fromWire, type State } from "../../../web/model.js";
import "../../../web/tabd-tab-bar.js";

export async function drive(): Promise<number> {
  const tabd = await connect("http://127.0.0.1:8080/", { room: "main", name: "kiosk" });
  const selected: string = tabd.state.selected; // non-null once connected
  const seq: number = await tabd.tap(selected);
  await tabd.push("detail", { tab: "home" });
  await tabd.set("greeting", { any: ["json"] });
  const page = await tabd.clients({ limit: 10 });
  const next: string | null = page.next;
  void next;
  tabd.subscribe((u: Update) => {
    switch (u.type) {
      case "events":
        for (const e of u.events) {
          if (e.kind === "pushed") console.log(e.route, e.page);
          if (e.kind === "scrollToTop") console.log(e.count);
        }
        break;
      case "connection":
        console.log(u.connection, u.retryAt);
        // @ts-expect-error: a connection update has no events
        console.log(u.events);
        break;
      default:
        break;
    }
  });
  try {
    await tabd.removeTab("home");
  } catch (e) {
    if (e instanceof TabdError && e.code === "invalid") console.log(e.message);
  }
  // @ts-expect-error: tap takes a tab id, not a number
  await tabd.tap(3);
  // @ts-expect-error: push's tab is an option, not the second argument
  await tabd.push("detail", "home");
  const own = new TabdClient("https://tabd.example.com/");
  const maybe: State | null = own.state;
  void maybe;
  own.close();
  return seq;
}

export function element(): void {
  const bar = document.querySelector("tabd-tab-bar");
  if (!bar) return;
  bar.addEventListener("tabd-select", (e) => console.log(e.detail.tab, e.detail.from, e.detail.live));
  bar.addEventListener("tabd-scroll-to-top", (e) => console.log(e.detail.count));
  // @ts-expect-error: a select event's detail has no count
  bar.addEventListener("tabd-select", (e) => console.log(e.detail.count));
  const client: TabdClient | null = bar.client;
  void client;
}

export function fold(wire: unknown): State {
  const state = fromWire(wire);
  return applyFrame(state, { events: [{ seq: state.seq + 1, kind: "selected", from: "home", to: "profile" }] });
}
