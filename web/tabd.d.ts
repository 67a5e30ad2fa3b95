// Types of tabd.js, the JavaScript client (docs/WEB.md is the guide).
export { FoldError } from "./model.js";
import type { Event, State } from "./model.js";
export type { Event, State, Tab, Page, ClientInfo } from "./model.js";

/** The protocol's error codes, and the client's own. */
export type ErrorCode =
  | "rate_limited" | "bad_json" | "bad_command" | "forbidden" | "unavailable" | "unknown_tab" | "invalid"
  | "connection_lost" | "closed" | "timed_out" | "room_deleted" | "token_expired" | "wrong_room" | "bad_url"
  | "not_connected"
  | (string & {});

/** Why a command or the client failed. */
export class TabdError extends Error {
  constructor(code: ErrorCode, message: string, details?: { ref?: string | null; closeCode?: number });
  readonly code: ErrorCode;
  /** The command's ref, for an error frame. */
  readonly ref?: string | null;
  /** The WebSocket close code that ended the client (4404, 4001). */
  readonly closeCode?: number;
}

export type Connection = "connecting" | "catching-up" | "live" | "reconnecting" | "closed";

export interface Options {
  /** The room (default "main", or the URL's ?room=). */
  room?: string;
  /** A room token or --token (default: the URL's #token= or ?token=). */
  token?: string | null;
  /** The client's display name (cut to 64 characters). */
  name?: string | null;
  /** ms to wait for the first welcome (connect() only; default 10000; 0: forever). */
  timeout?: number;
  /** Reconnect delays in ms, doubling from initial to max, ±20 % (default 250, 8000). */
  backoff?: { initial?: number; max?: number };
  /** ms between heartbeat pings (default 20000; 0: none). */
  heartbeat?: number;
  /** false: close when the connection drops (default true). */
  reconnect?: boolean;
  /** Called just before each event is folded, with the state as it is then; read only. */
  beforeEvent?: (event: Event, state: State) => void;
  /** A WebSocket class (default: the global one). */
  WebSocket?: { new (url: string, protocols?: string | string[]): WebSocket };
  /** A random source for the backoff's jitter, 0 ≤ x < 1 (default Math.random). */
  random?: () => number;
}

export interface Session {
  client: string;
  room: string;
  role: "view" | "control" | "admin" | null;
  epoch: string;
  server: string;
  resumed: boolean;
}

export interface EventsFrame {
  type: "events";
  by: string;
  ref: string | null;
  events: Event[];
}

export type Update =
  | { type: "connection"; connection: Connection; attempt: number; retryAt: number | null; error: TabdError | null }
  | { type: "welcome"; session: Session; resumed: boolean }
  | { type: "snapshot"; state: State; fresh: boolean; reason: "welcome" | "sync" | "resync" }
  | { type: "events"; events: Event[]; by: string; ref: string | null; live: boolean }
  | { type: "refused"; error: import("./model.js").FoldError; frame: EventsFrame }
  | { type: "error"; error: TabdError };

export interface ClientPage {
  clients: { id: string; name: string }[];
  /** The `after` of the next page; null on the last. */
  next: string | null;
  /** In a cluster: the node that answered. */
  node?: string;
}

export interface NewTab {
  id: string;
  title: string;
  icon: string;
  color: string;
  badge?: string | null;
}

export interface TabChange {
  id: string;
  title?: string;
  icon?: string;
  color?: string;
  /** null clears it. */
  badge?: string | null;
}

type OnTab = { tab?: string };

/** Where to connect, from the URL tabd prints, a URL behind a proxy, or a ws(s)://…/ws URL. */
export function endpoint(url: string | URL, options?: Options): { url: string; room: string; token: string | null; tokenAsProtocol: boolean };

/** When a signed token runs out (ms since 1970); null for any other token. */
export function tokenExpiry(token: string | null | undefined): number | null;

/** Connects; resolves once welcomed (state is then the room's). */
export function connect(url: string | URL, options?: Options): Promise<TabdClient & { state: State }>;

export class TabdClient {
  /** Starts connecting at once; state is null until the first welcome. */
  constructor(url: string | URL, options?: Options);
  /** Resolves at the first welcome. */
  readonly ready: Promise<TabdClient>;
  /** The room's state (read it; do not change it); null before the first welcome. */
  readonly state: State | null;
  readonly connection: Connection;
  readonly session: Session | null;
  readonly connections: number;
  readonly attempt: number;
  readonly retryAt: number | null;
  readonly error: TabdError | null;
  readonly room: string;
  readonly clientId: string | null;
  readonly role: Session["role"];
  readonly epoch: string | null;
  readonly readOnly: boolean;

  /** Calls listener on every change until the returned function is called. */
  subscribe(listener: (update: Update) => void): () => void;

  // Each resolves with the ack's seq once `state` holds it.
  select(tab: string): Promise<number>;
  tap(tab: string): Promise<number>;
  push(route: string, options?: OnTab): Promise<number>;
  pop(options?: OnTab): Promise<number>;
  popToRoot(options?: OnTab): Promise<number>;
  scroll(offset: number, options?: OnTab): Promise<number>;
  set(key: string, value: unknown, options?: OnTab): Promise<number>;
  addTab(tab: NewTab, options?: { index?: number }): Promise<number>;
  updateTab(tab: TabChange): Promise<number>;
  moveTab(tab: string, index: number): Promise<number>;
  removeTab(tab: string): Promise<number>;

  /** The room's snapshot, which becomes `state`. */
  sync(): Promise<State>;
  /** The round trip in ms. */
  ping(): Promise<number>;
  /** A page of the room's connected clients. */
  clients(options?: { after?: string | null; limit?: number }): Promise<ClientPage>;
  /** Any command by its protocol name. */
  send(type: string, fields?: Record<string, unknown>): Promise<unknown>;

  /** Drops the connection as a network failure would; reconnects after the backoff or holdMs. */
  disconnect(holdMs?: number): void;
  /** While reconnecting, tries again now. */
  reconnect(): void;
  /** Closes for good; pending commands reject with `closed`. */
  close(): void;
}
