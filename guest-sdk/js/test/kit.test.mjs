// The kit (colloquy-hook.js) in Node, on the stand-in host: reading events, building
// actions, the exports defineHook makes, and the runtime fixes.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { host, loadKit } from '../testing/index.mjs';
import { readSchema, validate } from '../testing/schema.mjs';

const kit = await loadKit();
const { Action, Event, defineHook, handleEvent, log, nowMs } = kit;
const outputSchema = readSchema('hook-output');
const inputSchema = readSchema('hook-input');

/** The event of docs/hook-abi.md, with a few fields changed by `patch`. */
function event(patch = {}) {
  return {
    abi_version: 1,
    hook: 'on_message',
    now: 1767225600000,
    conversation: {
      id: '0197', template: 'credit-assessment', revision: 'sha256:5f1c', status: 'active',
      initiator: 'desk', participants: ['risk'],
      threads: [{ participant: 'risk', state: 'start' }],
      vars: { status: 'pending', started_at: 1767225600000 },
      parameters: { applicant_id: 'A-17', income_source: 'salary' },
      context: {}, deadline: 1767229200000, retry_attempts: 0,
    },
    message: {
      id: 'm-1', performative: 'request', sender: 'desk', receivers: ['risk'],
      content: { amount: 20000, purpose: 'crypto mining rig' },
    },
    config: { max_amount: 50000 },
    ...patch,
  };
}

test('the sample events fit the input schema', () => {
  assert.deepEqual(validate(inputSchema, event()), []);
  assert.deepEqual(validate(inputSchema, event({ message: null, hook: 'on_timeout', timeout: { kind: 'retry', attempt: 1 } })), []);
});

test('an event reads as the Rust SDK reads it', () => {
  const e = new Event(event());
  assert.equal(e.hook, 'on_message');
  assert.equal(e.now, 1767225600000);
  assert.equal(e.abiVersion, 1);
  assert.equal(e.conversation.id, '0197');
  assert.equal(e.conversation.deadline, 1767229200000);
  assert.equal(e.conversation.outcome, null);
  assert.equal(e.message.performative, 'request');
  assert.equal(e.message.in_reply_to, null);
  assert.equal(e.timeout, null);
  assert.equal(e.contentU64('amount'), 20000);
  assert.equal(e.contentStr('purpose'), 'crypto mining rig');
  assert.equal(e.contentStr('amount'), undefined, 'a number is not text');
  assert.equal(e.contentU64('purpose'), undefined, 'text is not a number');
  assert.equal(e.contentField('missing'), undefined);
  assert.equal(e.configU64('max_amount'), 50000);
  assert.equal(e.varStr('status'), 'pending');
  assert.equal(e.varU64('started_at'), 1767225600000);
  assert.deepEqual(e.parameter('applicant_id'), 'A-17');
  assert.deepEqual(e.thread('risk'), { participant: 'risk', state: 'start', outcome: null, deadline: null });
  assert.equal(e.thread('nobody'), undefined);
});

test('whole numbers: non-negative numbers truncated, as Rust as_u64', () => {
  const read = (amount) => new Event(event({ message: { ...event().message, content: { amount } } })).contentU64('amount');
  assert.equal(read(500.9), 500);
  assert.equal(read(0), 0);
  assert.ok(Object.is(read(-0), 0));
  assert.equal(read(-1), undefined);
  assert.equal(read(1e3), 1000);
  assert.equal(read('12'), undefined);
  assert.equal(read(true), undefined);
  assert.equal(read(1e30), 2 ** 64, 'saturates where Rust saturates');
  assert.equal(new Event(event()).contentF64('amount'), 20000);
  assert.equal(new Event(event({ message: { ...event().message, content: { ok: true } } })).contentBool('ok'), true);
});

