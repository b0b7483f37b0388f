// The Colloquy web inspector's template pages (docs/inspector.md): the list, a template's
// page with its state machine, the hooks of every template, and a template's rollout — the candidate next to the active revision
// (a line diff of the two sources, the semantic diff, what the candidate's shadow twins
// found, its ramp) and the history of activations. A file of its own beside inspector.js,
// whose helpers (h, s, api, time, failure, fit, …) it uses; it is loaded first and only
// declares functions, so either may call the other once the page runs.
//
// Read-only like the rest: it sends GET requests only, and shows the command lines that
// promote, ramp or roll back instead of buttons.
'use strict';

/** Unchanged lines shown around each change of the source diff. */
const DIFF_CONTEXT = 3;
/**
 * Largest LCS table of the source diff (lines of the old side times the new one, after the
 * common head and tail are set aside): templates are a few hundred lines, so this is never
 * reached by one; past it, the differing middle shows as removed then added whole rather
 * than freeze the tab.
 */
const DIFF_MAX_CELLS = 4000000;
/** The activations that do not change the active revision (their revision is the candidate's). */
const CANDIDATE_KINDS = ['stage', 'ramp', 'abort'];

async function templatesPage(signal) {
  const [catalog, status] = await Promise.all([
    api('/v1/templates', { signal }),
    api('/v1/status', { signal }).catch((e) => ({ failed: e })),
  ]);
  main.append(h('h1', {}, 'Templates'));
  if (status.failed) {
    main.append(failure(status.failed));
  } else {
    main.append(h('section', { class: 'card', id: 'policy-status' },
      h('h2', {}, 'Catalog'),
      h('table', { class: 'kv' },
        h('tr', {}, h('th', {}, 'Revision'), h('td', { class: 'mono' }, status.revision)),
        h('tr', {}, h('th', {}, 'Loaded'), h('td', {}, time(status.loaded_at))),
        h('tr', {}, h('th', {}, 'Source'), h('td', {}, status.source)),
        h('tr', {}, h('th', {}, 'Compiling'), h('td', {}, status.compiling.length
          ? status.compiling.map((c) => `${c.template} (since ${time(c.since)})`).join(', ')
          : 'nothing'))),
      status.last_error
        ? h('div', { class: 'error', id: 'last-error' }, h('strong', {}, 'Last reload error '),
          time(status.last_error.at), ': ', status.last_error.message,
          h('ul', {}, status.last_error.diagnostics.map((d) => h('li', {},
            `${d.file || ''}${d.line ? ':' + d.line : ''}${d.column ? ':' + d.column : ''} `
            + `${d.path} — ${d.message}`))))
        : h('p', { class: 'ok', id: 'last-error' }, 'No reload error.')));
  }
  const candidateCells = new Map();
  main.append(h('table', { class: 'list', id: 'templates' },
    h('thead', {}, h('tr', {}, ['Template', 'Active revision', 'Candidate'].map((x) =>
      h('th', { scope: 'col' }, x)))),
    h('tbody', {}, catalog.templates.map((t) => {
      const cell = h('td', { class: 'mono candidate-cell' }, '…');
      candidateCells.set(t.name, cell);
      return h('tr', { 'data-template': t.name },
        h('td', {}, h('a', { href: '#/templates/' + encodeURIComponent(t.name) }, t.name)),
        h('td', { class: 'mono' }, t.revision), cell);
    }))));
  // The candidates are the admin's to read: an agent's token gets 403 on each, and the
  // column says so once.
  for (const [name, cell] of candidateCells) {
    api(`/v1/templates/${encodeURIComponent(name)}/candidates`, { signal }).then((list) => {
      const candidate = list.candidates[0];
      cell.replaceChildren(candidate ? h('a', { href: '#/templates/' + encodeURIComponent(name),
        'data-candidate': candidate.revision }, candidate.revision) : '—');
    }).catch((error) => {
      cell.textContent = error instanceof ApiError && error.status === 403 ? 'admin only' : '—';
    });
  }
}

