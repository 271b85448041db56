// What the code-server end-to-end test reads from and does in VS Code's
// workbench page, as a user would: the status bar, ghost text, the editor,
// the command palette.
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import { waitFor } from './harness.mjs';

/** Ghost text must stay the same this long before it counts (a later answer may replace it). */
const GHOST_STABLE_MS = 800;

/**
 * The midword status bar item: its text, the classes of its icons and its
 * accessibility label (the first line of the tooltip, "midword ready: <model>"
 * when ready); undefined while there is no such item.
 */
export async function readStatus(page) {
  const item = page.locator('.statusbar-item').filter({ hasText: /midword/ }).first();
  if ((await item.count()) === 0) {
    return undefined;
  }
  return item.evaluate((element) => ({
    text: element.innerText.trim(),
    icons: [...element.querySelectorAll('.codicon')].map((icon) => icon.className).join(' '),
    label: element.querySelector('[aria-label]')?.getAttribute('aria-label') ?? element.getAttribute('aria-label') ?? '',
  }));
}

/** Waits until the status bar item passes `test`; the error says what it showed last. */
export async function waitForStatus(page, what, test, timeoutMs) {
  let last;
  try {
    return await waitFor(
      `status bar: ${what}`,
      async () => {
        last = await readStatus(page);
        return last !== undefined && test(last) ? last : undefined;
      },
      { timeoutMs, intervalMs: 500 },
    );
  } catch (error) {
    throw new Error(`${error.message}; it showed ${JSON.stringify(last)}`);
  }
}

/**
 * Ghost text in the focused editor, "" when there is none. VS Code draws the
 * part on the cursor's line as `ghost-text-decoration` spans inside that line,
 * and any further lines in a view zone of `ghost-text` spans, one line element
 * each; they are read in document order and joined with line breaks.
 */
export async function readGhostText(page) {
  return page.evaluate(() => {
    const editor = document.querySelector('.monaco-editor.focused') ?? document.querySelector('.monaco-editor');
    if (editor === null) {
      return '';
    }
    const textOf = (spans) => spans.map((span) => span.textContent).join('').replace(/\u00a0/g, ' ');
    const inline = textOf([...editor.querySelectorAll('[class*="ghost-text-decoration"]')]);
    const spansByLine = new Map();
    for (const span of editor.querySelectorAll('.ghost-text')) {
      const line = span.closest('.view-line') ?? span.parentElement;
      spansByLine.set(line, [...(spansByLine.get(line) ?? []), span]);
    }
    return inline + [...spansByLine.values()].map((spans) => `\n${textOf(spans)}`).join('');
  });
}

/** Waits for ghost text that stays put; returns it and how long until any ghost text showed. */
export async function waitForGhostText(page, timeoutMs) {
  const started = Date.now();
  let seen = { text: '', since: 0 };
  let firstMs;
  const text = await waitFor(
    'ghost text',
    async () => {
      const now = await readGhostText(page);
      if (now.trim() !== '') {
        firstMs ??= Date.now() - started;
      }
      if (now !== seen.text) {
        seen = { text: now, since: Date.now() };
        return undefined;
      }
      return now.trim() !== '' && Date.now() - seen.since >= GHOST_STABLE_MS ? now : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
  return { text, waitedMs: firstMs };
}

/** Waits until the ghost text differs from `previous` (accepted, or shortened to its rest). */
export async function waitForGhostChange(page, previous, timeoutMs) {
  return waitFor(
    'the ghost text to change',
    async () => {
      const now = await readGhostText(page);
      return now !== previous ? { text: now } : undefined;
    },
    { timeoutMs },
  );
}

/** Saves the editor (Ctrl+S) and returns the file's text once it differs from `previous`. */
export async function saveAndRead(page, file, previous, timeoutMs) {
  await page.keyboard.press('Control+S');
  return waitFor(
    `${path.basename(file)} to be saved`,
    async () => {
      const text = await fs.readFile(file, 'utf8');
      return text !== previous ? text : undefined;
    },
    { timeoutMs },
  );
}

/** Opens the workspace folder and `fileName` in it (from the explorer), and focuses its editor. */
export async function openFile(page, url, folder, fileName, timeoutMs) {
  await page.goto(`${url}/?folder=${encodeURIComponent(folder)}`);
  await page.locator('.monaco-workbench').waitFor({ timeout: timeoutMs });
  await openFromExplorer(page, fileName, timeoutMs);
}

/** Opens `fileName` of the open folder in an editor (or brings its tab forward), and focuses it. */
export async function openFromExplorer(page, fileName, timeoutMs) {
  // the explorer, not Quick Open: that searches with ripgrep, which the offline install lacks
  const row = page.locator('.explorer-folders-view .monaco-list-row').filter({ hasText: fileName }).first();
  await waitFor(
    `${fileName} open in an editor`,
    async () => {
      if ((await page.locator('.tab.active').filter({ hasText: fileName }).count()) > 0) {
        return true;
      }
      await row.dblclick({ timeout: 5000 });
      return false;
    },
    { timeoutMs, intervalMs: 1000 },
  );
  await focusEditor(page);
}

export async function focusEditor(page) {
  await page.locator('.editor-instance .monaco-editor .view-lines').first().click();
}

/** Clicks the midword status bar item (runs the command it shows). */
export async function clickStatus(page) {
  await page.locator('.statusbar-item').filter({ hasText: /midword/ }).first().click();
}

/** Brings the editor tab of `fileName` forward and focuses its editor. */
export async function showTab(page, fileName) {
  await page.locator('.tab').filter({ hasText: fileName }).first().click();
  await focusEditor(page);
}

/** Runs a command from the command palette (F1) by its title. */
export async function runCommand(page, title) {
  await page.keyboard.press('F1');
  await page.locator('.quick-input-widget input').fill(`>${title}`);
  await page.locator('.quick-input-list .monaco-list-row').filter({ hasText: title }).first().waitFor();
  await page.keyboard.press('Enter');
}
