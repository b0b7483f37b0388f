// Checking an audit record offline (docs/security.md), as `colloquy audit verify --jwks`
// does: `verifyRecord` checks the record's format; its hash chain, event by event (the
// events numbered 1 to n, each `prev` the chain hash of the event before); that the record's
// length and head are those of the chain; that the first event names the record's
// conversation and revision; every signed message against its sender's keys; the template
// source against the revision, when the record holds it; and the engine's signature over the
// record with the engine's keys (`GET /v1/audit/keys`), when given. A failure is an
// `AuditBroken` naming the event (`seq`, if one) and the check, in the engine's words.
//
// The hashing is the engine's (`colloquy_trust::chain`): an event's body digest is the
// SHA-256 of its RFC 8785 form without `prev`, each thread transition replaced by its own
// digest; its chain hash is `SHA-256(prev || body digest)` over the raw bytes.

import { ColloquyError } from "./errors.js";
import { canonical } from "./jcs.js";
import { KeySet, sha256Hex, signedFields, verifyMessage } from "./signing.js";

/** The `format` of the records this module reads. */
export const AUDIT_FORMAT = "colloquy.audit/1";
/** The `prev` of a conversation's first event. */
export const GENESIS = "0".repeat(64);

/** A record that does not verify: which event (`seq`, if one) and which check. */
export class AuditBroken extends ColloquyError {
  constructor(seq, check, why) {
    super(`${seq !== null && seq !== undefined ? `event ${seq}: ` : ""}${check} check failed: ${why}`);
    this.seq = seq ?? null;
    this.check = check;
    this.why = why;
  }
}

const isHex32 = (text) => typeof text === "string" && /^[0-9a-f]{64}$/.test(text);
const quote = (value) => JSON.stringify(value === undefined ? null : value);

/** A thread transition's digest: the one it stands for when redacted. */
export function transitionDigest(transition) {
  if (transition && typeof transition === "object" && !Array.isArray(transition)) {
    const keys = Object.keys(transition);
    if (keys.length === 1 && keys[0] === "redacted") {
      if (!isHex32(transition.redacted)) throw new Error("`redacted` holds a SHA-256 in hex");
      return transition.redacted;
    }
  }
  return sha256Hex(canonical(transition));
}

/** An event's body digest (its `redacted` digest when the reader may not see it). */
export function bodyDigest(event) {
  if (event === null || typeof event !== "object" || Array.isArray(event)) throw new Error("an event is a JSON object");
  if ("redacted" in event) {
    if (!isHex32(event.redacted)) throw new Error("`redacted` holds a SHA-256 in hex");
    return event.redacted;
  }
  const { prev: _prev, ...body } = event;
  if (Array.isArray(body.transitions)) body.transitions = body.transitions.map(transitionDigest);
  return sha256Hex(canonical(body));
}

/** The chain hash of an event with this `prev` and body digest (both hex). */
export function link(prev, body) {
  if (!isHex32(prev)) throw new Error(`\`${prev}\` is not a SHA-256 in hex`);
  if (!isHex32(body)) throw new Error(`\`${body}\` is not a SHA-256 in hex`);
  return sha256Hex(Buffer.concat([Buffer.from(prev, "hex"), Buffer.from(body, "hex")]));
}

/**
 * The SHA-256 behind a template revision: of the YAML source, then, with a hook module,
 * `\0hook-module:` and the module's SHA-256 in hex.
 */
export function revisionDigest(source, hookModuleSha256) {
  const parts = [Buffer.from(source, "utf8")];
  if (hookModuleSha256 !== undefined && hookModuleSha256 !== null) parts.push(Buffer.from(`\0hook-module:${hookModuleSha256}`, "utf8"));
  return sha256Hex(Buffer.concat(parts));
}

/**
 * What the engine signs over a record: every field but the events (which the chain head
 * stands for) and the template source (which the digest stands for), in RFC 8785 form.
 */
export function signedPayload(record) {
  const template = record.template ?? {};
  const chain = record.chain ?? {};
  return canonical({
    format: record.format ?? null,
    conversation_id: record.conversation_id ?? null,
    reader: record.reader ?? null,
    template: template.name ?? null,
    revision: template.revision ?? null,
    template_sha256: template.sha256 ?? null,
    hook_sha256: template.hook_sha256 ?? null,
    chain_length: chain.length ?? null,
    chain_head: chain.head ?? null,
    chained_from: chain.chained_from ?? null,
    issued_at: record.issued_at ?? null,
    signer_keys: record.signer_keys ?? {},
  });
}

/**
 * Checks the record's chain, its summary and its start (no signatures); throws
 * `AuditBroken` naming the event and the check. Answers the chain:
 * `{length, head, chainedFrom, redacted}`.
 */
