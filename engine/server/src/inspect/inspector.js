// The Colloquy web inspector (docs/inspector.md). Plain JavaScript, no framework, no build
// step: what is served is what is written here. It reads the HTTP API with the credential the
// user types in and changes nothing (GET requests only).
//
// Why two classic scripts of about 1,000 and 700 lines rather than modules: no build step
// and nothing to resolve (the Content-Security-Policy allows only 'self'). The pages of
// templates and hooks are in templates.js, loaded before this file; the other views'
// sections are marked below.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const ENGINE = 'colloquy:engine';
/** 'tokens' (bearer tokens, an agents file) or 'open' (development mode: X-Agent-Id). */
const MODE = document.body.dataset.authMode === 'open' ? 'open' : 'tokens';
/** Where the credential lives: this tab only, gone when it closes. Never in a URL. */
const CREDENTIAL_KEY = MODE === 'open' ? 'colloquy-inspector-agent' : 'colloquy-inspector-token';
/** Conversations per list page (the API's default). */
const PAGE_SIZE = 50;
/** Height of one row of the sequence diagram, in pixels; rows are drawn only when visible. */
const ROW = 30;
/** Rows drawn above and below the visible ones, so a scroll rarely shows a blank. */
const OVERSCAN = 12;
/** Narrowest lane of the sequence diagram. */
const LANE_MIN = 140;
/** Longest content summary on an arrow. */
const SUMMARY_CHARS = 40;
/** Longest wait before following an event stream again after it broke. */
const RECONNECT_MAX_MS = 10000;
const OUTCOMES = ['success', 'failure', 'refused', 'timeout', 'cancelled', 'not_understood',
  'rejected', 'no_bids', 'escalated', 'violated'];

const main = document.getElementById('main');
const banner = document.getElementById('banner');
const who = document.getElementById('who');

// ---------------------------------------------------------------------------------------
// Small DOM helpers

/** An HTML element: `attrs` are attributes (`data-*` included), `on*` functions listeners. */
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** An SVG element, as `h`. */
function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

function setAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      node.addEventListener(key.slice(2), value);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

function time(ms) {
  if (ms === null || ms === undefined) return '—';
  const date = new Date(ms);
  return date.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 19);
}

function summary(content) {
  let text;
  try {
    text = typeof content === 'string' ? content : JSON.stringify(content);
  } catch (_) {
    text = String(content);
  }
  if (text === undefined || text === '{}' || text === 'null') return '';
  return text.length > SUMMARY_CHARS ? text.slice(0, SUMMARY_CHARS - 1) + '…' : text;
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

function hashLink(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) if (value) query.set(key, value);
  const text = query.toString();
  return '#' + path + (text ? '?' + text : '');
}

// ---------------------------------------------------------------------------------------
// The API

function credential() {
  return sessionStorage.getItem(CREDENTIAL_KEY);
}

function authHeaders() {
  const value = credential();
  if (!value) return {};
  return MODE === 'open' ? { 'X-Agent-Id': value } : { Authorization: 'Bearer ' + value };
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** GET `path` as JSON (or text), with the credential. */
async function api(path, { signal, text = false } = {}) {
  const response = await fetch(path, {
    headers: { ...authHeaders(), Accept: text ? 'text/plain' : 'application/json' },
    signal,
    cache: 'no-store',
  });
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      // Not every failure has a JSON body (a proxy's, say): the status says enough.
    }
    const error = body && body.error ? body.error : {};
    throw new ApiError(response.status, error.code || '', error.message || response.statusText);
  }
  return text ? response.text() : response.json();
}

/** Prometheus text as [{name, labels, value}]. */
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1]] = pair[2];
    }
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

function metricSum(samples, name, where = () => true) {
  return samples.filter((m) => m.name === name && where(m.labels)).reduce((a, m) => a + m.value, 0);
}

/**
 * Follows a server-sent event stream with fetch (EventSource cannot send an Authorization
 * header), calling `onEvents` with each batch of parsed events. Reconnects with
 * `Last-Event-ID` after a break, backing off up to RECONNECT_MAX_MS; stops when `signal`
 * aborts or `isOver()` says the stream has said all it will.
 */
async function followStream(path, { signal, onEvents, onState, isOver }) {
  let lastId = null;
  let backoff = 500;
  while (!signal.aborted) {
    try {
      const headers = { ...authHeaders(), Accept: 'text/event-stream' };
      if (lastId !== null) headers['Last-Event-ID'] = lastId;
      const response = await fetch(path, { headers, signal, cache: 'no-store' });
      if (!response.ok) {
        let message = response.statusText;
        try {
          message = (await response.json()).error.message;
        } catch (_) {
          // The status text will do.
        }
        onState('error', new ApiError(response.status, '', message));
        if (response.status < 500) return;
      } else {
        onState('live');
        backoff = 500;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          const blocks = buffer.split(/\r?\n\r?\n/);
          buffer = blocks.pop();
          const events = [];
          for (const block of blocks) {
            const event = parseEventBlock(block);
            if (event) {
              if (event.id !== null) lastId = event.id;
              events.push(event);
            }
          }
          if (events.length) onEvents(events);
        }
      }
    } catch (error) {
      if (signal.aborted) return;
      onState('error', error);
    }
    if (isOver()) {
      onState('ended');
      return;
    }
    onState('reconnecting');
    await new Promise((resolve) => setTimeout(resolve, backoff));
    backoff = Math.min(backoff * 2, RECONNECT_MAX_MS);
  }
}

