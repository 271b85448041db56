import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { settingProperties } from '../manifest';
import {
  candidateNames,
  HOLD_MS,
  MAX_CANDIDATES,
  parseSymbolsSetting,
  SymbolCollector,
  SYMBOLS_BUDGET_MS,
  SYMBOLS_CHOICES,
  typedName,
  type CursorPosition,
  type SymbolsSetting,
} from '../symbols';
import { deferred, flush, ManualTimers } from './helpers/manualTimers';
import { readPackageJson } from './helpers/paths';

/** vscode.CompletionItemKind values used below. */
const KIND = { Text: 0, Method: 1, Field: 4, Keyword: 13, Snippet: 14 } as const;

/** A document of one line, as the collector reads it. */
function documentWith(line: string, uri = 'file:///ws/a.py'): { uri: { toString(): string }; lineAt(line: number): { text: string } } {
  return { uri: { toString: () => uri }, lineAt: () => ({ text: line }) };
}

/** The cursor at the end of the one-line document's `line`. */
const endOf = (line: string): CursorPosition => ({ line: 0, character: line.length });

interface StubProvider {
  /** The (uri, position) pairs `vscode.executeCompletionItemProvider` was run with. */
  calls: [string, CursorPosition][];
  collector: SymbolCollector;
  timers: ManualTimers;
  logs: string[];
  setting: SymbolsSetting;
}

/** A collector whose "other providers" answer with `answer` (a value, or a promise to hold it open). */
function stubProvider(answer: () => unknown): StubProvider {
  const timers = new ManualTimers();
  const state: StubProvider = {
    calls: [],
    timers,
    logs: [],
    setting: 'auto',
    collector: undefined as unknown as SymbolCollector,
  };
  state.collector = new SymbolCollector({
    setting: () => state.setting,
    provideCompletions: (uri, position) => {
      state.calls.push([uri.toString(), { line: position.line, character: position.character }]);
      return Promise.resolve(answer());
    },
    log: (message) => state.logs.push(message),
    timers,
    now: () => timers.now,
  });
  return state;
}

/** Runs a collection to its end, moving the manual clock on while it waits. */
async function collectNow(state: StubProvider, line: string, waitMs = 0): Promise<string[] | undefined> {
  const collected = state.collector.collect(documentWith(line), endOf(line));
  await state.timers.tick(waitMs);
  return collected;
}

const assertProviders = {
  items: [
    { label: 'assertEqual', kind: KIND.Method },
    { label: { label: 'assertEquals', description: 'deprecated alias' }, kind: KIND.Method },
    { label: 'assertIn', kind: KIND.Method },
    { label: 'assertEqual', filterText: 'assertEqual', kind: KIND.Method }, // another provider's copy
  ],
};

describe('typedName', () => {
  it('inside a name: the name characters before the cursor', () => {
    assert.equal(typedName('    self.assertEq', 17), 'assertEq');
    assert.equal(typedName('    self.assertEqual(x)', 17), 'assertEq', 'only what is before the cursor');
    assert.equal(typedName('pri', 3), 'pri', 'a bare name');
    assert.equal(typedName('y = größe', 9), 'größe', 'non-ASCII letters go on with a name, as the server counts them');
    assert.equal(typedName('x = _private2', 13), '_private2');
  });

  it("right after a member '.': the empty name", () => {
    assert.equal(typedName('x = self.', 9), '');
    assert.equal(typedName('f(a).', 5), '', 'after a call');
    assert.equal(typedName('xs[0].', 6), '', 'after an index');
    assert.equal(typedName('a?.', 3), '', "after JavaScript's ?.");
  });

  it('anywhere else: undefined (no names are asked for)', () => {
    for (const [line, character] of [
      ['x = ', 4],
      ['', 0],
      ['x = 0.5', 7], // a number
      ['x = 1.', 6], // a number's point
      ['x = 0x1F', 8],
      ['...', 3],
      ['.', 1], // a line that starts with a dot
      ['a = (', 5],
      ['print("a" ', 10],
    ] as const) {
      assert.equal(typedName(line, character), undefined, JSON.stringify(line));
    }
  });
});

