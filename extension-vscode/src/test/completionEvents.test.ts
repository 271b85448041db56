import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { CompletionEvents, nextLinePart, NOTIFICATIONS, positionAfter, tagsOf } from '../completionEvents';

const item = (id: string, insertText: string): { insertText: string; command: unknown } => ({
  insertText,
  command: { title: 't', command: 'midword.completionAccepted', arguments: [{ id, method: 'bytesampler', context: 'inside_word' }] },
});

/** Brute force: the text up to (not including) the first line break that follows some non-break text. */
function nextLineOracle(rest: string): string {
  let out = '';
  for (const ch of rest) {
    if (ch === '\n' && out.replace(/\r?\n/g, '') !== '') {
      break;
    }
    if (ch === '\n' && out.includes('\n')) {
      break;
    }
    out += ch;
  }
  return out.endsWith('\r') && rest.length > out.length ? out.slice(0, -1) : out;
}

describe('nextLinePart', () => {
  it('takes the rest of the current line, or the line break and the next line', () => {
    assert.equal(nextLinePart('a = 1\nb = 2'), 'a = 1');
    assert.equal(nextLinePart('\n    b = 2\nc'), '\n    b = 2');
    assert.equal(nextLinePart('x\r\ny'), 'x');
    assert.equal(nextLinePart('single'), 'single');
    assert.equal(nextLinePart(''), '');
  });

  it('agrees with a character-by-character oracle on generated texts', () => {
    const pieces = ['a', ' ', '\n', 'bc', '\n\n', '  x'];
    let seed = 7;
    for (let n = 0; n < 500; n++) {
      let text = '';
      for (let k = 0; k < 6; k++) {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        text += pieces[seed % pieces.length] ?? '';
      }
      assert.equal(nextLinePart(text), nextLineOracle(text), JSON.stringify(text));
    }
  });
});

describe('positionAfter', () => {
  it('moves along the line, or to the end of the last inserted line', () => {
    assert.deepEqual(positionAfter(3, 4, 'abc'), { line: 3, character: 7 });
    assert.deepEqual(positionAfter(3, 4, 'abc\n  de'), { line: 4, character: 4 });
    assert.deepEqual(positionAfter(3, 4, ''), { line: 3, character: 4 });
  });
});

describe('CompletionEvents', () => {
  function recorder(): { sent: [string, Record<string, unknown>][]; events: CompletionEvents } {
    const sent: [string, Record<string, unknown>][] = [];
    return { sent, events: new CompletionEvents((method, params) => sent.push([method, params])) };
  }

  it('reads the tags from the item command; other items have none', () => {
    assert.deepEqual(tagsOf(item('a', 'x')), { id: 'a', method: 'bytesampler', context: 'inside_word' });
    assert.equal(tagsOf({ insertText: 'x' }), undefined);
    assert.equal(tagsOf({ insertText: 'x', command: { command: 'other', arguments: [{ id: 'a' }] } }), undefined);
  });

  it('the first offered item is shown once, however often VS Code says so', () => {
    const { sent, events } = recorder();
    const first = item('a', 'ser()');
    const second = item('b', 'ser(x)');
    events.offered('u', 0, 5, [first, second]);
    events.shown(first);
    events.offered('u', 0, 5, [first]);
    events.shown(second); // cycled to the second item
    assert.deepEqual(
      sent.map(([method, params]) => [method, params.id]),
      [
        [NOTIFICATIONS.shown, 'a'],
        [NOTIFICATIONS.shown, 'b'],
      ],
    );
    assert.equal(events.pendingAt('u', 0, 5)?.tags.id, 'b', 'the item on screen is the one shown last');
  });

  it("VS Code's partial acceptances are totals; the whole text counts as accepted", () => {
    const { sent, events } = recorder();
    const shown = item('a', 'foo(bar)');
    events.offered('u', 1, 0, [shown]);
    events.partiallyAcceptedItem(shown, 4);
    events.partiallyAcceptedItem(shown, 4); // no progress: nothing sent
    assert.equal(events.pendingAt('u', 1, 4)?.consumed, 4);
    assert.equal(events.pendingAt('u', 1, 0), undefined, 'the cursor moved on');
    events.partiallyAcceptedItem(shown, 8);
    assert.deepEqual(
      sent.map(([method, params]) => [method, params.acceptedLength]),
      [
        [NOTIFICATIONS.shown, undefined],
        [NOTIFICATIONS.partial, 4],
        [NOTIFICATIONS.accepted, undefined],
      ],
    );
    assert.equal(events.pendingAt('u', 1, 8), undefined, 'an accepted item is no longer pending');
  });

  it('ignores untagged items and events about unknown items', () => {
    const { sent, events } = recorder();
    events.offered('u', 0, 0, [{ insertText: 'x' }, null, 'text']);
    events.shown({ insertText: 'x' });
    events.partiallyAcceptedItem({}, 3);
    events.accepted({ method: 'no id' });
    assert.deepEqual(sent, []);
    assert.equal(events.pendingAt('u', 0, 0), undefined);
  });
});
