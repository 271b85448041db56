/**
 * Names the editor knows at the cursor, for completions guided by them (issue 39).
 * With `midword.symbols` at `auto`, when the cursor is in a name, or right after a `.`
 * where a name starts, the other completion providers are asked what they offer there
 * (`vscode.executeCompletionItemProvider`) within a time budget. Their labels and
 * filter texts that extend the name typed so far go to the server as the inline
 * request's `midwordCandidates`; the server then starts its suggestion with one of
 * them, chosen by the model's exact probabilities, or completes unguided.
 *
 * That command runs midword's own completion provider too (the server offers
 * `textDocument/completion`). While a collection at a cursor is in flight,
 * `collecting` says so and the client's completion middleware answers nothing there
 * without asking the server: no model run for it, and no midword items among the
 * names. Items of the kinds Text (word lists, midword's own items) and Snippet
 * (templates named by a keyword) are left out as well.
 *
 * Pure: no `vscode` import; the command comes in as a function.
 */
import type { Timers } from './restartScheduler';

/** The extension field of `textDocument/inlineCompletion` params that carries the names. */
export const CANDIDATES_FIELD = 'midwordCandidates';
export const SYMBOLS_CHOICES = ['auto', 'off'] as const;
export type SymbolsSetting = (typeof SYMBOLS_CHOICES)[number];
/** VS Code's command that runs every completion provider at a position. */
export const EXECUTE_COMPLETION_PROVIDER = 'vscode.executeCompletionItemProvider';
/** How long an inline request waits for the other providers before it goes without names. */
export const SYMBOLS_BUDGET_MS = 150;
/** The most names one request carries. */
export const MAX_CANDIDATES = 500;
/** Midword's completion provider stays out of a collection at most this long (a command that never settles). */
export const HOLD_MS = 5000;

/** `vscode.CompletionItemKind` values (0-based, unlike LSP's) of items that are not names. */
export const NOT_NAME_KINDS: ReadonlySet<number> = new Set([0 /* Text */, 14 /* Snippet */]);

/** A name a provider offers: a letter or `_`, then letters, digits, marks and connectors. */
const IDENTIFIER = /^[\p{L}\p{Nl}_][\p{L}\p{Nl}\p{Nd}\p{Mn}\p{Mc}\p{Pc}]*$/u;
/** What may come before a `.` that starts a member name, besides a name: a call, an index, `?.`. */
const BEFORE_MEMBER_DOT = new Set([')', ']', '?']);

/** Whether the UTF-16 code unit goes on with a name as the server counts it: ASCII letters, digits, `_`, anything not ASCII. */
function isNameUnit(code: number): boolean {
  return (code >= 0x61 && code <= 0x7a) || (code >= 0x41 && code <= 0x5a) || (code >= 0x30 && code <= 0x39) || code === 0x5f || code >= 0x80;
}

/** The name characters at the end of `text` (a backward scan: lines may be long). */
function nameRunAtEnd(text: string): string {
  let start = text.length;
  while (start > 0 && isNameUnit(text.charCodeAt(start - 1))) {
    start -= 1;
  }
  return text.slice(start);
}

/**
 * The part of a name typed before the cursor: the name characters just before it when
 * there are some (and they are not a number), `''` right after a member `.`; undefined
 * anywhere else (no names are asked for there).
 *
 * ```ts
 * typedName('    self.assertEq', 17) === 'assertEq'
 * typedName('x = self.', 9) === ''
 * typedName('x = 0.5', 7) === undefined // a number
 * typedName('x = ', 4) === undefined
 * ```
 */
export function typedName(lineText: string, character: number): string | undefined {
  const before = lineText.slice(0, character);
  const run = nameRunAtEnd(before);
  if (run !== '') {
    return /^[0-9]/.test(run) ? undefined : run;
  }
  if (!before.endsWith('.')) {
    return undefined;
  }
  const object = before.slice(0, -1);
  const objectRun = nameRunAtEnd(object);
  const afterObject = objectRun !== '' || BEFORE_MEMBER_DOT.has(object.slice(-1));
  if (!afterObject || /^[0-9]/.test(objectRun)) {
    return undefined; // `..`, `1.`, a `.` at the start of the line or after an operator
  }
  return '';
}

/** The label of a VS Code completion item: a string, or `{ label }` (a CompletionItemLabel). */
function labelOf(item: Record<string, unknown>): unknown {
  const label = item.label;
  return typeof label === 'object' && label !== null ? (label as { label?: unknown }).label : label;
}

/**
 * The names among the items of `vscode.executeCompletionItemProvider`'s answer (a
 * CompletionList or an array) that extend `typed`: labels and filter texts shaped like
 * identifiers, from items that are not Text or Snippet, each once, in the providers'
 * order, at most `cap` of them.
 *
 * ```ts
 * candidateNames({ items: [{ label: 'assertEqual', kind: 1 }, { label: 'assertIn', kind: 1 }] }, 'assertE')
 * // ['assertEqual']
 * ```
 */
