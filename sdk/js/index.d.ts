// Types of @colloquy/sdk, written by hand beside the JavaScript in src/.
//
// The wire types follow the component schemas of `GET /v1/openapi.json`
// (engine/server/src/openapi.json) field for field: test/drift.test.mjs reads this file and
// fails when an interface drifts from its component (fields, required fields, types), when a
// component has no interface, when `Outcome` and `CommitmentState` drift from
// docs/*.schema.json, or when a name exported by src/index.js is missing here. Keep one field
// per line, as that test reads them. Bodies the client sends are tagged `@request`: the
// server refuses unknown fields in them. Answers may carry fields a newer server adds.

// -- names -------------------------------------------------------------------------------

/** How a thread or a conversation ended (docs/hook-input.schema.json, `Outcome`). */
export type OutcomeName =
  | "success"
  | "failure"
  | "refused"
  | "rejected"
  | "cancelled"
  | "timeout"
  | "no_reply"
  | "not_understood"
  | "escalated";

/** The outcome names, as constants: `answer.outcome === Outcome.SUCCESS`. */
export declare const Outcome: Readonly<{
  SUCCESS: "success";
  FAILURE: "failure";
  REFUSED: "refused";
  REJECTED: "rejected";
  CANCELLED: "cancelled";
  TIMEOUT: "timeout";
  NO_REPLY: "no_reply";
  NOT_UNDERSTOOD: "not_understood";
  ESCALATED: "escalated";
}>;

/** The life of a commitment (docs/template.schema.json, `CommitmentState`). */
export type CommitmentStateName = "pending" | "active" | "fulfilled" | "violated" | "cancelled" | "released";

/** The commitment states, as constants. */
export declare const CommitmentState: Readonly<{
  PENDING: "pending";
  ACTIVE: "active";
  FULFILLED: "fulfilled";
  VIOLATED: "violated";
  CANCELLED: "cancelled";
  RELEASED: "released";
}>;

/** A conversation's status. */
export type Status = "active" | "completed";

/** What an agent of the agents file is: it calls the API (`token`), or the engine calls it. */
export type AgentKind = "token" | "a2a";

/** The sender of the messages the engine itself sends (automatic replies, escalations). */
export declare const ENGINE_PARTY: "colloquy:engine";

/** JSON, as the API carries it in `content`, `parameters` and `context`. */
export type Json = unknown;

// -- wire types (components of GET /v1/openapi.json) --------------------------------------

/** The body of every error answer. */
export interface ErrorBody {
  error: ErrorDetail;
}

/** What went wrong, and where (`pointer`: a JSON pointer into the request). */
export interface ErrorDetail {
  code: string;
  message: string;
  pointer?: string;
}

/** `POST /v1/conversations/{id}/messages`; also the opening act of a start. @request */
export interface SendMessage {
  message_id?: string;
  performative: string;
  to?: string[];
  content?: Json;
  in_reply_to?: string;
  /** Unix milliseconds, later than now. */
  reply_by?: number;
  /** The sender's detached JWS over what it signs (docs/security.md#signed-messages). */
  signature?: string;
}

/** `POST /v1/conversations`. @request */
export interface StartConversation {
  template: string;
  participants: string[];
  parameters?: Record<string, Json>;
  context?: Record<string, Json>;
  conversation_id?: string;
  deadline_ms?: number;
  message?: SendMessage;
}

/** A message as the conversation recorded it (receivers after routing). */
export interface Message {
  id: string;
  performative: string;
  sender: string;
  receivers: string[];
  content?: Json;
  in_reply_to?: string;
  reply_by?: number;
  sent_at: number;
  signature?: MessageSignature;
}

/** A message's signature as the engine recorded it. */
export interface MessageSignature {
  jws: string;
  to?: string[];
}

/** One participant's thread: its state, and how it ended. */
export interface ThreadView {
  participant: string;
  state: string;
  outcome?: string;
  deadline?: number;
}

/** A move open to the reader: a performative it may send now, to whom, and its guard. */
export interface OpenMove {
  performative: string;
  to: string[];
  when?: string;
}

