// Signed messages (docs/security.md#signed-messages): a sender signs the RFC 8785 form of
// what it sends with a detached JWS, and whoever holds its public keys checks it.
//
// A `SigningKey` (Ed25519, `EdDSA`, or P-256, `ES256`) given to a `Client` (`new Client(url,
// id, token, {signingKey})` or `client.signingWith(key)`) signs every message the client
// sends, and the opening message of every conversation it starts: the signature covers the
// conversation id, the message id, the sender, the performative, `to` as sent, the content,
// `in_reply_to` and `reply_by` (`signedFields`), every key present, null when absent. A
// message without an id, or a start without a conversation id, gets a fresh UUIDv7 one.
//
// A `KeySet` (from a JWKS document) checks such signatures, and the engine's over an audit
// record (audit.js). Only the two algorithms named are known: never `none`, never an HMAC,
// never a key the header points at. The signing input and the wording of what fails are
// those of the engine (`colloquy_trust::jws`), so the SDK's verdict and `colloquy audit
// verify`'s agree. Node's own `crypto` does the work: no dependency.

import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, verify } from "node:crypto";
import { readFileSync } from "node:fs";

import { canonical } from "./jcs.js";
import { ColloquyError } from "./errors.js";

/** The JWS `typ` of a message signature. */
export const MESSAGE_SIGNATURE_TYPE = "colloquy-message+jws";
/** The JWS `typ` of the engine's signature over an audit record. */
export const AUDIT_SIGNATURE_TYPE = "colloquy-audit+jws";

/** A key that cannot sign: not a key Colloquy signs with, or no key id. */
export class SigningError extends ColloquyError {}

function b64url(bytes) {
  return Buffer.from(bytes).toString("base64url");
}

/** The bytes of unpadded base64url; throws when it is not that. */
function b64urlDecode(text) {
  if (typeof text !== "string" || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
    throw new Error("not base64url");
  }
  return Buffer.from(text, "base64url");
}

