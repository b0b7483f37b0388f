// The SDK's types follow the server's own description of its API, as the Python SDK's
// tests/test_models_follow_the_api.py checks its models.
//
// Each component schema of `GET /v1/openapi.json` has an interface of the same name in
// index.d.ts with the same fields, the same required fields and the same field types, and
// is tagged `@request` exactly where the document refuses unknown fields (what the client
// sends); the outcome and commitment-state names, in index.d.ts and in src/models.js, are
// those of docs/hook-input.schema.json and docs/template.schema.json; and index.d.ts declares
// exactly what src/index.js exports. A field added to the API, a component added, or a name
// changed fails this test until the types follow.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import * as sdk from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, REPO, Server } from "./harness.mjs";

const OPENAPI = JSON.parse(readFileSync(join(REPO, "engine/server/src/openapi.json"), "utf8"));
const DECLARATIONS = readFileSync(join(REPO, "sdk/js/index.d.ts"), "utf8");

/** The interfaces and type aliases of a declaration file written one field per line. */
export function parseDeclarations(text) {
  const interfaces = new Map();
  const interfacePattern = /(\/\*\*(?:(?!\*\/)[\s\S])*\*\/\n)?export interface (\w+)(?: extends [^{]+)? \{\n([\s\S]*?)^\}/gm;
  for (const [, doc = "", name, body] of text.matchAll(interfacePattern)) {
    const fields = new Map();
    for (const line of body.split("\n")) {
      const member = /^ {2}(\w+)(\?)?: (.+);$/.exec(line);
      if (member) fields.set(member[1], { optional: member[2] === "?", type: member[3] });
    }
    interfaces.set(name, { request: doc.includes("@request"), fields });
  }
  const aliases = new Map();
  for (const [, name, body] of text.matchAll(/^export type (\w+) =([^;]*);/gm)) {
    aliases.set(name, body.trim());
  }
  return { interfaces, aliases };
}

/** The string literals of a union of them (`"a" | "b"`), or null. */
function literals(union) {
  const parts = union.split("|").map((part) => part.trim()).filter(Boolean);
  const values = parts.map((part) => /^"([^"]*)"$/.exec(part)?.[1]);
  return values.every((value) => value !== undefined) ? values.sort() : null;
}

/** A TypeScript type's shape, in the terms the OpenAPI shapes below share. */
function tsKind(type, declarations) {
  type = type.trim();
  if (type.endsWith("[]")) return ["array", tsKind(type.slice(0, -2), declarations)];
  if (type === "string") return ["string"];
  if (type === "number") return ["integer"];
  if (type === "boolean") return ["boolean"];
  if (type === "unknown" || type === "Json") return ["any"];
  if (/^Record<string, \w+>$/.test(type)) return ["object"];
  const union = literals(type);
  if (union) return ["enum", union];
  if (declarations.aliases.has(type)) {
    const values = literals(declarations.aliases.get(type));
    if (values) return ["enum", values];
    return tsKind(declarations.aliases.get(type), declarations);
  }
  if (declarations.interfaces.has(type)) return ["object", type];
  return ["unknown type", type];
}

/** An OpenAPI schema's shape: a JSON type, an enum's values, an array of a kind, a named
 * object, or anything. */
function apiKind(schema) {
  if (schema.$ref) {
    const name = schema.$ref.split("/").pop();
    const target = OPENAPI.components.schemas[name];
    return target.enum ? ["enum", [...target.enum].sort()] : ["object", name];
  }
  if (schema.enum) return ["enum", [...schema.enum].sort()];
  if (schema.type === "array") return ["array", apiKind(schema.items ?? {})];
  if (!schema.type) return ["any"];
  return [schema.type];
}

function same(api, ts) {
  if (JSON.stringify(api) === JSON.stringify(ts)) return true;
  // The document leaves some objects unnamed (`{"type": "object"}`) that the SDK names.
  if (api[0] === "object" && ts[0] === "object" && api.length === 1) return true;
  if (api[0] === "array" && ts[0] === "array") return same(api[1], ts[1]);
  return false;
}

