// Keeps the kit's TypeScript types true to the engine's JSON Schemas.
//
// - hook-types.d.ts (the event and answer types) is generated from
//   docs/hook-input.schema.json and docs/hook-output.schema.json: every field, its
//   optionality, its type and its description. `node check-types.mjs --write` rewrites it;
//   `node check-types.mjs` fails when the committed file differs from what the schemas give
//   (a field or action added, removed or changed on either side).
// - colloquy-hook.d.ts (the kit's API, written by hand) must declare one `Action` builder per
//   action of the output schema (camelCase of its key; `eval_vars` is for declarative rules
//   only) and no other, besides the conveniences in CONVENIENCES; read with the TypeScript
//   compiler's parser from the pinned tools (guest-sdk/js/setup.sh).
// - The .d.ts files must type-check under `strict`, as build.sh checks hooks.
//
// Exits 1 with the differences on any mismatch.

import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const docs = join(here, '..', '..', 'docs');
const GENERATED = join(here, 'hook-types.d.ts');
const KIT_TYPES = join(here, 'colloquy-hook.d.ts');
const HOOK_GLOBALS = join(here, 'hook-globals.d.ts');

/** Output actions without a builder, and why. */
const NO_BUILDER = { eval_vars: 'CEL, for declarative rules only: the engine ignores it from a hook' };
/** Builders beyond one per action: shorthands for another action. */
const CONVENIENCES = { setVar: 'set_vars' };

/** The type of the free-form parts (content, config, vars, parameters, context). */
const JSON_TYPE = `/** Any JSON value, as \`JSON.parse\` gives it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };`;

// --- generating hook-types.d.ts ------------------------------------------------------------

/** The TypeScript text of hook-types.d.ts for the two schemas. */
export function generate(input, output) {
  const sameOutcome = JSON.stringify(input.$defs.Outcome) === JSON.stringify(output.$defs.Outcome);
  if (!sameOutcome) throw new Error('the two schemas define Outcome differently');
  const parts = [
    '// Generated from docs/hook-input.schema.json and docs/hook-output.schema.json by',
    '// guest-sdk/js/check-types.mjs --write. Do not edit: change the schemas (the engine\'s',
    '// types) and regenerate; `node guest-sdk/js/check-types.mjs` fails while they differ.',
    '',
    JSON_TYPE,
    '',
    '// --- the event (hook-input.schema.json) ---',
    '',
    declaration(input.title, input),
  ];
  for (const [name, schema] of Object.entries(input.$defs)) parts.push(declaration(name, schema));
  parts.push('// --- the answer (hook-output.schema.json) ---', '', declaration(output.title, output));
  for (const [name, schema] of Object.entries(output.$defs)) {
    if (name !== 'Outcome') parts.push(declaration(name, schema));
  }
  return parts.join('\n');
}

function declaration(name, schema) {
  const doc = comment(schema.description, '');
  if (schema.type === 'object' && schema.properties) {
    return `${doc}export interface ${name} ${objectType(schema, '')}\n`;
  }
  return `${doc}export type ${name} =${unionLines(schema, '')};\n`;
}

