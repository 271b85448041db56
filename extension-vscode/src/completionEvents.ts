/**
 * Tells the server when a midword inline item is shown, accepted or partly
 * accepted, for its local acceptance log (`midword stats`). Pure: no `vscode`
 * import; positions are plain line/character pairs.
 *
 * The server tags each item with `{id, method, context}` as the arguments of
 * the item's command, `midword.completionAccepted`, which VS Code runs when
 * the whole item is accepted. "Shown" comes from VS Code's
 * `handleDidShowCompletionItem` where VS Code calls it, and otherwise when
 * the first item of an answer reaches VS Code (it shows that one). A partial
 * acceptance comes from `handleDidPartiallyAcceptCompletionItem`, and from
 * the extension's own **Accept Next Line** command.
 *
 * Each acceptance is reported once, and `acceptedLength` is counted as the
 * server counts an item's `length`: in Unicode code points of the item's
 * text (Python's `len`), line breaks as they are in that text.
 */

export const ACCEPTED_COMMAND = 'midword.completionAccepted';
export const NOTIFICATIONS = {
  shown: 'midword/completionShown',
  accepted: 'midword/completionAccepted',
  partial: 'midword/completionPartiallyAccepted',
} as const;
/** Client capability that asks the server for tagged items. */
export const EXPERIMENTAL_CAPABILITY = { midword: { completionEvents: true } };
const REMEMBERED_IDS = 500;

export interface ItemTags {
  id: string;
  method: string;
  context: string;
}

/** An offered item: where it was offered and how much of it has been taken. */
export interface TrackedItem {
  uri: string;
  line: number;
  character: number;
  text: string;
  tags: ItemTags;
  /** How much of `text` (UTF-16 code units, an index into it) partial acceptances inserted so far. */
  consumed: number;
}

export type Send = (method: string, params: Record<string, unknown>) => void;

/** The tags a server item carries in its command's arguments (undefined for any other item). */
export function tagsOf(item: unknown): ItemTags | undefined {
  const command = (item as { command?: { command?: unknown; arguments?: unknown[] } } | undefined)?.command;
  if (command?.command !== ACCEPTED_COMMAND) {
    return undefined;
  }
  return parseTags(command.arguments?.[0]);
}

export function parseTags(value: unknown): ItemTags | undefined {
  const tags = value as Record<string, unknown> | undefined;
  if (typeof tags?.id !== 'string' || tags.id === '') {
    return undefined;
  }
  const text = (field: unknown): string => (typeof field === 'string' ? field : '');
  return { id: tags.id, method: text(tags.method), context: text(tags.context) };
}

/**
 * What VS Code's Accept Next Line inserts from the rest of a suggestion: up to
 * and including its first `\n` (so a rest that starts with a line break gives
 * that break alone), or all of it.
 *
 * ```ts
 * nextLinePart('a = 1\nb = 2') === 'a = 1\n'
 * nextLinePart('\n    b = 2\nc') === '\n'
 * nextLinePart('x\r\ny') === 'x\r\n'
 * ```
 */
export function nextLinePart(rest: string): string {
  const newline = rest.indexOf('\n');
  return newline < 0 ? rest : rest.slice(0, newline + 1);
}

/**
 * Unicode code points in `text`: the server's unit (Python's `len`), where
 * JavaScript's `length` counts a character outside the BMP twice.
 *
 * ```ts
 * codePointLength('a𝔁') === 2 // 'a𝔁'.length === 3
 * ```
 */
export function codePointLength(text: string): number {
  let count = 0;
  for (const _ of text) {
    count += 1;
  }
  return count;
}

/**
 * The index in `text` after its first `lfLength` characters, each `\r\n`
 * counted as one (VS Code reports partial acceptances read back with `\n`
 * line ends).
 *
 * ```ts
 * indexAfterLfLength('a\r\nb', 2) === 3
 * ```
 */
export function indexAfterLfLength(text: string, lfLength: number): number {
  let index = 0;
  for (let counted = 0; counted < lfLength && index < text.length; counted++) {
    index += text.startsWith('\r\n', index) ? 2 : 1;
  }
  return index;
}

/** Where the cursor is after `text` is inserted at (line, character). */
export function positionAfter(line: number, character: number, text: string): { line: number; character: number } {
  const lines = text.split(/\r?\n/);
  if (lines.length === 1) {
    return { line, character: character + text.length };
  }
  return { line: line + lines.length - 1, character: (lines[lines.length - 1] ?? '').length };
}

/** The latest `REMEMBERED_IDS` item ids an event was sent for. */
class RecentIds {
  private readonly ids = new Set<string>();

  /** Remembers `id`; false when it was remembered already. */
  add(id: string): boolean {
    if (this.ids.has(id)) {
      return false;
    }
    this.ids.add(id);
    if (this.ids.size > REMEMBERED_IDS) {
      const oldest = this.ids.values().next().value;
      if (oldest !== undefined) {
        this.ids.delete(oldest);
      }
    }
    return true;
  }
}

