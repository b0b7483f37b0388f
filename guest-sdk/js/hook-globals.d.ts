// The globals a hook has besides ES2022's, for build.sh's type check of TypeScript hooks
// (the kit installs them: colloquy-hook.js, installRuntimeFixes). Not part of the kit's
// types, so editors with Node's or the DOM's `console` see no second declaration.

/** In a hook, `console` writes to the engine log (`log` and `info` at info level). */
declare var console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  debug(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};

/** The host interface of the world, for hooks that import it directly. */
declare module 'colloquy:hooks/host@1.0.0' {
  /** A line for the engine log, tagged with the conversation id. */
  export function log(level: 'debug' | 'info' | 'warn' | 'error', line: string): void;
  /** The host's wall clock, Unix milliseconds. */
  export function nowMs(): number;
}