/** `GET /v1/conversations/{id}/moves`. */
export interface MovesView {
  moves: OpenMove[];
}

/** A thread moved (a send receipt's `transitions`, an event's). */
export interface ThreadTransition {
  participant: string;
  from: string;
  to: string;
  outcome?: string;
  deadline?: number;
}

/** A commitment: who owes whom what, and where it stands. */
export interface CommitmentView {
  id: string;
  conversation_id: string;
  name: string;
  debtor: string;
  creditor: string;
  state: string;
  deadline?: number;
  created_by: string;
}

/** A broken rule, recorded. */
export interface Violation {
  kind: string;
  agent?: string;
  message_id?: string;
  detail: string;
  at: number;
}

/** `GET /v1/conversations/{id}`: the conversation as this reader may see it. */
export interface ConversationView {
  id: string;
  template: string;
  revision: string;
  initiator: string;
  participants: string[];
  status: Status;
  outcome?: string;
  threads: ThreadView[];
  vars?: Record<string, Json>;
  parameters?: Json;
  context?: Json;
  deadline?: number;
  messages: Message[];
  commitments: CommitmentView[];
  violations: Violation[];
  version: number;
}

/** What sending a message did. */
export interface SendReceipt {
  message_id: string;
  duplicate: boolean;
  receivers: string[];
  transitions: ThreadTransition[];
  violation?: Violation;
  status: Status;
  outcome?: string;
  threads: ThreadView[];
}

/** One row of a conversation listing. */
export interface ConversationSummary {
  id: string;
  template: string;
  revision: string;
  initiator: string;
  participants: string[];
  status: Status;
  outcome?: string;
  deadline?: number;
  version: number;
}

/** A page of `GET /v1/conversations`; pass `next_cursor` on for the next. */
export interface ConversationPage {
  conversations: ConversationSummary[];
  next_cursor?: string;
}

/** A page of `GET /v1/commitments`. */
export interface CommitmentList {
  commitments: CommitmentView[];
  next_cursor?: string;
}

/** A message in an agent's inbox; `seq` is the position to resume after. */
export interface InboxItem {
  seq: number;
  conversation_id: string;
  template?: string;
  message: Message;
}

/** `GET /v1/agents/{id}/inbox/poll`. */
export interface InboxPage {
  items: InboxItem[];
  next_after: number;
}

/** `POST /v1/agents/{id}/inbox/ack`. @request */
export interface InboxAck {
  through: number;
}

/** What an acknowledgement did; `head` is the newest entry's `seq`. */
export interface InboxAcked {
  through: number;
  head: number;
}

/** `GET /readyz`. */
export interface Readiness {
  status: string;
  templates: string[];
}

/** One agent of `GET /v1/agents`, with its inbox as the engine sees it now. */
export interface AgentInfo {
  id: string;
  kind: AgentKind;
  /** Whether messages to it are kept in an inbox. */
  inbox: boolean;
  /** Whether its inbox is also pushed to a webhook. */
  webhook: boolean;
  /** Inbox streams and waiting long polls it has open on this node. */
  inbox_streams: number;
  /** The `seq` of the newest entry its inbox has had (0: none yet). */
  inbox_head: number;
  /** Entries kept in its inbox, not yet acknowledged. */
  unacknowledged: number;
}

/** `GET /v1/agents`: the agents the caller may see (an agent: itself). */
export interface AgentList {
  agents: AgentInfo[];
}

/** The template revision an audited conversation ran (from the server's revision archive). */
export interface AuditTemplate {
  name: string;
  revision: string;
  sha256?: string;
  source?: string;
  hook_sha256?: string;
}

/** The hash chain over an audit record's events. */
export interface AuditChain {
  length: number;
  head: string;
  chained_from?: number;
}

/** The engine's signature over an audit record: a detached JWS by key `kid`. */
export interface AuditSignature {
  kid: string;
  jws: string;
}