/** One SSE block (`id:`, `event:`, `data:` lines) as {id, type, data}; null for a comment. */
function parseEventBlock(block) {
  let id = null;
  let type = 'message';
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'id') id = value;
    else if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return null;
  let parsed;
  try {
    parsed = JSON.parse(data.join('\n'));
  } catch (_) {
    return null;
  }
  return { id, type, data: parsed };
}

// ---------------------------------------------------------------------------------------
// Frame: who is looking, the banner, navigation

function showWho() {
  const value = credential();
  who.replaceChildren();
  if (!value) return;
  const label = MODE === 'open' ? 'viewing as ' + value : 'signed in';
  who.append(
    h('span', { class: 'muted' }, label),
    h('button', {
      type: 'button',
      class: 'link',
      onclick: () => {
        sessionStorage.removeItem(CREDENTIAL_KEY);
        route();
      },
    }, MODE === 'open' ? 'change' : 'sign out'),
  );
}

function showBanner() {
  if (MODE === 'open') {
    banner.hidden = false;
    banner.textContent = 'Open development mode: this server checks no tokens, and anyone '
      + 'may act as any agent (X-Agent-Id). The inspector shows what the agent you name may see.';
  } else {
    banner.hidden = true;
  }
}

function signIn() {
  const input = h('input', {
    id: 'credential',
    name: 'credential',
    type: MODE === 'open' ? 'text' : 'password',
    autocomplete: 'off',
    required: true,
    placeholder: MODE === 'open' ? 'agent id, e.g. alice' : 'token',
  });
  const form = h('form', {
    class: 'card signin',
    onsubmit: (event) => {
      event.preventDefault();
      const value = input.value.trim();
      if (!value) return;
      sessionStorage.setItem(CREDENTIAL_KEY, value);
      route();
    },
  },
  h('h1', {}, MODE === 'open' ? 'View as an agent' : 'Sign in'),
  h('p', {}, MODE === 'open'
    ? 'Name the agent whose view to show. In open development mode nobody checks it.'
    : 'Paste an agent\u2019s token, or the admin token to see everything. It stays in this '
      + 'tab (sessionStorage) and travels only as an Authorization header.'),
  h('label', { for: 'credential' }, MODE === 'open' ? 'Agent id' : 'Token'),
  input,
  h('button', { type: 'submit', id: 'signin' }, MODE === 'open' ? 'View' : 'Sign in'));
  main.replaceChildren(form);
  input.focus();
}

function failure(error) {
  if (error && error.name === 'AbortError') return null;
  const box = h('div', { class: 'error', role: 'alert' });
  if (error instanceof ApiError) {
    box.append(h('strong', {}, `${error.status} ${error.code || ''}`), ' ', error.message);
    if (error.status === 401) {
      box.append(' ', h('button', {
        type: 'button',
        class: 'link',
        onclick: () => {
          sessionStorage.removeItem(CREDENTIAL_KEY);
          route();
        },
      }, 'Sign in again'));
    }
  } else {
    box.append(String(error && error.message ? error.message : error));
  }
  return box;
}

let routeController = null;

