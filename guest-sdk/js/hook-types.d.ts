// Generated from docs/hook-input.schema.json and docs/hook-output.schema.json by
// guest-sdk/js/check-types.mjs --write. Do not edit: change the schemas (the engine's
// types) and regenerate; `node guest-sdk/js/check-types.mjs` fails while they differ.

/** Any JSON value, as `JSON.parse` gives it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// --- the event (hook-input.schema.json) ---

/** The event a hook is called with. */
export interface HookInput {
  /** Always [`HOOKS_ABI_VERSION`]. */
  abi_version: number;
  /** The template's `spec.hooks.config`, as written (`null` when absent). */
  config?: Json;
  /** The conversation as it was before this event. */
  conversation: HookConversation;
  /** Which lifecycle event: `on_start`, `on_message` or `on_timeout`. */
  hook: HookEvent;
  /** For `on_message`: the message being handled, with its receivers before routing. */
  message?: HookMessage | null;
  /** The engine's clock (Unix milliseconds). */
  now: number;
  /** For `on_timeout`: which deadline or retry came due. */
  timeout?: HookTimeout | null;
}

/** A conversation as a hook sees it. */
export interface HookConversation {
  /**
   * The context snapshot (unless `hooks.reads` leaves out `context`; `null` reads as
   * left out).
   */
  context?: Json;
  /** The conversation deadline (Unix milliseconds), if any. */
  deadline?: number | null;
  /** The conversation id. */
  id: string;
  /** The initiator (unless `hooks.reads` leaves out `parties`). */
  initiator?: string | null;
  /** The outcome, once completed. */
  outcome?: Outcome | null;
  /** The start parameters (unless `hooks.reads` leaves out `parameters`). */
  parameters?: Json;
  /** The participants, one thread each (as `initiator`). */
  participants?: string[] | null;
  /** Retries (`retry` actions) that have fired so far. */
  retry_attempts: number;
  /** The template revision the conversation is pinned to (as `template`). */
  revision?: string | null;
  /** `active` or `completed`. */
  status: HookStatus;
  /** The template's name (unless the template's `hooks.reads` leaves out `template`). */
  template?: string | null;
  /** Each thread's state (unless `hooks.reads` leaves out `threads`). */
  threads?: HookThread[] | null;
  /**
   * The variables hooks and declarative actions own (unless `hooks.reads` leaves out
   * `vars`).
   */
  vars?: { [key: string]: Json } | null;
}

/** A lifecycle event a hook can run at. */
export type HookEvent =
  /** The conversation starts. */
  | "on_start"
  /** A message is accepted. */
  | "on_message"
  /** A deadline passes or a retry comes due. */
  | "on_timeout";

/** The message an `on_message` hook handles. */
export interface HookMessage {
  /** The validated content. */
  content?: Json;
  /** The message id. */
  id: string;
  /** The message it answers. */
  in_reply_to?: string | null;
  /** The performative's name. */
  performative: string;
  /** Its receivers before routing rules and `route` actions. */
  receivers: string[];
  /** Its reply-by (Unix milliseconds). */
  reply_by?: number | null;
  /** The sender. */
  sender: string;
}

/** Whether a conversation still runs. */
export type HookStatus =
  /** Still running. */
  | "active"
  /** Ended. */
  | "completed";

/** One participant thread. */
export interface HookThread {
  /** The thread's reply-by deadline (Unix milliseconds), if any. */
  deadline?: number | null;
  /** The outcome, when the state is terminal. */
  outcome?: Outcome | null;
  /** The participant. */
  participant: string;
  /** The thread's state name. */
  state: string;
}

/** The deadline or retry an `on_timeout` hook handles. */
export interface HookTimeout {
  /** For `retry`: which retry this is (1 for the first); otherwise the retries so far. */
  attempt: number;
  /**
   * `conversation` (the conversation deadline), `thread` (a participant's reply-by) or
   * `retry` (a retry scheduled by a `retry` action).
   */
  kind: string;
  /** The thread's participant, for `thread`. */
  participant?: string | null;
}