/** A fresh UUIDv7 (time-ordered, RFC 9562), as the engine and the other SDKs mint ids. */
export function uuid7() {
  const bytes = randomBytes(16);
  const ms = BigInt(Date.now());
  for (let i = 0; i < 6; i += 1) bytes[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  bytes[6] = 0x70 | (bytes[6] & 0x0f);
  bytes[8] = 0x80 | (bytes[8] & 0x3f);
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function signingInput(protectedHeader, payload) {
  return Buffer.from(`${protectedHeader}.${b64url(Buffer.from(payload))}`, "ascii");
}

/** The algorithm a Node key object signs with, or null. */
function algOf(key) {
  if (key.asymmetricKeyType === "ed25519") return "EdDSA";
  if (key.asymmetricKeyType === "ec" && key.asymmetricKeyDetails?.namedCurve === "prime256v1") return "ES256";
  return null;
}

/**
 * A private key that signs, named by a key id (`kid`): Ed25519 (`EdDSA`) or P-256
 * (`ES256`). Its public half (`publicJwk()`) goes in the agent's `signing_keys` in the
 * server's agents file.
 */
export class SigningKey {
  /** @param {import("node:crypto").KeyObject} privateKey @param {string} kid */
  constructor(privateKey, kid) {
    if (!kid) throw new SigningError("a key id is required");
    if (privateKey?.type !== "private") throw new SigningError("not a private key");
    const alg = algOf(privateKey);
    if (!alg) throw new SigningError("not an Ed25519 or P-256 private key");
    this.alg = alg;
    this.kid = kid;
    Object.defineProperty(this, "key", { value: privateKey, enumerable: false });
  }

  /** A fresh key: `EdDSA` (Ed25519) or `ES256` (P-256). */
  static generate(alg = "EdDSA", kid = "") {
    if (alg === "EdDSA") return new SigningKey(generateKeyPairSync("ed25519").privateKey, kid);
    if (alg === "ES256") return new SigningKey(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey, kid);
    throw new SigningError(`\`${alg}\` is not an algorithm Colloquy signs with (EdDSA, ES256)`);
  }

  /** A PKCS#8 private key (`-----BEGIN PRIVATE KEY-----`, as `colloquy audit keygen` writes, or DER bytes). */
  static fromPem(pem, kid) {
    let key;
    try {
      const text = typeof pem === "string" ? pem : Buffer.from(pem).toString("latin1");
      key = text.includes("-----BEGIN")
        ? createPrivateKey({ key: text, format: "pem" })
        : createPrivateKey({ key: Buffer.from(pem), format: "der", type: "pkcs8" });
    } catch (error) {
      throw new SigningError(`not a PKCS#8 Ed25519 or P-256 private key: ${error.message}`, { cause: error });
    }
    return new SigningKey(key, kid);
  }

  /** The key in a PKCS#8 file (PEM or DER), as `colloquy audit keygen --out` writes it. */
  static fromFile(path, kid) {
    let bytes;
    try {
      bytes = readFileSync(path);
    } catch (error) {
      throw new SigningError(`the key ${path}: ${error.message}`, { cause: error });
    }
    try {
      return SigningKey.fromPem(bytes, kid);
    } catch (error) {
      throw new SigningError(`the key ${path}: ${error.message}`, { cause: error });
    }
  }

  /**
   * A private JWK (`{kty: "OKP", crv: "Ed25519", d, x}` or `{kty: "EC", crv: "P-256", d, x,
   * y}`), named `kid` or its own `kid`.
   */
  static fromJwk(jwk, kid) {
    if (typeof jwk === "string") jwk = JSON.parse(jwk);
    const known = (jwk?.kty === "OKP" && jwk?.crv === "Ed25519") || (jwk?.kty === "EC" && jwk?.crv === "P-256");
    if (!known) throw new SigningError("an OKP/Ed25519 or EC/P-256 private JWK is expected");
    if (typeof jwk.d !== "string") throw new SigningError("not a private JWK: no `d`");
    let key;
    try {
      const { kty, crv, d, x, y } = jwk;
      key = createPrivateKey({ key: { kty, crv, d, x, ...(y === undefined ? {} : { y }) }, format: "jwk" });
    } catch (error) {
      throw new SigningError(`not a private JWK: ${error.message}`, { cause: error });
    }
    return new SigningKey(key, kid || jwk.kid || "");
  }

  /** The public key as a JWK, for the agents file (`signing_keys: {keys: [it]}`). */
  publicJwk() {
    const { kty, crv, x, y } = createPublicKey(this.key).export({ format: "jwk" });
    return kty === "OKP" ? { kty, crv, alg: this.alg, kid: this.kid, x } : { kty, crv, alg: this.alg, kid: this.kid, x, y };
  }

  /** `{keys: [publicJwk()]}`: a JWKS of this key alone. */
  publicJwks() {
    return { keys: [this.publicJwk()] };
  }

  /** The key as PKCS#8 PEM, as `colloquy audit keygen` writes it (keep it private). */
  privatePem() {
    return this.key.export({ type: "pkcs8", format: "pem" });
  }

  /**
   * A detached compact JWS (`protected..signature`) over `payload` (bytes or a string)
   * whose header names this key's `alg` and `kid` and `typ`.
   */
  sign(payload, typ) {
    const header = b64url(JSON.stringify({ alg: this.alg, kid: this.kid, typ }));
    const input = signingInput(header, payload);
    const signature = this.alg === "EdDSA"
      ? sign(null, input, this.key)
      : sign("sha256", input, { key: this.key, dsaEncoding: "ieee-p1363" });
    return `${header}..${b64url(signature)}`;
  }

  /** The message signature over `fields` (`signedFields`) in RFC 8785 form. */
  signFields(fields) {
    return this.sign(canonical(fields), MESSAGE_SIGNATURE_TYPE);
  }
}

/**
 * What a sender signs: the conversation, the message id, itself, and the message as it
 * sends it (`to` as sent, `[]` for the default receivers). Every key is there; absent
 * values are null.
 */
export function signedFields(conversationId, sender, { messageId, performative, to, content, inReplyTo, replyBy } = {}) {
  return {
    conversation_id: conversationId,
    message_id: messageId ?? null,
    sender,
    performative,
    to: to ? [...to] : [],
    content: content === undefined ? null : content,
    in_reply_to: inReplyTo ?? null,
    reply_by: replyBy ?? null,
  };
}

function parseDetached(jws) {
  const parts = typeof jws === "string" ? jws.split(".") : [];
  if (parts.length !== 3 || !parts[0] || parts[1] !== "" || !parts[2]) {
    throw new Error("not a detached compact JWS (`header..signature`)");
  }
  return [parts[0], parts[2]];
}

/** A JWK's key id and public key; the error starts with the field at fault (`.x: …`). */
function publicKeyOf(jwk) {
  const raw = (name) => {
    const text = jwk?.[name];
    if (typeof text !== "string") throw new Error(`.${name}: required`);
    try {
      return b64urlDecode(text);
    } catch (error) {
      throw new Error(`.${name}: ${error.message}`);
    }
  };
  const kid = jwk?.kid;
  if (typeof kid !== "string") throw new Error(".kid: required");
  if (jwk.kty === "OKP" && jwk.crv === "Ed25519") return [kid, { alg: "EdDSA", parts: [raw("x")] }];
  if (jwk.kty === "EC" && jwk.crv === "P-256") return [kid, { alg: "ES256", parts: [raw("x"), raw("y")] }];
  throw new Error(": an OKP/Ed25519 or EC/P-256 key is expected");
}

function sameKey(a, b) {
  return a.alg === b.alg && a.parts.length === b.parts.length && a.parts.every((part, i) => part.equals(b.parts[i]));
}

function holds({ alg, parts }, signature, data) {
  try {
    if (alg === "EdDSA") {
      const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: b64url(parts[0]) }, format: "jwk" });
      return verify(null, data, key, signature);
    }
    if (parts[0].length !== 32 || parts[1].length !== 32 || signature.length !== 64) return false;
    const key = createPublicKey({ key: { kty: "EC", crv: "P-256", x: b64url(parts[0]), y: b64url(parts[1]) }, format: "jwk" });
    return verify("sha256", data, { key, dsaEncoding: "ieee-p1363" }, signature);
  } catch {
    return false;
  }
}