/**
 * `GET /v1/conversations/{id}/audit`: a conversation's audit record as its reader may have
 * it; events it may not see are `{seq, prev, redacted}`. Verify it with `verifyRecord` or,
 * offline, `colloquy audit verify` (docs/security.md). `signer_keys` holds, by sender, the
 * keys the engine checked signed messages against.
 */
export interface AuditRecord {
  format: string;
  conversation_id: string;
  reader?: string;
  template: AuditTemplate;
  events: Record<string, unknown>[];
  chain: AuditChain;
  issued_at: number;
  signer_keys?: Record<string, Jwks>;
  engine_signature?: AuditSignature;
}

/** `GET /v1/audit/keys`: the engine's audit key as a JWKS. */
export interface Jwks {
  keys: Record<string, unknown>[];
}

// -- wire types outside the OpenAPI components --------------------------------------------

/** A loaded template and its revision (a content hash). */
export interface TemplateSummary {
  name: string;
  revision: string;
}

/** `GET /v1/templates`. */
export interface TemplateList {
  revision: string;
  templates: TemplateSummary[];
}

/**
 * One entry of a conversation's event log (`GET /v1/conversations/{id}/events`). `type`
 * says what happened (`started`, `message_accepted`, `message_refused`, `thread_expired`,
 * `commitment_created`, `completed`, …); each kind has fields of its own (a
 * `thread_expired` event inlines its thread's move: `participant`, `from`, `to`).
 */
export interface ConversationEvent {
  seq: number;
  at: number;
  type: string;
  message?: Message;
  transitions?: ThreadTransition[];
  outcome?: string;
  reason?: string;
  [field: string]: unknown;
}

// -- errors ------------------------------------------------------------------------------

/** Base of every error the SDK throws (an aborted wait throws the signal's reason instead). */
export declare class ColloquyError extends Error {}

/** The server answered with an error body. */
export declare class ApiError extends ColloquyError {
  /** The HTTP status this class stands for (`null`: any status without a class). */
  static readonly statusCode: number | null;
  constructor(status: number, code: string, message: string, pointer?: string);
  readonly status: number;
  readonly code: string;
  /** The server's message alone (`message` also names the status, code and pointer). */
  readonly detail: string;
  /** A JSON pointer into the request naming the field at fault. */
  readonly pointer: string | null;
  /** Whether the same call may succeed later (5xx: nothing was recorded). */
  readonly transient: boolean;
}
/** 400: malformed JSON, a missing, unknown or mistyped field, a bad query or path. */
export declare class BadRequest extends ApiError {}
/** 401: no credentials, or a token the server does not know. */
export declare class Unauthenticated extends ApiError {}
/** 403: not a party to the conversation, another agent's inbox, the admin acting. */
export declare class Forbidden extends ApiError {}
/** 404: unknown conversation, template, commitment or route. */
export declare class NotFound extends ApiError {}
/** 405: a known path asked with another method. */
export declare class MethodNotAllowed extends ApiError {}
/** 408: the request's body did not arrive in full within the server's 30 s. */
export declare class RequestTimeout extends ApiError {}
/** 409: out of protocol, a duplicate conversation id, a settled commitment, a message limit. */
export declare class Conflict extends ApiError {}
/** 410: a message to a conversation that has ended. */
export declare class ConversationEnded extends ApiError {}
/** 413: a body over 1 MiB, or a context over the template's cap. */
export declare class PayloadTooLarge extends ApiError {}
/** 422: an unknown performative, a schema violation, a rule or hook refusing, a taken id. */
export declare class Unprocessable extends ApiError {}
/** 503: store unreachable, hook pool full, shutting down, no template yet. Retry. */
export declare class ServiceUnavailable extends ApiError {}
/** Any other 5xx: the detail is in the server's log. */
export declare class ServerError extends ApiError {}
/** The server could not be reached, the connection broke, or a call outlived its timeout. */
export declare class TransportError extends ColloquyError {}
/** The server answered something this SDK cannot read. */
export declare class DecodeError extends ColloquyError {}
/** An initiator helper's time ran out; the conversation goes on. */
export declare class AnswerTimeout extends ColloquyError {
  constructor(conversationId: string, timeoutMs: number);
  readonly conversationId: string;
  readonly timeoutMs: number;
}
/** The error for an error answer: its status's class, built from its body. */
export declare function errorFromAnswer(status: number, body: string): ApiError;