async function templatePage(name, signal) {
  const path = '/v1/templates/' + encodeURIComponent(name);
  main.append(h('p', {}, h('a', { href: '#/templates' }, '« templates')),
    h('h1', {}, 'Template ', h('span', { class: 'mono' }, name)));
  // Asked for at once, shown in their places as they come: the history is any caller's,
  // the candidates the admin's (an agent's token gets 403, shown as a note).
  const revisions = api(path + '/revisions', { signal }).catch(() => null);
  const history = api(path + '/history', { signal }).catch((error) => ({ failed: error }));
  const candidates = api(path + '/candidates', { signal }).catch((error) => ({ failed: error }));
  let doc = null;
  try {
    doc = await api(path, { signal });
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 403)) throw error;
    main.append(h('p', { class: 'error', id: 'template-forbidden' },
      'A template\u2019s definition is readable with the admin token only (or when the '
      + 'server runs with --public-templates): ', error.message));
  }
  const rolloutBox = h('section', { id: 'rollout' }, h('h2', {}, 'Rollout'),
    h('p', { class: 'muted' }, 'Loading…'));
  const historyBox = h('section', { id: 'history-box' }, h('h2', {}, 'History'),
    h('p', { class: 'muted' }, 'Loading…'));
  if (doc) {
    main.append(h('p', { class: 'mono muted', id: 'active-revision' }, doc.revision));
    // `append` would write a null as the text "null".
    const description = doc.template.metadata.description;
    if (description) main.append(h('p', {}, description));
  }
  main.append(rolloutBox);
  if (doc) {
    const list = await revisions;
    // The page moved on meanwhile: `main` is another page's now.
    if (signal.aborted) return;
    templateDefinition(doc, list);
  }
  main.append(historyBox);
  const [list, activations] = await Promise.all([candidates, history]);
  if (signal.aborted) return;
  historyBox.replaceChildren(...historyView(name, activations));
  rolloutBox.replaceChildren(...rolloutView(name, doc, list, activations, signal));
}

/** What a template is made of: its state machine, revisions, schemas, commitments, hooks. */
function templateDefinition(doc, list) {
  const spec = doc.template.spec;
  main.append(h('h2', {}, 'Thread state machine'),
    h('div', { class: 'machine-box' }, stateMachine(spec.thread)),
    h('p', { class: 'muted legend' }, 'Top row: the states a thread passes through, from the '
      + 'initial one (dot). Bottom row: terminal states (double boxes) with their outcome. Arrows: '
      + 'performative / who sends it, and the reply-by it sets. Dashed: the state\u2019s deadline '
      + `passed. A thread whose conversation expires goes to ${spec.thread.on_expiry}.`));
  if (list) {
    main.append(h('h2', {}, 'Revisions'), h('ul', { id: 'revisions' }, list.revisions.map((r) =>
      h('li', {}, h('span', { class: 'mono' }, r.revision), ` loaded ${time(r.loaded_at)}`,
        r.current ? ' (current)' : ''))));
  }
  if (spec.parameters) {
    main.append(h('h2', {}, 'Parameters'), h('pre', {}, pretty(spec.parameters.schema)));
  }
  const messages = Object.entries(spec.messages || {});
  if (messages.length) {
    main.append(h('h2', {}, 'Message schemas'), ...messages.map(([performative, m]) =>
      h('details', { class: 'schema', 'data-performative': performative },
        h('summary', {}, performative, m.description ? ' — ' + m.description : ''),
        h('pre', {}, pretty(m.schema)))));
  }
  if ((spec.commitments || []).length) {
    main.append(h('h2', {}, 'Commitments'), h('pre', {}, pretty(spec.commitments)));
  }
  if (spec.hooks) {
    main.append(h('h2', {}, 'Hooks'), h('pre', {}, pretty(spec.hooks)),
      h('p', {}, h('a', { href: '#/hooks' }, 'All hooks »')));
  }
}

// ---------------------------------------------------------------------------------------
// The rollout: the candidate next to the active revision

/** `curl` with the token from the environment (the page never prints the token it holds). */
function curlPost(url) {
  return `curl -X POST -H "Authorization: Bearer $COLLOQUY_TOKEN" '${url}'`;
}

