// Types of tabd.js, the JavaScript client (docs/WEB.md is the guide; tabd.js's comments
// say how it works). The state and event types are model.js's, re-exported here.
import type { Client, Event, EventsFrame, FoldError, Snapshot } from "./model.js";

export { FoldError } from "./model.js";
export type {
  Snapshot, TabState, Page, Client, Event, EventKind, EventOf, EventsFrame,
  SelectedEvent, AppearEvent, FirstAppearEvent, DisappearEvent, PushedEvent, PoppedEvent,
  ScrollToTopEvent, ScrolledEvent, ValueSetEvent, TabAddedEvent, TabUpdatedEvent,
  TabMovedEvent, TabRemovedEvent, ClientJoinedEvent, ClientLeftEvent, PresenceCountedEvent,
  ClientCountEvent, PresenceListedEvent, ClientIdsReservedEvent,
  State, Tab, ClientInfo,
} from "./model.js";

export { CloseCode, TabdError, tokenExpiry } from "./client-machine.js";
export type { ClientErrorCode, ErrorCode, ProtocolErrorCode } from "./client-machine.js";
import type { TabdError } from "./client-machine.js";

/** Where the client's connection is. */
export type Connection = "connecting" | "catching-up" | "live" | "reconnecting" | "closed";

/** A role that a token grants; a view may only read. */
export type Role = "view" | "control" | "admin";

/** The options of `new TabdClient` (and of endpoint(), which reads room and token). */
export interface ClientOptions {
  /** The room (default: the URL's `?room=`, else "main"). */
  room?: string;
  /** A room token (default, also for null: the URL's `#token=` or `?token=`). */
  token?: string | null;
  /** The client's name, as other clients see it (cut to 64 characters). */
  name?: string | null;
  /** Reconnect delays in ms, doubling from `initial` to `max`, ±20 % (default 250 and 8000). */
  backoff?: { initial?: number; max?: number };
  /** ms between heartbeat pings (default 20000; 0: none). */
  heartbeat?: number;
  /** ms before asking again for a snapshot when tabd refused the client's own sync (`rate_limited`; default 500). */
  resyncRetry?: number;
  /** false: the client closes when the connection drops (default true). */
  reconnect?: boolean;
  /** Called just before each event is folded, with the state as it is then; it only reads. */
  beforeEvent?: ((event: Event, state: Snapshot) => void) | null;
  /** The WebSocket class (default: the global one; node before 22 needs one). */
  WebSocket?: new (url: string, protocols?: string | string[]) => WebSocket;
  /** The backoff's jitter, a number in [0, 1) (default Math.random). */
  random?: () => number;
  /** Gives a token for each connection and, a while before it runs out, the next one
   * (handed to tabd on the open connection: no reconnect). Resolve null when there is no
   * token to give any more: the client closes (`token_expired`). A provider that throws
   * or takes longer than `tokenTimeout` counts as a failed attempt (retried with backoff). */
  getToken?: ((context: { room: string; reason: "connect" | "refresh" }) => string | null | Promise<string | null>) | null;
  /** ms the token provider may take (default 10000; 0: forever). */
  tokenTimeout?: number;
  /** A deadline (ms) for every command that names none (default 0: none). */
  commandTimeout?: number;
}

/** What every command also takes: an AbortSignal and a deadline in ms. A command not sent
 * yet is withdrawn (never sent); one sent stops being waited for (its events are folded
 * all the same). It rejects with the signal's reason, or TabdError `timed_out`. */
export interface CommandOptions {
  signal?: AbortSignal | null;
  timeout?: number;
}

/** The options of connect(). */
export interface ConnectOptions extends ClientOptions {
  /** ms to wait for the first welcome before rejecting with `timed_out` (default 10000; 0: forever). */
  timeout?: number;
}

/** connect()'s options; the name of earlier types. */
export type Options = ConnectOptions;

/** Where endpoint() says to connect. */
export interface Endpoint {
  /** The WebSocket URL (`ws://…/ws` or `wss://…/ws`), without a query. */
  url: string;
  /** The room id. */
  room: string;
  /** The token, or null. */
  token: string | null;
  /** The token goes as the subprotocol `tabd.token.<token>` (else in the query). */
  tokenAsProtocol: boolean;
}

