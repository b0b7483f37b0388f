// A JSON Schema check for the subset docs/hook-*.schema.json use ($ref, type, const, enum,
// oneOf, anyOf, properties, required, additionalProperties, items, minimum), so tests can hold
// events and answers to the engine's schemas without a validator package.
//
//     const errors = validate(readSchema('hook-output'), JSON.parse(answer));   // [] when valid

import { readFileSync } from 'node:fs';

/** A schema of docs/ by name: `hook-input` or `hook-output`. */
export function readSchema(name) {
  return JSON.parse(readFileSync(new URL(`../../../docs/${name}.schema.json`, import.meta.url), 'utf8'));
}

/** The ways `value` breaks `schema`, as "pointer: what" lines; empty when it fits. */
export function validate(schema, value) {
  return check(schema, schema, value, '');
}

function check(root, schema, value, at) {
  if (schema === true || schema === undefined) return [];
  if (schema === false) return [`${at || '/'}: not allowed`];
  if (schema.$ref) {
    const name = schema.$ref.replace('#/$defs/', '');
    if (!root.$defs || !(name in root.$defs)) return [`${at || '/'}: unknown $ref ${schema.$ref}`];
    return check(root, root.$defs[name], value, at);
  }
  const errors = [];
  const here = at || '/';
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((type) => hasType(value, type))) {
      return [`${here}: expected ${types.join(' or ')}, got ${JSON.stringify(value)?.slice(0, 60)}`];
    }
  }
  if ('const' in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    errors.push(`${here}: expected ${JSON.stringify(schema.const)}`);
  }
  if (schema.enum && !schema.enum.some((option) => JSON.stringify(option) === JSON.stringify(value))) {
    errors.push(`${here}: expected one of ${schema.enum.map((option) => JSON.stringify(option)).join(', ')}`);
  }
  if (schema.minimum !== undefined && typeof value === 'number' && value < schema.minimum) {
    errors.push(`${here}: below ${schema.minimum}`);
  }
  if (schema.oneOf) {
    const matching = schema.oneOf.filter((option) => check(root, option, value, at).length === 0).length;
    if (matching !== 1) errors.push(`${here}: matches ${matching} of oneOf's ${schema.oneOf.length} options, not 1`);
  }
  if (schema.anyOf && !schema.anyOf.some((option) => check(root, option, value, at).length === 0)) {
    errors.push(`${here}: matches none of anyOf`);
  }
  if (isObject(value)) {
    for (const key of schema.required ?? []) {
      if (!(key in value)) errors.push(`${at}/${key}: required`);
    }
    for (const [key, item] of Object.entries(value)) {
      if (schema.properties && key in schema.properties) {
        errors.push(...check(root, schema.properties[key], item, `${at}/${key}`));
      } else if (schema.additionalProperties === false) {
        errors.push(`${at}/${key}: unknown field`);
      } else if (typeof schema.additionalProperties === 'object') {
        errors.push(...check(root, schema.additionalProperties, item, `${at}/${key}`));
      }
    }
  }
  if (Array.isArray(value) && schema.items) {
    value.forEach((item, index) => errors.push(...check(root, schema.items, item, `${at}/${index}`)));
  }
  return errors;
}

function isObject(value) {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function hasType(value, type) {
  switch (type) {
    case 'null': return value === null;
    case 'boolean': return typeof value === 'boolean';
    case 'string': return typeof value === 'string';
    case 'number': return typeof value === 'number';
    case 'integer': return Number.isInteger(value);
    case 'array': return Array.isArray(value);
    case 'object': return isObject(value);
    default: throw new Error(`unknown JSON Schema type ${type}`);
  }
}
