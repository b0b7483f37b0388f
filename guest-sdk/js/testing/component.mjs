// Runs a built hook component in Node, with a stand-in host: for testing what build.sh made
// before (or besides) running it in the engine. The component is transpiled to JavaScript
// and core modules by jco-transpile (from the pinned tools, guest-sdk/js/setup.sh).
//
//     const hook = await loadComponent('target/hooks/js/quickstart.wasm');
//     const instance = await hook.instantiate({ now: 1000 });
//     instance.message(eventJson);   // the answer's JSON; a trap throws a WebAssembly.RuntimeError
//     instance.logs;                 // [[level, line], ...] the hook wrote
//
// Each `instantiate` is a fresh instance, as the engine makes one after a failure. This is
// not the engine: no time or memory limits, no 1 MiB output check (see `outputBytes`).

import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import v8 from 'node:v8';

/** The one interface a hook may import. */
export const HOST = 'colloquy:hooks/host@1.0.0';

/** The pinned tools' directory (as setup.sh installs them). */
export function toolsDir() {
  return join(process.env.COLLOQUY_GUEST_TOOLS ?? join(homedir(), '.cache', 'colloquy-guest-tools'), 'js');
}

/**
 * Loads the component at `path` and returns `{instantiate(options)}`; `options.now` is what
 * the host's `now-ms` answers (default 0).
 */
export async function loadComponent(path) {
  // QuickJS's core module uses extended constant expressions, on by default from Node 22.
  v8.setFlagsFromString('--experimental-wasm-extended-const');
  const require = createRequire(join(toolsDir(), 'package.json'));
  let transpileBytes;
  try {
    ({ transpileBytes } = await import(pathToFileURL(require.resolve('@bytecodealliance/jco-transpile')).href));
  } catch {
    throw new Error(`no jco-transpile under ${toolsDir()}: run bash guest-sdk/js/setup.sh`);
  }
  const { files } = await transpileBytes(readFileSync(path), {
    name: 'hook', instantiation: 'async', noTypescript: true, emitTypescriptDeclarations: false,
  });
  const dir = mkdtempSync(join(tmpdir(), 'colloquy-hook-component-'));
  let bindings;
  const modules = new Map();
  try {
    for (const [file, bytes] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, file)), { recursive: true });
      writeFileSync(join(dir, file), bytes);
      if (file.endsWith('.wasm')) modules.set(file, await WebAssembly.compile(bytes));
    }
    bindings = await import(pathToFileURL(join(dir, 'hook.js')).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    async instantiate({ now = 0 } = {}) {
      const logs = [];
      const host = {
        log: (level, line) => {
          logs.push([level, line]);
        },
        nowMs: () => BigInt(now),
      };
      // The bindings look the interface up without its version.
      const instance = await bindings.instantiate((file) => modules.get(file), { [HOST]: host, [HOST.split('@')[0]]: host });
      return {
        logs,
        start: (event) => instance.start(event),
        message: (event) => instance.message(event),
        timeout: (event) => instance.timeout(event),
      };
    },
  };
}

/** The size of an answer as the engine counts it (UTF-8 bytes; the limit is 1 MiB). */
export function outputBytes(answer) {
  return Buffer.byteLength(answer, 'utf8');
}
