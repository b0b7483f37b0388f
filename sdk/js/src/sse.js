// A minimal server-sent events reader: enough of the WHATWG event-stream format for what a
// Colloquy server sends (`id`, `event` and `data` lines, comments as keep-alives).

/**
 * @typedef {object} SseEvent
 * @property {string | null} id
 * @property {string | null} event
 * @property {string} data
 */

/** Turns chunks of bytes into events; an event (or a UTF-8 character) may be split across
 * any chunks. */
export class SseParser {
  #decoder = new TextDecoder("utf-8");
  #buffer = "";
  #id = null;
  #event = null;
  #data = [];

  /**
   * Adds a chunk; returns the events it completed, in order.
   *
   * @param {Uint8Array | string} chunk
   * @returns {SseEvent[]}
   */
  push(chunk) {
    this.#buffer += typeof chunk === "string" ? chunk : this.#decoder.decode(chunk, { stream: true });
    const events = [];
    let start = 0;
    for (let end = this.#buffer.indexOf("\n"); end !== -1; end = this.#buffer.indexOf("\n", start)) {
      let line = this.#buffer.slice(start, end);
      start = end + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (this.#data.length > 0) {
          events.push({ id: this.#id, event: this.#event, data: this.#data.join("\n") });
        }
        this.#id = null;
        this.#event = null;
        this.#data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") this.#id = value;
      else if (field === "event") this.#event = value;
      else if (field === "data") this.#data.push(value);
    }
    this.#buffer = this.#buffer.slice(start);
    return events;
  }
}
