// Types of model.js, the fold of tabd's events into its snapshot.

export interface Page {
  id: string;
  route: string;
  appeared: boolean;
  appearCount: number;
}

export interface Tab {
  id: string;
  title: string;
  icon: string;
  color: string;
  badge: string | null;
  stack: Page[];
  scroll: number;
  values: Record<string, unknown>;
}

export interface ClientInfo {
  id: string;
  name: string;
}

/** The room's snapshot, as the protocol sends it, with every event folded in. */
export interface State {
  seq: number;
  selected: string;
  scrollToTop: number;
  tabs: Tab[];
  presence: "listed" | "counted";
  clientCount: number;
  clients: ClientInfo[];
  /** A cluster's counted room: node name → count. */
  nodes?: Record<string, number>;
}

type E<K extends string, F> = { seq: number; kind: K } & F;

/** One event of an `events` frame. */
export type Event =
  | E<"selected", { from: string; to: string }>
  | E<"appear" | "firstAppear" | "disappear", { tab: string; page: string }>
  | E<"pushed", { tab: string; page: string; route: string }>
  | E<"popped", { tab: string; pages: string[] }>
  | E<"scrollToTop", { tab: string; count: number }>
  | E<"scrolled", { tab: string; offset: number }>
  | E<"valueSet", { tab: string; key: string; value: unknown }>
  | E<"tabAdded", { tab: Tab; index: number }>
  | E<"tabUpdated", { tab: Tab }>
  | E<"tabMoved", { tab: string; index: number }>
  | E<"tabRemoved", { tab: string }>
  | E<"clientJoined", { client: ClientInfo }>
  | E<"clientLeft", { client: string }>
  | E<"presenceCounted", { count: number; nodes?: Record<string, number> }>
  | E<"clientCount", { node?: string; count: number }>
  | E<"presenceListed", { node?: string; clients: ClientInfo[] }>
  | E<"clientIdsReserved", { node?: string; from: number; count: number }>;

/** The most clients a wire snapshot lists. */
export const MAX_CLIENTS_LISTED: number;

/** An event that does not fit the state it is applied to. */
export class FoldError extends Error {
  constructor(seq: number, message: string);
  /** The refused event's seq. */
  readonly seq: number;
}

/** A state of its own from a wire snapshot; TypeError when it is not one. */
export function fromWire(wire: unknown): State;
/** The snapshot the daemon would send for `state`. */
export function toWire(state: State): State;
/** Folds one event into `state` in place; FoldError (state unchanged) when it does not fit. */
export function applyEvent(state: State, event: Event): State;
/** Folds one frame's events in order, in place; FoldError at the first that does not fit. */
export function applyFrame(state: State, frame: { events: Event[] }, before?: (event: Event, state: State) => void): State;
