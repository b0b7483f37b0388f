// The hostile fixture (tests/fixtures/hooks/js/hostile.js) as built, in Node: each
// behaviour does what the engine's tests expect of it. `memory_bomb` is left to the engine:
// here nothing caps the component's memory, which would grow to 4 GiB.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';

import { loadComponent, outputBytes } from '../testing/component.mjs';
import { built } from './built.mjs';

const MIB = 1024 * 1024;
const hook = await loadComponent(built('hostile'));

function event(hookName, behaviour) {
  return JSON.stringify({
    abi_version: 1, hook: hookName, now: 1, conversation: { id: 'c', status: 'active', retry_attempts: 0 },
    config: { behaviour },
  });
}

const EVENTS = [['start', 'on_start'], ['message', 'on_message'], ['timeout', 'on_timeout']];

test('ok answers {"actions": []} at every event', async () => {
  const instance = await hook.instantiate();
  for (const [name, hookName] of EVENTS) assert.equal(instance[name](event(hookName, 'ok')), '{"actions": []}');
});

test('not_json answers text that is not JSON', async () => {
  const instance = await hook.instantiate();
  for (const [name, hookName] of EVENTS) {
    const answer = instance[name](event(hookName, 'not_json'));
    assert.throws(() => JSON.parse(answer), SyntaxError);
  }
});

test('too_big answers 2 MiB of valid JSON, over the 1 MiB output limit', async () => {
  const instance = await hook.instantiate();
  const answer = instance.message(event('on_message', 'too_big'));
  assert.ok(outputBytes(answer) > 2 * MIB, `${outputBytes(answer)} bytes`);
  assert.deepEqual(JSON.parse(answer).actions, []);
});

test('throw traps, and the instance is done for', async () => {
  for (const [name, hookName] of EVENTS) {
    const instance = await hook.instantiate();
    assert.throws(() => instance[name](event(hookName, 'throw')), WebAssembly.RuntimeError);
    assert.throws(() => instance[name](event(hookName, 'ok')), WebAssembly.RuntimeError);
  }
});

test('an unknown behaviour traps too', async () => {
  const instance = await hook.instantiate();
  assert.throws(() => instance.message(event('on_message', 'sideways')), WebAssembly.RuntimeError);
});

test('loop never returns (stopped from outside after 2 s)', async () => {
  const worker = new Worker(`
    const { parentPort, workerData } = require('node:worker_threads');
    (async () => {
      const { loadComponent } = await import(workerData.harness);
      const instance = await (await loadComponent(workerData.path)).instantiate();
      parentPort.postMessage('calling');
      instance.message(workerData.event);
      parentPort.postMessage('returned');
    })();
  `, {
    eval: true,
    workerData: { harness: new URL('../testing/component.mjs', import.meta.url).href, path: built('hostile'), event: event('on_message', 'loop') },
  });
  const messages = [];
  worker.on('message', (message) => messages.push(message));
  const error = new Promise((_, reject) => worker.on('error', reject));
  const calling = new Promise((resolve) => worker.on('message', (message) => message === 'calling' && resolve()));
  await Promise.race([calling, error]);
  await new Promise((resolve) => setTimeout(resolve, 2000));
  await worker.terminate();
  assert.deepEqual(messages, ['calling']);
});