function comment(description, indent) {
  if (!description) return '';
  const lines = description.split('\n');
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((line) => `${indent} * ${line}`.trimEnd()).join('\n')}\n${indent} */\n`;
}

function objectType(schema, indent) {
  const required = new Set(schema.required ?? []);
  const keys = Object.keys(schema.properties);
  if (keys.length === 1 && !schema.properties[keys[0]].description) {
    // One undocumented field (an action's key): on one line.
    const [key] = keys;
    return `{ ${key}${required.has(key) ? '' : '?'}: ${typeOf(schema.properties[key], indent)} }`;
  }
  const members = Object.entries(schema.properties).map(([key, property]) => {
    const optional = required.has(key) ? '' : '?';
    return `${comment(property.description, `${indent}  `)}${indent}  ${key}${optional}: ${typeOf(property, `${indent}  `)};`;
  });
  return `{\n${members.join('\n')}\n${indent}}`;
}

/** A union type on one line each member, for `oneOf` aliases (enums and actions). */
function unionLines(schema, indent) {
  if (schema.oneOf) {
    return schema.oneOf.map((member) => `\n${comment(member.description, `${indent}  `)}${indent}  | ${typeOf(member, `${indent}  `)}`).join('');
  }
  return ` ${typeOf(schema, indent)}`;
}

function typeOf(schema, indent) {
  if (schema.$ref) return schema.$ref.replace('#/$defs/', '');
  if ('const' in schema) return JSON.stringify(schema.const);
  if (schema.enum) return schema.enum.map((value) => JSON.stringify(value)).join(' | ');
  if (schema.anyOf) return schema.anyOf.map((member) => typeOf(member, indent)).join(' | ');
  if (schema.oneOf) return schema.oneOf.map((member) => typeOf(member, indent)).join(' | ');
  if (schema.type === undefined) return 'Json';
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return types.map((type) => {
    switch (type) {
      case 'null': return 'null';
      case 'string': return 'string';
      case 'integer':
      case 'number': return 'number';
      case 'boolean': return 'boolean';
      case 'array': {
        const item = typeOf(schema.items ?? {}, indent);
        return /[ |]/.test(item) ? `(${item})[]` : `${item}[]`;
      }
      case 'object':
        if (schema.properties) return objectType(schema, indent);
        if (schema.additionalProperties === true || schema.additionalProperties === undefined) {
          return '{ [key: string]: Json }';
        }
        return `{ [key: string]: ${typeOf(schema.additionalProperties, indent)} }`;
      default: throw new Error(`no TypeScript type for JSON Schema type ${type}`);
    }
  }).join(' | ');
}

// --- checking colloquy-hook.d.ts ----------------------------------------------------------

/** The output schema's action keys (`continue` included, as the one string action). */
export function actionKeys(output) {
  return output.$defs.Action.oneOf.map((variant) => variant.const ?? Object.keys(variant.properties)[0]);
}

export function camelCase(key) {
  return key.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
}

/** The builder names the kit must have, for the output schema. */
export function expectedBuilders(output) {
  const names = actionKeys(output).filter((key) => !(key in NO_BUILDER)).map(camelCase);
  return [...names, ...Object.keys(CONVENIENCES)].sort();
}

function typescript() {
  const tools = process.env.COLLOQUY_GUEST_TOOLS ?? join(homedir(), '.cache', 'colloquy-guest-tools');
  const require = createRequire(join(tools, 'js', 'package.json'));
  try {
    return require('typescript');
  } catch {
    throw new Error(`no TypeScript compiler under ${tools}/js: run bash guest-sdk/js/setup.sh`);
  }
}

/** The member names of `export declare const Action: {...}` in the kit's .d.ts. */
function declaredBuilders(ts, source) {
  const file = ts.createSourceFile(KIT_TYPES, source, ts.ScriptTarget.ES2022, true);
  for (const statement of file.statements) {
    if (!ts.isVariableStatement(statement)) continue;
    for (const declaration of statement.declarationList.declarations) {
      if (declaration.name.getText(file) === 'Action' && declaration.type && ts.isTypeLiteralNode(declaration.type)) {
        return declaration.type.members.map((member) => member.name.getText(file)).sort();
      }
    }
  }
  throw new Error('colloquy-hook.d.ts declares no `export declare const Action: { ... }`');
}

/** The diagnostics of a strict type check of both .d.ts files. */
function typeCheck(ts) {
  const program = ts.createProgram([KIT_TYPES, GENERATED, HOOK_GLOBALS], {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, lib: ['lib.es2022.d.ts'],
    module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler, types: [],
  });
  return ts.getPreEmitDiagnostics(program).map((diagnostic) => {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    if (!diagnostic.file) return message;
    const { line, character } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
    return `${diagnostic.file.fileName}:${line + 1}:${character + 1}: ${message}`;
  });
}

function lineDiff(want, have) {
  const wantLines = want.split('\n');
  const haveLines = have.split('\n');
  for (let at = 0; at < Math.max(wantLines.length, haveLines.length); at++) {
    if (wantLines[at] !== haveLines[at]) {
      return `first difference at line ${at + 1}:\n  schemas give: ${wantLines[at] ?? '(end)'}\n  file has:     ${haveLines[at] ?? '(end)'}`;
    }
  }
  return '';
}

export function readSchemas() {
  return {
    input: JSON.parse(readFileSync(join(docs, 'hook-input.schema.json'), 'utf8')),
    output: JSON.parse(readFileSync(join(docs, 'hook-output.schema.json'), 'utf8')),
  };
}

function main() {
  const { input, output } = readSchemas();
  const generated = generate(input, output);
  if (process.argv.includes('--write')) {
    writeFileSync(GENERATED, generated);
    console.log(`wrote ${GENERATED}`);
  }
  const problems = [];
  const committed = existsSync(GENERATED) ? readFileSync(GENERATED, 'utf8') : '';
  if (committed !== generated) {
    problems.push(`hook-types.d.ts is not what the schemas give (run node guest-sdk/js/check-types.mjs --write):\n${lineDiff(generated, committed)}`);
  }
  const ts = typescript();
  const declared = declaredBuilders(ts, readFileSync(KIT_TYPES, 'utf8'));
  const expected = expectedBuilders(output);
  const missing = expected.filter((name) => !declared.includes(name));
  const extra = declared.filter((name) => !expected.includes(name));
  if (missing.length) problems.push(`colloquy-hook.d.ts: Action lacks builders for ${missing.join(', ')}`);
  if (extra.length) problems.push(`colloquy-hook.d.ts: Action has builders for no action of the schema: ${extra.join(', ')}`);
  problems.push(...typeCheck(ts));
  if (problems.length) {
    console.error(problems.join('\n'));
    process.exit(1);
  }
  console.log(`types agree with the schemas (${expected.length} builders)`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
