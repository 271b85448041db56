import assert from 'node:assert/strict';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';

import { activateWith, COMMANDS, type ActivatedExtension } from '../activation';
import type { ClientFactory } from '../controller';
import { CHECK_MARKER } from '../importCheck';
import { settingDefaults } from '../manifest';
import { FakeClient } from './helpers/fakeController';
import { fakeContext, FakeVscode, Target } from './helpers/fakeVscode';
import { flush } from './helpers/manualTimers';
import { readPackageJson, tempDir, writeExecutable } from './helpers/paths';

const posix = process.platform !== 'win32';

/** Fake interpreters that answer the import check with a fixed verdict. */
function verdictInterpreter(dir: string, name: string, verdict: object): string {
  return writeExecutable(path.join(dir, name), `#!/bin/sh\necho '${CHECK_MARKER}${JSON.stringify(verdict)}'\n`);
}

interface Setup {
  vscode: FakeVscode;
  ext: ActivatedExtension;
  clients: FakeClient[];
  lastClient(): FakeClient;
}

function setup(configure: (vscode: FakeVscode) => void): Setup {
  const vscode = new FakeVscode(settingDefaults(readPackageJson()), tempDir('midword-ws-'));
  configure(vscode);
  const clients: FakeClient[] = [];
  const factory: ClientFactory = (launch, hooks) => {
    const client = new FakeClient(launch, hooks);
    clients.push(client);
    return client;
  };
  const ext = activateWith(vscode.api(), fakeContext() as never, { createClient: () => factory, debounceMs: 20, checkTimeoutMs: 5000 });
  return {
    vscode,
    ext,
    clients,
    lastClient: () => {
      const client = clients[clients.length - 1];
      assert.ok(client, 'a client was created');
      return client;
    },
  };
}

async function settle(s: Setup): Promise<void> {
  await flush();
  await s.ext.controller.whenIdle();
  await flush();
}

