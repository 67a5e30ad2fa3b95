// Types of tabd-tab-bar.js: the <tabd-tab-bar> element (docs/WEB.md). Importing the module
// defines the element; these types make `document.querySelector("tabd-tab-bar")` a
// TabdTabBar and type its events wherever they bubble to (they are composed).
import type { ClientOptions, Connection, Session, TabdClient, TabdError } from "./tabd.js";
import type { Snapshot } from "./model.js";

/**
 * tabd's tab bar. Attributes: server (tabd's URL, as for connect()), room (default
 * "main"), token, name, label (the tablist's accessible name, default "Tabs"). It reflects
 * `connection` and `read-only` on itself, for the page's CSS.
 */
export class TabdTabBar extends HTMLElement {
  /** The attributes the element follows. */
  static observedAttributes: string[];
  /** The client the element follows: its own (from `server`), or one the page set (not closed by the element). */
  get client(): TabdClient | null;
  set client(client: TabdClient | null | undefined);
  /** The tab buttons' tablist (in the shadow root), for tests and for focus. */
  readonly tablist: HTMLElement;
  /** Fresh tokens for the element's own connection (as tabd.js's getToken); setting it
   * reconnects with it. */
  get getToken(): ClientOptions["getToken"];
  set getToken(provider: ClientOptions["getToken"]);
}

/** Who caused an event, in the detail of those that come from the room's events. */
export interface TabdOrigin {
  /** The client id that caused it (or `tabd`, `api`). */
  by: string;
  /** false for replays after a reconnect. */
  live: boolean;
}

/** The detail of tabd-appear, tabd-first-appear and tabd-disappear. */
export interface TabdPageDetail extends TabdOrigin {
  tab: string;
  page: string;
  /** The page's route; null when the page is gone from the state (popped). */
  route: string | null;
}

/** The element's DOM events (bubbling, composed) by name. */
export interface TabdTabBarEventMap {
  /** tabd welcomed the client. */
  "tabd-welcome": CustomEvent<{ session: Session; client: TabdClient }>;
  /** The bar was drawn again from `state`. */
  "tabd-change": CustomEvent<{ state: Snapshot }>;
  /** The selection moved from `from` to `tab`. */
  "tabd-select": CustomEvent<{ tab: string; from: string } & TabdOrigin>;
  /** A tap on the selected tab at its root: the page should scroll `tab` to the top. */
  "tabd-scroll-to-top": CustomEvent<{ tab: string; count: number } & TabdOrigin>;
  /** The page became the visible one. */
  "tabd-appear": CustomEvent<TabdPageDetail>;
  /** The page is about to appear for the first time. */
  "tabd-first-appear": CustomEvent<TabdPageDetail>;
  /** The visible page stopped being visible. */
  "tabd-disappear": CustomEvent<TabdPageDetail>;
  /** The client's connection changed. */
  "tabd-connection": CustomEvent<{ connection: Connection; attempt: number; retryAt: number | null; error: TabdError | null }>;
  /** A tap that failed (`command` "tap" and its `tab`), a client that closed, or a bad `server`. */
  "tabd-error": CustomEvent<{ error: TabdError; command?: "tap"; tab?: string }>;
}

declare global {
  interface HTMLElementTagNameMap {
    "tabd-tab-bar": TabdTabBar;
  }
  // Every element, the document and the window: the events bubble and are composed.
  interface GlobalEventHandlersEventMap extends TabdTabBarEventMap {}
}
