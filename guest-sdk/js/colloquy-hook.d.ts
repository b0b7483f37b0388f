// The types of the kit (colloquy-hook.js), written by hand. The event and answer types it
// uses are generated from the engine's JSON Schemas into hook-types.d.ts; check-types.mjs
// checks that `Action` below has one builder per action of the output schema.

import type {
  Action as ActionJson,
  HookEvent,
  HookInput,
  HookStatus,
  Json,
  LogLevel,
  Outcome,
  RouteMode,
} from './hook-types';

export type * from './hook-types';

/** The hook ABI version this kit speaks (the event's `abi_version`). */
export declare const HOOKS_ABI_VERSION: 1;
/** The log levels of `log` and `Action.log`. */
export declare const LOG_LEVELS: readonly LogLevel[];
/** How a thread or a conversation ended. */
export declare const OUTCOMES: readonly Outcome[];
/** How `Action.route` treats the original receivers. */
export declare const ROUTE_MODES: readonly RouteMode[];

/**
 * Writes a line to the engine log, tagged with the conversation id (cut at 4 KiB; at most 64
 * lines per call).
 */
export declare function log(level: LogLevel, line: string): void;

/** The host's wall clock (Unix milliseconds). Decisions should use `event.now`. */
export declare function nowMs(): number;

/** A thread, with what the engine left out read as `null`. */
export interface Thread {
  participant: string;
  state: string;
  outcome: Outcome | null;
  deadline: number | null;
}

/**
 * The conversation before the event, with the parts `hooks.reads` left out read as empty:
 * `''` for names, `[]` for lists, `null` for the free-form parts.
 */
export interface Conversation {
  id: string;
  template: string;
  revision: string;
  status: HookStatus;
  outcome: Outcome | null;
  initiator: string;
  participants: string[];
  threads: Thread[];
  vars: { [key: string]: Json } | null;
  parameters: Json;
  context: Json;
  deadline: number | null;
  retry_attempts: number;
}

/** The message an `on_message` hook handles, with what was left out read as `null`. */
export interface Message {
  id: string;
  performative: string;
  sender: string;
  receivers: string[];
  content: Json;
  in_reply_to: string | null;
  reply_by: number | null;
}

/** The deadline or retry an `on_timeout` hook handles. */
export interface Timeout {
  /** `conversation`, `thread` or `retry`. */
  kind: string;
  /** The thread's participant, for `thread`. */
  participant: string | null;
  /** For `retry`: which retry this is (1 for the first); otherwise the retries so far. */
  attempt: number;
}

/** The event a hook is called with. */
export declare class Event {
  constructor(input: HookInput);
  /** Reads an event from its JSON text. */
  static fromJson(text: string): Event;
  /** The event as the engine wrote it. */
  readonly input: HookInput;
  readonly abiVersion: number;
  /** `on_start`, `on_message` or `on_timeout`. */
  readonly hook: HookEvent;
  /** The engine's clock (Unix milliseconds): the clock deadlines run on. */
  readonly now: number;
  readonly conversation: Conversation;
  /** For `on_message`: the message (receivers before routing); otherwise `null`. */
  readonly message: Message | null;
  /** For `on_timeout`: which deadline or retry came due; otherwise `null`. */
  readonly timeout: Timeout | null;
  /** The template's `spec.hooks.config` (`null` when absent). */
  readonly config: Json;
  /** The message content (`null` outside `on_message`). */
  readonly content: Json;

  /** A top-level field of the message content (`undefined` when missing). */
  contentField(name: string): Json | undefined;
  /** A top-level field of the message content as text (`undefined` when not a string). */
  contentStr(name: string): string | undefined;
  /** A top-level field as a whole number: a non-negative number, truncated. */
  contentU64(name: string): number | undefined;
  /** A top-level field of the message content as a number. */
  contentF64(name: string): number | undefined;
  /** A top-level field of the message content as a boolean. */
  contentBool(name: string): boolean | undefined;

  /** A top-level field of `spec.hooks.config`. */
  configField(name: string): Json | undefined;
  configStr(name: string): string | undefined;
  configU64(name: string): number | undefined;
  configF64(name: string): number | undefined;
  configBool(name: string): boolean | undefined;

  /** A variable of the conversation. */
  var(name: string): Json | undefined;
  varStr(name: string): string | undefined;
  varU64(name: string): number | undefined;

  /** A top-level start parameter. */
  parameter(name: string): Json | undefined;

  /** The thread of `participant`. */
  thread(participant: string): Thread | undefined;
}

/** One builder per action of docs/hook-output.schema.json (`eval_vars` is for rules only). */
export declare const Action: {
  /** Carry on: the same as returning no action. */
  continue(): ActionJson;
  /** Refuse the message (or the start); the sender gets the reason. */
  reject(reason: string): ActionJson;
  /** Merge these values into the conversation's `vars` (top-level keys replace). */
  setVars(vars: { [key: string]: Json }): ActionJson;
  /** `set_vars` with one variable. */
  setVar(name: string, value: Json): ActionJson;
  /** Send a message as the engine party; `content` is left out when `undefined` or `null`. */
  send(performative: string, to: string | string[], content?: Json): ActionJson;
  /** Change the receivers of the message being handled: `add` (default) or `replace`. */
  route(to: string | string[], mode?: RouteMode): ActionJson;
  /** Set the conversation deadline to this many milliseconds from now. */
  setDeadline(inMs: number): ActionJson;
  /** Push the conversation deadline back by this many milliseconds. */
  extendDeadline(byMs: number): ActionJson;
  /**
   * Run `on_timeout` again after `afterMs`; each further retry `backoff` times longer (1.0
   * when left out); none once `maxAttempts` have run.
   */
  retry(afterMs: number, backoff?: number, maxAttempts?: number): ActionJson;
  /** End the conversation now with an outcome. */
  complete(outcome: Outcome, reason?: string): ActionJson;
  /** Hand the conversation to an agent outside the protocol, with a reason. */
  escalate(to: string, reason: string): ActionJson;
  /** A line for the engine log, at `info` unless told. */
  log(message: string, level?: LogLevel): ActionJson;
};

/** A handler: the event in, the actions to take out (nothing, or `[]`, to carry on). */
export type Handler = (event: Event) => ActionJson[] | void;

/** The handlers of `defineHook`; a missing one answers "carry on". */
export interface Handlers {
  onStart?: Handler;
  onMessage?: Handler;
  onTimeout?: Handler;
}

/** The world's three exports: event JSON in, answer JSON out. */
export interface HookExports {
  start(event: string): string;
  message(event: string): string;
  timeout(event: string): string;
}

/**
 * The world's three exports from the handlers. Use it once, in the hook's entry file:
 *
 *     export const { start, message, timeout } = defineHook({ onStart, onMessage, onTimeout });
 *
 * A handler that throws fails the hook (the call traps; the template's `failure_policy`
 * decides); the error is written to the engine log first.
 */
export declare function defineHook(handlers: Handlers): HookExports;

/** Runs one handler on the event's JSON text; what each export of `defineHook` does. */
export declare function handleEvent(hook: HookEvent, handler: Handler | undefined, eventJson: string): string;

/** Installs `console`, `Date` and `performance.now` on the host (done by the kit in a hook). */
export declare function installRuntimeFixes(target: object): void;
