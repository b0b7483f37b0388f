// What build-examples.sh built: every component imports only the host (the WASI fixture
// WASI too, on purpose) and exports the world's three functions. Run after
// guest-sdk/js/build-examples.sh: node --test guest-sdk/js/test-components/

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { componentInfo } from '../tools/component-info.mjs';
import { built } from './built.mjs';

// componentize-qjs also exports `init` (its runtime's, used while building); the engine
// must look up the three world exports by name and leave it alone.
const EXPORTS = ['init', 'message', 'start', 'timeout'];

for (const name of ['credit', 'quickstart', 'hostile']) {
  test(`${name}: imports only colloquy:hooks/host@1.0.0 and exports the world`, () => {
    const { imports, exports } = componentInfo(readFileSync(built(name)));
    assert.deepEqual(imports, [{ name: 'colloquy:hooks/host@1.0.0', kind: 'instance' }]);
    assert.deepEqual(exports.map((entry) => entry.name).sort(), EXPORTS);
    assert.ok(exports.every((entry) => entry.kind === 'func'));
  });
}

test('wasi: imports WASI, as the engine refusal test needs', () => {
  const { imports, exports } = componentInfo(readFileSync(built('wasi')));
  const names = imports.map((entry) => entry.name);
  assert.ok(names.every((name) => name.startsWith('wasi:') || name === 'colloquy:hooks/host@1.0.0'), names.join(', '));
  assert.ok(names.some((name) => name.startsWith('wasi:clocks/')), names.join(', '));
  assert.ok(names.some((name) => name.startsWith('wasi:cli/')), names.join(', '));
  assert.deepEqual(exports.map((entry) => entry.name).sort(), EXPORTS);
});
