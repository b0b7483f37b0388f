// A stand-in for the host interface colloquy:hooks/host@1.0.0 in Node: `log` keeps its lines
// for `takeLogs`, `nowMs` answers what `setNowMs` set. `./index.mjs` makes imports of the
// interface (the kit's, or a hook's own) resolve here.

let lines = [];
let now = 0;

/** The host's `log`: keeps the line. */
export function log(level, line) {
  if (!['debug', 'info', 'warn', 'error'].includes(level)) {
    throw new TypeError(`not a log-level: ${String(level)}`);
  }
  if (typeof line !== 'string') throw new TypeError('a log line is a string');
  lines.push([level, line]);
}

/** The host's `now-ms`. */
export function nowMs() {
  return now;
}

/** The lines logged so far, as `[level, line]` pairs; emptied. */
export function takeLogs() {
  const taken = lines;
  lines = [];
  return taken;
}

/** What `nowMs` answers from now on. */
export function setNowMs(ms) {
  now = ms;
}