/** What the last welcome said. */
export interface Session {
  /** This connection's client id (`c1`, …). */
  client: string;
  /** The room joined. */
  room: string;
  /** The connection's role (null from an older tabd). */
  role: Role | null;
  /** The room history's epoch: seqs and ids mean something only within it. */
  epoch: string;
  /** The server's name and version, `tabd 0.2.0`. */
  server: string;
  /** Whether tabd resumed from the client's seq (then no snapshot came). */
  resumed: boolean;
}

/** `connection` changed (and on each attempt while reconnecting). */
export interface ConnectionUpdate {
  type: "connection";
  /** The client's `connection` now. */
  connection: Connection;
  /** Failed attempts since the last welcome. */
  attempt: number;
  /** When the next attempt is due (ms since 1970), while reconnecting. */
  retryAt: number | null;
  /** Why the client closed, once closed. */
  error: TabdError | null;
}

/** tabd welcomed a connection. */
export interface WelcomeUpdate {
  type: "welcome";
  session: Session;
  /** Whether tabd resumed from the client's seq. */
  resumed: boolean;
}

/** `state` was replaced by a snapshot. */
export interface SnapshotUpdate {
  type: "snapshot";
  /** The client's new `state`. */
  state: Snapshot;
  /** A new history (another epoch): page ids and seqs from before mean nothing now. */
  fresh: boolean;
  /** Where it came from: a welcome, the user's sync(), or the client's own after a refusal. */
  reason: "welcome" | "sync" | "resync";
}

/** Events were folded into `state`: a frame's, or the part of it not folded before. */
export interface EventsUpdate {
  type: "events";
  events: Event[];
  /** Who caused them: a client id, `tabd` or `api`. */
  by: string;
  /** The command's ref, or null. */
  ref: string | null;
  /** false for replays after a resume. */
  live: boolean;
}

/** The fold refused a frame; a snapshot follows. */
export interface RefusedUpdate {
  type: "refused";
  error: FoldError;
  /** The frame as it came (it may not have the shape of one). */
  frame: EventsFrame;
}

/** An error frame no pending command was waiting for. */
export interface ErrorUpdate {
  type: "error";
  error: TabdError;
}

/** What subscribe()'s listener hears: a switch on `type` narrows it. */
export type Update = ConnectionUpdate | WelcomeUpdate | SnapshotUpdate | EventsUpdate | RefusedUpdate | ErrorUpdate;

/** A page of the room's connected clients, in join order. */
export interface ClientPage {
  clients: Client[];
  /** The `after` of the next page; null on the last. */
  next: string | null;
  /** In a cluster: the node that answered (its own clients only). */
  node?: string;
}

/** A tab to add. */
export interface NewTab {
  /** `[a-z0-9_-]{1,32}`, not taken. */
  id: string;
  /** 1–64 characters. */
  title: string;
  /** An SF-Symbol-like name. */
  icon: string;
  /** `#RRGGBB`. */
  color: string;
  /** The badge's text; null or none: no badge. */
  badge?: string | null;
}

/** A change to a tab's look: only the members given change. */
export interface TabChange {
  /** The tab to change. */
  id: string;
  title?: string;
  icon?: string;
  color?: string;
  /** null removes the badge. */
  badge?: string | null;
}

/** Which tab a command is for. */
export interface OnTab {
  /** A tab id; none or null: the selected tab. */
  tab?: string | null;
}

/** The commands that tabd answers with an ack (their Promise resolves with its seq). */
export type AckCommand =
  | "select" | "tap" | "push" | "pop" | "popToRoot" | "scroll" | "set"
  | "addTab" | "updateTab" | "moveTab" | "removeTab";

/**
 * Where to connect: `url` as tabd prints it (`http://HOST:PORT/`), behind a proxy
 * (`https://example.com/tabd/`) or a `ws(s)://…/ws` URL; a `?room=` or `#token=` in it is
 * used when the options give none. Throws TabdError `bad_url`.
 */
export function endpoint(url: string | URL, options?: ClientOptions): Endpoint;


/**
 * Connects and resolves once tabd has welcomed the client (its `state` is then the room's);
 * rejects with a TabdError: `timed_out`, or why the client closed.
 */
export function connect(url: string | URL, options?: ConnectOptions): Promise<TabdClient & { readonly state: Snapshot }>;

/** One room's client. */
export class TabdClient {
  /** Starts connecting at once (from a microtask); `state` is null until the first welcome. Throws TabdError `bad_url`. */
  constructor(url: string | URL, options?: ClientOptions);

