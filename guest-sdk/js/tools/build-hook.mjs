// Builds a JavaScript or TypeScript hook into a component of `colloquy:hooks@1.0.0`; what
// guest-sdk/js/build.sh runs (after setup.sh has installed the pinned tools).
//
//     node tools/build-hook.mjs [--no-stub-wasi] HOOK.(js|ts) OUT.wasm
//
// 1. esbuild bundles the hook, its own imports and the kit (`colloquy-hook`) into one ES
//    module; TypeScript loses its types on the way. The host interface stays an import.
// 2. The output cache is looked up by the SHA-256 of everything the component is made from:
//    the bundle, every file esbuild read, the kit's types, the WIT, the tools' lock file,
//    this script and the options. A hit is copied out and the build ends there.
// 3. A TypeScript hook is type-checked (strict) against the kit's types.
// 4. componentize-qjs embeds the bundle in QuickJS, runs its top level once (Wizer) and
//    writes the component: `--sync` (no component-model async ABI), `--stub-wasi` (QuickJS's
//    WASI imports become traps, so the component imports only the host).
// 5. The component's imports and exports are checked, and it goes to the cache and OUT.
//
// `--no-stub-wasi` is for tests only: the component then imports WASI, which the engine
// refuses (tests/fixtures/hooks/js/wasi.js checks that refusal).

