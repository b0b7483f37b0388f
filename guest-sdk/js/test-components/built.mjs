// Paths of the components build-examples.sh builds, for the component tests.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';

const root = new URL('../../../', import.meta.url);
export const BUILT = {
  credit: 'templates/examples/credit-assessment/credit_assessment_js.wasm',
  quickstart: 'target/hooks/js/quickstart.wasm',
  hostile: 'target/hooks/js/hostile.wasm',
  wasi: 'target/hooks/js/wasi.wasm',
};

/** The path of a built component; fails (not skips) when it was not built. */
export function built(name) {
  const path = new URL(BUILT[name], root).pathname;
  assert.ok(existsSync(path), `${BUILT[name]} is missing: run guest-sdk/js/build-examples.sh first`);
  return path;
}
