// Types of tabd-tab-bar.js: the <tabd-tab-bar> element (docs/WEB.md).
import type { Connection, Session, TabdClient, TabdError } from "./tabd.js";
import type { State } from "./model.js";

export class TabdTabBar extends HTMLElement {
  /** The client the element follows: its own (from `server`), or one a page gave it. */
  client: TabdClient | null;
  /** The tablist in the shadow root. */
  readonly tablist: HTMLElement;
}

type Origin = { by: string; live: boolean };
type PageDetail = { tab: string; page: string; route: string | null } & Origin;

export interface TabdTabBarEventMap {
  "tabd-welcome": CustomEvent<{ session: Session; client: TabdClient }>;
  "tabd-change": CustomEvent<{ state: State }>;
  "tabd-select": CustomEvent<{ tab: string; from: string } & Origin>;
  "tabd-scroll-to-top": CustomEvent<{ tab: string; count: number } & Origin>;
  "tabd-appear": CustomEvent<PageDetail>;
  "tabd-first-appear": CustomEvent<PageDetail>;
  "tabd-disappear": CustomEvent<PageDetail>;
  "tabd-connection": CustomEvent<{ connection: Connection; attempt: number; retryAt: number | null; error: TabdError | null }>;
  "tabd-error": CustomEvent<{ error: TabdError; command?: string; tab?: string }>;
}

export interface TabdTabBar {
  addEventListener<K extends keyof TabdTabBarEventMap>(type: K, listener: (this: TabdTabBar, ev: TabdTabBarEventMap[K]) => unknown, options?: boolean | AddEventListenerOptions): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject, options?: boolean | AddEventListenerOptions): void;
  removeEventListener<K extends keyof TabdTabBarEventMap>(type: K, listener: (this: TabdTabBar, ev: TabdTabBarEventMap[K]) => unknown, options?: boolean | EventListenerOptions): void;
  removeEventListener(type: string, listener: EventListenerOrEventListenerObject, options?: boolean | EventListenerOptions): void;
}

declare global {
  interface HTMLElementTagNameMap {
    "tabd-tab-bar": TabdTabBar;
  }
}
