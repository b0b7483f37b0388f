// What a call can fail with.
//
// Every error answer of the API carries `{"error": {"code", "message", "pointer"?}}`; it is
// thrown as the `ApiError` subclass of its HTTP status, with the code, the message, the
// pointer (a JSON pointer into the request naming the field at fault) and the status, so
// agents catch the kind of failure they can act on (`err instanceof Conflict`) and read the
// code for the detail (`err.code === "duplicate_conversation"`). The status table is
// docs/http-api.md, "Errors". The classes are the Python SDK's, one for one.

/** How much of an error body that is not the API's is kept as the message. */
const FOREIGN_BODY_CHARS = 512;

/** Base of every error the SDK throws (an aborted wait throws the signal's reason instead). */
export class ColloquyError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server answered with an error body. */
export class ApiError extends ColloquyError {
  /** The HTTP status this class stands for (`null`: any status without a class). */
  static statusCode = null;

  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   * @param {string} [pointer]
   */
  constructor(status, code, message, pointer) {
    super(`HTTP ${status} ${code}: ${message}${pointer ? ` at ${pointer}` : ""}`);
    this.status = status;
    this.code = code;
    /** The server's message alone (`.message` also names the status and code). */
    this.detail = message;
    this.pointer = pointer ?? null;
  }

  /** Whether the same call may succeed later (the server's 5xx: nothing was recorded). */
  get transient() {
    return this.status >= 500;
  }
}

/** 400: malformed JSON, a missing, unknown or mistyped field, a bad query or path. */
export class BadRequest extends ApiError {
  static statusCode = 400;
}

/** 401: no credentials, or a token the server does not know. */
export class Unauthenticated extends ApiError {
  static statusCode = 401;
}

/** 403: not a party to the conversation, another agent's inbox, the admin acting. */
export class Forbidden extends ApiError {
  static statusCode = 403;
}

/** 404: unknown conversation, template, commitment or route. */
export class NotFound extends ApiError {
  static statusCode = 404;
}

/** 405: a known path asked with another method. */
export class MethodNotAllowed extends ApiError {
  static statusCode = 405;
}

/** 408: the request's body did not arrive in full within the server's 30 s. */
export class RequestTimeout extends ApiError {
  static statusCode = 408;
}

/**
 * 409: out of protocol (under `enforce`), a duplicate conversation id, a settled commitment,
 * a conversation ended at its message limit.
 */
export class Conflict extends ApiError {
  static statusCode = 409;
}

/** 410: a message to a conversation that has ended. */
export class ConversationEnded extends ApiError {
  static statusCode = 410;
}

/** 413: a body over 1 MiB, or a context over the template's cap. */
export class PayloadTooLarge extends ApiError {
  static statusCode = 413;
}

/**
 * 422: well formed, but the conversation refuses it: an unknown performative, a schema
 * violation, a rule or hook refusing the message, a taken `message_id`.
 */
export class Unprocessable extends ApiError {
  static statusCode = 422;
}

/**
 * 503: the store is unreachable, the hook pool is full, the server is shutting down or has
 * no template loaded. Nothing was recorded: retry.
 */
export class ServiceUnavailable extends ApiError {
  static statusCode = 503;
}

/** Any other 5xx: the detail is in the server's log, never in the answer. */
export class ServerError extends ApiError {}

/** The server could not be reached, the connection broke, or a call outlived its timeout. */
export class TransportError extends ColloquyError {}

/** The server answered something this SDK cannot read (not a Colloquy server?). */
export class DecodeError extends ColloquyError {}

/**
 * An initiator helper's time ran out before the final answer. The conversation goes on
 * without the helper: read it with `client.conversation(err.conversationId)`, follow it
 * again, or cancel it.
 */
export class AnswerTimeout extends ColloquyError {
  /**
   * @param {string} conversationId
   * @param {number} timeoutMs
   */
  constructor(conversationId, timeoutMs) {
    super(`no final answer in conversation ${JSON.stringify(conversationId)} within ${timeoutMs} ms`);
    this.conversationId = conversationId;
    this.timeoutMs = timeoutMs;
  }
}

const BY_STATUS = new Map(
  [
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
  ].map((cls) => [cls.statusCode, cls]),
);

/**
 * The error for an error answer: its status's class, built from its body. A body that is
 * not the API's error body (a proxy's page, a bare 400 from the HTTP layer) becomes code
 * `http_error` with the body's text as the message.
 *
 * @param {number} status
 * @param {string} body
 * @returns {ApiError}
 */
export function errorFromAnswer(status, body) {
  let code = "http_error";
  let message = body.slice(0, FOREIGN_BODY_CHARS);
  let pointer;
  try {
    const detail = JSON.parse(body)?.error;
    if (typeof detail?.code === "string" && typeof detail?.message === "string") {
      ({ code, message } = detail);
      pointer = typeof detail.pointer === "string" ? detail.pointer : undefined;
    }
  } catch {
    // Not JSON: the foreign body's text stays the message.
  }
  const cls = BY_STATUS.get(status) ?? (status >= 500 ? ServerError : ApiError);
  return new cls(status, code, message, pointer);
}
