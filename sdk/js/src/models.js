// The wire's names and the one body the SDK builds in several places.
//
// The wire types themselves are plain JSON objects, typed in ../index.d.ts field for field
// after the component schemas of `GET /v1/openapi.json`; test/drift.test.mjs fails when
// they drift from that document, or when the outcome and commitment-state names below
// drift from docs/*.schema.json. Answers are read as they come: a field a newer server adds
// is kept, never refused.

/**
 * How a thread or a conversation ended. Answers hold plain strings (a newer server may know
 * more outcomes); these are those strings: `answer.outcome === Outcome.SUCCESS`.
 */
export const Outcome = Object.freeze({
  SUCCESS: "success",
  FAILURE: "failure",
  REFUSED: "refused",
  REJECTED: "rejected",
  CANCELLED: "cancelled",
  TIMEOUT: "timeout",
  NO_REPLY: "no_reply",
  NOT_UNDERSTOOD: "not_understood",
  ESCALATED: "escalated",
});

/** The life of a commitment (a promise one party owes another). */
export const CommitmentState = Object.freeze({
  PENDING: "pending",
  ACTIVE: "active",
  FULFILLED: "fulfilled",
  VIOLATED: "violated",
  CANCELLED: "cancelled",
  RELEASED: "released",
});

/** The sender of the messages the engine itself sends (automatic replies, escalations). */
export const ENGINE_PARTY = "colloquy:engine";

/** A body field, left out when unset (the server refuses `null` for most of them). */
export function setField(target, key, value) {
  if (value !== undefined && value !== null) target[key] = value;
  return target;
}

/**
 * The body of a message (`SendMessage`): `POST /v1/conversations/{id}/messages`, or a
 * start's opening act.
 */
export function messageBody(performative, content, { to, inReplyTo, replyBy, messageId } = {}) {
  const body = { performative };
  setField(body, "message_id", messageId);
  setField(body, "to", to === undefined || to === null ? undefined : [...to]);
  setField(body, "content", content);
  setField(body, "in_reply_to", inReplyTo);
  setField(body, "reply_by", replyBy);
  return body;
}
