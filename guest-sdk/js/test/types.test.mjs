// The kit's TypeScript types agree with the engine's JSON Schemas (check-types.mjs), and
// the generator notices a change on either side.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { actionKeys, expectedBuilders, generate, readSchemas } from '../check-types.mjs';
import { loadKit } from '../testing/index.mjs';

const checker = new URL('../check-types.mjs', import.meta.url).pathname;

test('check-types.mjs passes on the committed files', () => {
  const output = execFileSync(process.execPath, [checker], { encoding: 'utf8' });
  assert.match(output, /types agree with the schemas/);
});

test('hook-types.d.ts is what the schemas generate', () => {
  const { input, output } = readSchemas();
  assert.equal(readFileSync(new URL('../hook-types.d.ts', import.meta.url), 'utf8'), generate(input, output));
});

test('a field added to a schema changes the generated types', () => {
  const { input, output } = readSchemas();
  const before = generate(input, output);
  input.$defs.HookMessage.properties.priority = { type: 'integer', description: 'New.' };
  const after = generate(input, output);
  assert.notEqual(after, before);
  assert.match(after, /priority\?: number;/);
  output.$defs.RejectAction.required = [];
  assert.match(generate(input, output), /reason\?: string;/);
});

test('the kit has exactly the builders the output schema asks for', async () => {
  const { output } = readSchemas();
  const kit = await loadKit();
  assert.deepEqual(Object.keys(kit.Action).sort(), expectedBuilders(output));
  assert.ok(actionKeys(output).includes('eval_vars'));
  assert.ok(!('evalVars' in kit.Action));
});

test('the kit\'s lists of outcomes, log levels and route modes are the schema\'s', async () => {
  const { output } = readSchemas();
  const kit = await loadKit();
  const consts = (name) => output.$defs[name].oneOf?.map((option) => option.const) ?? output.$defs[name].enum;
  assert.deepEqual([...kit.OUTCOMES], consts('Outcome'));
  assert.deepEqual([...kit.LOG_LEVELS], consts('LogLevel'));
  assert.deepEqual([...kit.ROUTE_MODES], consts('RouteMode'));
});