/** Where the cursor is: a document and a position in it. */
export interface CursorAt {
  uri: string;
  line: number;
  character: number;
}

export class CompletionEvents {
  private readonly tracked = new WeakMap<object, TrackedItem>();
  private current: TrackedItem | undefined;
  private readonly sentShown = new RecentIds();
  private readonly sentAccepted = new RecentIds();

  constructor(private readonly send: Send) {}

  /** An answer reached VS Code: remember its items; the first one is on screen. */
  offered(uri: string, line: number, character: number, items: readonly unknown[]): void {
    let first: TrackedItem | undefined;
    for (const item of items) {
      if (typeof item !== 'object' || item === null) {
        continue;
      }
      const tags = tagsOf(item);
      const text = (item as { insertText?: unknown }).insertText;
      if (tags === undefined || typeof text !== 'string') {
        continue;
      }
      const tracked: TrackedItem = { uri, line, character, text, tags, consumed: 0 };
      this.tracked.set(item, tracked);
      first ??= tracked;
    }
    if (first !== undefined) {
      this.current = first;
      this.sendShown(first.tags);
    }
  }

  /** VS Code's handleDidShowCompletionItem: this item (maybe another than the first) is on screen. */
  shown(item: unknown): void {
    const tracked = typeof item === 'object' && item !== null ? this.tracked.get(item) : undefined;
    if (tracked !== undefined) {
      this.current = tracked;
      this.sendShown(tracked.tags);
    }
  }

  /**
   * The item's command ran: VS Code inserted all of it. Reported once per item:
   * an Accept Next Line that takes the whole rest is seen both here and by
   * `acceptNextLine`, in either order.
   */
  accepted(value: unknown): void {
    const tags = parseTags(value);
    if (tags === undefined) {
      return;
    }
    if (this.current?.tags.id === tags.id) {
      this.current = undefined;
    }
    if (this.sentAccepted.add(tags.id)) {
      this.send(NOTIFICATIONS.accepted, { ...tags });
    }
  }

  /**
   * VS Code's handleDidPartiallyAcceptCompletionItem (a word, a line): `acceptedLength`
   * in all so far, in UTF-16 code units with line breaks read as `\n`.
   */
  partiallyAcceptedItem(item: unknown, acceptedLength: number): void {
    const tracked = typeof item === 'object' && item !== null ? this.tracked.get(item) : undefined;
    if (tracked === undefined) {
      return;
    }
    const acceptedIndex = indexAfterLfLength(tracked.text, acceptedLength);
    if (acceptedIndex > tracked.consumed) {
      this.partiallyAccepted(tracked, acceptedIndex);
    }
  }

  /** `item.text` up to `acceptedIndex` is inserted by now; all of it is an acceptance. */
  partiallyAccepted(item: TrackedItem, acceptedIndex: number): void {
    item.consumed = Math.min(item.text.length, Math.max(item.consumed, acceptedIndex));
    if (item.consumed >= item.text.length) {
      this.accepted(item.tags);
      return;
    }
    const acceptedLength = codePointLength(item.text.slice(0, item.consumed));
    this.send(NOTIFICATIONS.partial, { ...item.tags, acceptedLength });
  }

  /**
   * midword's Accept Next Line: `runBuiltin` runs VS Code's, and the line it
   * inserted of the midword item at `cursor` is reported, where VS Code did not
   * report it itself (handleDidPartiallyAcceptCompletionItem, which it calls
   * before its command returns). When the line is all that was left, VS Code
   * accepts the whole item and runs the item's command, maybe only after
   * `runBuiltin` returns; `accepted` sends that acceptance once.
   */
  async acceptNextLine(cursor: CursorAt | undefined, runBuiltin: () => PromiseLike<unknown>): Promise<void> {
    const pending = cursor === undefined ? undefined : this.pendingAt(cursor.uri, cursor.line, cursor.character);
    const consumedBefore = pending?.consumed;
    await runBuiltin();
    if (pending !== undefined && pending.consumed === consumedBefore) {
      const line = nextLinePart(pending.text.slice(pending.consumed));
      this.partiallyAccepted(pending, pending.consumed + line.length);
    }
  }

  /** The item on screen at this cursor (its rest starts there), if it is midword's. */
  pendingAt(uri: string, line: number, character: number): TrackedItem | undefined {
    const item = this.current;
    if (item?.uri !== uri) {
      return undefined;
    }
    const at = positionAfter(item.line, item.character, item.text.slice(0, item.consumed));
    return at.line === line && at.character === character ? item : undefined;
  }

  private sendShown(tags: ItemTags): void {
    if (this.sentShown.add(tags.id)) {
      this.send(NOTIFICATIONS.shown, { ...tags });
    }
  }
}