/** The section's content: the candidate view, a note that there is none, or why not shown. */
function rolloutView(name, doc, list, activations, signal) {
  if (list.failed) {
    if (list.failed instanceof ApiError && list.failed.status === 403) {
      return [h('h2', {}, 'Candidate'), h('p', { class: 'muted', id: 'candidates-forbidden' },
        'A candidate revision and what its shadow found are shown with the admin token only '
        + '(the report holds the candidate\u2019s source). The history below is for everyone.')];
    }
    return [h('h2', {}, 'Candidate'), failure(list.failed)];
  }
  const candidate = list.candidates[0];
  const server = location.origin;
  const base = `${server}/v1/templates/${encodeURIComponent(name)}`;
  if (!candidate) {
    return [h('h2', {}, 'Candidate'),
      h('p', { id: 'no-candidate' }, 'No candidate is staged: new conversations run on the '
        + 'active revision ', h('span', { class: 'mono' }, list.active || '—'), '. A staged '
        + 'candidate serves nobody; a shadow twin of each new conversation runs on it, and '
        + 'this page shows where the twins went elsewhere. Stage one with'),
      h('pre', { class: 'commands' }, `curl -X POST -H "Authorization: Bearer $COLLOQUY_TOKEN" `
        + `--data-binary @${name}.yaml '${base}/candidates?sample=1'`),
      rollbackCommands(name, list.active, activations, server, base)];
  }
  const active = list.active || (doc && doc.revision) || '';
  const ramp = candidate.ramp;
  const ramping = ramp && !ramp.aborted && ramp.percent > 0;
  const semantic = h('div', { id: 'semantic-diff-box' }, h('p', { class: 'muted' }, 'Loading…'));
  const diffPath = `/v1/templates/${encodeURIComponent(name)}/candidates/`
    + `${encodeURIComponent(candidate.revision)}/diff`;
  api(diffPath, { signal }).then((report) => {
    semantic.replaceChildren(report.changes.length
      ? h('ul', { id: 'semantic-diff' }, report.changes.map((c) => h('li', { 'data-path': c.path },
        h('span', { class: 'mono muted' }, c.path), ' ', c.what)))
      : h('p', { class: 'muted', id: 'semantic-diff' }, 'No change in the protocol\u2019s terms '
        + '(the text differs only where nothing is compiled from it).'));
  }).catch((error) => {
    const shown = failure(error);
    if (shown) semantic.replaceChildren(shown);
  });
  return [
    h('h2', {}, 'Candidate'),
    h('div', { class: 'sides', id: 'candidate', 'data-revision': candidate.revision },
      h('section', { class: 'card', id: 'active-side' }, h('h3', {}, 'Active'),
        h('p', { class: 'mono rev' }, active),
        h('p', { class: 'muted' }, ramping
          ? `serves ${100 - ramp.percent}% of new conversations`
          : 'serves every new conversation')),
      h('section', { class: 'card candidate', id: 'candidate-side' }, h('h3', {}, 'Candidate'),
        h('p', { class: 'mono rev', id: 'candidate-revision' }, candidate.revision),
        h('p', { class: 'muted' }, `staged ${time(candidate.staged_at)} by `
          + `${candidate.staged_by}; ` + (ramping
          ? `serves ${ramp.percent}% of new conversations (a ramp)`
          : 'serves nobody')
          + `; shadows ${Math.round(candidate.sample * 100)}% of new conversations`))),
    h('h3', {}, 'What changes'),
    h('p', { class: 'muted' }, 'In the protocol\u2019s terms (as colloquy templates diff '
      + 'prints it): states, moves per state and role, deadlines, outcomes, commitments, '
      + 'schemas wider or narrower, roles, hooks.'),
    semantic,
    h('h3', {}, 'Source'),
    doc ? sourceDiff(doc.source, candidate.source)
      : h('p', { class: 'muted' }, 'The active source needs the admin token.'),
    h('h3', {}, 'Shadow'),
    ...shadowView(candidate.shadow),
    h('h3', {}, 'Ramp'),
    ...rampView(ramp),
    h('h3', {}, 'Promote, ramp or roll back'),
    h('p', { class: 'muted' }, 'The inspector changes nothing. With the admin token in '
      + 'COLLOQUY_TOKEN:'),
    h('pre', { class: 'commands', id: 'commands' }, [
      '# the candidate serves new conversations (running ones stay on their revision)',
      `colloquy templates promote ${name} ${candidate.revision} --server ${server}`,
      curlPost(`${base}/candidates/${candidate.revision}/promote`),
      '# or first a share of new conversations, stopped by its gates if they trip',
      curlPost(`${base}/candidates/${candidate.revision}/ramp?percent=5`
        + '&abort_on=refusal_rate:5,hook_failure_rate:2'),
    ].join('\n')),
    rollbackCommands(name, active, activations, server, base),
  ];
}

/** The command lines of a rollback, and which revision it would bring back. */
function rollbackCommands(name, active, activations, server, base) {
  const made = activations.failed ? undefined : activations.activations.slice().reverse()
    .find((a) => a.revision === active && !CANDIDATE_KINDS.includes(a.kind));
  const previous = made && made.previous;
  return h('div', { id: 'rollback' },
    h('p', { class: 'muted' }, previous
      ? ['Roll back: the revision active before the last change (',
        h('span', { class: 'mono' }, previous), ', by the history) serves again.']
      : 'Roll back: the revision active before the last change serves again (409 when there '
        + 'is none).'),
    h('pre', { class: 'commands', id: 'rollback-commands' }, [
      `colloquy templates rollback ${name} --server ${server}`,
      curlPost(`${base}/rollback`),
    ].join('\n')));
}

