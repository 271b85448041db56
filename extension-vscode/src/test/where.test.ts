import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import { FALLBACK_OPTIONS } from '../options';
import { blockedReason, excludedBy, flippedLanguages, languageEnabled, uriPath } from '../where';
import { EXTENSION_ROOT } from './helpers/paths';

interface SharedCases {
  excluded: { uri: string; patterns: string[]; expect: string | null }[];
  languages: { languageId: string; languages: Record<string, boolean>; expect: boolean }[];
}

/** The cases the server's tests answer too (tests/server/test_server_where.py): both sides must agree. */
const CASES = JSON.parse(
  fs.readFileSync(path.join(EXTENSION_ROOT, 'src', 'test', 'fixtures', 'where-cases.json'), 'utf8'),
) as SharedCases;

describe('where midword completes (mirror of server/where.py)', () => {
  it('answers every shared exclusion case as the server does', () => {
    assert.ok(CASES.excluded.length > 20);
    for (const { uri, patterns, expect } of CASES.excluded) {
      assert.equal(excludedBy(uri, patterns) ?? null, expect, `${uri} ${JSON.stringify(patterns)}`);
    }
  });

  it('answers every shared language case as the server does', () => {
    for (const { languageId, languages, expect } of CASES.languages) {
      assert.equal(languageEnabled(languageId, languages), expect, `${languageId} ${JSON.stringify(languages)}`);
    }
  });

  it('reads the path of file, untitled and notebook-cell URIs', () => {
    assert.equal(uriPath('file:///c%3A/work/My%20App/.env'), '/c:/work/My App/.env');
    assert.equal(uriPath('untitled:Untitled-1'), 'Untitled-1');
    assert.equal(uriPath('vscode-notebook-cell:/w/a.ipynb#W0sZmlsZQ%3D%3D'), '/w/a.ipynb');
    assert.equal(uriPath('vscode-remote://ssh-remote%2Bbox/home/me/.env'), '/home/me/.env');
  });

  it('the default settings: markdown and .env off, python on', () => {
    const settings = FALLBACK_OPTIONS;
    assert.deepEqual(blockedReason({ uri: 'file:///w/README.md', languageId: 'markdown' }, settings), { kind: 'language', languageId: 'markdown' });
    assert.deepEqual(blockedReason({ uri: 'file:///w/.env', languageId: 'dotenv' }, settings), { kind: 'excluded', pattern: '.env' });
    assert.equal(blockedReason({ uri: 'file:///w/main.py', languageId: 'python' }, settings), undefined);
    // an excluded file is excluded whatever its language, and the exclusion is named first
    assert.deepEqual(blockedReason({ uri: 'file:///w/secrets.md', languageId: 'markdown' }, settings), { kind: 'excluded', pattern: 'secrets.*' });
  });

  it('flipping a language writes it into the user value, keeping the user entries', () => {
    const merged = { ...FALLBACK_OPTIONS.languages, rust: false };
    assert.deepEqual(flippedLanguages('markdown', merged, { rust: false }), { rust: false, markdown: true });
    assert.deepEqual(flippedLanguages('python', merged, undefined), { python: false });
    assert.deepEqual(flippedLanguages('rust', merged, { rust: false }), { rust: true });
  });
});
