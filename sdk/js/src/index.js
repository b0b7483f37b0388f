// @colloquy/sdk: agents for Colloquy, the policy-driven dialogue engine, over its HTTP API
// (docs/http-api.md). Agents in JavaScript and TypeScript start Request, Query and
// Contract-Net conversations and take part in them, as Rust agents do with the Rust SDK and
// Python agents with the Python SDK (docs/sdk-js.md is the guide).
//
// Layout:
// - client.js   `Client`: a method per endpoint, and the initiator's helpers
// - ask.js      the helpers' logic: `PendingAnswer`, following a conversation to its answer
// - agent.js    `Agent` (handlers over the inbox stream, acknowledgements) and `Incoming`
// - streams.js  inbox and event streams that reconnect and resume (`Last-Event-ID`)
// - sse.js      the server-sent events parser
// - errors.js   one error class per kind of failure, built from the API's error body
// - models.js   outcome and commitment-state names; the message body
// - signals.js  waits bounded by an AbortSignal and a timeout
// - signing.js  `SigningKey` (signs the messages a client sends) and `KeySet` (checks)
// - audit.js    `verifyRecord`: an audit record's chain, senders' and engine's signatures
// - jcs.js      RFC 8785, what signatures and the chain are computed over
// The wire types are in ../index.d.ts.

export { Client, AGENT_HEADER, DEFAULT_TIMEOUT_MS } from "./client.js";
export { PendingAnswer, CFP_GRACE_MS } from "./ask.js";
export { Agent, Incoming, DEFAULT_GRACE_MS } from "./agent.js";
export { InboxStream, EventStream } from "./streams.js";
export { SseParser } from "./sse.js";
export { Outcome, CommitmentState, ENGINE_PARTY } from "./models.js";
export { SigningKey, KeySet, SigningError, signedFields, verifyMessage, uuid7 } from "./signing.js";
export { AuditBroken, verifyRecord, verifyChain, signedPayload, bodyDigest, link, GENESIS } from "./audit.js";
export { canonical } from "./jcs.js";
export {
  ColloquyError,
  ApiError,
  BadRequest,
  Unauthenticated,
  Forbidden,
  NotFound,
  MethodNotAllowed,
  RequestTimeout,
  Conflict,
  ConversationEnded,
  PayloadTooLarge,
  Unprocessable,
  ServiceUnavailable,
  ServerError,
  TransportError,
  DecodeError,
  AnswerTimeout,
  errorFromAnswer,
} from "./errors.js";