// -- the client --------------------------------------------------------------------------

/** Every method that waits takes a signal: aborting it rejects with the signal's reason. */
export interface Abortable {
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** How long one call may take (default 30 000 ms); past it, `TransportError`. */
  timeoutMs?: number;
  /** Another `fetch` (default: the global one). */
  fetch?: typeof fetch;
  /**
   * Sign every message the client sends (and every start's opening message) with this key,
   * whose public half the server has for the agent (`signing_keys` in the agents file).
   */
  signingKey?: SigningKey | null;
}

export interface StartOptions extends Abortable {
  message?: SendMessage;
  parameters?: Record<string, Json>;
  context?: Record<string, Json>;
  conversationId?: string;
  deadlineMs?: number;
}

export interface SendOptions extends Abortable {
  /** Receivers; none: the other side of this agent's thread. */
  to?: Iterable<string>;
  inReplyTo?: string;
  /** Unix milliseconds. */
  replyBy?: number;
  /** An idempotency key: a retry with it answers the first receipt. */
  messageId?: string;
}

export interface ListOptions extends Abortable {
  participant?: string;
  state?: Status;
  template?: string;
  outcome?: string;
  cursor?: string;
  limit?: number;
  order?: "asc" | "desc";
}

/** Called with each message the other side sends; may return a promise. */
export type Observer = (message: Message) => void | Promise<void>;

export interface AnswerOptions extends Abortable {
  /** How long to wait for the final answer (default 30 000 ms); past it, `AnswerTimeout`. */
  timeoutMs?: number;
}

export interface AskOptions extends AnswerOptions {
  observe?: Observer;
  /** The opening message's reply-by, from now (ms): past it in silence, outcome `timeout`. */
  replyWithinMs?: number;
  parameters?: Record<string, Json>;
  context?: Record<string, Json>;
  conversationId?: string;
  template?: string;
}

export interface CallForProposalsOptions extends AnswerOptions {
  /** The cfp's reply-by, from now (ms); or `replyBy`. */
  replyWithinMs?: number;
  /** The cfp's reply-by, in Unix ms. */
  replyBy?: number;
  observe?: Observer;
  parameters?: Record<string, Json>;
  context?: Record<string, Json>;
  conversationId?: string;
  template?: string;
}

/** The final answer of a request or a query. */
export interface Answer {
  conversationId: string;
  /** How the participant's thread ended (`Outcome`), or null if it has not. */
  outcome: string | null;
  /** The message that ended it (inform, failure, refuse, not-understood), if one did. */
  reply: Message | null;
  /** Everything the participant sent, in order. */
  messages: Message[];
}

/** What a call for proposals collected by its reply-by. */
export interface Proposals {
  conversationId: string;
  /** Proposals made in time, in arrival order. */
  proposals: Message[];
  /** Refusals and other answers that are not proposals. */
  declined: Message[];
  /** Participants whose reply-by passed in silence. */
  silent: string[];
}

/** The default timeout of one call (ms). */
export declare const DEFAULT_TIMEOUT_MS: number;
/** The header naming the caller in open development mode. */
export declare const AGENT_HEADER: "x-agent-id";
/** How long past the cfp's reply-by `callForProposals` waits for the engine (ms). */
export declare const CFP_GRACE_MS: number;

/** An agent's client: `new Client("http://127.0.0.1:7700", "alice", "alice-token")`. */
export declare class Client {
  constructor(baseUrl: string, agentId: string, token?: string | null, options?: ClientOptions);
  readonly baseUrl: string;
  readonly agentId: string;
  readonly timeoutMs: number;
  /** The key the client signs its messages with, if any. */
  signingKey: SigningKey | null;

