import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  codePointLength,
  CompletionEvents,
  indexAfterLfLength,
  nextLinePart,
  NOTIFICATIONS,
  positionAfter,
  tagsOf,
} from '../completionEvents';

const item = (id: string, insertText: string): { insertText: string; command: { title: string; command: string; arguments: unknown[] } } => ({
  insertText,
  command: { title: 't', command: 'midword.completionAccepted', arguments: [{ id, method: 'bytesampler', context: 'inside_word' }] },
});

/** Brute force, character by character: VS Code's Accept Next Line takes up to and including the first "\n". */
function nextLineOracle(rest: string): string {
  let out = '';
  for (const ch of rest) {
    out += ch;
    if (ch === '\n') {
      break;
    }
  }
  return out;
}

/**
 * Every text of up to four pieces that mix line breaks (LF and CRLF), spaces, words and a character
 * outside the BMP (4,681 texts, the empty one included).
 */
function allTexts(): string[] {
  const pieces = ['a', ' ', '\n', 'bc', '\n\n', '  x', '\r\n', '𝔁'];
  let texts = [''];
  const all = [''];
  for (let length = 1; length <= 4; length++) {
    texts = texts.flatMap((text) => pieces.map((piece) => text + piece));
    all.push(...texts);
  }
  return all;
}

describe('nextLinePart', () => {
  it('takes the rest of the current line with its line break, or the line break alone', () => {
    assert.equal(nextLinePart('a = 1\nb = 2'), 'a = 1\n');
    assert.equal(nextLinePart('\n    b = 2\nc'), '\n');
    assert.equal(nextLinePart('x\r\ny'), 'x\r\n');
    assert.equal(nextLinePart('last\n'), 'last\n');
    assert.equal(nextLinePart('single'), 'single');
    assert.equal(nextLinePart(''), '');
  });

  it('agrees with a character-by-character oracle on every short text', () => {
    for (const text of allTexts()) {
      assert.equal(nextLinePart(text), nextLineOracle(text), JSON.stringify(text));
    }
  });
});

describe('lengths', () => {
  it('codePointLength counts characters as Python does, not UTF-16 code units', () => {
    assert.equal(codePointLength('a𝔁'), 2);
    assert.equal(codePointLength(''), 0);
    for (const text of allTexts()) {
      // oracle: code points are code units less one per surrogate pair
      const pairs = text.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g)?.length ?? 0;
      assert.equal(codePointLength(text), text.length - pairs, JSON.stringify(text));
    }
  });

  it('indexAfterLfLength inverts reading a prefix back with LF line ends', () => {
    assert.equal(indexAfterLfLength('a\r\nb', 2), 3);
    assert.equal(indexAfterLfLength('a\nb', 2), 2);
    assert.equal(indexAfterLfLength('ab', 9), 2, 'never past the end');
    for (const text of allTexts()) {
      for (let index = 0; index <= text.length; index++) {
        if (text[index - 1] === '\r' && text[index] === '\n') {
          continue; // VS Code never splits a line break
        }
        const lfLength = text.slice(0, index).replace(/\r\n/g, '\n').length;
        assert.equal(indexAfterLfLength(text, lfLength), index, `${JSON.stringify(text)} at ${index}`);
      }
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

  it('partial lengths go to the server in code points of the item text, as its length', () => {
    const { sent, events } = recorder();
    const text = 'π𝔁 = 1\nnext';
    const shown = item('a', text);
    events.offered('u', 1, 0, [shown]);
    events.partiallyAcceptedItem(shown, 'π𝔁 = 1\n'.length); // VS Code counts UTF-16 code units
    const codePoints = Array.from('π𝔁 = 1\n').length; // 7, where its UTF-16 length is 8
    assert.deepEqual(sent.at(-1), [
      NOTIFICATIONS.partial,
      { id: 'a', method: 'bytesampler', context: 'inside_word', acceptedLength: codePoints },
    ]);
    assert.equal(events.pendingAt('u', 2, 0)?.consumed, 'π𝔁 = 1\n'.length);
  });

  it('a CRLF item: VS Code counts its line breaks as one character, the server as two', () => {
    const { sent, events } = recorder();
    const shown = item('a', 'a = 1\r\nb = 2\r\nc');
    events.offered('u', 4, 2, [shown]);
    events.partiallyAcceptedItem(shown, 'a = 1\n'.length);
    assert.equal(events.pendingAt('u', 5, 0)?.consumed, 'a = 1\r\n'.length, 'the rest starts on the next line');
    events.partiallyAcceptedItem(shown, 'a = 1\nb = 2\n'.length);
    assert.deepEqual(
      sent.slice(1).map(([method, params]) => [method, params.acceptedLength]),
      [
        [NOTIFICATIONS.partial, 'a = 1\r\n'.length],
        [NOTIFICATIONS.partial, 'a = 1\r\nb = 2\r\n'.length],
      ],
    );
  });

  it('an item accepted twice (its command, and a partial acceptance of all of it) is reported once', () => {
    const { sent, events } = recorder();
    const shown = item('a', 'x = 1');
    events.offered('u', 0, 0, [shown]);
    events.accepted(shown.command.arguments[0]);
    events.partiallyAcceptedItem(shown, 'x = 1'.length);
    events.accepted(shown.command.arguments[0]);
    assert.deepEqual(
      sent.map(([method]) => method),
      [NOTIFICATIONS.shown, NOTIFICATIONS.accepted],
    );
  });

  it('Accept Next Line without a cursor or item runs VS Code and reports nothing', async () => {
    const { sent, events } = recorder();
    let ran = 0;
    await events.acceptNextLine(undefined, () => Promise.resolve(ran++));
    await events.acceptNextLine({ uri: 'u', line: 0, character: 0 }, () => Promise.resolve(ran++));
    assert.equal(ran, 2);
    assert.deepEqual(sent, []);
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