export function verifyChain(record) {
  const events = record.events ?? [];
  let head = GENESIS;
  let chainedFrom = null;
  let redacted = 0;
  events.forEach((event, index) => {
    const seq = index + 1;
    if (event?.seq !== seq) {
      throw new AuditBroken(seq, "order", `event ${seq} of the log says it is \`seq\` ${quote(event?.seq)}`);
    }
    let body;
    try {
      body = bodyDigest(event);
    } catch (error) {
      throw new AuditBroken(seq, "digest", error.message);
    }
    if ("prev" in event) {
      if (event.prev !== head) {
        const before = seq === 1 ? "the empty log" : `event ${seq - 1}`;
        throw new AuditBroken(seq, "chain", `its \`prev\` is not the chain hash of ${before}: an event before it was removed, reordered or altered`);
      }
      chainedFrom ??= seq;
    } else if (chainedFrom !== null) {
      throw new AuditBroken(seq, "chain", "it carries no `prev`, after the chain began");
    }
    if ("redacted" in event) redacted += 1;
    head = link(head, body);
  });
  const said = record.chain ?? {};
  if (said.length !== events.length || said.head !== head || (said.chained_from ?? null) !== chainedFrom) {
    throw new AuditBroken(null, "summary", `the record says its chain is ${said.length} events to head ${said.head}, the events make ${events.length} to ${head}`);
  }
  const first = events[0];
  if (first && !("redacted" in first)) {
    const template = record.template ?? {};
    const named = [["id", record.conversation_id], ["template", template.name], ["revision", template.revision]];
    for (const [name, expected] of named) {
      if (first[name] !== expected) {
        throw new AuditBroken(1, "start", `the conversation started with ${name} ${quote(first[name])}, the record names \`${expected}\``);
      }
    }
  }
  return { length: events.length, head, chainedFrom, redacted };
}

/** Keys from a `KeySet`, a JWKS, or a list of JWKS. */
function keySet(documents) {
  if (documents === undefined || documents === null) return new KeySet();
  if (documents instanceof KeySet) return documents;
  return Array.isArray(documents) ? KeySet.fromJwks(...documents) : KeySet.fromJwks(documents);
}

const MESSAGE_FIELDS = [["id", "string"], ["performative", "string"], ["sender", "string"], ["receivers", "array"], ["sent_at", "number"]];

function checkSignatures(record, agentKeys) {
  let signed = 0;
  const sets = new Map();
  for (const event of record.events ?? []) {
    const message = event?.message;
    if (message === null || typeof message !== "object" || !("signature" in message)) continue;
    const broken = (why) => new AuditBroken(typeof event.seq === "number" ? event.seq : null, "message signature", why);
    for (const [name, kind] of MESSAGE_FIELDS) {
      const ok = kind === "array" ? Array.isArray(message[name]) : typeof message[name] === kind;
      if (!ok) throw broken(`not a message: \`${name}\` missing or not a ${kind}`);
    }
    const signature = message.signature;
    if (signature === null) continue;
    if (typeof signature !== "object" || typeof signature.jws !== "string") throw broken("not a message: its `signature` has no `jws`");
    const sender = message.sender;
    if (!sets.has(sender)) {
      const jwks = agentKeys?.[sender] ?? record.signer_keys?.[sender];
      if (jwks === undefined || jwks === null) throw broken(`the record holds no keys of \`${sender}\``);
      try {
        sets.set(sender, keySet(jwks));
      } catch (error) {
        throw broken(error.message);
      }
    }
    const fields = signedFields(record.conversation_id, sender, {
      messageId: message.id,
      performative: message.performative,
      to: signature.to ?? [],
      content: message.content,
      inReplyTo: message.in_reply_to,
      replyBy: message.reply_by,
    });
    try {
      verifyMessage(sets.get(sender), fields, signature.jws);
    } catch (error) {
      throw broken(`\`${sender}\`'s message ${message.id}: ${error.message}`);
    }
    signed += 1;
  }
  return signed;
}

function checkTemplate(template) {
  const digest = template?.sha256;
  if (digest === undefined || digest === null) return false;
  if (template.revision !== `sha256:${digest.slice(0, 16)}`) {
    throw new AuditBroken(null, "template", `revision ${template.revision} is not the abbreviation of sha256 ${digest}`);
  }
  if (template.source === undefined || template.source === null) return false;
  const computed = revisionDigest(template.source, template.hook_sha256);
  if (computed !== digest) {
    throw new AuditBroken(null, "template", `the source (and hook module hash) hash to ${computed}, not ${digest}`);
  }
  return true;
}

/**
 * Checks `record` as `colloquy audit verify --jwks` does; throws `AuditBroken` naming the
 * event (if one) and the check: `format`, `order`, `digest`, `chain`, `summary`, `start`,
 * `message signature`, `template`, `engine signature`.
 *
 * `engineKeys`: the engine's audit keys (a JWKS, as `GET /v1/audit/keys` answers, a list of
 * them, or a `KeySet`). An engine signature by a key not among them fails; without them it
 * is reported unchecked (`engineSignatureUnchecked`). Each signed message is checked against
 * its sender's keys: those in `agentKeys` (sender id to JWKS) when it names the sender, else
 * those the record carries in `signer_keys` (which the engine's signature covers).
 */
export function verifyRecord(record, { engineKeys, agentKeys } = {}) {
  let engine;
  try {
    engine = keySet(engineKeys);
  } catch (error) {
    throw new Error(`the engine's keys: ${error.message}`, { cause: error });
  }
  if (record?.format !== AUDIT_FORMAT) throw new AuditBroken(null, "format", `\`${record?.format}\` is not \`${AUDIT_FORMAT}\``);
  const chain = verifyChain(record);
  const signedMessages = checkSignatures(record, agentKeys ?? {});
  const templateChecked = checkTemplate(record.template);
  let engineKey = null;
  let engineSignatureUnchecked = false;
  const engineSignature = record.engine_signature;
  if (engineSignature !== undefined && engineSignature !== null) {
    if (engine.size === 0) {
      engineSignatureUnchecked = true;
    } else {
      try {
        engineKey = engine.verify(engineSignature.jws, signedPayload(record));
      } catch (error) {
        throw new AuditBroken(null, "engine signature", error.message);
      }
    }
  }
  return { chain, engineKey, engineSignatureUnchecked, templateChecked, signedMessages };
}