  /** Signs every message sent from now on with `key` (`null`: stops); answers the client. */
  signingWith(key: SigningKey | null): this;
  /** A message body as this client sends it: with an id and signed when it has a key. */
  signed(conversationId: string, body: SendMessage): SendMessage;
  callApi<T = unknown>(
    method: string,
    path: string,
    options?: { json?: unknown; query?: Record<string, unknown>; body?: string; timeoutMs?: number } & Abortable,
  ): Promise<T>;
  ready(options?: Abortable): Promise<Readiness>;
  start(template: string, participants: Iterable<string>, options?: StartOptions): Promise<ConversationView>;
  send(conversationId: string, performative: string, content?: Json, options?: SendOptions): Promise<SendReceipt>;
  conversation(conversationId: string, options?: Abortable): Promise<ConversationView>;
  moves(conversationId: string, options?: Abortable): Promise<OpenMove[]>;
  audit(conversationId: string, options?: Abortable): Promise<AuditRecord>;
  conversations(options?: ListOptions): Promise<ConversationPage>;
  allConversations(options?: Omit<ListOptions, "cursor" | "limit" | "order">): AsyncGenerator<ConversationSummary>;
  commitments(options?: { role?: "debtor" | "creditor"; state?: string } & Abortable): Promise<CommitmentView[]>;
  releaseCommitment(commitmentId: string, options?: Abortable): Promise<CommitmentView>;
  cancelCommitment(commitmentId: string, options?: Abortable): Promise<CommitmentView>;
  agents(options?: Abortable): Promise<AgentList>;
  templates(options?: Abortable): Promise<TemplateList>;
  pollInbox(after?: number, options?: { waitMs?: number; limit?: number } & Abortable): Promise<InboxPage>;
  acknowledge(through: number, options?: Abortable): Promise<InboxAcked>;
  acknowledgeInbox(options?: Abortable): Promise<InboxAcked>;
  inbox(after?: number): InboxStream;
  events(conversationId: string, after?: number): EventStream;

  request(participant: string, content: Json, options?: AskOptions): Promise<Answer>;
  query(participant: string, content: Json, options?: AskOptions): Promise<Answer>;
  beginRequest(participant: string, content: Json, options?: Omit<AskOptions, "timeoutMs">): Promise<PendingAnswer>;
  beginQuery(participant: string, content: Json, options?: Omit<AskOptions, "timeoutMs">): Promise<PendingAnswer>;
  follow(conversationId: string, participant: string, options?: { observe?: Observer }): PendingAnswer;
  callForProposals(participants: Iterable<string>, content: Json, options?: CallForProposalsOptions): Promise<Proposals>;
  accept(conversationId: string, proposal: Message, content?: Json, options?: Abortable): Promise<SendReceipt>;
  reject(conversationId: string, proposal: Message, content?: Json, options?: Abortable): Promise<SendReceipt>;
  answer(conversationId: string, message: Message, performative: string, content?: Json, options?: Abortable): Promise<SendReceipt>;
  cancel(conversationId: string, content?: Json, options?: { to?: Iterable<string> } & Abortable): Promise<SendReceipt>;
}

// -- signed messages and audit records ---------------------------------------------------

/** The algorithms Colloquy signs with: Ed25519 and P-256. */
export type SigningAlgorithm = "EdDSA" | "ES256";

/** A key that cannot sign: not a key Colloquy signs with, or no key id. */
export declare class SigningError extends ColloquyError {}

/**
 * A private key that signs, named by a key id: `SigningKey.fromPem(pem, "bob-1")` (PKCS#8,
 * as `colloquy audit keygen` writes), `fromFile`, `fromJwk` (a private JWK), `generate`.
 */
