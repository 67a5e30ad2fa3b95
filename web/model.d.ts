// Types of model.js, the fold of tabd's `events` frames into its snapshot. The state is
// PROTOCOL.md's snapshot, field for field; tabd.d.ts re-exports these types.

/** One page of a tab's stack. */
export interface Page {
  /** The page's id (`p1`, `p2`, …), unique within the room's epoch. */
  id: string;
  /** The route it was pushed with (`root` for a tab's first page). */
  route: string;
  /** Whether its `firstAppear` happened. */
  appeared: boolean;
  /** How often it became the visible page. */
  appearCount: number;
}

/** One tab, as a snapshot shows it (and `tabAdded` and `tabUpdated` carry it). */
export interface TabState {
  /** The tab's id, `[a-z0-9_-]{1,32}`. */
  id: string;
  /** What the tab bar shows under the icon. */
  title: string;
  /** An SF-Symbol-like name (`house`, `person.crop.circle`); icons.js draws it. */
  icon: string;
  /** `#RRGGBB`, upper case. */
  color: string;
  /** The badge's text, or null for none. */
  badge: string | null;
  /** Its pages from the root (`stack[0]`) to the top, the visible one (1 to 64). */
  stack: Page[];
  /** Its scroll offset. */
  scroll: number;
  /** Its values by key, each any JSON (never null: null removes a key). */
  values: Record<string, unknown>;
}

/** A connected client, as `clients` and `clientJoined` list it. */
export interface Client {
  /** The client id (`c1`, `c2`, …), unique within the room's epoch. */
  id: string;
  /** The name it connected with. */
  name: string;
}

/** The room's snapshot at one seq, as the protocol sends it, with every event folded in. */
export interface Snapshot {
  /** The last seq it includes. */
  seq: number;
  /** The selected tab's id. */
  selected: string;
  /** The scroll-to-top counter. */
  scrollToTop: number;
  /** Every tab, in display order (1 to 32). */
  tabs: TabState[];
  /** "counted" once the room grew past tabd's --presence-limit: `clients` is then []. */
  presence: "listed" | "counted";
  /** How many clients are connected (in a counted room, the count last reported). */
  clientCount: number;
  /** A listed room's clients, in join order; [] in a counted room. */
  clients: Client[];
  /** A cluster's counted room only: node name → its count (`clientCount` is their sum). */
  nodes?: Record<string, number>;
}

/** The same as Snapshot: the state a client keeps. */
export type State = Snapshot;
/** The same as TabState. */
export type Tab = TabState;
/** The same as Client. */
export type ClientInfo = Client;

/** What every event has. */
interface EventBase<K extends string> {
  /** Its place in the room's history: the state's seq + 1 when it is folded. */
  seq: number;
  /** What happened; the other fields depend on it. */
  kind: K;
}

