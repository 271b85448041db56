/**
 * The packaged entry point, dist/extension.js (esbuild bundle, built by
 * `npm run build`), activated in a stubbed `vscode` with a fake server: the
 * whole path from activation to a ready status bar item, and deactivation.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import { settingDefaults } from '../manifest';
import { fakeServerPython, serverMessages, waitFor } from './helpers/fakeServerLauncher';
import { fakeContext, FakeVscode } from './helpers/fakeVscode';
import { EXTENSION_ROOT, readPackageJson, tempDir } from './helpers/paths';
import { createVscodeModule, installVscodeModule } from './helpers/vscodeModule';

const posix = process.platform !== 'win32';
const bundle = path.join(EXTENSION_ROOT, 'dist', 'extension.js');

interface ExtensionModule {
  activate(context: unknown): unknown;
  deactivate(): Promise<void>;
}

describe('dist/extension.js', { skip: !posix && 'the fake interpreter is a shell script' }, () => {
  it('exists (npm run build) and is the package.json main', () => {
    assert.ok(fs.existsSync(bundle), `${bundle} is missing: run npm run ext:build first`);
    const manifest = readPackageJson() as { main: string };
    assert.equal(path.resolve(EXTENSION_ROOT, manifest.main), bundle);
  });

  it('activates in a stubbed VS Code, starts the server, shows ready, and shuts it down on deactivate', async () => {
    const dir = tempDir('midword-bundle-');
    const files = fakeServerPython(dir);
    const fake = new FakeVscode(settingDefaults(readPackageJson()), dir);
    fake.user.set('midword.python.path', files.python);
    fake.user.set('midword.maxItems', 4);
    const { module } = createVscodeModule(fake);
    installVscodeModule(module);

    const extension = (await import(bundle)) as ExtensionModule;
    extension.activate(fakeContext());
    const item = (): string => fake.statusItems[0]?.text ?? '';
    await waitFor('ready status', () => item() === '$(sparkle) midword fake-default');
    assert.deepEqual([...fake.commands.keys()].sort(), [
      'midword.acceptNextLine',
      'midword.completionAccepted',
      'midword.restartServer',
      'midword.selectModelFolder',
      'midword.showLog',
      'midword.toggle',
      'midword.toggleLanguage',
    ]);
    const initialize = serverMessages(files).find((m) => m.method === 'initialize');
    assert.equal((initialize?.params.initializationOptions as { maxItems: number }).maxItems, 4);

    fake.setUser('topP', 0.95);
    await waitFor('forwarded setting', () => serverMessages(files).some((m) => m.method === 'workspace/didChangeConfiguration'));

    await extension.deactivate();
    const methods = (): string[] => serverMessages(files).map((m) => m.method);
    assert.ok(methods().includes('shutdown'), methods().join(', '));
    // Then the exit notification, or at least the end of its stdin (the client may close the pipe first).
    await waitFor('the server to be told to go', () => methods().includes('exit') || methods().includes('stdin closed'));
    assert.deepEqual(fake.errors, []);
  });
});