/** The shadow's counts, and its sample divergences each linked to the live conversation. */
function shadowView(shadow) {
  const byKind = Object.entries(shadow.by_kind || {});
  const shown = [];
  if (!shadow.active) {
    shown.push(h('p', { class: 'error', id: 'shadow-off' }, 'Shadowing is off here: ',
      shadow.reason || 'no reason given'));
  }
  shown.push(h('table', { class: 'kv counts-table', id: 'shadow' },
    h('tr', { 'data-count': 'shadowed' }, h('th', {}, 'Shadowed'),
      h('td', { class: 'num' }, String(shadow.shadowed)),
      h('td', { class: 'muted' }, 'live conversations given a twin on the candidate')),
    h('tr', { 'data-count': 'same' }, h('th', {}, 'Same'),
      h('td', { class: 'num' }, String(shadow.same)),
      h('td', { class: 'muted' }, 'twins whose conversation ended with no divergence')),
    h('tr', { 'data-count': 'diverged' }, h('th', {}, 'Diverged'),
      h('td', { class: 'num' + (shadow.diverged ? ' bad' : '') }, String(shadow.diverged)),
      h('td', {}, byKind.length
        ? byKind.map(([kind, n]) => h('span', { class: 'pill kind', 'data-kind': kind },
          `${kind} ${n}`)) : h('span', { class: 'muted' }, 'none'))),
    h('tr', { 'data-count': 'dropped' }, h('th', {}, 'Dropped'),
      h('td', { class: 'num' + (shadow.dropped ? ' bad' : '') }, String(shadow.dropped)),
      h('td', { class: 'muted' }, 'live steps not shadowed: the shadow queue was full'))));
  const samples = shadow.samples || [];
  if (!samples.length) {
    shown.push(h('p', { class: 'muted', id: 'no-divergences' }, 'No divergence found yet.'));
    return shown;
  }
  shown.push(h('p', { class: 'muted' }, `The first ${samples.length} divergences: where each `
    + 'twin first differs from its live conversation. Step 0 is the start; step N the Nth '
    + 'message of a real party after it. The link marks that step in the conversation.'),
  h('table', { class: 'list', id: 'divergences' },
    h('thead', {}, h('tr', {}, ['Conversation', 'Step', 'Input', 'Kind', 'What differs (live → '
      + 'candidate)'].map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, samples.map((d) => h('tr', { 'data-conversation': d.conversation_id },
      h('td', {}, h('a', { class: 'mono',
        href: hashLink('/c/' + encodeURIComponent(d.conversation_id), { step: String(d.step) }) },
      d.conversation_id)),
      h('td', { class: 'num' }, String(d.step)),
      h('td', { class: 'wrap' }, d.input),
      h('td', {}, d.kind, d.detail ? h('div', { class: 'mono muted' }, d.detail) : null),
      h('td', { class: 'wrap' }, differencesView(d.differences)))))));
  return shown;
}

function differencesView(differences) {
  if (!Array.isArray(differences)) return h('pre', {}, pretty(differences));
  const show = (value) => (value === undefined ? '—' : JSON.stringify(value));
  return h('ul', { class: 'differences' }, differences.map((d) => h('li', {},
    h('span', { class: 'mono' }, d.path || '(whole)'), ': ', show(d.expected), ' → ',
    show(d.got), d.note ? h('span', { class: 'muted' }, ` (${d.note})`) : null)));
}

/** A canary's share, gates and per-side tallies, or a note that none runs. */
function rampView(ramp) {
  if (!ramp) {
    return [h('p', { class: 'muted', id: 'no-ramp' }, 'No ramp: no new conversation starts on '
      + 'the candidate for real. A ramp starts a share of them there, pinned to it, and its '
      + 'gates stop it when the candidate refuses or fails hooks more than the active '
      + 'revision.')];
  }
  const rate = (part, whole) => (whole ? `${((100 * part) / whole).toFixed(1)}%` : '—');
  const side = (label, t) => h('tr', { 'data-side': label.toLowerCase() }, h('th', {}, label),
    h('td', { class: 'num' }, String(t.conversations)),
    h('td', { class: 'num' }, String(t.messages)),
    h('td', { class: 'num' }, `${t.refused} (${rate(t.refused, t.messages)})`),
    h('td', { class: 'num' }, `${t.hook_failures} (${rate(t.hook_failures, t.messages)})`));
  return [
    h('table', { class: 'kv', id: 'ramp' },
      h('tr', {}, h('th', {}, 'Share'), h('td', { id: 'ramp-percent' },
        ramp.aborted ? `0% (was ${ramp.percent}%)` : `${ramp.percent}% of new conversations`)),
      h('tr', {}, h('th', {}, 'Since'), h('td', {}, time(ramp.since))),
      h('tr', {}, h('th', {}, 'Gates'), h('td', { class: 'mono' }, ramp.abort_on || 'none')),
      h('tr', {}, h('th', {}, 'Judged'), h('td', {}, 'once each side has '
        + `${ramp.min_conversations} conversations`))),
    ramp.aborted ? h('p', { class: 'error', id: 'ramp-aborted' }, h('strong', {},
      'Stopped by its gates: '), ramp.aborted) : null,
    h('table', { class: 'list', id: 'ramp-tallies' },
      h('thead', {}, h('tr', {}, ['Since the ramp', 'Conversations', 'Messages', 'Refused',
        'Hook failures'].map((x) => h('th', { scope: 'col' }, x)))),
      h('tbody', {}, side('Candidate', ramp.candidate), side('Active', ramp.active))),
  ];
}

/** Every activation of the template, newest first. */
function historyView(name, history) {
  const heading = h('h2', {}, 'History');
  if (history.failed) return [heading, failure(history.failed)];
  const rows = history.activations.slice().reverse();
  if (!rows.length) {
    return [heading, h('p', { class: 'muted', id: 'history-none' }, `Nothing recorded for ${name}.`)];
  }
  return [heading,
    h('p', { class: 'muted' }, 'Every change of the revision serving new conversations, or '
      + 'of its candidate, newest first (kept in the store\u2019s revision archive); in bold, '
      + 'the one that made the active revision active.'),
    h('table', { class: 'list', id: 'history' },
      h('thead', {}, h('tr', {}, ['At', 'Kind', 'Revision', 'Previous', 'By', 'Detail'].map((x) =>
        h('th', { scope: 'col' }, x)))),
      h('tbody', {}, rows.map((a) => h('tr', { 'data-kind': a.kind,
        class: a.revision && a.revision === history.active && !CANDIDATE_KINDS.includes(a.kind)
          ? 'current' : null },
      h('td', {}, time(a.at)),
      h('td', {}, a.kind),
      h('td', { class: 'mono' }, a.revision || '—'),
      h('td', { class: 'mono' }, a.previous || '—'),
      h('td', {}, a.by),
      h('td', { class: 'wrap' }, a.detail || '')))))];
}

// ---------------------------------------------------------------------------------------
// The line diff of two sources

/**
 * The lines of `before` and `after` as [{op: 'same'|'del'|'add', text, old, new}] (`old`
 * and `new` are 1-based line numbers, absent on the side a line is not in): a longest
 * common subsequence of the lines, after the common head and tail are set aside.
 */
function lineDiff(before, after) {
  const a = splitLines(before);
  const b = splitLines(after);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let endA = a.length;
  let endB = b.length;
  while (endA > head && endB > head && a[endA - 1] === b[endB - 1]) {
    endA -= 1;
    endB -= 1;
  }
  const x = a.slice(head, endA);
  const y = b.slice(head, endB);
  const ops = [];
  for (let i = 0; i < head; i += 1) ops.push({ op: 'same', text: a[i] });
  if (x.length * y.length > DIFF_MAX_CELLS) {
    for (const text of x) ops.push({ op: 'del', text });
    for (const text of y) ops.push({ op: 'add', text });
  } else {
    // longest[i][j]: the length of a longest common subsequence of x[i..] and y[j..].
    const longest = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
    for (let i = x.length - 1; i >= 0; i -= 1) {
      for (let j = y.length - 1; j >= 0; j -= 1) {
        longest[i][j] = x[i] === y[j] ? longest[i + 1][j + 1] + 1
          : Math.max(longest[i + 1][j], longest[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < x.length && j < y.length) {
      if (x[i] === y[j]) {
        ops.push({ op: 'same', text: x[i] });
        i += 1;
        j += 1;
      } else if (longest[i + 1][j] >= longest[i][j + 1]) {
        ops.push({ op: 'del', text: x[i] });
        i += 1;
      } else {
        ops.push({ op: 'add', text: y[j] });
        j += 1;
      }
    }
    for (; i < x.length; i += 1) ops.push({ op: 'del', text: x[i] });
    for (; j < y.length; j += 1) ops.push({ op: 'add', text: y[j] });
  }
  for (let i = endA; i < a.length; i += 1) ops.push({ op: 'same', text: a[i] });
  let old = 0;
  let now = 0;
  for (const line of ops) {
    if (line.op !== 'add') line.old = ++old;
    if (line.op !== 'del') line.new = ++now;
  }
  return ops;
}

/** A text's lines; a final newline ends the last line rather than start an empty one. */
function splitLines(text) {
  const lines = String(text || '').split(/\r?\n/);
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** The source diff as a table: changed lines with DIFF_CONTEXT lines around, the rest folded. */
function sourceDiff(before, after) {
  const ops = lineDiff(before, after);
  const near = new Uint8Array(ops.length);
  ops.forEach((line, i) => {
    if (line.op === 'same') return;
    for (let k = Math.max(0, i - DIFF_CONTEXT); k <= Math.min(ops.length - 1, i + DIFF_CONTEXT); k += 1) {
      near[k] = 1;
    }
  });
  const added = ops.filter((l) => l.op === 'add').length;
  const removed = ops.filter((l) => l.op === 'del').length;
  const rows = [];
  for (let i = 0; i < ops.length;) {
    if (near[i]) {
      const line = ops[i];
      const sign = { same: ' ', del: '-', add: '+' }[line.op];
      rows.push(h('tr', { class: 'line ' + line.op, 'data-op': line.op },
        h('td', { class: 'ln' }, line.old ? String(line.old) : ''),
        h('td', { class: 'ln' }, line.new ? String(line.new) : ''),
        h('td', { class: 'code' }, sign + ' ' + line.text)));
      i += 1;
    } else {
      let j = i;
      while (j < ops.length && !near[j]) j += 1;
      rows.push(h('tr', { class: 'fold' }, h('td', { class: 'ln' }), h('td', { class: 'ln' }),
        h('td', { class: 'code muted' }, `⋯ ${j - i} unchanged line${j - i === 1 ? '' : 's'}`)));
      i = j;
    }
  }
  return h('div', { class: 'source-diff-box' },
    h('p', { class: 'muted', id: 'source-diff-summary' }, added || removed
      ? `${removed} line${removed === 1 ? '' : 's'} removed, ${added} added (active → candidate)`
      : 'The two sources are the same text.'),
    h('table', { class: 'source-diff', id: 'source-diff' }, h('tbody', {}, rows)));
}

// ---------------------------------------------------------------------------------------
// Hooks

async function hooksPage(signal) {
  main.append(h('h1', {}, 'Hooks'));
  const [catalog, metricsText] = await Promise.all([
    api('/v1/templates', { signal }),
    api('/metrics', { signal, text: true }).catch(() => ''),
  ]);
  const rows = [];
  let forbidden = null;
  for (const t of catalog.templates) {
    try {
      const doc = await api('/v1/templates/' + encodeURIComponent(t.name), { signal });
      if (doc.template.spec.hooks) rows.push({ name: t.name, doc });
    } catch (error) {
      if (error instanceof ApiError && error.status === 403) {
        forbidden = error;
        break;
      }
      throw error;
    }
  }
  if (forbidden) {
    main.append(h('p', { class: 'error', id: 'hooks-forbidden' }, 'Hooks are part of a '
      + 'template\u2019s definition, readable with the admin token only (or with '
      + '--public-templates): ', forbidden.message));
  } else if (!rows.length) {
    main.append(h('p', { class: 'muted', id: 'hooks-none' }, 'No loaded template has a hook.'));
  } else {
    main.append(h('table', { class: 'list', id: 'hooks' },
      h('thead', {}, h('tr', {}, ['Template', 'Module', 'Kind', 'SHA-256', 'Size', 'Events',
        'Limits', 'On failure', 'Reads'].map((x) => h('th', { scope: 'col' }, x)))),
      h('tbody', {}, rows.map(({ name, doc }) => {
        const hooks = doc.template.spec.hooks;
        const module = doc.hook_module || {};
        return h('tr', { 'data-template': name },
          h('td', {}, h('a', { href: '#/templates/' + encodeURIComponent(name) }, name)),
          h('td', { class: 'mono' }, hooks.module),
          h('td', {}, module.kind === 'component' ? 'component' : module.kind === 'core_module' ? 'core module' : ''),
          h('td', { class: 'mono hash', title: module.sha256 || '' },
            module.sha256 ? module.sha256.slice(0, 16) + '…' : ''),
          h('td', { class: 'num' }, module.size ? `${(module.size / 1024).toFixed(1)} KiB` : ''),
          h('td', {}, (hooks.events || []).join(', ')),
          h('td', { class: 'mono' }, Object.entries(hooks.limits || {}).map(([k, v]) =>
            h('div', {}, `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`))),
          h('td', {}, String(hooks.failure_policy || '')),
          h('td', {}, hooks.reads ? hooks.reads.join(', ') : 'everything'));
      }))));
  }
  const samples = parseMetrics(metricsText).filter((m) =>
    m.name === 'colloquy_hook_duration_seconds_count' || m.name === 'colloquy_hook_duration_seconds_sum');
  const byEvent = new Map();
  for (const m of samples) {
    const key = m.labels.event;
    const entry = byEvent.get(key) || { ok: 0, failed: 0, seconds: 0 };
    if (m.name.endsWith('_count')) entry[m.labels.result === 'ok' ? 'ok' : 'failed'] += m.value;
    else entry.seconds += m.value;
    byEvent.set(key, entry);
  }
  main.append(h('h2', {}, 'Calls since the engine started'),
    h('p', { class: 'muted' }, 'From /metrics (colloquy_hook_duration_seconds), counted per hook '
      + 'event over every module.'),
    byEvent.size ? h('table', { class: 'list', id: 'hook-calls' },
      h('thead', {}, h('tr', {}, ['Event', 'Calls', 'Failures', 'Mean time'].map((x) =>
        h('th', { scope: 'col' }, x)))),
      h('tbody', {}, [...byEvent].map(([event, e]) => h('tr', {}, h('td', {}, event),
        h('td', { class: 'num' }, String(e.ok + e.failed)),
        h('td', { class: 'num' + (e.failed ? ' bad' : '') }, String(e.failed)),
        h('td', { class: 'num' }, e.ok + e.failed
          ? `${((e.seconds / (e.ok + e.failed)) * 1e6).toFixed(0)} µs` : '')))))
      : h('p', { class: 'muted' }, 'No hook has run yet.'));
}

// ---------------------------------------------------------------------------------------
// The state machine

/**
 * A thread's state machine as SVG, in two rows: the states a thread passes through along the
 * top, in the order of their distance from the initial state, and the terminal states (double
 * boxes with their outcome) along the bottom. Moves between passing states arc above the top
 * row, moves to a terminal state go down to it, so no arrow crosses a box. Arrows are labelled
 * `performative / role`; deadline moves are dashed.
 */
function stateMachine(thread) {
  const names = Object.keys(thread.states);
  const isTerminal = (name) => Boolean((thread.states[name] || {}).terminal);
  const depth = new Map([[thread.initial, 0]]);
  const queue = [thread.initial];
  while (queue.length) {
    const name = queue.shift();
    const state = thread.states[name] || {};
    const out = (state.transitions || []).map((t) => t.to);
    if (state.on_deadline) out.push(state.on_deadline);
    for (const to of out) {
      if (!depth.has(to) && thread.states[to]) {
        depth.set(to, depth.get(name) + 1);
        queue.push(to);
      }
    }
  }
  const order = (a, b) => (depth.has(a) ? depth.get(a) : 1e9) - (depth.has(b) ? depth.get(b) : 1e9)
    || names.indexOf(a) - names.indexOf(b);
  const passing = names.filter((n) => !isTerminal(n)).sort(order);

  const edges = [];
  for (const name of names) {
    const state = thread.states[name];
    for (const t of state.transitions || []) {
      edges.push({ from: name, to: t.to, performative: t.performative, role: t.from,
        deadline: false, label: `${t.performative} / ${t.from}`
          + (t.reply_by && t.reply_by.default_ms ? ` (reply ${t.reply_by.default_ms / 1000}s)` : '') });
    }
    if (state.on_deadline) {
      edges.push({ from: name, to: state.on_deadline, performative: '', role: '', deadline: true,
        label: 'deadline' });
    }
  }
  // Terminal states ordered by where the moves into them come from, so fewer arrows cross.
  const topIndex = new Map(passing.map((n, i) => [n, i]));
  const pull = (name) => {
    const sources = edges.filter((e) => e.to === name && topIndex.has(e.from))
      .map((e) => topIndex.get(e.from));
    return sources.length ? sources.reduce((a, b) => a + b, 0) / sources.length : 1e9;
  };
  const terminals = names.filter(isTerminal).sort((a, b) => pull(a) - pull(b) || order(a, b));

  const boxW = 150;
  const boxH = 46;
  const topGap = 90;
  const bottomGap = 24;
  const margin = 28;
  const arcStep = 26;
  // Arcs between passing states nest by how far they reach.
  const arcs = edges.filter((e) => topIndex.has(e.from) && topIndex.has(e.to));
  const span = (e) => Math.abs(topIndex.get(e.to) - topIndex.get(e.from));
  const levels = new Map();
  const taken = [];
  for (const e of arcs.slice().sort((a, b) => span(a) - span(b))) {
    const lo = Math.min(topIndex.get(e.from), topIndex.get(e.to));
    const hi = Math.max(topIndex.get(e.from), topIndex.get(e.to));
    let level = 0;
    while (taken.some((t) => t.level === level && t.lo < hi && lo < t.hi)) level += 1;
    taken.push({ level, lo, hi });
    levels.set(e, level);
  }
  const highest = Math.max(0, ...levels.values());
  const topY = margin + 30 + (arcs.length ? (highest + 1) * arcStep : 0);
  const bottomY = topY + boxH + 250;
  const topW = passing.length * (boxW + topGap) - topGap;
  const bottomW = terminals.length * (boxW + bottomGap) - bottomGap;
  const width = margin * 2 + Math.max(topW, bottomW);
  const height = bottomY + boxH + margin;
  const pos = new Map();
  const topStart = margin + (width - margin * 2 - topW) / 2;
  passing.forEach((name, i) => pos.set(name, { x: topStart + i * (boxW + topGap), y: topY }));
  const bottomStart = margin + (width - margin * 2 - bottomW) / 2;
  terminals.forEach((name, i) => pos.set(name, { x: bottomStart + i * (boxW + bottomGap),
    y: bottomY }));

  const svg = s('svg', { class: 'machine', id: 'state-machine', width, height,
    viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'Thread state machine' },
  s('defs', {}, s('marker', { id: 'm-arrow', viewBox: '0 0 10 10', refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
  s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }))));
  const edgeLayer = s('g', { class: 'edges' });
  const labelLayer = s('g', { class: 'edge-labels' });
  // Where the arrows leave a box's bottom and enter a box's top, spread along its width.
  const outgoing = new Map();
  const incoming = new Map();
  const downs = edges.filter((e) => !levels.has(e) && e.from !== e.to);
  for (const e of downs) {
    (outgoing.get(e.from) || outgoing.set(e.from, []).get(e.from)).push(e);
    (incoming.get(e.to) || incoming.set(e.to, []).get(e.to)).push(e);
  }
  for (const list of [...outgoing.values(), ...incoming.values()]) {
    list.sort((a, b) => (pos.get(a.to) || { x: 0 }).x - (pos.get(b.to) || { x: 0 }).x
      || (pos.get(a.from) || { x: 0 }).x - (pos.get(b.from) || { x: 0 }).x);
  }
  const spread = (list, e, box) => {
    const i = list.indexOf(e);
    return box.x + 12 + ((boxW - 24) * (i + 1)) / (list.length + 1);
  };
  const middle = (e) => (spread(outgoing.get(e.from), e, pos.get(e.from))
    + spread(incoming.get(e.to), e, pos.get(e.to))) / 2;
  const slot = new Map(downs.filter((e) => pos.get(e.from) && pos.get(e.to))
    .sort((a, b) => middle(a) - middle(b)).map((e, i) => [e, i]));
  const lanes = new Map();
  for (const e of edges) {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) continue;
    let d;
    let lx;
    let ly;
    if (e.from === e.to) {
      const n = lanes.get(e.from) || 0;
      lanes.set(e.from, n + 1);
      d = `M${a.x + boxW - 40},${a.y} c0,-30 34,-30 26,0`;
      lx = a.x + boxW - 24;
      ly = a.y - 26 - n * 13;
    } else if (levels.has(e)) {
      const rise = 22 + levels.get(e) * arcStep;
      const forward = b.x > a.x;
      const x1 = a.x + (forward ? boxW * 0.7 : boxW * 0.3);
      const x2 = b.x + (forward ? boxW * 0.3 : boxW * 0.7);
      const y = a.y;
      d = `M${x1},${y} C${x1},${y - rise * 1.33} ${x2},${y - rise * 1.33} ${x2},${y}`;
      lx = (x1 + x2) / 2;
      ly = y - rise + 4;
    } else {
      const x1 = spread(outgoing.get(e.from), e, a);
      const y1 = a.y + boxH;
      const x2 = spread(incoming.get(e.to), e, b);
      const y2 = b.y;
      const dip = b.y > a.y ? 0 : 60;
      d = `M${x1},${y1} C${x1},${y1 + 80 + dip} ${x2},${y2 - 80 - dip} ${x2},${y2}`;
      // On the curve, at one of five heights in turn, so neighbouring labels do not overlap.
      const t = 0.2 + 0.15 * (slot.get(e) % 5);
      const u = 1 - t;
      lx = u * u * u * x1 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t * t * t * x2;
      ly = u * u * u * y1 + 3 * u * u * t * (y1 + 80 + dip) + 3 * u * t * t * (y2 - 80 - dip)
        + t * t * t * y2 + 4;
    }
    edgeLayer.append(s('path', { d, class: 'edge' + (e.deadline ? ' deadline' : ''),
      'marker-end': 'url(#m-arrow)' }));
    labelLayer.append(s('g', { class: 'edge-label' + (e.deadline ? ' deadline' : ''),
      'data-from-state': e.from, 'data-to-state': e.to, 'data-performative': e.performative,
      'data-role': e.role, 'data-deadline': e.deadline ? 'true' : 'false' },
    s('text', { x: lx, y: ly, 'text-anchor': 'middle' }, e.label),
    s('title', {}, `${e.from} → ${e.to}: ${e.label}`)));
  }
  svg.append(edgeLayer);
  for (const name of names) {
    const p = pos.get(name);
    const state = thread.states[name];
    const terminal = state.terminal;
    const group = s('g', { class: 'state' + (terminal ? ' terminal' : '')
      + (name === thread.initial ? ' initial' : ''), 'data-state': name,
    'data-terminal': terminal || '' },
    s('title', {}, state.description || name));
    group.append(s('rect', { x: p.x, y: p.y, width: boxW, height: boxH, rx: 8 }));
    if (terminal) {
      group.append(s('rect', { x: p.x + 4, y: p.y + 4, width: boxW - 8, height: boxH - 8, rx: 6,
        class: 'inner' }));
    }
    group.append(s('text', { x: p.x + boxW / 2, y: p.y + (terminal ? 20 : 28),
      'text-anchor': 'middle', class: 'state-name' }, fit(name, boxW - 12)));
    if (terminal) {
      group.append(s('text', { x: p.x + boxW / 2, y: p.y + 36, 'text-anchor': 'middle',
        class: 'outcome' }, terminal));
    }
    if (name === thread.initial) {
      group.append(s('circle', { cx: p.x - 12, cy: p.y + boxH / 2, r: 6, class: 'start-dot' }));
    }
    svg.append(group);
  }
  svg.append(labelLayer);
  return svg;
}