/** The selection moved from `from` to `to` (tab ids). */
export interface SelectedEvent extends EventBase<"selected"> {
  from: string;
  to: string;
}
/** The page became the visible page of the selected tab; its `appearCount` went up. */
export interface AppearEvent extends EventBase<"appear"> {
  tab: string;
  page: string;
}
/** Right before the first `appear` of that page, and never again for it. */
export interface FirstAppearEvent extends EventBase<"firstAppear"> {
  tab: string;
  page: string;
}
/** The visible page stopped being visible. */
export interface DisappearEvent extends EventBase<"disappear"> {
  tab: string;
  page: string;
}
/** A new page on top of the tab's stack. */
export interface PushedEvent extends EventBase<"pushed"> {
  tab: string;
  page: string;
  route: string;
}
/** Those pages left the tab's stack. */
export interface PoppedEvent extends EventBase<"popped"> {
  tab: string;
  /** Page ids, top first; never the root. */
  pages: string[];
}
/** A tap on the selected tab at its root page; the tab's offset is 0 again. */
export interface ScrollToTopEvent extends EventBase<"scrollToTop"> {
  tab: string;
  /** The scroll-to-top counter's new value. */
  count: number;
}
/** The tab's scroll offset changed. */
export interface ScrolledEvent extends EventBase<"scrolled"> {
  tab: string;
  offset: number;
}
/** `value` is stored under `key`, exactly as sent; null removed the key. */
export interface ValueSetEvent extends EventBase<"valueSet"> {
  tab: string;
  key: string;
  value: unknown;
}
/** A new tab at `index`, not selected, with one new root page. */
export interface TabAddedEvent extends EventBase<"tabAdded"> {
  /** The whole tab, not its id. */
  tab: TabState;
  index: number;
}
/** The tab after an update that changed something. */
export interface TabUpdatedEvent extends EventBase<"tabUpdated"> {
  /** The whole tab, not its id. */
  tab: TabState;
}
/** The tab moved; `index` is its position after the move. */
export interface TabMovedEvent extends EventBase<"tabMoved"> {
  tab: string;
  index: number;
}
/** The tab and its whole stack are gone. */
export interface TabRemovedEvent extends EventBase<"tabRemoved"> {
  tab: string;
}
/** A client connected (listed rooms only). */
export interface ClientJoinedEvent extends EventBase<"clientJoined"> {
  client: Client;
}
/** A client disconnected (listed rooms only). */
export interface ClientLeftEvent extends EventBase<"clientLeft"> {
  /** The client's id only, not a Client as in clientJoined. */
  client: string;
}
/** The room counts its clients from here on: `count` are connected. */
export interface PresenceCountedEvent extends EventBase<"presenceCounted"> {
  count: number;
  /** In a cluster: node name → count; their sum is `count`. */
  nodes?: Record<string, number>;
}
/** A counted room's count is now `count` (in a cluster, `node`'s share of it). */
export interface ClientCountEvent extends EventBase<"clientCount"> {
  node?: string;
  count: number;
}
/** A counted room emptied: it is listed again. */
export interface PresenceListedEvent extends EventBase<"presenceListed"> {
  /** In a cluster: the node that says so. */
  node?: string;
  clients: Client[];
}
/** Client ids `c{from}` … `c{from+count−1}` are taken; the snapshot does not change. */
export interface ClientIdsReservedEvent extends EventBase<"clientIdsReserved"> {
  node?: string;
  from: number;
  count: number;
}

/** One event of an `events` frame: a switch on `kind` narrows it to its fields. */
export type Event =
  | SelectedEvent
  | AppearEvent
  | FirstAppearEvent
  | DisappearEvent
  | PushedEvent
  | PoppedEvent
  | ScrollToTopEvent
  | ScrolledEvent
  | ValueSetEvent
  | TabAddedEvent
  | TabUpdatedEvent
  | TabMovedEvent
  | TabRemovedEvent
  | ClientJoinedEvent
  | ClientLeftEvent
  | PresenceCountedEvent
  | ClientCountEvent
  | PresenceListedEvent
  | ClientIdsReservedEvent;

/** Every event kind. */
export type EventKind = Event["kind"];
/** The event of one kind: `EventOf<"pushed">` is PushedEvent. */
export type EventOf<K extends EventKind> = Extract<Event, { kind: K }>;

/** An `events` frame: one batch, the same for every client of the room. */
export interface EventsFrame {
  type: "events";
  /** Who caused the batch: a client id, `tabd` (first appears, presence) or `api`. */
  by: string;
  /** The command's `ref`, or null. */
  ref: string | null;
  /** One or more events, with consecutive seqs. */
  events: Event[];
}

/** The most clients a wire snapshot lists (100). */
export const MAX_CLIENTS_LISTED: number;

/** An event that does not fit the state it is applied to: the stream is broken. */
export class FoldError extends Error {
  constructor(seq: number, message: string);
  name: "FoldError";
  /** The seq of the refused event (the expected seq when the event has none). */
  readonly seq: number;
}

/** A state of its own from a wire snapshot (copied); TypeError when it is not one. */
export function fromWire(wire: unknown): Snapshot;
/** The snapshot the daemon would send for `state` (at most 100 clients); its tabs are the state's own. */
export function toWire(state: Snapshot): Snapshot;
/** Folds one event into `state` in place and returns it; FoldError (state unchanged) when it does not fit. */
export function applyEvent(state: Snapshot, event: Event): Snapshot;
/**
 * Folds one frame's events in order, in place, and returns `state`; FoldError at the first
 * that does not fit (`state` then holds those before it). `before(event, state)` is called
 * just before each event is folded; it must not change `state`.
 */
export function applyFrame(state: Snapshot, frame: { events: Event[] }, before?: (event: Event, state: Snapshot) => void): Snapshot;
