// The TypeScript credit policy's component against the Rust policy's module
// (templates/examples/credit-assessment/credit_assessment.wasm, built by
// templates/examples/build.sh): the same answers and log lines for every event of
// fixtures/credit-events.mjs. Needs both builds.

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

import { loadComponent } from '../testing/component.mjs';
import { creditCases } from '../fixtures/credit-events.mjs';
import { built } from './built.mjs';

const RUST = new URL('../../../templates/examples/credit-assessment/credit_assessment.wasm', import.meta.url).pathname;
const LEVELS = ['debug', 'info', 'warn', 'error'];

/** A core module of hook ABI v1 (docs/hook-abi.md), called as the engine calls it. */
async function loadCoreHook(path) {
  const logs = [];
  let memory;
  const text = (ptr, len) => new TextDecoder().decode(new Uint8Array(memory.buffer, ptr, len));
  const { instance } = await WebAssembly.instantiate(readFileSync(path), {
    'colloquy:hooks/host@1.0.0': {
      log: (level, ptr, len) => logs.push([LEVELS[level], text(ptr, len)]),
      'now-ms': () => 0n,
    },
  });
  const exports = instance.exports;
  memory = exports.memory;
  assert.equal(exports.hooks_abi_version(), 1);
  const call = (name, input) => {
    const bytes = new TextEncoder().encode(input);
    const ptr = exports.cabi_realloc(0, 0, 1, bytes.length);
    new Uint8Array(memory.buffer, ptr, bytes.length).set(bytes);
    const ret = exports[name](ptr, bytes.length);
    const [outPtr, outLen] = new Uint32Array(memory.buffer.slice(ret, ret + 8));
    const answer = text(outPtr, outLen);
    exports[`cabi_post_${name}`]?.(ret);
    return answer;
  };
  return { logs, call };
}

test('the TypeScript policy answers every event as the Rust policy does', async () => {
  assert.ok(existsSync(RUST), 'templates/examples/credit-assessment/credit_assessment.wasm is missing: run templates/examples/build.sh');
  const rust = await loadCoreHook(RUST);
  const js = await (await loadComponent(built('credit'))).instantiate();
  const cases = creditCases();
  for (const [name, event] of cases) {
    const input = JSON.stringify(event);
    const rustAnswer = rust.call(name, input);
    const jsAnswer = js[name](input);
    assert.deepEqual(JSON.parse(jsAnswer), JSON.parse(rustAnswer), `${name} ${input}`);
    assert.deepEqual(js.logs.splice(0), rust.logs.splice(0), `log lines of ${name} ${input}`);
  }
  assert.ok(cases.length >= 30);
});