function route() {
  if (routeController) routeController.abort();
  routeController = new AbortController();
  const signal = routeController.signal;
  const hash = location.hash.replace(/^#/, '') || '/conversations';
  const [path, query] = hash.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || '');
  const page = parts[0] === 'c' ? 'conversations' : parts[0] || 'conversations';
  for (const link of document.querySelectorAll('#nav a')) {
    if (link.dataset.page === page) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  showBanner();
  showWho();
  main.replaceChildren();
  document.body.dataset.page = page;
  if (parts[0] === 'bench') {
    benchPage(params, signal);
    return;
  }
  if (!credential()) {
    signIn();
    return;
  }
  const pages = {
    conversations: () => conversationsPage(params, signal),
    c: () => conversationPage(parts[1] || '', signal, params),
    templates: () => (parts[1] ? templatePage(parts[1], signal) : templatesPage(signal)),
    hooks: () => hooksPage(signal),
    agents: () => agentsPage(signal),
  };
  (pages[parts[0]] || pages.conversations)().catch((error) => {
    const shown = failure(error);
    if (shown) main.append(shown);
  });
}

// ---------------------------------------------------------------------------------------
// Conversations

async function conversationsPage(params, signal) {
  const filters = {
    template: params.get('template') || '',
    state: params.get('state') || '',
    outcome: params.get('outcome') || '',
    agent: params.get('agent') || '',
  };
  const cursor = params.get('cursor') || '';
  const query = new URLSearchParams({ limit: String(PAGE_SIZE), order: 'desc' });
  if (filters.template) query.set('template', filters.template);
  if (filters.state) query.set('state', filters.state);
  if (filters.outcome) query.set('outcome', filters.outcome);
  if (filters.agent) query.set('participant', filters.agent);
  if (cursor) query.set('cursor', cursor);

  const templateSelect = h('select', { name: 'template', id: 'f-template' },
    h('option', { value: '' }, 'any template'));
  const form = h('form', {
    class: 'filters',
    onsubmit: (event) => {
      event.preventDefault();
      const data = new FormData(form);
      location.hash = hashLink('/conversations', Object.fromEntries(data.entries()));
    },
  },
  h('label', {}, 'Template ', templateSelect),
  h('label', {}, 'Status ', h('select', { name: 'state', id: 'f-state' },
    ['', 'active', 'completed'].map((v) => h('option', { value: v, selected: v === filters.state },
      v || 'any')))),
  h('label', {}, 'Outcome ', h('select', { name: 'outcome', id: 'f-outcome' },
    ['', ...OUTCOMES].map((v) => h('option', { value: v, selected: v === filters.outcome },
      v || 'any')))),
  h('label', {}, 'Agent ', h('input', { name: 'agent', id: 'f-agent', value: filters.agent,
    placeholder: 'any', size: 12 })),
  h('button', { type: 'submit' }, 'Filter'));
  const counts = h('p', { class: 'counts', id: 'counts' }, 'counting…');
  const list = h('div', { id: 'conversation-list' }, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Conversations'), form, counts, list);

  // The template names for the filter, and the engine-wide counts, beside the page itself.
  api('/v1/templates', { signal }).then((catalog) => {
    const names = catalog.templates.map((t) => t.name);
    if (filters.template && !names.includes(filters.template)) names.push(filters.template);
    for (const name of names) {
      templateSelect.append(h('option', { value: name, selected: name === filters.template }, name));
    }
  }).catch(() => {
    templateSelect.replaceWith(h('input', { name: 'template', id: 'f-template',
      value: filters.template, placeholder: 'any', size: 14 }));
  });
  api('/metrics', { signal, text: true }).then((text) => {
    const samples = parseMetrics(text);
    const live = metricSum(samples, 'colloquy_live_conversations');
    const started = metricSum(samples, 'colloquy_conversations_started_total');
    const byOutcome = {};
    for (const m of samples.filter((m) => m.name === 'colloquy_conversations_completed_total')) {
      byOutcome[m.labels.outcome] = (byOutcome[m.labels.outcome] || 0) + m.value;
    }
    const completed = Object.values(byOutcome).reduce((a, b) => a + b, 0);
    const detail = Object.entries(byOutcome).map(([k, v]) => `${k} ${v}`).join(', ');
    counts.textContent = `This engine since it started (from /metrics, every conversation): `
      + `${live} active in memory · ${started} started · ${completed} completed`
      + (detail ? ` (${detail})` : '');
  }).catch(() => {
    counts.textContent = '';
  });

  const page = await api('/v1/conversations?' + query, { signal });
  const rows = page.conversations;
  const table = h('table', { class: 'list', id: 'conversations' },
    h('thead', {}, h('tr', {}, ['Conversation', 'Template', 'Initiator', 'Participants',
      'Status', 'Outcome', 'Events', 'Deadline'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((c) => h('tr', { 'data-id': c.id },
      h('td', {}, h('a', { href: '#/c/' + encodeURIComponent(c.id), class: 'mono' }, c.id)),
      h('td', {}, c.template),
      h('td', {}, c.initiator),
      h('td', { class: 'wrap' }, c.participants.length > 6
        ? `${c.participants.slice(0, 6).join(', ')} +${c.participants.length - 6}`
        : c.participants.join(', ')),
      h('td', {}, h('span', { class: 'pill ' + c.status }, c.status)),
      h('td', {}, c.outcome || ''),
      h('td', { class: 'num' }, String(c.version)),
      h('td', {}, c.deadline ? time(c.deadline) : '')))));
  const paging = h('nav', { class: 'paging', 'aria-label': 'Pages' },
    cursor ? h('a', { href: hashLink('/conversations', { ...filters }) }, '« first page') : null,
    page.next_cursor
      ? h('a', { id: 'next-page', href: hashLink('/conversations',
        { ...filters, cursor: page.next_cursor }) }, 'next page »')
      : h('span', { class: 'muted' }, 'last page'));
  list.replaceChildren(...[rows.length ? table : h('p', { class: 'muted' },
    'No conversations here.'), paging].filter(Boolean));
}

// ---------------------------------------------------------------------------------------
// One conversation: the model, fed by events

/** What the diagram and the side panel show, built from the conversation's events. */
class ConversationModel {
  constructor() {
    this.lanes = [];
    this.laneIndex = new Map();
    this.rows = [];
    this.messages = new Map();
    this.threads = new Map();
    this.commitments = new Map();
    this.vars = {};
    this.context = null;
    this.parameters = null;
    this.status = 'active';
    this.outcome = null;
    this.deadline = null;
    this.template = '';
    this.lanesChanged = false;
    // The inputs a replay or a shadow twin re-drives, numbered as their reports number
    // steps: step 0 is the start (with the opening message, when the initiator sent one
    // with it), step N the Nth message of a real party after it.
    this.start = null;
    this.opening = null;
    this.inputs = [];
    this.anyMessage = false;
    this.end = null;
  }

  /** The row a divergence's `step` points at, as {seq, kind}; null when not (yet) there. */
  stepRow(step) {
    if (step === 0) {
      if (this.opening !== null) return { seq: this.opening, kind: 'msg' };
      return this.start && { seq: this.start.seq, kind: 'note' };
    }
    if (step >= 1 && step <= this.inputs.length) return { seq: this.inputs[step - 1], kind: 'msg' };
    // One past the last input: the end of the recording.
    if (step === this.inputs.length + 1 && this.end !== null) return { seq: this.end, kind: 'note' };
    return null;
  }

  lane(party) {
    if (!this.laneIndex.has(party)) {
      // The engine's lane stays last.
      const engine = this.laneIndex.get(ENGINE);
      if (party !== ENGINE && engine !== undefined) {
        this.lanes.splice(engine, 0, party);
      } else {
        this.lanes.push(party);
      }
      this.laneIndex = new Map(this.lanes.map((p, i) => [p, i]));
      this.lanesChanged = true;
    }
    return this.laneIndex.get(party);
  }

  /** Starts from the conversation as `GET /v1/conversations/{id}` shows it. */
  fromView(view) {
    this.lane(view.initiator);
    for (const p of view.participants) this.lane(p);
    this.lane(ENGINE);
    for (const t of view.threads) this.threads.set(t.participant, { ...t });
    for (const c of view.commitments) this.commitments.set(c.id, { ...c });
    this.vars = view.vars || {};
    this.context = view.context;
    this.parameters = view.parameters;
    this.status = view.status;
    this.outcome = view.outcome || null;
    this.deadline = view.deadline || null;
    this.template = view.template;
  }

  note(seq, lane, tone, text, at) {
    this.lane(lane);
    this.rows.push({ kind: 'note', seq, lane, tone, text, at });
  }

  /** Applies one event (as the event stream sends it). */
  apply(event) {
    const seq = event.seq;
    switch (event.type) {
      case 'started':
        this.start = { seq, at: event.at, initiator: event.initiator };
        this.lane(event.initiator);
        for (const p of event.participants) this.lane(p);
        this.lane(ENGINE);
        this.context = event.context;
        this.parameters = event.parameters;
        if (event.deadline) this.deadline = event.deadline;
        this.note(seq, event.initiator, 'state', `started ${event.template}`
          + (event.deadline ? ` · ends by ${clock(event.deadline)}` : ''), event.at);
        break;
      case 'message_accepted': {
        const m = event.message;
        this.lane(m.sender);
        for (const r of m.receivers) this.lane(r);
        this.messages.set(String(seq), m);
        if (m.sender !== ENGINE) {
          const opening = this.start && !this.anyMessage && m.sender === this.start.initiator
            && event.at === this.start.at;
          if (opening) this.opening = seq;
          else this.inputs.push(seq);
        }
        this.anyMessage = true;
        this.rows.push({ kind: 'msg', seq, from: m.sender, to: m.receivers,
          performative: m.performative, summary: summary(m.content), at: event.at });
        for (const t of event.transitions || []) this.transition(seq, t, 'state');
        break;
      }
      case 'message_refused':
        // Never delivered: a note on the sender's lane, not an arrow.
        this.note(seq, event.sender, 'violation', `refused ${event.performative}: ${event.code}`
          + (event.pointer ? ` at ${event.pointer}` : ''), event.at);
        break;
      case 'thread_expired':
        this.transition(seq, event, 'violation', 'reply-by passed: ');
        break;
      case 'thread_deadline_set': {
        const thread = this.threads.get(event.participant) || { participant: event.participant };
        thread.deadline = event.deadline || null;
        this.threads.set(event.participant, thread);
        this.note(seq, event.participant, 'deadline',
          event.deadline ? `reply by ${clock(event.deadline)}` : 'reply-by cleared', event.at);
        break;
      }
      case 'violation_recorded': {
        const v = event.violation;
        this.note(seq, v.agent || ENGINE, 'violation', `violation ${v.kind}: ${v.detail}`, event.at);
        break;
      }
      case 'commitment_created': {
        const { seq: _s, at: _a, type: _t, ...c } = event;
        this.commitments.set(c.id, c);
        this.note(seq, c.debtor, 'commit', `commitment ${c.name} ${c.state}`
          + ` (owed to ${c.creditor})` + (c.deadline ? ` due ${clock(c.deadline)}` : ''), event.at);
        break;
      }
      case 'commitment_moved': {
        const c = this.commitments.get(event.id) || { id: event.id, name: event.id };
        c.state = event.to;
        c.deadline = event.deadline || null;
        this.commitments.set(event.id, c);
        this.note(seq, c.debtor || ENGINE, 'commit', `commitment ${c.name} → ${event.to}`
          + (event.deadline ? ` due ${clock(event.deadline)}` : ''), event.at);
        break;
      }
      case 'vars_merged':
        Object.assign(this.vars, event.vars);
        this.note(seq, ENGINE, 'action', `vars: ${summary(event.vars)}`, event.at);
        break;
      case 'deadline_set':
        this.deadline = event.deadline || null;
        this.note(seq, ENGINE, 'deadline',
          event.deadline ? `conversation ends by ${clock(event.deadline)}` : 'no deadline', event.at);
        break;
      case 'retry_scheduled':
        this.note(seq, ENGINE, 'action', `retry ${event.attempt} at ${clock(event.retry_at)}`,
          event.at);
        break;
      case 'retry_fired':
        this.note(seq, ENGINE, 'action', `retry ${event.attempt} fired`, event.at);
        break;
      case 'escalated':
        this.lane(event.to);
        this.note(seq, ENGINE, 'action', `escalated to ${event.to}: ${event.reason}`, event.at);
        break;
      case 'completed':
        this.end = seq;
        this.status = 'completed';
        this.outcome = event.outcome;
        this.note(seq, ENGINE, 'end', `completed: ${event.outcome}`
          + (event.reason ? ` (${event.reason})` : ''), event.at);
        break;
      default:
        this.note(seq, ENGINE, 'action', event.type, event.at);
    }
  }

  transition(seq, t, tone, prefix = '') {
    const thread = this.threads.get(t.participant) || { participant: t.participant };
    thread.state = t.to;
    thread.outcome = t.outcome || thread.outcome || null;
    if ('deadline' in t) thread.deadline = t.deadline || null;
    this.threads.set(t.participant, thread);
    this.note(seq, t.participant, tone, `${prefix}${t.from} → ${t.to}`
      + (t.outcome ? ` (${t.outcome})` : '') + (t.deadline ? ` · reply by ${clock(t.deadline)}` : ''),
    t.at);
  }
}

/** The virtualised sequence diagram of a model, drawn into `host`. */
class SequenceDiagram {
  constructor(host, model, onSelect) {
    this.model = model;
    this.onSelect = onSelect;
    this.scroller = h('div', { class: 'seq-scroll', id: 'sequence', tabindex: '0',
      'aria-label': 'Sequence diagram: click a message, or use the up and down arrows, to '
        + 'show its JSON' });
    this.head = s('svg', { class: 'seq-head', height: 36 });
    this.headBox = h('div', { class: 'seq-headbox' }, this.head);
    this.body = h('div', { class: 'seq-body' });
    this.scroller.append(this.headBox, this.body);
    host.append(this.scroller);
    this.pending = false;
    this.selected = null;
    /** The row marked (a divergence's step), as {seq, kind}. */
    this.marked = null;
    this.scroller.addEventListener('scroll', () => this.schedule());
    this.scroller.addEventListener('click', (event) => {
      const row = event.target.closest('g.msg');
      if (row) this.select(row.dataset.seq);
    });
    // Up and down arrows step through the messages, as a click on each would.
    this.scroller.addEventListener('keydown', (event) => {
      if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
      const index = this.model.rows.findIndex((r) => String(r.seq) === this.selected);
      const step = event.key === 'ArrowDown' ? 1 : -1;
      for (let i = (index < 0 && step < 0 ? this.model.rows.length : index) + step;
        i >= 0 && i < this.model.rows.length; i += step) {
        if (this.model.rows[i].kind === 'msg') {
          event.preventDefault();
          this.reveal(i);
          this.select(String(this.model.rows[i].seq));
          return;
        }
      }
    });
    this.resizes = new ResizeObserver(() => this.schedule());
    this.resizes.observe(this.scroller);
  }

  isMarked(row) {
    return this.marked !== null && this.marked.seq === row.seq && this.marked.kind === row.kind;
  }

  /** Stops watching the diagram's size (the page moved on). */
  close() {
    this.resizes.disconnect();
  }

  /** Scrolls row `index` into view if it is not. */
  reveal(index) {
    const top = index * ROW + 36;
    const el = this.scroller;
    if (top < el.scrollTop + 36 || top + ROW > el.scrollTop + el.clientHeight) {
      el.scrollTop = Math.max(0, top - el.clientHeight / 2);
    }
  }

  laneWidth() {
    const lanes = Math.max(this.model.lanes.length, 1);
    return Math.max(LANE_MIN, Math.floor((this.scroller.clientWidth - 2) / lanes));
  }

  x(party) {
    return this.model.laneIndex.get(party) * this.laneWidth() + this.laneWidth() / 2;
  }

  select(seq) {
    this.selected = seq;
    this.onSelect(seq);
    this.render();
  }

  /** Whether the view is at the bottom, so new rows should scroll into view. */
  atBottom() {
    const el = this.scroller;
    return el.scrollTop + el.clientHeight >= el.scrollHeight - ROW * 2;
  }

  /** Draws at the next frame (many events in one frame draw once). */
  schedule(follow = false) {
    if (follow) this.follow = this.follow || this.atBottom();
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const model = this.model;
    const laneW = this.laneWidth();
    const width = laneW * model.lanes.length;
    const height = model.rows.length * ROW + ROW;
    this.body.style.height = height + 'px';
    this.body.style.width = width + 'px';
    if (model.lanesChanged || this.drawnWidth !== width) {
      this.drawHead(width, laneW);
      model.lanesChanged = false;
      this.drawnWidth = width;
    }
    if (this.follow) {
      this.scroller.scrollTop = this.scroller.scrollHeight;
      this.follow = false;
    }
    const top = Math.max(0, this.scroller.scrollTop - 36);
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(model.rows.length,
      Math.ceil((top + this.scroller.clientHeight) / ROW) + OVERSCAN);
    const windowHeight = (last - first) * ROW + ROW;
    const svg = s('svg', { class: 'seq-window', width, height: windowHeight,
      'data-first': first, 'data-last': last });
    svg.style.top = first * ROW + 'px';
    svg.append(s('defs', {},
      s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 8,
        markerHeight: 8, orient: 'auto-start-reverse' }, s('path', { d: 'M0,0 L10,5 L0,10 z',
        class: 'arrowhead' }))));
    for (const party of model.lanes) {
      const x = this.x(party);
      svg.append(s('line', { x1: x, x2: x, y1: 0, y2: windowHeight,
        class: party === ENGINE ? 'lane engine' : 'lane' }));
    }
    for (let i = first; i < last; i += 1) {
      svg.append(this.drawRow(model.rows[i], (i - first) * ROW + ROW / 2 + 6, laneW));
    }
    if (this.window) this.window.replaceWith(svg);
    else this.body.append(svg);
    this.window = svg;
  }

  drawHead(width, laneW) {
    const head = s('svg', { class: 'seq-head', width, height: 36 });
    for (const party of this.model.lanes) {
      const x = this.x(party);
      head.append(s('g', { class: 'party', 'data-party': party },
        s('rect', { x: x - laneW / 2 + 4, y: 4, width: laneW - 8, height: 28, rx: 4,
          class: party === ENGINE ? 'party-box engine' : 'party-box' }),
        s('text', { x, y: 23, 'text-anchor': 'middle' },
          party === ENGINE ? 'engine' : fit(party, laneW - 16))));
    }
    this.head.replaceWith(head);
    this.head = head;
  }

  drawRow(row, y, laneW) {
    if (row.kind === 'msg') {
      const from = this.x(row.from);
      const marked = this.isMarked(row);
      const group = s('g', { class: 'msg' + (String(row.seq) === this.selected ? ' selected' : '')
        + (marked ? ' marked' : ''), 'data-marked': marked ? 'true' : null, 'data-seq': row.seq, 'data-performative': row.performative, 'data-from': row.from,
        'data-to': row.to.join(' '), role: 'button', tabindex: -1 });
      const targets = row.to.map((r) => this.x(r));
      const right = Math.max(from, ...targets);
      const left = Math.min(from, ...targets);
      group.append(s('rect', { x: left, y: y - ROW / 2 - 4, width: Math.max(right - left, 20),
        height: ROW, class: 'hit' }));
      if (marked) group.append(s('text', { x: 4, y: y + 4, class: 'step-flag' }, '\u25c6'));
      for (const to of targets) {
        if (to === from) {
          group.append(s('path', { d: `M${from},${y} h18 v8 h-16`, class: 'arrow',
            'marker-end': 'url(#arrow)' }));
        } else {
          group.append(s('line', { x1: from, x2: to, y1: y, y2: y, class: 'arrow',
            'marker-end': 'url(#arrow)' }));
        }
      }
      const span = Math.max(right - left, laneW) - 8;
      const label = row.performative + (row.summary ? ' ' + row.summary : '');
      group.append(s('text', { x: (left + right) / 2, y: y - 5, 'text-anchor': 'middle',
        class: 'label' }, s('tspan', { class: 'perf' }, row.performative),
      row.summary ? ' ' + fit(row.summary, span - row.performative.length * 7 - 8) : ''),
      s('title', {}, `#${row.seq} ${label}`));
      return group;
    }
    const x = this.x(row.lane);
    const total = laneW * this.model.lanes.length;
    const text = fit(row.text, Math.max(Math.min(laneW * 2.2, total - 16), 120));
    const width = text.length * 7 + 12;
    // From the lane rightwards, or leftwards where the diagram ends first (the engine's lane).
    const left = x - 5 + width > total ? Math.max(0, x + 5 - width) : x - 5;
    const marked = this.isMarked(row);
    return s('g', { class: 'note ' + row.tone + (marked ? ' marked' : ''),
      'data-marked': marked ? 'true' : null, 'data-seq': row.seq, 'data-tone': row.tone },
      s('rect', { x: left, y: y - ROW / 2 + 2, width, height: ROW - 8, rx: 3 }),
      s('text', { x: left + 6, y: y - 1 }, text),
      s('title', {}, `#${row.seq} ${row.text}`));
  }
}

/** `text` cut to about `pixels` wide (monospace-ish estimate: 7 px a character). */
function fit(text, pixels) {
  const chars = Math.max(4, Math.floor(pixels / 7));
  return text.length > chars ? text.slice(0, chars - 1) + '…' : text;
}

function sidePanel(model, selectedSeq) {
  const threads = [...model.threads.values()];
  const commitments = [...model.commitments.values()];
  const panel = [
    h('section', {}, h('h2', {}, 'Status'),
      h('p', { id: 'conv-status' }, h('span', { class: 'pill ' + model.status }, model.status),
        model.outcome ? ' ' + model.outcome : ''),
      model.deadline ? h('p', {}, 'Ends by ' + time(model.deadline)) : null),
    h('section', {}, h('h2', {}, `Threads (${threads.length})`),
      threads.length ? h('table', { class: 'kv', id: 'threads' }, threads.map((t) => h('tr', {},
        h('th', {}, t.participant), h('td', {}, t.state || '', t.outcome ? ` (${t.outcome})` : '',
          t.deadline ? h('div', { class: 'muted' }, 'reply by ' + time(t.deadline)) : null))))
        : h('p', { class: 'muted' }, 'none visible')),
    h('section', {}, h('h2', {}, `Commitments (${commitments.length})`),
      commitments.length ? h('table', { class: 'kv', id: 'commitments' }, commitments.map((c) =>
        h('tr', {}, h('th', {}, c.name), h('td', {}, `${c.state}: ${c.debtor} → ${c.creditor}`,
          c.deadline ? h('div', { class: 'muted' }, 'due ' + time(c.deadline)) : null))))
        : h('p', { class: 'muted' }, 'none')),
    h('section', {}, h('h2', {}, 'Vars'), h('pre', {}, pretty(model.vars))),
    h('section', {}, h('h2', {}, 'Context'), h('pre', {}, pretty(model.context))),
    h('section', {}, h('h2', {}, 'Parameters'), h('pre', {}, pretty(model.parameters))),
  ];
  if (selectedSeq && model.messages.has(selectedSeq)) {
    panel.unshift(h('section', { class: 'selected-message' }, h('h2', {}, `Message #${selectedSeq}`),
      h('pre', { id: 'message-json' }, pretty(model.messages.get(selectedSeq)))));
  }
  return panel;
}

async function conversationPage(id, signal, params) {
  const view = await api('/v1/conversations/' + encodeURIComponent(id), { signal });
  // `?step=N` (a link from a template's candidate view): the input where a candidate
  // revision's twin or replay first went elsewhere, marked in the diagram.
  const stepParam = params.get('step');
  const step = stepParam !== null && /^\d+$/.test(stepParam) ? Number(stepParam) : null;
  const stepNote = step === null ? null : h('p', { class: 'step-mark', id: 'step-mark' },
    `Step ${step} is marked \u25c6: where a candidate revision first went elsewhere than this `
    + 'conversation (step 0 is the start, step N the Nth message of a real party after it). ',
  h('span', { class: 'step-found' }, 'Looking for it…'));
  const model = new ConversationModel();
  model.fromView(view);
  const state = h('span', { class: 'live', id: 'live-state' }, 'connecting');
  const side = h('aside', { class: 'side', id: 'side-panel' });
  const diagramHost = h('div', { class: 'diagram' });
  main.append(
    h('div', { class: 'conv-head' },
      h('h1', {}, h('span', { class: 'muted' }, 'Conversation '), h('span', { class: 'mono' }, id)),
      h('p', {}, `${view.template} · initiated by ${view.initiator} · `, state)),
    stepNote,
    h('div', { class: 'conv' }, diagramHost, side));
  let selected = null;
  let panelPending = false;
  const refreshPanel = () => {
    if (panelPending) return;
    panelPending = true;
    requestAnimationFrame(() => {
      panelPending = false;
      side.replaceChildren(...sidePanel(model, selected));
    });
  };
  const diagram = new SequenceDiagram(diagramHost, model, (seq) => {
    selected = seq;
    refreshPanel();
  });
  signal.addEventListener('abort', () => diagram.close());
  refreshPanel();
  diagram.schedule();
  let lastSeq = 0;
  followStream(`/v1/conversations/${encodeURIComponent(id)}/events`, {
    signal,
    isOver: () => model.status === 'completed',
    onState: (what, error) => {
      if (what === 'ended' && stepNote && diagram.marked === null) {
        stepNote.querySelector('.step-found').textContent = 'It is not in this conversation\u2019s '
          + `log, which has ${model.inputs.length + 1} inputs (steps 0 to ${model.inputs.length}).`;
      }
      state.textContent = {
        live: 'live', reconnecting: 'reconnecting…', ended: 'ended',
        error: 'stream error: ' + (error && error.message),
      }[what] || what;
      state.dataset.state = what;
    },
    onEvents: (events) => {
      for (const event of events) {
        // Resuming can repeat an event (delivery is at least once): draw each once.
        if (event.data.seq <= lastSeq) continue;
        lastSeq = event.data.seq;
        model.apply(event.data);
      }
      diagramHost.dataset.rows = String(model.rows.length);
      const found = step !== null && diagram.marked === null ? model.stepRow(step) : null;
      if (found) {
        // Marked once, when its row arrives: drawn, scrolled to and, for a message, selected.
        diagram.marked = found;
        const index = model.rows.findIndex((r) => r.seq === found.seq && r.kind === found.kind);
        const row = model.rows[index];
        stepNote.dataset.seq = String(found.seq);
        stepNote.querySelector('.step-found').textContent = row.kind === 'msg'
          ? `It is message #${row.seq}: ${row.performative} from ${row.from}.`
          : `It is #${row.seq}: ${row.text}.`;
        diagram.render();
        diagram.reveal(index);
        if (found.kind === 'msg') diagram.select(String(found.seq));
        diagram.schedule();
      } else {
        diagram.schedule(true);
      }
      refreshPanel();
    },
  });
}

// ---------------------------------------------------------------------------------------
// A made-up conversation, to measure drawing (docs/inspector.md, "Performance")

function benchPage(params, signal) {
  const messages = Math.min(Number(params.get('messages')) || 10000, 200000);
  const parties = Math.min(Math.max(Number(params.get('parties')) || 50, 2), 1000);
  const names = Array.from({ length: parties }, (_, i) => (i ? `bidder-${i}` : 'buyer'));
  const host = h('div', { class: 'diagram' });
  const result = h('p', { id: 'bench-result' }, 'drawing…');
  main.append(h('h1', {}, `Drawing ${messages} messages between ${parties} parties`), result,
    h('div', { class: 'conv' }, host));
  const model = new ConversationModel();
  const started = performance.now();
  model.apply({ seq: 1, at: 0, type: 'started', initiator: 'buyer',
    participants: names.slice(1), template: 'synthetic', context: {}, parameters: {} });
  for (let i = 0; i < messages; i += 1) {
    const bidder = names[1 + (i % (parties - 1))];
    const out = i % 2 === 0;
    model.apply({ seq: i + 2, at: i, type: 'message_accepted',
      message: { id: `m${i}`, performative: out ? 'cfp' : 'propose', sender: out ? 'buyer' : bidder,
        receivers: [out ? bidder : 'buyer'], content: { n: i, price: i * 3 } },
      transitions: out ? [] : [{ participant: bidder, from: 'called', to: 'proposed' }] });
  }
  const diagram = new SequenceDiagram(host, model, () => {});
  signal.addEventListener('abort', () => diagram.close());
  diagram.render();
  requestAnimationFrame(() => requestAnimationFrame(() => {
    const drawn = performance.now() - started;
    const scrollStart = performance.now();
    diagram.scroller.scrollTop = diagram.scroller.scrollHeight / 2;
    diagram.render();
    const scrolled = performance.now() - scrollStart;
    result.textContent = `${model.rows.length} rows: first drawn in ${drawn.toFixed(0)} ms; `
      + `a jump to the middle redrawn in ${scrolled.toFixed(1)} ms; `
      + `${diagram.window.querySelectorAll('g').length} row groups in the page`;
    result.dataset.drawnMs = drawn.toFixed(1);
    result.dataset.scrollMs = scrolled.toFixed(2);
    result.dataset.rows = String(model.rows.length);
  }));
}

// ---------------------------------------------------------------------------------------
// Agents

async function agentsPage(signal) {
  main.append(h('h1', {}, 'Agents'));
  const listing = await api('/v1/agents', { signal });
  const table = h('table', { class: 'list', id: 'agents' },
    h('thead', {}, h('tr', {}, ['Agent', 'Kind', 'Inbox streams', 'Inbox head',
      'Unacknowledged', 'Owes', 'Is owed'].map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}));
  main.append(table, h('p', { class: 'muted' }, 'Inbox streams: inbox streams and long polls '
    + 'open on this engine node now. Owes / is owed: commitments not yet settled.'));
  for (const agent of listing.agents) {
    const owes = h('td', { class: 'num' }, '…');
    const owed = h('td', { class: 'num' }, '…');
    table.tBodies[0].append(h('tr', { 'data-agent': agent.id },
      h('td', {}, h('a', { href: hashLink('/conversations', { agent: agent.id }) }, agent.id)),
      h('td', {}, agent.kind + (agent.inbox ? '' : ', no inbox')),
      h('td', { class: 'num' + (agent.inbox_streams ? ' good' : '') }, String(agent.inbox_streams)),
      h('td', { class: 'num' }, String(agent.inbox_head)),
      h('td', { class: 'num' }, String(agent.unacknowledged)),
      owes, owed));
    for (const [role, cell] of [['debtor', owes], ['creditor', owed]]) {
      api(`/v1/commitments?agent=${encodeURIComponent(agent.id)}&role=${role}&limit=500`,
        { signal }).then((page) => {
        const open = page.commitments.filter((c) => c.state === 'pending' || c.state === 'active');
        cell.textContent = String(open.length) + (page.next_cursor ? '+' : '');
        cell.title = open.map((c) => `${c.name} (${c.state}) ${c.conversation_id}`).join('\n');
      }).catch(() => {
        cell.textContent = '—';
      });
    }
  }
}

window.addEventListener('hashchange', route);
route();