test('parts left out by hooks.reads read as empty', () => {
  const cut = event({
    conversation: { id: 'c', status: 'active', threads: [{ participant: 'risk', state: 'start' }], deadline: 5, retry_attempts: 2 },
    message: null,
    config: null,
  });
  assert.deepEqual(validate(inputSchema, cut), []);
  const e = new Event(cut);
  assert.equal(e.conversation.template, '');
  assert.equal(e.conversation.revision, '');
  assert.equal(e.conversation.initiator, '');
  assert.deepEqual(e.conversation.participants, []);
  assert.equal(e.conversation.vars, null);
  assert.equal(e.conversation.parameters, null);
  assert.equal(e.conversation.context, null);
  assert.equal(e.conversation.retry_attempts, 2);
  assert.equal(e.var('status'), undefined);
  assert.equal(e.parameter('x'), undefined);
  assert.equal(e.content, null);
  assert.equal(e.contentStr('purpose'), undefined);
  assert.equal(e.configStr('x'), undefined);
  assert.deepEqual(new Event({ ...cut, conversation: { id: 'c', status: 'active', retry_attempts: 0 } }).conversation.threads, []);
});

test('accessors read own fields only', () => {
  const e = Event.fromJson('{"abi_version":1,"hook":"on_message","now":1,"conversation":{"id":"c","status":"active","retry_attempts":0},"message":{"id":"m","performative":"p","sender":"s","receivers":[],"content":{"__proto__":"own"}},"config":["not","an","object"]}');
  assert.equal(e.contentField('toString'), undefined);
  assert.equal(e.contentStr('__proto__'), 'own');
  assert.equal(e.configField('0'), undefined, 'an array is not an object');
});

test('every builder writes its action as the output schema and the Rust SDK have it', () => {
  const cases = [
    [Action.continue(), 'continue'],
    [Action.reject('too much'), { reject: { reason: 'too much' } }],
    [Action.setVars({ a: 1, b: { c: [true] } }), { set_vars: { a: 1, b: { c: [true] } } }],
    [Action.setVar('risk_route', 'special'), { set_vars: { risk_route: 'special' } }],
    [Action.send('inform', 'bob', { done: true }), { send: { performative: 'inform', to: ['bob'], content: { done: true } } }],
    [Action.send('inform', ['bob', 'carol']), { send: { performative: 'inform', to: ['bob', 'carol'] } }],
    [Action.send('inform', 'bob', null), { send: { performative: 'inform', to: ['bob'] } }],
    [Action.route('special-risk-assessment'), { route: { to: ['special-risk-assessment'], mode: 'add' } }],
    [Action.route(['a', 'b'], 'replace'), { route: { to: ['a', 'b'], mode: 'replace' } }],
    [Action.setDeadline(60000), { set_deadline: { in_ms: 60000 } }],
    [Action.extendDeadline(5), { extend_deadline: { by_ms: 5 } }],
    [Action.retry(1000, 2.0, 3), { retry: { after_ms: 1000, backoff: 2, max_attempts: 3 } }],
    [Action.retry(1000), { retry: { after_ms: 1000 } }],
    [Action.complete('success', 'done'), { complete: { outcome: 'success', reason: 'done' } }],
    [Action.complete('no_reply'), { complete: { outcome: 'no_reply' } }],
    [Action.escalate('human-review', 'why'), { escalate: { to: 'human-review', reason: 'why' } }],
    [Action.log('hello'), { log: { level: 'info', message: 'hello' } }],
    [Action.log('careful', 'warn'), { log: { level: 'warn', message: 'careful' } }],
  ];
  for (const [built, expected] of cases) {
    assert.deepEqual(built, expected);
    assert.deepEqual(validate(outputSchema, { actions: [built] }), [], JSON.stringify(built));
  }
  // Each action of the schema has a case above.
  const covered = new Set(cases.map(([built]) => (typeof built === 'string' ? built : Object.keys(built)[0])));
  const actions = outputSchema.$defs.Action.oneOf.map((variant) => variant.const ?? Object.keys(variant.properties)[0]);
  assert.deepEqual(actions.filter((action) => !covered.has(action)), ['eval_vars']);
});

test('builders refuse what the engine would refuse', () => {
  assert.throws(() => Action.reject(42), /reason must be a string/);
  assert.throws(() => Action.route('a', 'sideways'), /route mode/);
  assert.throws(() => Action.complete('great'), /outcome must be one of/);
  assert.throws(() => Action.setDeadline(-1), /inMs must be a non-negative whole number/);
  assert.throws(() => Action.retry(1.5), /afterMs/);
  assert.throws(() => Action.retry(10, Infinity), /backoff/);
  assert.throws(() => Action.log('x', 'loud'), /log level/);
  assert.throws(() => Action.send('inform', [1]), /agents are a string or an array of strings/);
  assert.throws(() => Action.setVars([1]), /setVars takes an object/);
});

