// The quick start's hook (guest-sdk/js/examples/quickstart/my_hook.ts, quoted by
// docs/hooks-js.md) as built: what the guide says it does.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { loadComponent } from '../testing/component.mjs';
import { built } from './built.mjs';

const hook = await loadComponent(built('quickstart'));

function event(hookName, patch = {}) {
  return JSON.stringify({
    abi_version: 1, hook: hookName, now: 1767225600000,
    conversation: { id: 'c', status: 'active', retry_attempts: 0 },
    config: { max_amount: 1000 },
    ...patch,
  });
}

const request = (amount) => ({ message: { id: 'm', performative: 'request', sender: 'alice', receivers: ['bob'], content: { amount } } });

test('on_start remembers when', async () => {
  const instance = await hook.instantiate();
  assert.deepEqual(JSON.parse(instance.start(event('on_start'))), { actions: [{ set_vars: { opened_at: 1767225600000 } }] });
});

test('on_message refuses amounts over the limit and logs the others', async () => {
  const instance = await hook.instantiate();
  assert.deepEqual(JSON.parse(instance.message(event('on_message', request(5000)))),
    { actions: [{ reject: { reason: 'amount 5000 is over the limit of 1000' } }] });
  assert.deepEqual(JSON.parse(instance.message(event('on_message', request(250)))),
    { actions: [{ set_vars: { last_amount: 250 } }] });
  assert.deepEqual(instance.logs, [['info', 'request for 250 accepted']]);
  assert.equal(instance.timeout(event('on_timeout')), '{}');
});
