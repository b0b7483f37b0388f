// build.sh refuses what it cannot build, before building anything (no component is made;
// the pinned tools are needed). Its cache: test-components/build.test.mjs.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';


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

test('usage: two files, a .js or .ts hook', () => {
  assert.match(run().output, /usage: guest-sdk\/js\/build.sh/);
  assert.match(run('hook.py', 'out.wasm').output, /a hook is a \.js or \.ts file/);
  assert.match(run('/nonexistent/hook.ts', 'out.wasm').output, /no such file/);
});

test('a TypeScript hook that does not type-check is not built', () => {
  const dir = scratch({
    'bad.ts': `import { Action, defineHook } from 'colloquy-hook';
export const { start, message, timeout } = defineHook({
  onMessage(event) { return [Action.reject(event.contentU64('amount'))]; },
});
`,
  });
  try {
    const { status, output } = run(join(dir, 'bad.ts'), join(dir, 'bad.wasm'));
    assert.notEqual(status, 0);
    assert.match(output, /bad\.ts\(3,\d+\): error TS2345: Argument of type 'number \| undefined'/);
    assert.ok(!existsSync(join(dir, 'bad.wasm')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a syntax error names the file and line', () => {
  const dir = scratch({ 'broken.js': 'export function start( {\n' });
  try {
    const { status, output } = run(join(dir, 'broken.js'), join(dir, 'broken.wasm'));
    assert.notEqual(status, 0);
    assert.match(output, /\[ERROR\] Expected identifier but found end of file\s+broken\.js:2:0/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