import { createHash, randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir, tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { componentInfo } from './component-info.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const kitDir = resolve(here, '..');
const repoRoot = resolve(kitDir, '..', '..');
const WIT = join(repoRoot, 'guest-sdk', 'wit', 'hooks.wit');
const WORLD = 'hooks';
const HOST = 'colloquy:hooks/host@1.0.0';
const EXPORTS = ['start', 'message', 'timeout'];
/** The language level of the bundle: what QuickJS-ng runs without help. */
const TARGET = 'es2022';
/** Files whose types are checked with the hook's (the kit's API and the hook's globals). */
const KIT_TYPES = ['colloquy-hook.d.ts', 'hook-types.d.ts', 'hook-globals.d.ts'].map((file) => join(kitDir, file));
const TYPESCRIPT = /\.[cm]?tsx?$/;

const USAGE = 'usage: guest-sdk/js/build.sh [--no-stub-wasi] HOOK.(js|ts) OUT.wasm';

function toolsBase() {
  return process.env.COLLOQUY_GUEST_TOOLS ?? join(homedir(), '.cache', 'colloquy-guest-tools');
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

async function main(argv) {
  const stubWasi = !argv.includes('--no-stub-wasi');
  const args = argv.filter((arg) => arg !== '--no-stub-wasi');
  if (args.length !== 2 || args.some((arg) => arg.startsWith('-'))) fail(USAGE);
  const [hook, out] = args.map((arg) => resolve(arg));
  if (!/\.(m?js|[cm]?ts)$/.test(hook)) fail(`${args[0]}: a hook is a .js or .ts file\n${USAGE}`);
  try {
    statSync(hook);
  } catch {
    fail(`${args[0]}: no such file`);
  }

  const started = Date.now();
  const tools = join(toolsBase(), 'js');
  const require = createRequire(join(tools, 'package.json'));
  const esbuild = require('esbuild');
  const name = basename(hook, extname(hook));

  const bundle = await bundleHook(esbuild, hook, name);
  const key = cacheKey(bundle, name, stubWasi, tools);
  const cacheDir = join(toolsBase(), 'js-cache');
  const cached = join(cacheDir, `${key}.wasm`);
  if (exists(cached)) {
    copyOut(cached, out);
    console.log(`${args[1]}: up to date (cache ${key.slice(0, 12)})`);
    return;
  }

  if ([...bundle.inputs].some((input) => TYPESCRIPT.test(input))) {
    typeCheck(require('typescript'), hook);
  }

  const { componentize } = require('componentize-qjs');
  const work = mkdtempSync(join(tmpdir(), 'colloquy-js-hook-'));
  let component;
  try {
    const jsPath = join(work, `${name}.js`);
    writeFileSync(jsPath, bundle.text);
    ({ component } = await componentize({
      witPath: WIT, world: WORLD, jsSource: bundle.text, jsPath, moduleRoot: work,
      stubWasi, sync: true,
    }));
  } catch (error) {
    fail(`${args[0]}: componentize-qjs failed: ${error.message ?? error}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }

  checkComponent(component, stubWasi, args[0]);
  mkdirSync(cacheDir, { recursive: true });
  const temporary = join(cacheDir, `.${key}.${randomBytes(4).toString('hex')}.tmp`);
  writeFileSync(temporary, component);
  renameSync(temporary, cached);
  copyOut(cached, out);
  const size = (component.length / 1024 / 1024).toFixed(2);
  console.log(`${args[1]}: built (${size} MiB, ${((Date.now() - started) / 1000).toFixed(1)} s)`);
}

/** The hook bundled with its imports and the kit: `{text, inputs}` (inputs: absolute paths). */
async function bundleHook(esbuild, hook, name) {
  const kit = {
    name: 'colloquy-hook',
    setup(build) {
      build.onResolve({ filter: /^colloquy-hook$/ }, () => ({ path: join(kitDir, 'colloquy-hook.js') }));
    },
  };
  const workingDir = dirname(hook);
  let result;
  try {
    result = await esbuild.build({
      entryPoints: [hook], absWorkingDir: workingDir, outfile: `${name}.js`, write: false,
      bundle: true, format: 'esm', platform: 'neutral', target: TARGET, mainFields: ['module', 'main'],
      external: [HOST], plugins: [kit], metafile: true, charset: 'utf8', legalComments: 'none',
      logLevel: 'silent',
    });
  } catch (error) {
    const messages = await esbuild.formatMessages(error.errors ?? [], { kind: 'error', color: false });
    fail(messages.join('') || String(error));
  }
  const inputs = new Set(Object.keys(result.metafile.inputs).map((input) => resolve(workingDir, input)));
  return { text: result.outputFiles[0].text, inputs };
}

function cacheKey(bundle, name, stubWasi, tools) {
  const hash = createHash('sha256');
  const add = (label, data) => {
    hash.update(`${label}\0${Buffer.byteLength(data)}\0`);
    hash.update(data);
  };
  add('options', JSON.stringify({ name, stubWasi, target: TARGET, world: WORLD }));
  add('bundle', bundle.text);
  // The bundle holds every line that runs; the files esbuild read and the kit's types are
  // added so that a change that only a type check would catch is not served from the cache.
  for (const input of [...bundle.inputs].sort()) add(`input ${basename(input)}`, readFileSync(input));
  for (const file of KIT_TYPES) add(basename(file), readFileSync(file));
  add('wit', readFileSync(WIT));
  add('tools', readFileSync(join(tools, 'package-lock.json')));
  add('builder', readFileSync(fileURLToPath(import.meta.url)));
  add('inspector', readFileSync(join(here, 'component-info.mjs')));
  return hash.digest('hex');
}

/** Type-checks a TypeScript hook (strict, ES2022, no DOM or Node globals) against the kit. */
function typeCheck(ts, hook) {
  const options = {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, lib: ['lib.es2022.d.ts'],
    module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler,
    allowImportingTsExtensions: true, types: [], skipLibCheck: true,
    paths: { 'colloquy-hook': [join(kitDir, 'colloquy-hook.d.ts')] },
  };
  const program = ts.createProgram([hook, join(kitDir, 'hook-globals.d.ts')], options);
  const diagnostics = ts.getPreEmitDiagnostics(program);
  if (diagnostics.length === 0) return;
  const host = {
    getCanonicalFileName: (file) => file,
    getCurrentDirectory: () => process.cwd(),
    getNewLine: () => '\n',
  };
  fail(ts.formatDiagnostics(diagnostics, host).trimEnd());
}

/** Fails unless the component imports only the host (or WASI too, without stubs) and exports the world. */
function checkComponent(component, stubWasi, label) {
  const { imports, exports } = componentInfo(component);
  const foreign = imports.map((entry) => entry.name).filter((name) => name !== HOST);
  if (stubWasi && foreign.length > 0) {
    fail(`${label}: the component imports ${foreign.join(', ')}; a hook may import only ${HOST}`);
  }
  if (!stubWasi && !foreign.some((name) => name.startsWith('wasi:'))) {
    fail(`${label}: built with --no-stub-wasi, yet the component imports no WASI interface`);
  }
  const exported = new Set(exports.filter((entry) => entry.kind === 'func').map((entry) => entry.name));
  const missing = EXPORTS.filter((name) => !exported.has(name));
  if (missing.length > 0) fail(`${label}: the component does not export ${missing.join(', ')}`);
}

function exists(path) {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}

function copyOut(from, to) {
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(from, to);
}

await main(process.argv.slice(2));