export declare class SigningKey {
  readonly alg: SigningAlgorithm;
  readonly kid: string;
  static generate(alg?: SigningAlgorithm, kid?: string): SigningKey;
  static fromPem(pem: string | Uint8Array, kid: string): SigningKey;
  static fromFile(path: string, kid: string): SigningKey;
  static fromJwk(jwk: Record<string, unknown> | string, kid?: string): SigningKey;
  /** The public key as a JWK (`kty`, `crv`, `alg`, `kid`, `x`, and `y` for P-256). */
  publicJwk(): Record<string, string>;
  /** `{keys: [publicJwk()]}`, for the agent's `signing_keys`. */
  publicJwks(): Jwks;
  /** The key as PKCS#8 PEM. */
  privatePem(): string;
  /** A detached compact JWS (`protected..signature`) over `payload`. */
  sign(payload: string | Uint8Array, typ: string): string;
  /** The message signature over `fields` in RFC 8785 form. */
  signFields(fields: SignedFields): string;
}

/** Public keys that check signatures, by key id. */
export declare class KeySet {
  static fromJwks(...documents: (Jwks | string)[]): KeySet;
  addJwks(jwks: Jwks | string): this;
  readonly size: number;
  has(kid: string): boolean;
  /** The id of the key whose detached signature `jws` over `payload` is; throws why not. */
  verify(jws: string, payload: string | Uint8Array): string;
}

/** What a sender signs (every key present, null when absent; `to` as sent). */
export interface SignedFields {
  conversation_id: string;
  message_id: string | null;
  sender: string;
  performative: string;
  to: string[];
  content: Json;
  in_reply_to: string | null;
  reply_by: number | null;
}

export declare function signedFields(
  conversationId: string,
  sender: string,
  message: { messageId?: string | null; performative: string; to?: Iterable<string> | null; content?: Json; inReplyTo?: string | null; replyBy?: number | null },
): SignedFields;
/** The id of the key in `keys` whose signature `jws` over `fields` is; throws `unknown key: …` or `altered: …`. */
export declare function verifyMessage(keys: KeySet, fields: SignedFields, jws: string): string;
/** A fresh UUIDv7. */
export declare function uuid7(): string;
/** `value` in its RFC 8785 (JCS) form. */
export declare function canonical(value: unknown): string;

/** An audit record, as the verifier takes it (kept as a name for code written against it). */
export type VerifiableRecord = AuditRecord;

/** A record that does not verify: which event (if one) and which check. */
export declare class AuditBroken extends ColloquyError {
  readonly seq: number | null;
  /** `format`, `order`, `digest`, `chain`, `summary`, `start`, `message signature`, `template`, `engine signature`. */
  readonly check: string;
  readonly why: string;
}

/** The chain a record's events make. */
export interface VerifiedChain {
  length: number;
  head: string;
  chainedFrom: number | null;
  /** How many events the reader saw only as digests. */
  redacted: number;
}

/** What a record proved. */
export interface VerifiedRecord {
  chain: VerifiedChain;
  /** The key that made the engine's signature, when there is one and keys were given. */
  engineKey: string | null;
  /** The record holds an engine signature that no key was given to check. */
  engineSignatureUnchecked: boolean;
  /** The template source was there and matches the revision. */
  templateChecked: boolean;
  /** How many messages carried their sender's signature, each checked. */
  signedMessages: number;
}

export interface VerifyOptions {
  /** The engine's audit keys (`GET /v1/audit/keys`); without them its signature is unchecked. */
  engineKeys?: Jwks | Jwks[] | KeySet;
  /** Senders' keys by agent id, checked instead of the record's `signer_keys`. */
  agentKeys?: Record<string, Jwks | KeySet>;
}

/** Checks a record as `colloquy audit verify --jwks` does; throws `AuditBroken`. */
export declare function verifyRecord(record: VerifiableRecord, options?: VerifyOptions): VerifiedRecord;
/** Checks the chain, the summary and the start alone. */
export declare function verifyChain(record: VerifiableRecord): VerifiedChain;
/** What the engine signs over a record, in RFC 8785 form. */
export declare function signedPayload(record: VerifiableRecord): string;
/** An event's body digest. */
export declare function bodyDigest(event: Record<string, unknown>): string;
/** The chain hash of an event with this `prev` and body digest. */
export declare function link(prev: string, body: string): string;
/** The `prev` of a conversation's first event. */
export declare const GENESIS: string;

