// Colloquy lifecycle hooks in JavaScript or TypeScript: the kit a hook imports as
// `colloquy-hook`. `guest-sdk/js/build.sh HOOK.(js|ts) OUT.wasm` bundles the hook with this
// file and builds a component of `colloquy:hooks@1.0.0` (guest-sdk/wit/hooks.wit) with
// QuickJS (componentize-qjs). Reference: docs/hooks-js.md; the payloads:
// docs/hook-input.schema.json and docs/hook-output.schema.json.
//
//     import { defineHook, Action } from 'colloquy-hook';
//     export const { start, message, timeout } = defineHook({
//       onMessage(event) {
//         const limit = event.configU64('max_amount') ?? 10000;
//         const amount = event.contentU64('amount');
//         return amount !== undefined && amount > limit ? [Action.reject('too much')] : [];
//       },
//     });
//
// Layout:
// - the host: `log` and `nowMs`, the two imports of `colloquy:hooks/host@1.0.0`;
// - `Event`: the event as a hook sees it, with accessors for the free-form parts (content,
//   config, vars, parameters), read as the Rust guest SDK reads them;
// - `Action`: one builder per action of the output schema;
// - `defineHook` / `handleEvent`: the three world exports;
// - the runtime fixes: `console` and `Date` on the host's log and clock (QuickJS's own would
//   reach for WASI, which a hook has none of).
//
// Instances are reused between calls and thrown away after any failure: keep state in the
// conversation (`Action.setVars`), never in module variables.

import { log as hostLog, nowMs as hostNowMs } from 'colloquy:hooks/host@1.0.0';

/** The hook ABI version this kit speaks (the event's `abi_version`). */
export const HOOKS_ABI_VERSION = 1;

/** The log levels of the host's `log` and of `Action.log`. */
export const LOG_LEVELS = Object.freeze(['debug', 'info', 'warn', 'error']);

/** How a thread or a conversation ended (`Action.complete`). */
export const OUTCOMES = Object.freeze([
  'success', 'failure', 'refused', 'rejected', 'cancelled', 'timeout', 'no_reply',
  'not_understood', 'escalated',
]);

/** How `Action.route` treats the message's original receivers. */
export const ROUTE_MODES = Object.freeze(['add', 'replace']);

/** The handlers `defineHook` takes, and the lifecycle event each one runs at. */
const HANDLERS = Object.freeze({ onStart: 'on_start', onMessage: 'on_message', onTimeout: 'on_timeout' });

/** What `Event.*U64` gives for numbers at or past 2^64: Rust's `as u64` saturates there. */
const U64_CEILING = 2 ** 64;

// --- the host ---------------------------------------------------------------------------

/**
 * Writes a line to the engine log, tagged with the conversation id. The host cuts lines at
 * 4 KiB and keeps at most 64 per call.
 * @param {'debug'|'info'|'warn'|'error'} level
 * @param {string} line
 */
export function log(level, line) {
  if (!LOG_LEVELS.includes(level)) {
    throw new TypeError(`log level must be one of ${LOG_LEVELS.join(', ')}, not ${describeValue(level)}`);
  }
  hostLog(level, String(line));
}

/**
 * The host's wall clock (Unix milliseconds). Decisions should use `event.now`, the engine
 * clock the conversation's deadlines run on.
 * @returns {number}
 */
export function nowMs() {
  return Number(hostNowMs());
}

// --- the event ----------------------------------------------------------------------------

/**
 * The event a hook is called with (docs/hook-input.schema.json), with the parts a
 * template's `hooks.reads` left out read as empty: `''` for names, `[]` for lists, `null`
 * for `vars`, `parameters` and `context` (as the Rust guest SDK reads them).
 */
export class Event {
  /** @param {import('./hook-types').HookInput} input the event as parsed from its JSON */
  constructor(input) {
    if (!isObject(input) || !isObject(input.conversation)) {
      throw new TypeError('an event is an object with a `conversation` object');
    }
    /** The event as the engine wrote it. */
    this.input = input;
    this.abiVersion = input.abi_version;
    this.hook = input.hook;
    this.now = input.now;
    this.conversation = conversationView(input.conversation);
    this.message = isObject(input.message) ? messageView(input.message) : null;
    this.timeout = isObject(input.timeout)
      ? { kind: input.timeout.kind, participant: input.timeout.participant ?? null, attempt: input.timeout.attempt }
      : null;
    this.config = input.config ?? null;
  }

