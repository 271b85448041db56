/**
 * A server that dies during startup (e.g. `python -m midword serve` without
 * pygls): the real vscode-languageclient's start() must reject, promptly,
 * with no crash report and no notification of its own.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import type { ClientHooks } from '../controller';
import { settingDefaults } from '../manifest';
import { FALLBACK_OPTIONS } from '../options';
import { waitFor } from './helpers/fakeServerLauncher';
import { FakeVscode } from './helpers/fakeVscode';
import { readPackageJson, tempDir, writeExecutable } from './helpers/paths';
import { createVscodeModule, installVscodeModule, stubLogChannel } from './helpers/vscodeModule';

const posix = process.platform !== 'win32';

describe('a server that exits during startup', { skip: !posix && 'the fake interpreter is a shell script' }, () => {
  it('makes start() reject, without an unexpected-exit report or a VS Code notification', async () => {
    const dir = tempDir('midword-lc-fail-');
    const python = writeExecutable(
      path.join(dir, 'broken-python'),
      "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'pygls'\" >&2\nexit 1\n",
    );
    const fake = new FakeVscode(settingDefaults(readPackageJson()), dir);
    const { module } = createVscodeModule(fake);
    installVscodeModule(module);
    const { createLanguageClient } = await import('../languageClient.js');
    const exits: string[] = [];
    const hooks: ClientHooks = {
      isEnabled: () => true,
      currentOptions: () => ({ ...FALLBACK_OPTIONS }),
      onServerStatus: () => undefined,
      onProgress: () => undefined,
      onCompletionLatency: () => undefined,
      onUnexpectedExit: (detail) => exits.push(detail),
    };
    const lines: string[] = [];
    const client = createLanguageClient({ python, cwd: dir }, hooks, { outputChannel: stubLogChannel(lines) as never });
    const started = Date.now();
    await assert.rejects(client.start());
    assert.ok(Date.now() - started < 10_000);
    assert.equal(client.isRunning, false);
    assert.deepEqual(exits, []);
    assert.deepEqual(fake.errors, [], 'the extension reports start failures itself, with actions');
    // The server's stderr reaches the log (it may arrive just after the rejection).
    await waitFor('stderr in the log', () => lines.some((line) => line.includes("No module named 'pygls'")));
    await client.stop();
  });
});
