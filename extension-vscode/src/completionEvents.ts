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
  /** Characters of `text` already inserted by partial acceptances. */
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
 * What "accept the next line" inserts from the rest of a suggestion: up to its
 * first line break; when the rest starts with a line break, that break and the
 * next line.
 *
 * ```ts
 * nextLinePart('a = 1\nb = 2') === 'a = 1'
 * nextLinePart('\n    b = 2\nc') === '\n    b = 2'
 * ```
 */
export function nextLinePart(rest: string): string {
  const start = rest.startsWith('\r\n') ? 2 : rest.startsWith('\n') ? 1 : 0;
  const newline = rest.slice(start).search(/\r?\n/);
  return newline < 0 ? rest : rest.slice(0, start + newline);
}

/** Where the cursor is after `text` is inserted at (line, character). */
export function positionAfter(line: number, character: number, text: string): { line: number; character: number } {
  const lines = text.split(/\r?\n/);
  if (lines.length === 1) {
    return { line, character: character + text.length };
  }
  return { line: line + lines.length - 1, character: (lines[lines.length - 1] ?? '').length };
}

export class CompletionEvents {
  private readonly tracked = new WeakMap<object, TrackedItem>();
  private current: TrackedItem | undefined;
  private readonly sentShown = new Set<string>();

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

  /** The item's command ran: VS Code inserted all of it. */
  accepted(value: unknown): void {
    const tags = parseTags(value);
    if (tags === undefined) {
      return;
    }
    if (this.current?.tags.id === tags.id) {
      this.current = undefined;
    }
    this.send(NOTIFICATIONS.accepted, { ...tags });
  }

  /** VS Code's handleDidPartiallyAcceptCompletionItem (a word, a line): `acceptedLength` in all so far. */
  partiallyAcceptedItem(item: unknown, acceptedLength: number): void {
    const tracked = typeof item === 'object' && item !== null ? this.tracked.get(item) : undefined;
    if (tracked !== undefined && acceptedLength > tracked.consumed) {
      this.partiallyAccepted(tracked, acceptedLength);
    }
  }

  /** The first `acceptedLength` characters of `item` are inserted by now; all of them is an acceptance. */
  partiallyAccepted(item: TrackedItem, acceptedLength: number): void {
    item.consumed = Math.min(item.text.length, Math.max(item.consumed, acceptedLength));
    if (item.consumed >= item.text.length) {
      this.accepted(item.tags);
      return;
    }
    this.send(NOTIFICATIONS.partial, { ...item.tags, acceptedLength: item.consumed });
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
    if (this.sentShown.has(tags.id)) {
      return;
    }
    this.sentShown.add(tags.id);
    if (this.sentShown.size > REMEMBERED_IDS) {
      const oldest = this.sentShown.values().next().value;
      if (oldest !== undefined) {
        this.sentShown.delete(oldest);
      }
    }
    this.send(NOTIFICATIONS.shown, { ...tags });
  }
}