  /** Reads an event from its JSON text. Throws a `SyntaxError` or `TypeError`. */
  static fromJson(text) {
    return new Event(JSON.parse(text));
  }

  /** The message content (`null` outside `on_message`). */
  get content() {
    return this.message === null ? null : this.message.content;
  }

  /** A top-level field of the message content (`undefined` when missing). */
  contentField(name) { return field(this.content, name); }
  /** A top-level field of the message content as text (`undefined` when not a string). */
  contentStr(name) { return asStr(this.contentField(name)); }
  /**
   * A top-level field of the message content as a whole number: a non-negative number,
   * truncated (`undefined` otherwise).
   */
  contentU64(name) { return asU64(this.contentField(name)); }
  /** A top-level field of the message content as a number. */
  contentF64(name) { return asF64(this.contentField(name)); }
  /** A top-level field of the message content as a boolean. */
  contentBool(name) { return asBool(this.contentField(name)); }

  /** A top-level field of the template's `spec.hooks.config`. */
  configField(name) { return field(this.config, name); }
  /** A top-level field of `spec.hooks.config` as text. */
  configStr(name) { return asStr(this.configField(name)); }
  /** A top-level field of `spec.hooks.config` as a whole number (as `contentU64`). */
  configU64(name) { return asU64(this.configField(name)); }
  /** A top-level field of `spec.hooks.config` as a number. */
  configF64(name) { return asF64(this.configField(name)); }
  /** A top-level field of `spec.hooks.config` as a boolean. */
  configBool(name) { return asBool(this.configField(name)); }

  /** A variable of the conversation. */
  var(name) { return field(this.conversation.vars, name); }
  /** A variable of the conversation as text. */
  varStr(name) { return asStr(this.var(name)); }
  /** A variable of the conversation as a whole number (as `contentU64`). */
  varU64(name) { return asU64(this.var(name)); }

  /** A top-level start parameter. */
  parameter(name) { return field(this.conversation.parameters, name); }

  /** The thread of `participant` (`undefined` when it has none, or threads were left out). */
  thread(participant) {
    return this.conversation.threads.find((thread) => thread.participant === participant);
  }
}

function conversationView(c) {
  return {
    id: c.id,
    template: c.template ?? '',
    revision: c.revision ?? '',
    status: c.status,
    outcome: c.outcome ?? null,
    initiator: c.initiator ?? '',
    participants: c.participants ?? [],
    threads: (c.threads ?? []).map((t) => ({
      participant: t.participant,
      state: t.state,
      outcome: t.outcome ?? null,
      deadline: t.deadline ?? null,
    })),
    vars: c.vars ?? null,
    parameters: c.parameters ?? null,
    context: c.context ?? null,
    deadline: c.deadline ?? null,
    retry_attempts: c.retry_attempts,
  };
}

function messageView(m) {
  return {
    id: m.id,
    performative: m.performative,
    sender: m.sender,
    receivers: m.receivers,
    content: m.content ?? null,
    in_reply_to: m.in_reply_to ?? null,
    reply_by: m.reply_by ?? null,
  };
}