describe('candidateNames', () => {
  it('labels and filter texts that extend what was typed, each once, in the providers\' order', () => {
    assert.deepEqual(candidateNames(assertProviders, 'assertE'), ['assertEqual', 'assertEquals']);
    assert.deepEqual(candidateNames(assertProviders, ''), ['assertEqual', 'assertEquals', 'assertIn']);
    assert.deepEqual(
      candidateNames([{ label: 'Counter (collections)', filterText: 'Counter', kind: KIND.Field }], 'Co'),
      ['Counter'],
      'a filter text gives the name where the label is decorated; an array answer works too',
    );
  });

  it("leaves out Text items (word lists, midword's own items) and Snippets", () => {
    const answer = {
      items: [
        { label: 'assertEqual(result, expected)', kind: KIND.Text, filterText: 'assertEqual' }, // midword's item
        { label: 'assertWordFromBuffer', kind: KIND.Text },
        { label: 'assertSnippet', kind: KIND.Snippet },
        { label: 'assertTrue', kind: KIND.Method },
        { label: 'assert', kind: KIND.Keyword },
      ],
    };
    assert.deepEqual(candidateNames(answer, 'assert'), ['assertTrue', 'assert']);
  });

  it('only identifier-shaped texts', () => {
    const labels = ['foo()', 'foo bar', '1foo', '', 'foo.bar', '$foo', '-foo', 'foo-bar', 'fooBar', '_foo', 'größe', 'foo2'];
    const answer = { items: labels.map((label) => ({ label, kind: KIND.Field })) };
    assert.deepEqual(candidateNames(answer, ''), ['fooBar', '_foo', 'größe', 'foo2']);
  });

  it(`at most ${MAX_CANDIDATES} names (or the cap given)`, () => {
    const answer = { items: Array.from({ length: 2 * MAX_CANDIDATES }, (_, i) => ({ label: `name${i}`, kind: KIND.Field })) };
    const names = candidateNames(answer, 'name');
    assert.equal(names.length, MAX_CANDIDATES);
    assert.equal(names[0], 'name0');
    assert.deepEqual(candidateNames(answer, 'name', 3), ['name0', 'name1', 'name2']);
  });

  it('no answer, or a malformed one: no names', () => {
    for (const answer of [undefined, null, 'x', 3, {}, { items: 'x' }, { items: [null, 'x', 3, { label: 7 }] }]) {
      assert.deepEqual(candidateNames(answer, ''), [], JSON.stringify(answer));
    }
  });

  it('package.json declares midword.symbols with these values, and says how long it waits', () => {
    const schema = settingProperties(readPackageJson())['midword.symbols'];
    assert.deepEqual(schema?.enum, [...SYMBOLS_CHOICES]);
    assert.equal(schema.default, 'auto');
    assert.match(String(schema.markdownDescription), new RegExp(`at most ${SYMBOLS_BUDGET_MS} ms`));
  });

  it('parseSymbolsSetting: off only when it says so', () => {
    assert.equal(parseSymbolsSetting('off'), 'off');
    assert.equal(parseSymbolsSetting('auto'), 'auto');
    assert.equal(parseSymbolsSetting(undefined), 'auto');
    assert.equal(parseSymbolsSetting('bogus'), 'auto');
  });
});