  /** Resolves with the client once it has a state; rejects if it closes first. */
  readonly ready: Promise<TabdClient & { readonly state: Snapshot }>;
  /** The room's state: null until the first welcome. Read it; do not change it. */
  readonly state: Snapshot | null;
  /** Where the connection is. */
  readonly connection: Connection;
  /** The session of the last welcome (null before). */
  readonly session: Session | null;
  /** Connections opened so far that were welcomed. */
  readonly connections: number;
  /** Failed attempts since the last welcome. */
  readonly attempt: number;
  /** When the next attempt is due (ms since 1970) while reconnecting, else null. */
  readonly retryAt: number | null;
  /** Why the client closed, once closed. */
  readonly error: TabdError | null;
  /** The room's id. */
  readonly room: string;
  /** This connection's client id, from the last welcome. */
  readonly clientId: string | null;
  /** The connection's role (null before the welcome or from an older tabd). */
  readonly role: Role | null;
  /** The epoch of the state's history. */
  readonly epoch: string | null;
  /** A view token: the client may read (`sync`, `clients`, `ping`) and not command. */
  readonly readOnly: boolean;

  /** Calls listener(update) on every change, until the returned function is called. */
  subscribe(listener: (update: Update) => void): () => void;

  /** Selects `tab`. Each command resolves with the ack's seq once `state` holds it. */
  select(tab: string, options?: CommandOptions): Promise<number>;
  /** A tap on `tab`: selects it, or pops it to its first page, or scrolls it to the top. */
  tap(tab: string, options?: CommandOptions): Promise<number>;
  /** Pushes a page with `route` on the tab. */
  push(route: string, options?: OnTab & CommandOptions): Promise<number>;
  /** Pops the tab's top page. */
  pop(options?: OnTab & CommandOptions): Promise<number>;
  /** Pops the tab to its first page. */
  popToRoot(options?: OnTab & CommandOptions): Promise<number>;
  /** Sets the tab's scroll offset. */
  scroll(offset: number, options?: OnTab & CommandOptions): Promise<number>;
  /** Keeps `value` (any JSON; null removes it) under `key` on the tab. */
  set(key: string, value: unknown, options?: OnTab & CommandOptions): Promise<number>;
  /** Adds a tab, at `index` or at the end. */
  addTab(tab: NewTab, options?: { index?: number } & CommandOptions): Promise<number>;
  /** Changes a tab's look. */
  updateTab(tab: TabChange, options?: CommandOptions): Promise<number>;
  /** Moves a tab; `index` is its position after the move. */
  moveTab(tab: string, index: number, options?: CommandOptions): Promise<number>;
  /** Removes a tab (not the only one). */
  removeTab(tab: string, options?: CommandOptions): Promise<number>;

  /** Asks for the room's snapshot; `state` becomes it. Resolves with `state`. */
  sync(options?: CommandOptions): Promise<Snapshot>;
  /** Resolves with the round trip in milliseconds. */
  ping(options?: CommandOptions): Promise<number>;
  /** A page of the room's connected clients; `after` is an earlier page's `next`. */
  clients(options?: { after?: string | null; limit?: number | null } & CommandOptions): Promise<ClientPage>;

  /** Any command by its protocol name and fields: what it resolves with depends on it. */
  send(type: AckCommand, fields?: Record<string, unknown>, options?: CommandOptions): Promise<number>;
  send(type: "sync", fields?: Record<string, never>, options?: CommandOptions): Promise<Snapshot>;
  send(type: "ping", fields?: Record<string, never>, options?: CommandOptions): Promise<void>;
  send(type: "clients", fields?: { after?: string; limit?: number }, options?: CommandOptions): Promise<ClientPage>;
  send(type: string, fields?: Record<string, unknown>, options?: CommandOptions): Promise<unknown>;

  /** Drops the connection now, as a network failure would, and reconnects after the backoff or `holdMs`. */
  disconnect(holdMs?: number): void;
  /** While reconnecting, tries again now instead of waiting out the backoff. */
  reconnect(): void;
  /** Asks getToken for a fresh token now and hands it to tabd on the open connection (as the
   * client does on its own before a token runs out); without getToken it does nothing. */
  refreshToken(): void;
  /** Closes the client for good: pending commands reject with `closed`. */
  close(): void;
}