/** How a thread or a conversation ended. */
export type Outcome =
  /** The participant did what was asked (FIPA inform-done / inform-result). */
  | "success"
  /** The participant tried and failed (FIPA failure). */
  | "failure"
  /** The participant declined (FIPA refuse). */
  | "refused"
  /**
   * The initiator turned a proposal down (FIPA reject-proposal), or let it lapse
   * unanswered past its reply-by.
   */
  | "rejected"
  /** The initiator cancelled and the participant confirmed. */
  | "cancelled"
  /** A deadline passed while an answer was still owed. */
  | "timeout"
  /** The participant never answered a call before its reply-by (contract-net silence). */
  | "no_reply"
  /** One side did not understand the other (FIPA not-understood). */
  | "not_understood"
  /** Handed to an agent outside the protocol (a hook's or rule's `escalate`). */
  | "escalated";

// --- the answer (hook-output.schema.json) ---

/** What a hook answers. `{}` and `{"actions": []}` both mean "carry on". */
export interface HookOutput {
  /**
   * The actions, in order: the same vocabulary as a template's declarative rules
   * (`eval_vars` excepted: it is CEL, for rules only).
   */
  actions?: Action[];
  /** Lines for the engine log (info level, tagged with the conversation and hook). */
  log?: string[];
}

/** One step a rule or a hook asks the engine to take. */
export type Action =
  /** Carry on; the same as returning no action. */
  | "continue"
  /**
   * Refuse the message (or the start): the sender gets an error with this reason and the
   * conversation is left unchanged.
   */
  | { reject: RejectAction }
  /** Merge these values into the conversation's `vars` (top-level keys replace). */
  | { set_vars: { [key: string]: Json } }
  /** Merge the values of these CEL expressions into `vars` (declarative rules only). */
  | { eval_vars: { [key: string]: string } }
  /** Send a message as the engine party ([`crate::message::ENGINE_PARTY`]). */
  | { send: SendAction }
  /** Change who receives the message being processed. */
  | { route: RouteAction }
  /** Set the conversation deadline to this many milliseconds from now. */
  | { set_deadline: DeadlineAction }
  /** Push the conversation deadline back by this many milliseconds. */
  | { extend_deadline: ExtendAction }
  /** Run `on_timeout` again later; with a backoff factor and an attempt cap. */
  | { retry: RetryAction }
  /** End the conversation now with an outcome. */
  | { complete: CompleteAction }
  /**
   * Hand the conversation to an agent outside the protocol, with a reason; it receives the
   * current message (if any) and is added as an observer.
   */
  | { escalate: EscalateAction }
  /** Write a line to the engine log, tagged with the conversation id. */
  | { log: LogAction };

/** `complete`: end the conversation. */
export interface CompleteAction {
  /** The outcome. */
  outcome: Outcome;
  /** Why, for the log and the event. */
  reason?: string | null;
}

/** `set_deadline`. */
export interface DeadlineAction {
  /** Milliseconds from now. */
  in_ms: number;
}

/** `escalate`: hand over to an agent. */
export interface EscalateAction {
  /** Why. */
  reason: string;
  /** The agent to hand over to. */
  to: string;
}

/** `extend_deadline`. */
export interface ExtendAction {
  /** Milliseconds to add to the current deadline (or to now, when there is none). */
  by_ms: number;
}

/** `log`. */
export interface LogAction {
  /** `debug`, `info` (default), `warn` or `error`. */
  level?: LogLevel;
  /** The line. */
  message: string;
}

/** Log levels a rule or hook may use. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** `reject`: refuse with a reason. */
export interface RejectAction {
  /** Why; shown to the sender. */
  reason: string;
}

/** `retry`: run `on_timeout` again after a delay. */
export interface RetryAction {
  /** Delay before the first retry. */
  after_ms: number;
  /** Each further retry waits this many times longer (1.0 when absent). */
  backoff?: number | null;
  /** No retry is scheduled once this many have run; rules see the count as `retry.attempt`. */
  max_attempts?: number | null;
}

/** `route`: change the receivers of the message being processed. */
export interface RouteAction {
  /** `add` (default) keeps the original receivers; `replace` drops them. */
  mode?: RouteMode;
  /** Agent ids. */
  to: string[];
}

/** How [`RouteAction`] treats the original receivers. */
export type RouteMode =
  /** Keep them and add the new ones. */
  | "add"
  /** Deliver only to the new ones. */
  | "replace";

/** `send`: a message from the engine party. */
export interface SendAction {
  /** The content. */
  content?: Json;
  /** The performative. */
  performative: string;
  /** Receivers (agent ids). */
  to: string[];
}