/**
 * Public keys that verify signatures, by key id: `KeySet.fromJwks({keys: [...]})`. Every
 * key needs a `kid`; keys of other types are an error.
 */
export class KeySet {
  constructor() {
    this.keys = new Map();
  }

  /** The keys of one or more JWKS documents (objects or their JSON text). */
  static fromJwks(...documents) {
    const set = new KeySet();
    for (const document of documents) set.addJwks(document);
    return set;
  }

  /** Adds the keys of a JWKS document; a key id already present throws unless it names the same key. */
  addJwks(jwks) {
    if (typeof jwks === "string") jwks = JSON.parse(jwks);
    const keys = jwks?.keys;
    if (!Array.isArray(keys)) throw new Error("a JWKS document has a `keys` list");
    keys.forEach((jwk, index) => {
      let kid;
      let key;
      try {
        [kid, key] = publicKeyOf(jwk);
      } catch (error) {
        throw new Error(`keys[${index}]${error.message}`);
      }
      const known = this.keys.get(kid);
      if (known && !sameKey(known, key)) throw new Error(`keys[${index}]: key id \`${kid}\` names two keys`);
      this.keys.set(kid, key);
    });
    return this;
  }

  get size() {
    return this.keys.size;
  }

  has(kid) {
    return this.keys.has(kid);
  }

  /**
   * The id of the key whose detached signature `jws` over `payload` (bytes or a string)
   * is; throws an `Error` saying why not, in the engine's words.
   */
  verify(jws, payload) {
    const [protectedHeader, signature] = parseDetached(jws);
    let header;
    try {
      header = JSON.parse(b64urlDecode(protectedHeader).toString("utf8"));
      if (header === null || typeof header !== "object" || Array.isArray(header)) throw new Error();
    } catch {
      throw new Error("the protected header is not base64url JSON");
    }
    const kid = typeof header.kid === "string" ? header.kid : "";
    const alg = typeof header.alg === "string" ? header.alg : "";
    const key = this.keys.get(kid);
    if (!key) throw new Error(`no known key \`${kid}\``);
    if (key.alg !== alg) throw new Error(`key \`${kid}\` is ${key.alg}, the signature says \`${alg}\``);
    let bytes;
    try {
      bytes = b64urlDecode(signature);
    } catch {
      throw new Error("the signature is not base64url");
    }
    if (!holds(key, bytes, signingInput(protectedHeader, payload))) {
      throw new Error(`the signature by \`${kid}\` does not hold`);
    }
    return kid;
  }
}

/**
 * The id of the key in `keys` whose signature `jws` over `fields` is; throws saying why not
 * as the server's 422 does: not a JWS, signed by a key the sender does not have (`unknown
 * key`), or over other fields (`altered`).
 */
export function verifyMessage(keys, fields, jws) {
  parseDetached(jws);
  try {
    return keys.verify(jws, canonical(fields));
  } catch (error) {
    const why = error.message;
    if (why.startsWith("no known key")) throw new Error(`unknown key: ${why}`);
    if (why.includes("does not hold")) throw new Error(`altered: ${why} over this message`);
    throw error;
  }
}

/** The SHA-256 of `data`, lowercase hex. */
export function sha256Hex(data) {
  return createHash("sha256").update(data).digest("hex");
}
