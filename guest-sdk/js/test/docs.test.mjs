// docs/hooks-js.md quotes real files: each fenced block after a `<!-- file: PATH -->` line
// must equal the file at PATH (from the repository root), so the quick start is the code the
// tests build and run.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

const root = new URL('../../../', import.meta.url);
const page = readFileSync(new URL('docs/hooks-js.md', root), 'utf8');

/** `[path, block text]` for each quoted file, in page order. */
function quotedFiles(text) {
  const quotes = [];
  const pattern = /^<!-- file: (\S+) -->\n```[a-z]*\n([\s\S]*?)^```$/gm;
  for (const match of text.matchAll(pattern)) quotes.push([match[1], match[2]]);
  return quotes;
}

test('the quick start quotes its hook and template as they are', () => {
  const quotes = quotedFiles(page);
  assert.deepEqual(quotes.map(([path]) => path), [
    'guest-sdk/js/examples/quickstart/my_hook.ts',
    'guest-sdk/js/examples/quickstart/my-hook.yaml',
  ]);
  for (const [path, block] of quotes) {
    assert.equal(block, readFileSync(new URL(path, root), 'utf8'), `docs/hooks-js.md's copy of ${path}`);
  }
});

test('every file marker is followed by a fenced block', () => {
  const markers = page.match(/^<!-- file: \S+ -->$/gm) ?? [];
  assert.equal(markers.length, quotedFiles(page).length);
});