describe('activation with a stubbed vscode API', { skip: !posix && 'fake interpreters are shell scripts' }, () => {
  let dir = '';
  let okPython = '';
  let noTorchPython = '';
  before(() => {
    dir = tempDir('midword-activation-');
    okPython = verdictInterpreter(dir, 'ok-python', { status: 'ok', python: '3.12.3', midword: '0.1.0', torch: '2.13.0' });
    noTorchPython = verdictInterpreter(dir, 'no-torch-python', { status: 'torch-missing', module: 'torch', missing: 'torch', error: "ModuleNotFoundError: No module named 'torch'", python: '3.12.3' });
  });

  it('registers the four commands, starts the server with the defaults, shows ready', async () => {
    const s = setup((vscode) => vscode.user.set('midword.python.path', okPython));
    await settle(s);
    assert.deepEqual([...s.vscode.commands.keys()].sort(), Object.values(COMMANDS).sort());
    const client = s.lastClient();
    assert.deepEqual(client.launch, { python: okPython, cwd: s.vscode.workspaceFolder });
    assert.deepEqual(client.hooks.currentOptions(), {
      model: '',
      device: 'auto',
      dtype: 'auto',
      ensemble: [],
      ensembleWeights: [],
      ensembleCombine: 'mix',
      method: 'bytesampler',
      mode: 'pbp',
      temperature: 0,
      topP: 1,
      maxTokens: 48,
      timeBudgetMs: 1500,
      multiline: 'auto',
      windowBytes: 4096,
      logLevel: 'info',
      maxItems: 3,
      acceptanceLog: true,
      deviceFallback: true,
      engine: 'local',
      engineUrl: '',
      engineModel: '',
      fim: 'auto',
      suffixBytes: 1024,
      debounceMs: 'auto',
      contextFiles: 'auto',
      contextBytes: 1024,
    });
    const item = s.vscode.statusItems[0];
    assert.ok(item?.visible);
    assert.equal(item.text, '$(sparkle) midword');
    client.hooks.onServerStatus({ state: 'ready', model: 'tiny-coder', message: '', latencyMs: 61 });
    assert.equal(item.text, '$(sparkle) midword tiny-coder 61 ms');
    await s.ext.dispose();
  });

  it('torch missing: error message with Select Interpreter / Open Settings / Show Log; Open Settings opens midword.python.path', async () => {
    const s = setup((vscode) => {
      vscode.user.set('midword.python.path', noTorchPython);
      vscode.nextErrorChoice = 'Open Settings';
    });
    await settle(s);
    assert.equal(s.clients.length, 0);
    assert.equal(s.vscode.errors.length, 1);
    assert.match(s.vscode.errors[0]?.message ?? '', /PyTorch \(torch\) is not installed/);
    assert.deepEqual(s.vscode.errors[0]?.items, ['Select Interpreter', 'Open Settings', 'Show Log']);
    assert.deepEqual(s.vscode.executed, [['workbench.action.openSettings', 'midword.python.path']]);
    const item = s.vscode.statusItems[0];
    assert.equal(item?.text, '$(error) midword');
    assert.equal(item.command, 'midword.showLog');
    assert.equal((item.backgroundColor as { id: string }).id, 'statusBarItem.errorBackground');
    await s.ext.dispose();
  });

  it('Select Interpreter with midword.python.path set: a file picker that writes the setting, which restarts the server', async () => {
    const s = setup((vscode) => {
      vscode.user.set('midword.python.path', noTorchPython);
      vscode.nextErrorChoice = 'Select Interpreter';
      vscode.nextOpenDialog = [{ fsPath: okPython }];
    });
    await settle(s);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await settle(s);
    assert.deepEqual(s.vscode.updates, [{ id: 'midword.python.path', value: okPython, target: Target.Global }]);
    assert.equal(s.clients.length, 1, 'the new interpreter passed the check and the server started');
    assert.equal(s.lastClient().launch.python, okPython);
    await s.ext.dispose();
  });

  it("uses the Python extension's interpreter when the setting is empty, and restarts when it changes", async () => {
    let listener: (() => void) | undefined;
    let active = okPython;
    const s = setup((vscode) => {
      vscode.extensionsInstalled.set('ms-python.python', {
        isActive: true,
        activate: () => Promise.resolve(),
        exports: {
          environments: {
            getActiveEnvironmentPath: () => ({ id: 'x', path: active }),
            resolveEnvironment: () => Promise.resolve({ executable: { uri: { fsPath: active } } }),
            onDidChangeActiveEnvironmentPath: (l: () => void) => {
              listener = l;
              return { dispose: () => undefined };
            },
          },
        },
      });
      vscode.nextErrorChoice = 'Select Interpreter';
    });
    await settle(s);
    assert.equal(s.lastClient().launch.python, okPython);
    assert.ok(listener, 'subscribed to interpreter changes');

    active = noTorchPython;
    listener();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await settle(s);
    assert.equal(s.clients[0]?.stopped, 1);
    assert.match(s.vscode.errors[0]?.message ?? '', /no-torch-python \(the Python extension's active interpreter\)/);
    assert.deepEqual(s.vscode.executed, [['python.setInterpreter']], 'Select Interpreter defers to the Python extension');
    await s.ext.dispose();
  });

  it('Enable/Disable Completions writes midword.enable and switches completions off without a restart', async () => {
    const s = setup((vscode) => vscode.user.set('midword.python.path', okPython));
    await settle(s);
    const client = s.lastClient();
    assert.equal(client.hooks.isEnabled(), true);
    await s.vscode.run(COMMANDS.toggle);
    await settle(s);
    assert.deepEqual(s.vscode.updates, [{ id: 'midword.enable', value: false, target: Target.Global }]);
    assert.equal(client.hooks.isEnabled(), false);
    assert.equal(s.vscode.statusItems[0]?.text, '$(circle-slash) midword');
    assert.equal(s.vscode.statusItems[0].command, 'midword.toggle');
    assert.equal(s.clients.length, 1);
    assert.equal(client.stopped, 0);
    assert.deepEqual(client.sent, []);
    await s.vscode.run(COMMANDS.toggle);
    assert.equal(client.hooks.isEnabled(), true);
    await s.ext.dispose();
  });

  it('toggle writes to the workspace when the workspace sets midword.enable', async () => {
    const s = setup((vscode) => {
      vscode.user.set('midword.python.path', okPython);
      vscode.workspaceValues.set('midword.enable', true);
    });
    await settle(s);
    await s.vscode.run(COMMANDS.toggle);
    assert.deepEqual(s.vscode.updates, [{ id: 'midword.enable', value: false, target: Target.Workspace }]);
    await s.ext.dispose();
  });

  it('changing a server setting forwards it live; changing python.path restarts', async () => {
    const s = setup((vscode) => vscode.user.set('midword.python.path', okPython));
    await settle(s);
    const client = s.lastClient();
    s.vscode.setUser('maxTokens', 16);
    s.vscode.setUser('device', 'cpu');
    await settle(s);
    assert.equal(client.sent.length, 2);
    assert.equal(client.sent[1]?.maxTokens, 16);
    assert.equal(client.sent[1].device, 'cpu');
    assert.equal(s.clients.length, 1);

    s.vscode.setUser('python.path', okPython);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await settle(s);
    assert.equal(s.clients.length, 2);
    assert.equal(client.stopped, 1);
    assert.equal(s.lastClient().hooks.currentOptions().maxTokens, 16);
    await s.ext.dispose();
  });

  it('Select Model Folder writes midword.model (forwarded to the server); with a model set it offers the default back', async () => {
    const s = setup((vscode) => {
      vscode.user.set('midword.python.path', okPython);
      vscode.nextOpenDialog = [{ fsPath: '/models/coder' }];
    });
    await settle(s);
    await s.vscode.run(COMMANDS.selectModelFolder);
    await settle(s);
    assert.deepEqual(s.vscode.updates, [{ id: 'midword.model', value: '/models/coder', target: Target.Global }]);
    assert.equal(s.lastClient().sent[0]?.model, '/models/coder');
    assert.deepEqual((s.vscode.openDialogCalls[0] as { canSelectFolders: boolean }).canSelectFolders, true);

    s.vscode.nextQuickPick = 'Use the default model shipped with midword';
    await s.vscode.run(COMMANDS.selectModelFolder);
    await settle(s);
    assert.equal(s.vscode.updates[1]?.value, '');
    assert.equal(s.lastClient().sent[1]?.model, '');
    assert.equal(s.clients.length, 1);
    await s.ext.dispose();
  });

  it('Restart Server x5 in a burst restarts once; Show Log shows the channel', async () => {
    const s = setup((vscode) => vscode.user.set('midword.python.path', okPython));
    await settle(s);
    for (let i = 0; i < 5; i++) {
      await s.vscode.run(COMMANDS.restartServer);
    }
    await new Promise((resolve) => setTimeout(resolve, 60));
    await settle(s);
    assert.equal(s.clients.length, 2);
    await s.vscode.run(COMMANDS.showLog);
    assert.equal(s.vscode.logShown, 1);
    assert.ok(s.vscode.logLines.some((line) => line.startsWith('info Restart requested (Restart Server command)')));
    await s.ext.dispose();
    assert.equal(s.lastClient().stopped, 1);
  });
});

describe('Accept Next Line and the acceptance events', { skip: !posix && 'fake interpreters are shell scripts' }, () => {
  const uri = 'file:///ws/total.py';
  const tagged = (id: string, insertText: string): unknown => ({
    insertText,
    command: { command: 'midword.completionAccepted', arguments: [{ id, method: 'bytesampler', context: 'boundary' }] },
  });

  async function started(): Promise<Setup> {
    const dir = tempDir('midword-accept-');
    const python = verdictInterpreter(dir, 'ok-python', { status: 'ok', python: '3.12.3', midword: '0.1.0', torch: '2.13.0' });
    const s = setup((vscode) => vscode.user.set('midword.python.path', python));
    await settle(s);
    return s;
  }

  it('is contributed with a default keybinding while an inline suggestion is visible', () => {
    const manifest = readPackageJson() as {
      contributes: { commands: { command: string }[]; keybindings: { command: string; key: string; when: string }[] };
    };
    assert.ok(manifest.contributes.commands.some((c) => c.command === COMMANDS.acceptNextLine));
    const binding = manifest.contributes.keybindings.find((k) => k.command === COMMANDS.acceptNextLine);
    assert.equal(binding?.key, 'shift+tab');
    assert.match(binding.when, /inlineSuggestionVisible/);
    assert.match(binding.when, /!editorReadonly/);
  });

  it("runs VS Code's accept-next-line and reports each line of midword's item, then the whole item", async () => {
    const s = await started();
    const client = s.lastClient();
    s.ext.completionEvents.offered(uri, 2, 8, [tagged('i1', 'total += v\n        return total'), tagged('i2', 'pass')]);
    assert.deepEqual(client.notifications, [['midword/completionShown', { id: 'i1', method: 'bytesampler', context: 'boundary' }]]);

    s.vscode.setActiveEditor(uri, 2, 8);
    await s.vscode.run(COMMANDS.acceptNextLine);
    assert.deepEqual(s.vscode.executed, [['editor.action.inlineSuggest.acceptNextLine']]);
    assert.deepEqual(client.notifications[1], [
      'midword/completionPartiallyAccepted',
      { id: 'i1', method: 'bytesampler', context: 'boundary', acceptedLength: 'total += v'.length },
    ]);

    s.vscode.setActiveEditor(uri, 2, 8 + 'total += v'.length); // where VS Code left the cursor
    await s.vscode.run(COMMANDS.acceptNextLine);
    assert.deepEqual(client.notifications[2], ['midword/completionAccepted', { id: 'i1', method: 'bytesampler', context: 'boundary' }]);
    assert.equal(client.notifications.length, 3);
    await s.ext.dispose();
  });

  it('reports a line once when VS Code reports it too (handleDidPartiallyAcceptCompletionItem, seen in code-server)', async () => {
    const s = await started();
    const client = s.lastClient();
    const item = tagged('i1', 'a = 1\nb = 2');
    s.ext.completionEvents.offered(uri, 2, 8, [item]);
    s.vscode.setActiveEditor(uri, 2, 8);
    const executed = s.vscode.executed;
    executed.push = (...args: unknown[][]): number => {
      s.ext.completionEvents.partiallyAcceptedItem(item, 'a = 1\n'.length); // VS Code, while its command runs
      return Array.prototype.push.apply(executed, args);
    };
    await s.vscode.run(COMMANDS.acceptNextLine);
    assert.deepEqual([...s.vscode.executed], [['editor.action.inlineSuggest.acceptNextLine']]);
    assert.deepEqual(client.notifications.slice(1), [
      ['midword/completionPartiallyAccepted', { id: 'i1', method: 'bytesampler', context: 'boundary', acceptedLength: 6 }],
    ]);
    await s.ext.dispose();
  });

  it("another provider's suggestion (the cursor is not at midword's item) is accepted without an event", async () => {
    const s = await started();
    const client = s.lastClient();
    s.ext.completionEvents.offered(uri, 2, 8, [tagged('i1', 'x = 1')]);
    s.vscode.setActiveEditor(uri, 5, 0);
    await s.vscode.run(COMMANDS.acceptNextLine);
    assert.deepEqual(s.vscode.executed, [['editor.action.inlineSuggest.acceptNextLine']]);
    assert.deepEqual(
      client.notifications.map(([method]) => method),
      ['midword/completionShown'],
    );
    await s.ext.dispose();
  });

  it('the command an item carries reports it accepted, with its tags', async () => {
    const s = await started();
    await s.vscode.run(COMMANDS.completionAccepted, { id: 'i9', method: 'naive', context: 'inside_word' });
    await s.vscode.run(COMMANDS.completionAccepted, 'not tags');
    assert.deepEqual(s.lastClient().notifications, [['midword/completionAccepted', { id: 'i9', method: 'naive', context: 'inside_word' }]]);
    await s.ext.dispose();
  });
});
