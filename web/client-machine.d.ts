// Types of client-machine.js: the JavaScript client's decisions as a value (tabd.js
// performs its actions; most programs use tabd.js and never this module), and the error
// and close-code names the client shares.
import type { Endpoint, TabdClient, Update } from "./tabd.js";
import type { Event, Snapshot } from "./model.js";

/** The codes of tabd's error frames (PROTOCOL.md, Errors). */
export type ProtocolErrorCode =
  | "rate_limited" | "bad_json" | "bad_command" | "unauthorized" | "forbidden" | "unavailable" | "unknown_tab" | "invalid";

/** The client's own codes; `not_connected` is <tabd-tab-bar>'s (a tap while offline). */
export type ClientErrorCode =
  | "connection_lost" | "closed" | "timed_out" | "aborted" | "room_deleted" | "token_expired" | "token_failed"
  | "wrong_room" | "bad_url" | "not_connected";

/** WebSocket close codes by name: those tabd sends, and `clientDrop`, the code the client
 * closes a connection with when it drops it to open another. */
export declare const CloseCode: Readonly<{
  normal: 1000;
  goingAway: 1001;
  protocolError: 1002;
  unsupportedData: 1003;
  invalidPayload: 1007;
  policyViolation: 1008;
  messageTooBig: 1009;
  internalError: 1011;
  tryAgainLater: 1013;
  clientDrop: 4000;
  tokenExpired: 4001;
  roomGone: 4404;
}>;

/** A TabdError's code: those above, or one of a newer tabd. */
export type ErrorCode = ProtocolErrorCode | ClientErrorCode | (string & {});

/** Why a command or the client failed. */
export class TabdError extends Error {
  constructor(code: ErrorCode, message: string, details?: { ref?: string | null; closeCode?: number });
  name: "TabdError";
  /** The protocol's error code or the client's own: programs read this, not `message`. */
  readonly code: ErrorCode;
  /** The command's ref (an error frame's, or the one in flight when the connection dropped). */
  readonly ref?: string | null;
  /** The WebSocket close code that ended the client (4404 room deleted, 4001 token expired). */
  readonly closeCode?: number;
}

/** When a signed token runs out, in ms since 1970; null for any other token. */
export function tokenExpiry(token: string | null | undefined): number | null;

/** How long (ms) before a token of `lifetime` ms runs out the client asks for the next
 * one: a quarter of its life, at least 500 ms and at most a minute. */
export function refreshLead(lifetime: number): number;

/** Whether `token` can travel as the WebSocket subprotocol `tabd.token.<token>`. */
export function tokenAsProtocol(token: string | null): boolean;

/** What the machine asks its shell to do, in order. */
export type Action =
  | { do: "open"; url: string; protocols: string[]; generation: number }
  | { do: "send"; text: string }
  | { do: "close"; code: number; reason: string }
  | { do: "retry"; delay: number; generation: number }
  | { do: "cancelRetry" }
  | { do: "heartbeat"; every: number; generation: number }
  | { do: "stopHeartbeat" }
  | { do: "resyncLater"; delay: number; generation: number }
  | { do: "cancelResync" }
  | { do: "resolve"; id: number; value: unknown }
  | { do: "reject"; id: number; error: TabdError }
  | { do: "publish"; update: Update }
  | { do: "ready" }
  | { do: "failed"; error: TabdError }
  | { do: "foldHeld" }
  | { do: "getToken"; generation: number; reason: "connect" | "refresh" }
  | { do: "refreshLater"; delay: number; generation: number }
  | { do: "cancelRefresh" };

/** The machine's settings (tabd.js fills them from the client's options). */
export interface MachineOptions {
  name: string | null;
  backoff: { initial: number; max: number };
  heartbeat: number;
  resyncRetry: number;
  reconnect: boolean;
  beforeEvent: ((event: Event, state: Snapshot) => void) | null;
  /** Whether the app gives tokens (getToken): then every connection asks for one. */
  tokenProvider?: boolean;
}

/** Time and chance, given to the machine (tests pass fixed ones). */
export interface Clock {
  /** ms since 1970 */
  now(): number;
  /** in [0, 1) */
  random(): number;
}

/** What the machine shows of the client: what TabdClient shows, read from here. */
export interface ClientMachine extends Pick<TabdClient, "state" | "connection" | "session" | "connections" | "attempt" | "retryAt" | "error" | "room"> {}

/** One room's client as a machine: inputs in, actions out. It touches no socket and no timer. */
export class ClientMachine {
  constructor(endpoint: Endpoint, options: MachineOptions, clock: Clock);
  /** Whether a command would go out now rather than wait for a welcome. */
  readonly welcomed: boolean;
  /** The first connection. */
  start(): Action[];
  /** A command of the program's, answered (resolve or reject) as `id`. */
  request(type: string, fields: Record<string, unknown>, id: number): Action[];
  /** A message of connection `generation`. */
  received(text: string, generation: number): Action[];
  /** Connection `generation` closed with `code` (undefined: it could not be opened). */
  closed(generation: number, code: number | undefined): Action[];
  /** The backoff after a drop is over. */
  retryDue(generation: number): Action[];
  /** A heartbeat of connection `generation` is due. */
  heartbeatDue(generation: number): Action[];
  /** The delay after tabd refused the client's own sync (after a `resyncLater` action) is over. */
  resyncDue(generation: number): Action[];
  /** The frames held during a resync, folded after its snapshot's updates (after a `foldHeld` action). */
  foldHeld(): Action[];
  /** The program drops the connection; the next attempt is not before `holdMs` from now. */
  disconnect(holdMs: number): Action[];
  /** The program asks to try again now. */
  reconnect(): Action[];
  /** The program closes the client for good. */
  close(): Action[];
  /** The token provider answered a `getToken` action (null: it has none; the client closes). */
  tokenReady(generation: number, token: string | null | undefined): Action[];
  /** The token provider failed a `getToken` action. */
  tokenFailed(generation: number, error: unknown): Action[];
  /** A `refreshLater` is due. */
  refreshDue(generation: number): Action[];
  /** The program stops waiting for command `id`: withdrawn if not sent, else its answer settles nothing. */
  cancel(id: number, error: unknown): Action[];
}
