// Credit assessment policy in TypeScript (the hook of credit-assessment-js.yaml): the same
// policy as the Rust hook in ../hook/src/lib.rs, answer for answer and log line for log line.
// Built by guest-sdk/js/build-examples.sh into ../credit_assessment_js.wasm.
//
// - on_start: the application is `pending`, stamped with its start time.
// - on_message: a loan request above `config.max_amount` is refused; one whose purpose
//   mentions crypto is also routed to `config.special_risk_agent`.
// - on_timeout: while the assessor has not answered, retry after 1 s, 2 s, 4 s; after the
//   third retry, escalate to `config.escalation_agent` with the reason.

import { Action, defineHook, log, type Event } from 'colloquy-hook';

/** Retries before escalating. */
const MAX_RETRIES = 3;
/** First retry delay; each further one doubles. */
const FIRST_RETRY_MS = 1_000;
/** Used when the template's config has no `max_amount`. */
const DEFAULT_MAX_AMOUNT = 50_000;
/** The thread state in which the assessor owes an answer. */
const AWAITING = 'assessing';

function assessRequest(event: Event) {
  const limit = event.configU64('max_amount') ?? DEFAULT_MAX_AMOUNT;
  const amount = event.contentU64('amount');
  if (amount !== undefined && amount > limit) {
    return [Action.reject(`amount ${amount} exceeds the limit of ${limit}`)];
  }
  if (containsIgnoreAsciiCase(event.contentStr('purpose') ?? '', 'crypto')) {
    return [
      Action.route(event.configStr('special_risk_agent') ?? 'special-risk-assessment'),
      Action.setVar('risk_route', 'special'),
    ];
  }
  return [Action.setVar('risk_route', 'standard')];
}

/** Whether `haystack` contains `needle`, ignoring ASCII case only (as Rust's eq_ignore_ascii_case). */
function containsIgnoreAsciiCase(haystack: string, needle: string): boolean {
  const lower = (text: string) => text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
  return lower(haystack).includes(lower(needle));
}

export const { start, message, timeout } = defineHook({
  onStart(event) {
    // Keys in the order the Rust hook writes them (serde_json's map is sorted).
    return [Action.setVars({ started_at: event.now, status: 'pending' })];
  },

  onMessage(event) {
    switch (event.message?.performative) {
      case 'request':
        return assessRequest(event);
      case 'inform':
        return [Action.setVar('status', 'assessed')];
      case 'refuse':
      case 'failure':
        return [Action.setVar('status', 'declined')];
      default:
        return [];
    }
  },

  onTimeout(event) {
    const timeout = event.timeout;
    if (timeout === null) return [];
    const stillWaiting = event.conversation.threads.some((thread) => thread.state === AWAITING);
    if (!stillWaiting || timeout.kind === 'conversation') return [];
    const retriesDone = timeout.kind === 'retry' ? timeout.attempt : event.conversation.retry_attempts;
    if (retriesDone < MAX_RETRIES) {
      log('info', `no assessment yet; retry ${retriesDone + 1} of ${MAX_RETRIES}`);
      return [Action.retry(FIRST_RETRY_MS, 2.0, MAX_RETRIES)];
    }
    return [
      Action.setVar('status', 'escalated'),
      Action.escalate(
        event.configStr('escalation_agent') ?? 'human-review',
        `max_retries_exceeded: no assessment after ${MAX_RETRIES} retries`,
      ),
    ];
  },
});