export function candidateNames(result: unknown, typed: string, cap = MAX_CANDIDATES): string[] {
  const items: unknown = Array.isArray(result) ? result : (result as { items?: unknown } | null | undefined)?.items;
  if (!Array.isArray(items)) {
    return [];
  }
  const names = new Set<string>();
  for (const item of items as unknown[]) {
    if (typeof item !== 'object' || item === null) {
      continue;
    }
    const fields = item as Record<string, unknown>;
    if (typeof fields.kind === 'number' && NOT_NAME_KINDS.has(fields.kind)) {
      continue;
    }
    for (const text of [labelOf(fields), fields.filterText]) {
      if (typeof text === 'string' && IDENTIFIER.test(text) && text.startsWith(typed)) {
        names.add(text);
        if (names.size >= cap) {
          return [...names];
        }
      }
    }
  }
  return [...names];
}

/** The part of a text document the collection reads. */
export interface CursorDocument {
  readonly uri: { toString(): string };
  lineAt(line: number): { readonly text: string };
}

export interface CursorPosition {
  readonly line: number;
  readonly character: number;
}

export interface SymbolDeps {
  /** `midword.symbols`, read at each request (applied live). */
  setting(): SymbolsSetting;
  /** Runs `vscode.executeCompletionItemProvider` at the cursor. */
  provideCompletions(uri: CursorDocument['uri'], position: CursorPosition): PromiseLike<unknown>;
  /** Debug lines for the output channel. */
  log?(message: string): void;
  budgetMs?: number;
  timers?: Timers;
  now?(): number;
}

/** The midword.symbols value a setting read gives: `off` only when it says so. */
export function parseSymbolsSetting(value: unknown): SymbolsSetting {
  return value === 'off' ? 'off' : 'auto';
}

const realTimers: Timers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

const TIMED_OUT = Symbol('timed out');

export class SymbolCollector {
  /** Collections in flight, by cursor. */
  private readonly inFlight = new Map<string, number>();

  constructor(private readonly deps: SymbolDeps) {}

  /**
   * The names other providers offer at the cursor that extend what was typed;
   * undefined when the setting is off, the cursor is not in a name, no provider
   * answers within the budget, or none offers such a name.
   */
  async collect(document: CursorDocument, position: CursorPosition): Promise<string[] | undefined> {
    if (this.deps.setting() === 'off') {
      return undefined;
    }
    const typed = typedName(document.lineAt(position.line).text, position.character);
    if (typed === undefined) {
      return undefined;
    }
    const now = (): number => (this.deps.now !== undefined ? this.deps.now() : performance.now());
    const started = now();
    const release = this.hold(cursorKey(document.uri.toString(), position.line, position.character));
    let asked: Promise<unknown>;
    try {
      asked = Promise.resolve(this.deps.provideCompletions(document.uri, position));
    } catch (error) {
      asked = Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    const answered = asked.then(
      (result) => result,
      (error: unknown) => {
        this.deps.log?.(`symbols: the completion providers failed: ${String(error)}`);
        return undefined;
      },
    );
    void answered.finally(release);
    const result = await this.withinBudget(answered);
    const ms = Math.round(now() - started);
    if (result === TIMED_OUT) {
      this.deps.log?.(`symbols: no answer from the completion providers within ${this.budgetMs} ms; no names sent`);
      return undefined;
    }
    const names = candidateNames(result, typed);
    this.deps.log?.(`symbols: ${names.length} name(s) extending ${JSON.stringify(typed)} from the completion providers in ${ms} ms`);
    return names.length > 0 ? names : undefined;
  }

  /** Whether a collection at this cursor is in flight (midword's own completion provider then answers nothing). */
  collecting(uri: string, line: number, character: number): boolean {
    return this.inFlight.has(cursorKey(uri, line, character));
  }

  private get budgetMs(): number {
    return this.deps.budgetMs ?? SYMBOLS_BUDGET_MS;
  }

  private get timers(): Timers {
    return this.deps.timers ?? realTimers;
  }

  /** Marks the cursor as collected at until the returned function runs, or `HOLD_MS` passed. */
  private hold(key: string): () => void {
    this.inFlight.set(key, (this.inFlight.get(key) ?? 0) + 1);
    let released = false;
    const release = (): void => {
      if (released) {
        return;
      }
      released = true;
      this.timers.clearTimeout(timer);
      const count = (this.inFlight.get(key) ?? 1) - 1;
      if (count > 0) {
        this.inFlight.set(key, count);
      } else {
        this.inFlight.delete(key);
      }
    };
    const timer = this.timers.setTimeout(release, HOLD_MS);
    return release;
  }

  private withinBudget<T>(promise: Promise<T>): Promise<T | typeof TIMED_OUT> {
    return new Promise((resolve) => {
      const timer = this.timers.setTimeout(() => resolve(TIMED_OUT), this.budgetMs);
      void promise.then((value) => {
        this.timers.clearTimeout(timer);
        resolve(value);
      });
    });
  }
}

function cursorKey(uri: string, line: number, character: number): string {
  return `${uri}#${line}:${character}`;
}
