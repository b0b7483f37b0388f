// RFC 8785 (the JSON Canonicalization Scheme): the one spelling of a JSON value that
// signatures and the audit chain are computed over, as the engine writes it
// (`colloquy_trust::jcs`). ECMAScript's own `JSON.stringify` writes numbers and strings as
// the RFC asks; objects' keys go in UTF-16 code-unit order, which is what `sort` compares.

/** `value` in its RFC 8785 form. Integers past 2^53 are their nearest double, as JSON's. */
export function canonical(value) {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw new RangeError("JSON has no NaN or infinity");
      return JSON.stringify(value);
    case "bigint":
      return canonical(Number(value));
    case "string":
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value)) return `[${value.map((item) => canonical(item === undefined ? null : item)).join(",")}]`;
      if (typeof value.toJSON === "function") return canonical(value.toJSON());
      const keys = Object.keys(value).filter((key) => value[key] !== undefined).sort();
      return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(",")}}`;
    }
    default:
      throw new TypeError(`not a JSON value: ${typeof value}`);
  }
}