/** A request or query under way. */
export declare class PendingAnswer {
  readonly conversationId: string;
  readonly participant: string;
  /** The answer so far. */
  readonly result: Answer;
  /** The final answer; may be awaited again after an `AnswerTimeout`. */
  answer(options?: AnswerOptions): Promise<Answer>;
  /** `cancel` to the participant: once it confirms, the outcome is `cancelled`. */
  cancel(content?: Json, options?: Abortable): Promise<SendReceipt>;
  /** Stops following the conversation. */
  close(): void;
}

// -- streams -----------------------------------------------------------------------------

/** An agent's inbox, in order, for ever; reconnects and resumes on its own. */
export declare class InboxStream implements AsyncIterable<InboxItem> {
  /** The `seq` of the last item handed out. */
  readonly position: number;
  next(options?: Abortable): Promise<InboxItem>;
  close(): void;
  [Symbol.asyncIterator](): AsyncGenerator<InboxItem>;
}

/** A conversation's events, ending after `completed`; reconnects and resumes on its own. */
export declare class EventStream implements AsyncIterable<ConversationEvent> {
  /** The `seq` of the last event handed out. */
  readonly position: number;
  /** The next event, or null once the conversation completed. */
  next(options?: Abortable): Promise<ConversationEvent | null>;
  close(): void;
  [Symbol.asyncIterator](): AsyncGenerator<ConversationEvent>;
}

/** One server-sent event. */
export interface SseEvent {
  id: string | null;
  event: string | null;
  data: string;
}

/** The server-sent events parser the streams use. */
export declare class SseParser {
  push(chunk: Uint8Array | string): SseEvent[];
}

// -- the participant's side --------------------------------------------------------------

/** A reply helper's options; the handler's signal bounds it unless another is given. */
export type ReplyOptions = Abortable;

/** A message from the inbox, with what is needed to answer it. */
export declare class Incoming {
  constructor(client: Client, item: InboxItem, signal?: AbortSignal);
  readonly client: Client;
  readonly item: InboxItem;
  /** Aborted when the agent's run ends before the handler does. */
  readonly signal: AbortSignal | undefined;
  readonly seq: number;
  readonly conversationId: string;
  readonly template: string | null;
  readonly message: Message;
  readonly performative: string;
  readonly sender: string;
  readonly content: Json;
  reply(performative: string, content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  agree(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  refuse(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  inform(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  failure(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  notUnderstood(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  propose(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  /** `accept-proposal`. */
  accept(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  /** `reject-proposal`. */
  reject(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
  cancel(content?: Json, options?: ReplyOptions): Promise<SendReceipt>;
}

export type Handler = (msg: Incoming) => unknown | Promise<unknown>;

export interface AgentOptions {
  /** Handlers at once (default 1); one conversation's messages always go in order. */
  concurrency?: number;
  /** Told of a handler that threw (default: `console.error`); its message counts as handled. */
  onError?: (error: unknown, incoming: Incoming) => void;
}

export interface RunOptions extends Abortable {
  /** Serve from this inbox position (default 0: every entry not yet acknowledged). */
  after?: number;
  /** How long handlers under way may finish after `stop()` (default 10 000 ms). */
  graceMs?: number;
}

/** How long `run` lets handlers under way finish after `stop()` (ms). */
export declare const DEFAULT_GRACE_MS: number;

/** An agent's handlers, run over its inbox. */
export declare class Agent {
  constructor(client: Client, options?: AgentOptions);
  readonly client: Client;
  readonly concurrency: number;
  /** The `seq` of the last inbox item handled without a gap. */
  readonly position: number;
  on(performative: string, handler: Handler): this;
  on(performative: string, template: string | { template?: string }, handler: Handler): this;
  handlerFor(item: InboxItem): Handler | null;
  /** Stop taking messages, let handlers under way finish, acknowledge, return. */
  stop(): void;
  /** Serves the inbox until `stop()`; aborting the signal stops at once. */
  run(options?: RunOptions): Promise<void>;
}