test('defineHook answers {} for nothing, the actions otherwise', () => {
  const hook = defineHook({
    onStart: (e) => [Action.setVar('started_at', e.now)],
    onMessage: () => [],
  });
  const text = JSON.stringify(event());
  assert.equal(hook.start(text), '{"actions":[{"set_vars":{"started_at":1767225600000}}]}');
  assert.equal(hook.message(text), '{}');
  assert.equal(hook.timeout(text), '{}', 'no handler: carry on');
  assert.equal(defineHook({ onStart: () => undefined }).start(text), '{}');
});

test('a handler that throws fails the call, and the error is logged first', () => {
  host.takeLogs();
  const hook = defineHook({
    onMessage() {
      throw new RangeError('no such loan');
    },
  });
  assert.throws(() => hook.message(JSON.stringify(event())), { name: 'RangeError', message: 'no such loan' });
  const logs = host.takeLogs();
  assert.equal(logs.length, 1);
  assert.equal(logs[0][0], 'error');
  assert.match(logs[0][1], /^on_message threw RangeError: no such loan/);
  // Not an Error: thrown on as it is.
  assert.throws(() => defineHook({ onStart: () => { throw 'plain'; } }).start(JSON.stringify(event())), (thrown) => thrown === 'plain');
  assert.deepEqual(host.takeLogs(), [['error', 'on_start threw "plain"']]);
});

test('a handler must answer with an array, synchronously', () => {
  const text = JSON.stringify(event());
  assert.throws(() => defineHook({ onStart: () => Action.continue() }).start(text), /array of actions/);
  assert.throws(() => defineHook({ onStart: async () => [] }).start(text), /not a Promise/);
  host.takeLogs();
});

test('defineHook refuses unknown handlers (a typo would never run)', () => {
  assert.throws(() => defineHook({ onmessage() {} }), /unknown handler "onmessage"/);
  assert.throws(() => defineHook({ onStart: 5 }), /onStart must be a function/);
  assert.throws(() => defineHook(), /object of handlers/);
});

test('an event that does not parse is answered with a reject naming the problem', () => {
  const answer = JSON.parse(handleEvent('on_message', () => [], '{"abi_version": 1,'));
  assert.match(answer.actions[0].reject.reason, /^the hook cannot read its event: /);
  const shapeless = JSON.parse(handleEvent('on_message', () => [], '[]'));
  assert.match(shapeless.actions[0].reject.reason, /conversation/);
});

test('log and nowMs reach the host', () => {
  host.takeLogs();
  host.setNowMs(1234);
  log('warn', 'careful');
  assert.equal(nowMs(), 1234);
  assert.deepEqual(host.takeLogs(), [['warn', 'careful']]);
  assert.throws(() => log('verbose', 'x'), /log level must be one of/);
});

test('the runtime fixes: console to the log, Date on the host clock, no performance.now', () => {
  class TestDate extends Date {}
  const target = { Date: TestDate, performance: { timeOrigin: 7 } };
  kit.installRuntimeFixes(target);
  host.takeLogs();
  host.setNowMs(86_400_000);
  target.console.log('hello', { a: 1 }, 2);
  target.console.error(new TypeError('bad'));
  target.console.debug('quiet');
  assert.deepEqual(host.takeLogs(), [['info', 'hello {"a":1} 2'], ['error', 'TypeError: bad'], ['debug', 'quiet']]);
  assert.equal(target.Date.now(), 86_400_000);
  assert.equal(new target.Date().getTime(), 86_400_000);
  assert.equal(new target.Date(5).getTime(), 5);
  assert.equal(new target.Date(2026, 0, 2).getFullYear(), 2026);
  assert.ok(new target.Date() instanceof TestDate);
  assert.equal(new target.Date().constructor, target.Date);
  assert.equal(typeof target.Date(), 'string');
  assert.equal(target.Date.UTC(1970, 0, 1), 0);
  assert.throws(() => target.performance.now(), /performance.now\(\) is not available/);
  assert.equal(target.performance.timeOrigin, 7);
});
