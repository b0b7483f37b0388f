// Testing hooks in Node, without building a component:
//
//     import { loadKit, loadHook, host } from '<colloquy>/guest-sdk/js/testing/index.mjs';
//     const hook = await loadHook('my_hook.ts');       // its exports: start, message, timeout
//     host.setNowMs(1000);
//     const answer = JSON.parse(hook.message(JSON.stringify(event)));
//     host.takeLogs();                                   // [[level, line], ...]
//
// Importing this module makes `colloquy:hooks/host@1.0.0` resolve to a stand-in host
// (./host.mjs) and `colloquy-hook` to the kit; `loadHook` bundles a hook (JavaScript or
// TypeScript) with esbuild from the pinned tools (guest-sdk/js/setup.sh) as build.sh does,
// without the type check. Node is not QuickJS: run the built component too
// (./component.mjs) before trusting a hook with the engine.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire, register } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import * as host from './host.mjs';
import { toolsDir } from './component.mjs';

register('./resolve-hooks.mjs', import.meta.url);

const kit = fileURLToPath(new URL('../colloquy-hook.js', import.meta.url));

export { host };

/** The kit (colloquy-hook.js), on the stand-in host. */
export async function loadKit() {
  return import(pathToFileURL(kit).href);
}

/** The hook at `path` (.js or .ts) bundled as build.sh bundles it, and imported. */
export async function loadHook(path) {
  const require = createRequire(join(toolsDir(), 'package.json'));
  let esbuild;
  try {
    esbuild = require('esbuild');
  } catch {
    throw new Error(`no esbuild under ${toolsDir()}: run bash guest-sdk/js/setup.sh`);
  }
  const entry = resolve(path);
  const result = await esbuild.build({
    entryPoints: [entry], absWorkingDir: dirname(entry), write: false, bundle: true,
    format: 'esm', platform: 'neutral', target: 'es2022', mainFields: ['module', 'main'],
    // The kit and the host stay imports, so the hook shares this kit and its stand-in host.
    external: ['colloquy:hooks/host@1.0.0', 'colloquy-hook'], logLevel: 'silent',
  });
  const dir = mkdtempSync(join(tmpdir(), 'colloquy-hook-test-'));
  try {
    const file = join(dir, 'hook.mjs');
    writeFileSync(file, result.outputFiles[0].text);
    return await import(pathToFileURL(file).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
