// The top-level imports and exports of a WebAssembly component, read from its binary
// (the component model's binary format: import section 10, export section 11), so every
// build can check what it made without another tool. Nested modules and components are
// skipped: only what the host links against matters.
//
//     node tools/component-info.mjs FILE.wasm    prints {"imports": [...], "exports": [...]}

import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

/** The component layer's preamble: `\0asm`, version 0x0d, layer 1. */
const COMPONENT_PREAMBLE = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
const IMPORT_SECTION = 10;
const EXPORT_SECTION = 11;
/** Extern kinds, by their byte in an externdesc. */
const EXTERN_KINDS = ['module', 'func', 'value', 'type', 'component', 'instance'];
/** Sorts, by their byte in a sortidx (0x00 is followed by a core sort). */
const SORTS = ['core', 'func', 'value', 'type', 'component', 'instance'];

/**
 * The imports and exports of the component in `bytes`.
 * @param {Uint8Array} bytes
 * @returns {{imports: {name: string, kind: string}[], exports: {name: string, kind: string}[]}}
 */
export function componentInfo(bytes) {
  const reader = new Reader(bytes);
  if (!COMPONENT_PREAMBLE.every((byte, at) => bytes[at] === byte)) {
    throw new Error(bytes[4] === 0x01
      ? 'a core WebAssembly module, not a component'
      : 'not a WebAssembly component');
  }
  reader.at = COMPONENT_PREAMBLE.length;
  const imports = [];
  const exports = [];
  while (!reader.done()) {
    const id = reader.byte();
    const size = reader.u32();
    const end = reader.at + size;
    if (id === IMPORT_SECTION) {
      for (let count = reader.u32(); count > 0; count--) {
        const name = reader.externName();
        imports.push({ name, kind: reader.externDesc() });
      }
    } else if (id === EXPORT_SECTION) {
      for (let count = reader.u32(); count > 0; count--) {
        const name = reader.externName();
        const sort = reader.byte();
        if (sort === 0x00) reader.byte();
        reader.u32();
        if (reader.byte() === 0x01) reader.externDesc();
        exports.push({ name, kind: SORTS[sort] ?? `sort ${sort}` });
      }
    }
    reader.at = end;
  }
  return { imports, exports };
}

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.at = 0;
  }

  done() {
    return this.at >= this.bytes.length;
  }

  byte() {
    if (this.done()) throw new Error('the component ends early');
    return this.bytes[this.at++];
  }

  u32() {
    let value = 0;
    let shift = 0;
    for (;;) {
      const byte = this.byte();
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return value;
      shift += 7;
    }
  }

  string() {
    const length = this.u32();
    const text = new TextDecoder().decode(this.bytes.subarray(this.at, this.at + length));
    this.at += length;
    return text;
  }

  /** An importname' / exportname': 0x00 name, or 0x01 name and a version suffix. */
  externName() {
    const form = this.byte();
    const name = this.string();
    if (form === 0x01) this.string();
    return name;
  }

  /** An externdesc, skipped; returns its kind. */
  externDesc() {
    const kind = this.byte();
    if (kind === 0x00) this.byte(); // core module: 0x11 then the type index
    if (kind === 0x02 || kind === 0x03) {
      // value bound (0x00 index | 0x01 valtype) or type bound (0x00 index | 0x01 resource)
      if (this.byte() === 0x00 || kind === 0x02) this.u32();
    } else {
      this.u32();
    }
    return EXTERN_KINDS[kind] ?? `kind ${kind}`;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const info = componentInfo(readFileSync(process.argv[2]));
  console.log(JSON.stringify(info, null, 2));
}
