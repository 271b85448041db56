/**
 * Where midword completes: the per-language switch (`midword.languages`) and
 * the files it never reads (`midword.excludeFiles`). The server decides for
 * itself (server/where.py, the same rules); the extension mirrors the rules
 * only to say in the status bar why the active editor gets nothing. Pure: no
 * `vscode` import. Both sides are checked against the same cases
 * (src/test/fixtures/where-cases.json).
 *
 * Globs: `*` is any run of characters but `/`, `?` one such character, `**`
 * any run including `/`, `[abc]` / `[!abc]` a character class, `\` a path
 * separator. A pattern without a `/` is matched against the file name; one
 * with a `/` against the path's last segments, or the whole path when it
 * starts with `/`. Case is ignored (a secret named `.ENV` is still a secret).
 */

/** Language id -> completions on; `*` is every language not named. */
export type LanguageSwitches = Readonly<Record<string, boolean>>;

/** Why a document gets no completions. */
export type Blocked = { kind: 'language'; languageId: string } | { kind: 'excluded'; pattern: string };

/** Completions on for `languageId`: its own entry (case ignored), else `*`, else on. */
export function languageEnabled(languageId: string, languages: LanguageSwitches): boolean {
  const wanted = languageId.toLowerCase();
  let fallback = true;
  let own: boolean | undefined;
  for (const [key, on] of Object.entries(languages)) {
    if (key.toLowerCase() === wanted) {
      own = on;
    } else if (key === '*') {
      fallback = on;
    }
  }
  return own ?? fallback;
}

/** The decoded path of a document URI with `/` separators (`untitled:Untitled-1` gives `Untitled-1`). */
export function uriPath(uri: string): string {
  const afterScheme = uri.replace(/^[A-Za-z][A-Za-z0-9+.-]*:/, '');
  const withoutAuthority = afterScheme.startsWith('//') ? afterScheme.replace(/^\/\/[^/]*/, '') : afterScheme;
  const path = withoutAuthority.replace(/[?#].*$/, '');
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    // a stray % stays as it is
  }
  return decoded.replace(/\\/g, '/');
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/** Index of the `]` closing the class opened at `start`; -1 when there is none (a plain `[`). */
function classEnd(pattern: string, start: number): number {
  const first = pattern.startsWith('[!', start) ? start + 2 : start + 1;
  return pattern.indexOf(']', first + 1); // a `]` right after `[` or `[!` is a member
}

function charClass(body: string): string {
  const negated = body.startsWith('!');
  const members = (negated ? body.slice(1) : body).replace(/[\\^[\]]/g, '\\$&');
  return negated ? `[^/${members}]` : `[${members}]`;
}

/** The regular expression source (without anchors) of one glob pattern. */
export function globSource(glob: string): string {
  const pattern = glob.replace(/\\/g, '/');
  let out = '';
  let i = 0;
  while (i < pattern.length) {
    const end = pattern[i] === '[' ? classEnd(pattern, i) : -1;
    if (pattern.startsWith('**/', i)) {
      out += '(?:.*/)?';
      i += 3;
    } else if (pattern.startsWith('**', i)) {
      out += '.*';
      i += 2;
    } else if (pattern[i] === '*') {
      out += '[^/]*';
      i += 1;
    } else if (pattern[i] === '?') {
      out += '[^/]';
      i += 1;
    } else if (end > 0) {
      out += charClass(pattern.slice(i + 1, end));
      i = end + 1;
    } else {
      out += escapeRegExp(pattern[i] ?? '');
      i += 1;
    }
  }
  return out;
}

interface CompiledPattern {
  pattern: string;
  regex: RegExp;
  nameOnly: boolean;
}

function compile(pattern: string): CompiledPattern {
  const trimmed = pattern.trim();
  const slashed = trimmed.replace(/\\/g, '/');
  const body = globSource(trimmed);
  if (!slashed.includes('/')) {
    return { pattern, regex: new RegExp(`^(?:${body})$`, 'is'), nameOnly: true };
  }
  const anchored = slashed.startsWith('/') ? body : `(?:.*/)?${body}`;
  return { pattern, regex: new RegExp(`^(?:${anchored})$`, 'is'), nameOnly: false };
}

const compiledCache = new Map<string, CompiledPattern>();

function compiled(pattern: string): CompiledPattern {
  let found = compiledCache.get(pattern);
  if (found === undefined) {
    found = compile(pattern);
    compiledCache.set(pattern, found);
  }
  return found;
}

/** The first of `patterns` that the document's path matches; undefined when none does. */
export function excludedBy(uri: string, patterns: readonly string[]): string | undefined {
  const path = uriPath(uri);
  const name = path.slice(path.lastIndexOf('/') + 1);
  for (const pattern of patterns) {
    if (pattern.trim() === '') {
      continue;
    }
    const { regex, nameOnly } = compiled(pattern);
    if (regex.test(nameOnly ? name : path)) {
      return pattern;
    }
  }
  return undefined;
}

/** Why a document gets no completions under these settings; undefined when it gets them. */
export function blockedReason(
  document: { uri: string; languageId: string },
  settings: { languages: LanguageSwitches; excludeFiles: readonly string[] },
): Blocked | undefined {
  const pattern = excludedBy(document.uri, settings.excludeFiles);
  if (pattern !== undefined) {
    return { kind: 'excluded', pattern };
  }
  return languageEnabled(document.languageId, settings.languages) ? undefined : { kind: 'language', languageId: document.languageId };
}

/**
 * The user's `midword.languages` object with the language flipped (what the toggle
 * command writes): `current` is the effective object (default and user merged).
 */
export function flippedLanguages(
  languageId: string,
  current: LanguageSwitches,
  userValue: LanguageSwitches | undefined,
): Record<string, boolean> {
  return { ...(userValue ?? {}), [languageId]: !languageEnabled(languageId, current) };
}
