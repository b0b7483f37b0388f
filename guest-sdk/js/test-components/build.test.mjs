// build.sh's bundling and cache, on real builds (a few seconds each).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { componentInfo } from '../tools/component-info.mjs';

const build = new URL('../build.sh', import.meta.url).pathname;

function run(...args) {
  const result = spawnSync('bash', [build, ...args], { encoding: 'utf8' });
  return { status: result.status, output: result.stdout + result.stderr };
}

function scratch(files) {
  const dir = mkdtempSync(join(tmpdir(), 'colloquy-js-build-test-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

test('a hook importing its own files is bundled; a second build comes from the cache', () => {
  // A fresh comment makes fresh sources, so the first build is a real one.
  const dir = scratch({
    'limits.ts': `// ${process.pid}-${Date.now()}\nexport const LIMIT = 7;\n`,
    'entry.ts': `import { Action, defineHook } from 'colloquy-hook';
import { LIMIT } from './limits';
export const { start, message, timeout } = defineHook({
  onStart: () => [Action.setVar('limit', LIMIT)],
});
`,
  });
  try {
    const first = run(join(dir, 'entry.ts'), join(dir, 'one.wasm'));
    assert.equal(first.status, 0, first.output);
    assert.match(first.output, /built \(/);
    const second = run(join(dir, 'entry.ts'), join(dir, 'two.wasm'));
    assert.equal(second.status, 0, second.output);
    assert.match(second.output, /up to date \(cache [0-9a-f]{12}\)/);
    assert.deepEqual(readFileSync(join(dir, 'one.wasm')), readFileSync(join(dir, 'two.wasm')));
    const { imports } = componentInfo(readFileSync(join(dir, 'one.wasm')));
    assert.deepEqual(imports.map((entry) => entry.name), ['colloquy:hooks/host@1.0.0']);
    // Changing an imported file is a new build.
    writeFileSync(join(dir, 'limits.ts'), `// ${process.pid}-${Date.now()}\nexport const LIMIT = 8;\n`);
    assert.match(run(join(dir, 'entry.ts'), join(dir, 'three.wasm')).output, /built \(/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