function isObject(value) {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function field(object, name) {
  return isObject(object) && Object.prototype.hasOwnProperty.call(object, name) ? object[name] : undefined;
}

function asStr(value) { return typeof value === 'string' ? value : undefined; }
function asF64(value) { return typeof value === 'number' ? value : undefined; }
function asBool(value) { return typeof value === 'boolean' ? value : undefined; }
function asU64(value) {
  if (typeof value !== 'number' || !(value >= 0)) return undefined;
  // `+ 0` turns -0 into 0.
  return Math.min(Math.trunc(value), U64_CEILING) + 0;
}

// --- the actions --------------------------------------------------------------------------

/**
 * One builder per action of docs/hook-output.schema.json, each returning the action's JSON.
 * `eval_vars` has none: it is CEL for declarative rules, and the engine ignores it from a hook.
 */
export const Action = Object.freeze({
  /** Carry on: the same as returning no action. */
  continue() {
    return 'continue';
  },
  /** Refuse the message (or the start); the sender gets the reason. */
  reject(reason) {
    return { reject: { reason: text(reason, 'reason') } };
  },
  /** Merge these values into the conversation's `vars` (top-level keys replace). */
  setVars(vars) {
    if (!isObject(vars)) throw new TypeError(`setVars takes an object, not ${describeValue(vars)}`);
    return { set_vars: vars };
  },
  /** `set_vars` with one variable. */
  setVar(name, value) {
    return { set_vars: { [text(name, 'name')]: value } };
  },
  /**
   * Send a message as the engine party: to one agent or several; `content` is left out
   * when `undefined` or `null`.
   */
  send(performative, to, content) {
    const send = { performative: text(performative, 'performative'), to: agents(to) };
    if (content !== undefined && content !== null) send.content = content;
    return { send };
  },
  /** Change the receivers of the message being handled: `add` (default) or `replace`. */
  route(to, mode = 'add') {
    if (!ROUTE_MODES.includes(mode)) {
      throw new TypeError(`route mode must be one of ${ROUTE_MODES.join(', ')}, not ${describeValue(mode)}`);
    }
    return { route: { to: agents(to), mode } };
  },
  /** Set the conversation deadline to this many milliseconds from now. */
  setDeadline(inMs) {
    return { set_deadline: { in_ms: whole(inMs, 'inMs') } };
  },
  /** Push the conversation deadline back by this many milliseconds. */
  extendDeadline(byMs) {
    return { extend_deadline: { by_ms: whole(byMs, 'byMs') } };
  },
  /**
   * Run `on_timeout` again after `afterMs`; each further retry waits `backoff` times longer
   * (1.0 when left out), and none is scheduled once `maxAttempts` have run.
   */
  retry(afterMs, backoff, maxAttempts) {
    const retry = { after_ms: whole(afterMs, 'afterMs') };
    if (backoff !== undefined && backoff !== null) {
      if (typeof backoff !== 'number' || !Number.isFinite(backoff)) {
        throw new TypeError(`backoff must be a finite number, not ${describeValue(backoff)}`);
      }
      retry.backoff = backoff;
    }
    if (maxAttempts !== undefined && maxAttempts !== null) {
      retry.max_attempts = whole(maxAttempts, 'maxAttempts');
    }
    return { retry };
  },
  /** End the conversation now with an outcome (and a reason, for the log and the event). */
  complete(outcome, reason) {
    if (!OUTCOMES.includes(outcome)) {
      throw new TypeError(`outcome must be one of ${OUTCOMES.join(', ')}, not ${describeValue(outcome)}`);
    }
    const complete = { outcome };
    if (reason !== undefined && reason !== null) complete.reason = text(reason, 'reason');
    return { complete };
  },
  /** Hand the conversation to an agent outside the protocol, with a reason. */
  escalate(to, reason) {
    return { escalate: { to: text(to, 'to'), reason: text(reason, 'reason') } };
  },
  /** A line for the engine log, at `info` unless told. */
  log(message, level = 'info') {
    if (!LOG_LEVELS.includes(level)) {
      throw new TypeError(`log level must be one of ${LOG_LEVELS.join(', ')}, not ${describeValue(level)}`);
    }
    return { log: { level, message: text(message, 'message') } };
  },
});

function text(value, what) {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string, not ${describeValue(value)}`);
  return value;
}

function agents(to) {
  const list = typeof to === 'string' ? [to] : to;
  if (!Array.isArray(list) || !list.every((agent) => typeof agent === 'string')) {
    throw new TypeError(`agents are a string or an array of strings, not ${describeValue(to)}`);
  }
  return list;
}

function whole(value, what) {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`${what} must be a non-negative whole number, not ${describeValue(value)}`);
  }
  return value;
}

// --- the exports --------------------------------------------------------------------------

/**
 * The world's three exports (`start`, `message`, `timeout`: event JSON in, answer JSON out)
 * from handlers that take an `Event` and return the actions to take (an array, or nothing
 * for "carry on"). A missing handler answers `{}`. Use it once, in the hook's entry file:
 *
 *     export const { start, message, timeout } = defineHook({ onStart, onMessage, onTimeout });
 *
 * A handler that throws fails the hook (the call traps, the template's `failure_policy`
 * decides); the error is written to the engine log first.
 */
export function defineHook(handlers) {
  if (!isObject(handlers)) throw new TypeError('defineHook takes an object of handlers');
  for (const [name, handler] of Object.entries(handlers)) {
    if (!Object.prototype.hasOwnProperty.call(HANDLERS, name)) {
      throw new TypeError(`defineHook: unknown handler ${JSON.stringify(name)} (known: ${Object.keys(HANDLERS).join(', ')})`);
    }
    if (handler !== undefined && typeof handler !== 'function') {
      throw new TypeError(`defineHook: ${name} must be a function`);
    }
  }
  return Object.freeze({
    start: (event) => handleEvent(HANDLERS.onStart, handlers.onStart, event),
    message: (event) => handleEvent(HANDLERS.onMessage, handlers.onMessage, event),
    timeout: (event) => handleEvent(HANDLERS.onTimeout, handlers.onTimeout, event),
  });
}

/**
 * Runs one handler on the event's JSON text and returns the answer's JSON text: what each
 * export of `defineHook` does. An event that does not parse is answered with a `reject`
 * naming the problem (an engine and kit that disagree, which a template author should hear
 * about); anything the handler throws is logged and thrown on.
 * @param {'on_start'|'on_message'|'on_timeout'} hook
 * @param {((event: Event) => unknown) | undefined} handler
 * @param {string} eventJson
 * @returns {string}
 */
export function handleEvent(hook, handler, eventJson) {
  let event;
  try {
    event = Event.fromJson(eventJson);
  } catch (error) {
    return answer([Action.reject(`the hook cannot read its event: ${error instanceof Error ? error.message : String(error)}`)]);
  }
  if (handler === undefined) return '{}';
  try {
    return answer(handler(event));
  } catch (error) {
    hostLog('error', `${hook} threw ${describeError(error)}`);
    throw error;
  }
}

function answer(actions) {
  if (actions === undefined || actions === null) return '{}';
  if (typeof actions.then === 'function') {
    throw new TypeError('a handler must return its actions, not a Promise: hooks run synchronously');
  }
  if (!Array.isArray(actions)) {
    throw new TypeError(`a handler returns an array of actions (or nothing), not ${describeValue(actions)}`);
  }
  return actions.length === 0 ? '{}' : JSON.stringify({ actions });
}

function describeError(error) {
  if (!(error instanceof Error)) return describeValue(error);
  const stack = typeof error.stack === 'string' ? error.stack.trimEnd() : '';
  return stack ? `${error.name}: ${error.message}\n${stack}` : `${error.name}: ${error.message}`;
}

function describeValue(value) {
  if (typeof value === 'string') return JSON.stringify(value);
  if (value === null || typeof value !== 'object') return String(value);
  return Array.isArray(value) ? 'an array' : 'an object';
}

// --- the runtime fixes --------------------------------------------------------------------

/**
 * Gives `target` (the global object) a `console` that writes to the engine log, a `Date` whose
 * `Date.now()` and `new Date()` read the host's clock, and a `performance.now()` that says it
 * is not available: QuickJS's own clock and console reach for WASI, and a hook component's
 * WASI imports are stubs that trap. The kit calls it when it loads in a hook (where there is
 * no `console`); that happens once, when the component is built (the build snapshots the
 * initialised module). Exported for tests.
 */
export function installRuntimeFixes(target) {
  const to = (level) => (...args) => hostLog(level, formatArgs(args));
  target.console = {
    log: to('info'), info: to('info'), debug: to('debug'), warn: to('warn'), error: to('error'),
  };

  const QuickJsDate = target.Date;
  const HookDate = function Date(...args) {
    if (new.target === undefined) return new QuickJsDate(Number(hostNowMs())).toString();
    return Reflect.construct(QuickJsDate, args.length === 0 ? [Number(hostNowMs())] : args, new.target);
  };
  Object.defineProperty(HookDate, 'length', { value: QuickJsDate.length });
  HookDate.prototype = QuickJsDate.prototype;
  HookDate.now = () => Number(hostNowMs());
  HookDate.parse = QuickJsDate.parse;
  HookDate.UTC = QuickJsDate.UTC;
  Object.defineProperty(QuickJsDate.prototype, 'constructor', {
    value: HookDate, writable: true, configurable: true, enumerable: false,
  });
  target.Date = HookDate;

  if (typeof target.performance === 'object' && target.performance !== null) {
    // QuickJS's `performance.now` can be neither written nor redefined: the object is
    // replaced by one that inherits the rest.
    const now = () => {
      throw new Error('performance.now() is not available in a hook: use event.now or nowMs()');
    };
    target.performance = Object.create(target.performance, { now: { value: now, enumerable: true } });
  }
}

function formatArgs(args) {
  return args.map((arg) => {
    if (typeof arg === 'string') return arg;
    if (arg instanceof Error) return `${arg.name}: ${arg.message}`;
    try {
      return JSON.stringify(arg) ?? String(arg);
    } catch {
      return String(arg);
    }
  }).join(' ');
}

// No `console` means the hook runtime (Node and browsers have one): fix it, once (a second
// copy of the kit in the same bundle finds the console this one made).
if (typeof globalThis.console === 'undefined') installRuntimeFixes(globalThis);
