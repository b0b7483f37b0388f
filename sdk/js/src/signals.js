// Waiting with an AbortSignal: signals linked with a timeout, and sleeps a signal cuts short.
//
// `AbortSignal.any` and `AbortSignal.timeout` would do, but the first needs Node 20.3 and
// the second's timer cannot be cleared: a busy agent makes thousands of calls a second,
// each with a 30 s timeout, and every one would keep its timer (and the signal) alive for
// the full 30 s after the call is done. A `Deadline` clears its timer and unhooks its
// listeners as soon as the wait is over.

/** Why a `Deadline` fired: its timeout passed (not the caller's signal). */
export class DeadlinePassed extends Error {
  constructor(ms) {
    super(`timed out after ${ms} ms`);
    this.name = "DeadlinePassed";
    this.ms = ms;
  }
}

/**
 * One wait's signal: aborted when any of `signals` aborts (with its reason) or after
 * `timeoutMs` (with a `DeadlinePassed`). Call `dispose()` once the wait is over.
 */
export class Deadline {
  /**
   * @param {Array<AbortSignal | undefined | null>} signals
   * @param {number} [timeoutMs] none: no timeout
   */
  constructor(signals, timeoutMs) {
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    this.sources = signals.filter(Boolean);
    this.onAbort = (event) => this.controller.abort(event.target.reason);
    for (const source of this.sources) {
      if (source.aborted) {
        this.controller.abort(source.reason);
        break;
      }
      source.addEventListener("abort", this.onAbort, { once: true });
    }
    this.timer =
      timeoutMs === undefined || timeoutMs === null || this.signal.aborted
        ? null
        : setTimeout(() => this.controller.abort(new DeadlinePassed(timeoutMs)), timeoutMs);
  }

  /** Whether it fired because its own timeout passed. */
  get timedOut() {
    return this.signal.aborted && this.signal.reason instanceof DeadlinePassed;
  }

  dispose() {
    if (this.timer !== null) clearTimeout(this.timer);
    for (const source of this.sources) source.removeEventListener("abort", this.onAbort);
  }
}

/**
 * Resolves after `ms`, or rejects with the signal's reason when it aborts first.
 *
 * @param {number} ms
 * @param {AbortSignal} [signal]
 */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Resolves with `promise`'s value, or rejects with the signal's reason when it aborts
 * first (the promise itself goes on; its outcome is then ignored).
 *
 * @template T
 * @param {Promise<T>} promise
 * @param {AbortSignal} [signal]
 * @returns {Promise<T>}
 */
export function untilAborted(promise, signal) {
  if (!signal) return promise;
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      promise.catch(() => {});
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}
