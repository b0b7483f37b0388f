// The TypeScript credit policy (templates/examples/credit-assessment/hook-ts/credit_policy.ts)
// in Node: the cases of the Rust policy's unit tests (../hook/src/lib.rs), and the rest of
// its behaviour. test-wasm/credit-policy.test.mjs compares the built component with the
// Rust module event by event.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { host, loadHook } from '../testing/index.mjs';
import { readSchema, validate } from '../testing/schema.mjs';
import { creditEvent, request } from '../fixtures/credit-events.mjs';

const policy = await loadHook(new URL('../../../templates/examples/credit-assessment/hook-ts/credit_policy.ts', import.meta.url).pathname);
const outputSchema = readSchema('hook-output');

function run(exportName, event) {
  const answer = JSON.parse(policy[exportName](JSON.stringify(event)));
  assert.deepEqual(validate(outputSchema, answer), []);
  return answer.actions ?? [];
}

test('on_start: pending, stamped with the start time', () => {
  assert.deepEqual(run('start', creditEvent('on_start')), [{ set_vars: { started_at: 1000, status: 'pending' } }]);
});

test('refuses over the limit and routes crypto (the Rust unit test)', () => {
  const big = run('message', creditEvent('on_message', { message: request(500, 'car') }));
  assert.deepEqual(big, [{ reject: { reason: 'amount 500 exceeds the limit of 100' } }]);
  const crypto = run('message', creditEvent('on_message', { message: request(50, 'Crypto mining') }));
  assert.deepEqual(crypto, [
    { route: { to: ['special-risk-assessment'], mode: 'add' } },
    { set_vars: { risk_route: 'special' } },
  ]);
  const shouting = run('message', creditEvent('on_message', { message: request(50, 'CRYPTO\n') }));
  assert.deepEqual(shouting[0], { route: { to: ['special-risk-assessment'], mode: 'add' } });
  const car = run('message', creditEvent('on_message', { message: request(50, 'a new car') }));
  assert.deepEqual(car, [{ set_vars: { risk_route: 'standard' } }]);
});

test('the limit and agents come from the config, with the Rust defaults', () => {
  const config = { max_amount: 1000, special_risk_agent: 'crypto-desk' };
  assert.deepEqual(run('message', creditEvent('on_message', { message: request(1000, 'crypto'), config })), [
    { route: { to: ['crypto-desk'], mode: 'add' } },
    { set_vars: { risk_route: 'special' } },
  ]);
  // No config: the limit is 50 000.
  assert.deepEqual(run('message', creditEvent('on_message', { message: request(50001, 'car'), config: null })),
    [{ reject: { reason: 'amount 50001 exceeds the limit of 50000' } }]);
  assert.deepEqual(run('message', creditEvent('on_message', { message: request(50000, 'car'), config: null })),
    [{ set_vars: { risk_route: 'standard' } }]);
  // Fractions are truncated, as the Rust SDK reads whole numbers.
  assert.deepEqual(run('message', creditEvent('on_message', { message: request(100.9, 'car') })),
    [{ set_vars: { risk_route: 'standard' } }]);
  assert.deepEqual(run('message', creditEvent('on_message', { message: request(101.5, 'car') })),
    [{ reject: { reason: 'amount 101 exceeds the limit of 100' } }]);
});

test('crypto is matched ignoring ASCII case only', () => {
  const route = (purpose) => run('message', creditEvent('on_message', { message: request(1, purpose) }))[0];
  assert.ok('route' in route('buy cRyPtO'));
  assert.ok('set_vars' in route('CRYPT0'));
  // Not ASCII: the Kelvin sign is no K, and a dotted capital I no i (Rust's eq_ignore_ascii_case).
  assert.ok('set_vars' in route('\u0130crypt'));
  assert.ok('set_vars' in route('cryp\u0074\u0301o'));
  // No purpose, or not text: standard.
  const noPurpose = { id: 'm', performative: 'request', sender: 'desk', receivers: ['risk'], content: { amount: 1 } };
  assert.deepEqual(run('message', creditEvent('on_message', { message: noPurpose })), [{ set_vars: { risk_route: 'standard' } }]);
});

test('answers and refusals set the status; other messages change nothing', () => {
  const said = (performative) => run('message', creditEvent('on_message', {
    message: { id: 'm', performative, sender: 'risk', receivers: ['desk'], content: {} },
  }));
  assert.deepEqual(said('inform'), [{ set_vars: { status: 'assessed' } }]);
  assert.deepEqual(said('refuse'), [{ set_vars: { status: 'declined' } }]);
  assert.deepEqual(said('failure'), [{ set_vars: { status: 'declined' } }]);
  assert.deepEqual(said('agree'), []);
  assert.deepEqual(run('message', creditEvent('on_message')), [], 'no message');
});

test('retries three times then escalates (the Rust unit test)', () => {
  host.takeLogs();
  const retry = (attempt) => creditEvent('on_timeout', { timeout: { kind: 'retry', attempt } });
  assert.deepEqual(run('timeout', retry(2)), [{ retry: { after_ms: 1000, backoff: 2, max_attempts: 3 } }]);
  assert.deepEqual(host.takeLogs(), [['info', 'no assessment yet; retry 3 of 3']]);
  const last = run('timeout', retry(3));
  assert.deepEqual(last, [
    { set_vars: { status: 'escalated' } },
    { escalate: { to: 'human-review', reason: 'max_retries_exceeded: no assessment after 3 retries' } },
  ]);
  assert.deepEqual(host.takeLogs(), []);
});

test('a thread deadline counts the retries so far; the conversation deadline and an answered thread do nothing', () => {
  host.takeLogs();
  const thread = (retries, state = 'assessing') => creditEvent('on_timeout', {
    timeout: { kind: 'thread', participant: 'risk', attempt: retries },
    conversation: { retry_attempts: retries, threads: [{ participant: 'risk', state }] },
  });
  assert.deepEqual(run('timeout', thread(0)), [{ retry: { after_ms: 1000, backoff: 2, max_attempts: 3 } }]);
  assert.deepEqual(host.takeLogs(), [['info', 'no assessment yet; retry 1 of 3']]);
  assert.equal(run('timeout', thread(3))[1].escalate.to, 'human-review');
  assert.deepEqual(run('timeout', thread(0, 'assessed')), []);
  assert.deepEqual(run('timeout', creditEvent('on_timeout', { timeout: { kind: 'conversation', attempt: 0 } })), []);
  assert.deepEqual(run('timeout', creditEvent('on_timeout')), [], 'no timeout');
  const escalation = { max_amount: 100, escalation_agent: 'night-desk' };
  assert.equal(run('timeout', creditEvent('on_timeout', { timeout: { kind: 'retry', attempt: 3 }, config: escalation }))[1].escalate.to, 'night-desk');
});