/** What differs between an OpenAPI object schema and an interface, as sentences. */
export function compare(where, api, iface, declarations, problems = []) {
  const apiFields = Object.keys(api.properties ?? {}).sort();
  const tsFields = [...iface.fields.keys()].sort();
  if (JSON.stringify(apiFields) !== JSON.stringify(tsFields)) {
    problems.push(`${where}: fields ${apiFields} in the API, ${tsFields} in index.d.ts`);
  }
  const apiRequired = [...(api.required ?? [])].sort();
  const tsRequired = tsFields.filter((name) => !iface.fields.get(name).optional);
  if (JSON.stringify(apiRequired) !== JSON.stringify(tsRequired)) {
    problems.push(`${where}: required ${apiRequired} in the API, ${tsRequired} in index.d.ts`);
  }
  if ((api.additionalProperties === false) !== iface.request) {
    problems.push(`${where}: unknown fields refused in one and not the other (tag the interface @request)`);
  }
  for (const name of apiFields.filter((field) => iface.fields.has(field))) {
    const apiField = api.properties[name];
    const a = apiKind(apiField);
    const t = tsKind(iface.fields.get(name).type, declarations);
    if (!same(a, t)) {
      problems.push(`${where}.${name}: ${JSON.stringify(a)} in the API, ${JSON.stringify(t)} in index.d.ts`);
    } else if (apiField.properties && t[0] === "object" && t.length === 2) {
      compare(`${where}.${name}`, apiField, declarations.interfaces.get(t[1]), declarations, problems);
    }
  }
  return problems;
}

function schemaNames(file, definition) {
  const document = JSON.parse(readFileSync(join(REPO, "docs", file), "utf8"));
  return document.$defs[definition].oneOf.map((option) => option.const).sort();
}

const declarations = parseDeclarations(DECLARATIONS);
const components = OPENAPI.components.schemas;

describe("the types follow the API", () => {
  test("every component has an interface", BOUNDED, () => {
    const without = Object.keys(components).filter((name) => !declarations.interfaces.has(name));
    assert.deepEqual(without, []);
  });

  for (const name of Object.keys(components).sort()) {
    test(`${name} has its component's fields and types`, BOUNDED, () => {
      assert.deepEqual(compare(name, components[name], declarations.interfaces.get(name), declarations), []);
    });
  }

  test("outcomes and commitment states are the documents'", BOUNDED, () => {
    const outcomes = schemaNames("hook-input.schema.json", "Outcome");
    const states = schemaNames("template.schema.json", "CommitmentState");
    assert.deepEqual(Object.values(sdk.Outcome).sort(), outcomes);
    assert.deepEqual(literals(declarations.aliases.get("OutcomeName")), outcomes);
    assert.deepEqual(Object.values(sdk.CommitmentState).sort(), states);
    assert.deepEqual(literals(declarations.aliases.get("CommitmentStateName")), states);
  });

  test("index.d.ts declares exactly what src/index.js exports", BOUNDED, () => {
    const declared = [...DECLARATIONS.matchAll(/^export declare (?:class|const|function) (\w+)/gm)].map((m) => m[1]);
    assert.deepEqual(declared.sort(), Object.keys(sdk).sort());
  });

  test("the drift check sees a missing field, a wrong type and a missing tag", BOUNDED, () => {
    const shorter = parseDeclarations(`/** Sent. */\nexport interface Shorter {\n  code: number;\n}\n`);
    const api = {
      additionalProperties: false,
      required: ["code", "message"],
      properties: { code: { type: "string" }, message: { type: "string" } },
    };
    const problems = compare("Shorter", api, shorter.interfaces.get("Shorter"), shorter);
    assert.equal(problems.length, 4, problems.join("\n"));
  });
});

describe("the served document", { skip: NO_SERVER }, () => {
  let server;
  before(async () => {
    server = await new Server().start();
  });
  after(() => server?.dispose());

  test("is the tree's engine/server/src/openapi.json", BOUNDED, async () => {
    const served = await (await fetch(`${server.url}/v1/openapi.json`)).json();
    assert.deepEqual(served, OPENAPI);
  });
});