describe('SymbolCollector with a stub provider', () => {
  it('collects the names the other providers offer at the cursor', async () => {
    const state = stubProvider(() => assertProviders);
    const line = '    self.assertE';
    assert.deepEqual(await collectNow(state, line), ['assertEqual', 'assertEquals']);
    assert.deepEqual(state.calls, [['file:///ws/a.py', { line: 0, character: line.length }]]);
    assert.match(state.logs.join('\n'), /symbols: 2 name\(s\) extending "assertE"/);
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, line.length), false, 'done');
  });

  it('none of the offered names extends what was typed: no names (the request goes without)', async () => {
    const state = stubProvider(() => assertProviders);
    assert.equal(await collectNow(state, 'self.fail'), undefined);
    assert.equal(state.calls.length, 1);
  });

  it('not collected outside a name', async () => {
    const state = stubProvider(() => assertProviders);
    for (const line of ['x = ', 'x = 0.5', '    ', 'print("a" ']) {
      assert.equal(await collectNow(state, line), undefined, JSON.stringify(line));
    }
    assert.deepEqual(state.calls, [], 'the providers were never asked');
  });

  it('midword.symbols off: never asks, sends none; applied at the next request', async () => {
    const state = stubProvider(() => assertProviders);
    state.setting = 'off';
    assert.equal(await collectNow(state, 'self.assertE'), undefined);
    assert.deepEqual(state.calls, []);
    state.setting = 'auto';
    assert.deepEqual(await collectNow(state, 'self.assertE'), ['assertEqual', 'assertEquals']);
  });

  it(`the time budget: no answer within ${SYMBOLS_BUDGET_MS} ms sends no names`, async () => {
    const late = deferred<unknown>();
    const state = stubProvider(() => late.promise);
    const line = 'self.assertE';
    let settled: string[] | undefined | 'pending' = 'pending';
    const collected = state.collector.collect(documentWith(line), endOf(line)).then((names) => (settled = names));
    await state.timers.tick(SYMBOLS_BUDGET_MS - 1);
    assert.equal(settled, 'pending', 'still waiting just before the budget');
    await state.timers.tick(1);
    await collected;
    assert.equal(settled, undefined, 'gave up at the budget');
    assert.match(state.logs.join('\n'), new RegExp(`no answer from the completion providers within ${SYMBOLS_BUDGET_MS} ms`));
    // the command is still running: midword's own completion provider stays out of it until it settles
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, line.length), true);
    late.resolve(assertProviders);
    await flush();
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, line.length), false);
  });

  it('an answer within the budget is used', async () => {
    const soon = deferred<unknown>();
    const state = stubProvider(() => soon.promise);
    const collected = state.collector.collect(documentWith('self.assertE'), endOf('self.assertE'));
    await state.timers.tick(SYMBOLS_BUDGET_MS - 10);
    soon.resolve(assertProviders);
    assert.deepEqual(await collected, ['assertEqual', 'assertEquals']);
    assert.equal(state.timers.count, 0, 'no timer left behind');
  });

  it('collecting() holds only for the cursor collected at, while the command runs, and at most a while', async () => {
    const never = deferred<unknown>();
    const state = stubProvider(() => never.promise);
    const collected = state.collector.collect(documentWith('self.x'), { line: 0, character: 6 });
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, 6), true);
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, 5), false, 'another cursor');
    assert.equal(state.collector.collecting('file:///ws/b.py', 0, 6), false, 'another document');
    await state.timers.tick(SYMBOLS_BUDGET_MS);
    assert.equal(await collected, undefined);
    await state.timers.tick(HOLD_MS - SYMBOLS_BUDGET_MS - 1);
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, 6), true);
    await state.timers.tick(1);
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, 6), false, 'a command that never settles holds it no longer');
  });

  it('two collections at one cursor: it is collected at until both are done', async () => {
    const first = deferred<unknown>();
    const second = deferred<unknown>();
    const answers = [first.promise, second.promise];
    const state = stubProvider(() => answers.shift());
    const a = state.collector.collect(documentWith('self.x'), { line: 0, character: 6 });
    const b = state.collector.collect(documentWith('self.x'), { line: 0, character: 6 });
    first.resolve({ items: [] });
    await a;
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, 6), true);
    second.resolve({ items: [] });
    await b;
    assert.equal(state.collector.collecting('file:///ws/a.py', 0, 6), false);
  });

  it('a provider that fails: no names, logged, nothing held', async () => {
    const timers = new ManualTimers();
    const logs: string[] = [];
    const collector = new SymbolCollector({
      setting: () => 'auto',
      provideCompletions: () => Promise.reject(new Error('provider crashed')),
      log: (message) => logs.push(message),
      timers,
    });
    assert.equal(await collector.collect(documentWith('self.x'), { line: 0, character: 6 }), undefined);
    assert.match(logs.join('\n'), /provider crashed/);
    await flush();
    assert.equal(collector.collecting('file:///ws/a.py', 0, 6), false);
    const throwing = new SymbolCollector({
      setting: () => 'auto',
      provideCompletions: () => {
        throw new Error('no such command');
      },
      timers,
    });
    assert.equal(await throwing.collect(documentWith('self.x'), { line: 0, character: 6 }), undefined);
  });
});
