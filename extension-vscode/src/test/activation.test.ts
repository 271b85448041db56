import assert from 'node:assert/strict';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';

import { activateWith, BUILTIN_ACCEPT_NEXT_LINE, COMMANDS, type ActivatedExtension } from '../activation';
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
      backend: 'auto',
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
      minConfidence: 0,
      maxLines: 0,
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
      languages: { '*': true, plaintext: false, markdown: false, scminput: false },
      excludeFiles: settingDefaults(readPackageJson()).get('excludeFiles'),
      symbolsMinMass: 0,
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

  it('the status bar says when the active editor is off: its language, or an excluded file; settings changes show at once', async () => {
    const s = setup((vscode) => vscode.user.set('midword.python.path', okPython));
    await settle(s);
    const item = s.vscode.statusItems[0];
    assert.equal(item?.text, '$(sparkle) midword');
    s.vscode.setActiveEditor('file:///ws/README.md', 0, 0, 'markdown');
    assert.equal(item.text, '$(circle-slash) midword: off for markdown');
    assert.equal(item.command, 'midword.toggleLanguage');
    s.vscode.setActiveEditor('file:///ws/.env', 0, 0, 'dotenv');
    assert.equal(item.text, '$(circle-slash) midword: excluded file');
    s.vscode.setUser('excludeFiles', ['*.secret']); // a user list replaces the default
    assert.equal(item.text, '$(sparkle) midword');
    s.vscode.setActiveEditor('file:///ws/main.py', 0, 0, 'python');
    assert.equal(item.text, '$(sparkle) midword');
    s.vscode.setUser('languages', { python: false });
    assert.equal(item.text, '$(circle-slash) midword: off for python');
    await settle(s);
    const sent = s.lastClient().sent;
    assert.deepEqual(sent[sent.length - 1]?.excludeFiles, ['*.secret']);
    // VS Code merges the user's object over the default: the server gets both
    assert.deepEqual(sent[sent.length - 1]?.languages, { '*': true, plaintext: false, markdown: false, scminput: false, python: false });
    await s.ext.dispose();
  });

  it('Enable/Disable Completions for This Language flips the active language in the user settings, both ways', async () => {
    const s = setup((vscode) => {
      vscode.user.set('midword.python.path', okPython);
      vscode.user.set('midword.languages', { rust: false });
    });
    await settle(s);
    s.vscode.setActiveEditor('file:///ws/notes.md', 0, 0, 'markdown');
    const item = s.vscode.statusItems[0];
    assert.equal(item?.text, '$(circle-slash) midword: off for markdown');
    await s.vscode.run(COMMANDS.toggleLanguage);
    assert.deepEqual(s.vscode.updates, [{ id: 'midword.languages', value: { rust: false, markdown: true }, target: Target.Global }]);
    assert.equal(item.text, '$(sparkle) midword');
    await s.vscode.run(COMMANDS.toggleLanguage);
    assert.deepEqual(s.vscode.updates[1], { id: 'midword.languages', value: { rust: false, markdown: false }, target: Target.Global });
    assert.equal(item.text, '$(circle-slash) midword: off for markdown');
    await settle(s);
    const client = s.lastClient();
    assert.equal(client.stopped, 0); // no restart, the settings went to the running server
    assert.equal(client.sent[client.sent.length - 1]?.languages.markdown, false);
    s.vscode.activeEditor = undefined;
    await s.vscode.run(COMMANDS.toggleLanguage);
    assert.equal(s.vscode.updates.length, 2);
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

  it('midword.symbols: the client gets names from vscode.executeCompletionItemProvider; off, live, with no server message', async () => {
    const s = setup((vscode) => {
      vscode.user.set('midword.python.path', okPython);
      vscode.onExecute = (command) =>
        command === 'vscode.executeCompletionItemProvider' ? { items: [{ label: 'frobnicate', kind: 1 }, { label: 'size', kind: 9 }] } : undefined;
    });
    await settle(s);
    const symbols = s.lastClient().hooks.symbols;
    assert.ok(symbols);
    const uri = { toString: () => 'file:///ws/a.py' };
    const document = { uri, lineAt: () => ({ text: 'w.fro' }) };
    const position = { line: 0, character: 5 };
    assert.deepEqual(await symbols.collect(document, position), ['frobnicate']);
    assert.deepEqual(s.vscode.executed, [['vscode.executeCompletionItemProvider', uri, position]]);
    assert.ok(s.vscode.logLines.some((line) => line.startsWith('debug symbols: 1 name(s)')));

    s.vscode.setUser('symbols', 'off');
    await settle(s);
    assert.equal(await symbols.collect(document, position), undefined);
    assert.equal(s.vscode.executed.length, 1, 'off: the providers are not asked');
    assert.equal(s.lastClient().sent.length, 0, 'an extension setting: nothing is sent to the server');
    assert.equal(s.clients.length, 1);
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
  interface TaggedItem {
    insertText: string;
    command: { command: string; arguments: unknown[] };
  }
  const tagged = (id: string, insertText: string): TaggedItem => ({
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

  /**
   * VS Code's own Accept Next Line (inlineCompletionsModel.acceptNextLine) on `item`, shown at (2, 8):
   * it inserts the rest of the item up to and including its first "\n" and moves the cursor after it;
   * when that is all of the rest it accepts the whole item instead, which runs the item's command
   * (VS Code does not wait for that command: `commandRuns` says whether it runs before or after the
   * builtin command returns). Where VS Code offers handleDidPartiallyAcceptCompletionItem
   * (`reportsPartial`) it calls it with the length inserted so far, line breaks counted as "\n",
   * twice: with the number, then with a PartialAcceptInfo.
   */
  function modelVscodeAcceptNextLine(
    s: Setup,
    item: TaggedItem,
    how: { reportsPartial: boolean; commandRuns: 'during' | 'after' },
  ): void {
    let inserted = '';
    s.vscode.setActiveEditor(uri, 2, 8);
    s.vscode.onExecute = (command) => {
      if (command !== BUILTIN_ACCEPT_NEXT_LINE) {
        return undefined;
      }
      const rest = item.insertText.slice(inserted.length);
      const newline = rest.indexOf('\n');
      const until = newline < 0 ? rest.length : newline + 1;
      if (until === rest.length) {
        const runCommand = (): Promise<unknown> => s.vscode.run(item.command.command, ...item.command.arguments);
        if (how.commandRuns === 'during') {
          return runCommand();
        }
        setImmediate(() => void runCommand());
        return undefined;
      }
      inserted += rest.slice(0, until);
      const lines = inserted.split('\n');
      const last = lines[lines.length - 1] ?? '';
      s.vscode.setActiveEditor(uri, 2 + lines.length - 1, lines.length === 1 ? 8 + last.length : last.length);
      if (how.reportsPartial) {
        const lfLength = inserted.replace(/\r\n/g, '\n').length;
        s.ext.completionEvents.partiallyAcceptedItem(item, lfLength);
        s.ext.completionEvents.partiallyAcceptedItem(item, lfLength);
      }
      return undefined;
    };
  }

  const vscodeVariants = [
    { reportsPartial: false, commandRuns: 'after' },
    { reportsPartial: false, commandRuns: 'during' },
    { reportsPartial: true, commandRuns: 'after' },
    { reportsPartial: true, commandRuns: 'during' },
  ] as const;

  /** Offers `text` at (2, 8), presses midword's Accept Next Line `presses` times; the events sent after "shown". */
  async function acceptLines(
    text: string,
    presses: number,
    how: (typeof vscodeVariants)[number],
  ): Promise<[string, Record<string, unknown>][]> {
    const s = await started();
    const client = s.lastClient();
    const item = tagged('i1', text);
    s.ext.completionEvents.offered(uri, 2, 8, [item, tagged('i2', 'pass')]);
    modelVscodeAcceptNextLine(s, item, how);
    for (let press = 0; press < presses; press++) {
      await s.vscode.run(COMMANDS.acceptNextLine);
      await flush();
    }
    assert.ok(s.vscode.executed.every(([command]) => command === BUILTIN_ACCEPT_NEXT_LINE));
    assert.deepEqual(client.notifications[0], ['midword/completionShown', tags('i1')]);
    await s.ext.dispose();
    return client.notifications.slice(1);
  }

  const tags = (id: string): Record<string, string> => ({ id, method: 'bytesampler', context: 'boundary' });
  const partial = (acceptedLength: number): [string, Record<string, unknown>] => [
    'midword/completionPartiallyAccepted',
    { ...tags('i1'), acceptedLength },
  ];
  const accepted: [string, Record<string, unknown>] = ['midword/completionAccepted', tags('i1')];

  for (const how of vscodeVariants) {
    const variant = `(partial handler: ${how.reportsPartial}, item command ${how.commandRuns} the builtin)`;

    it(`reports each line with its line break, then the whole item once ${variant}`, async () => {
      const first = 'total += v\n';
      const second = '        count += 1\n';
      const sent = await acceptLines(`${first}${second}    return total`, 3, how);
      assert.deepEqual(sent, [partial(first.length), partial(first.length + second.length), accepted]);
    });

    it(`a rest without a line break, or ending with one, is one acceptance ${variant}`, async () => {
      assert.deepEqual(await acceptLines('x = 1', 1, how), [accepted]);
      assert.deepEqual(await acceptLines('x = 1\n', 1, how), [accepted]);
    });

    it(`a rest that starts with a line break: the break alone, then the rest ${variant}`, async () => {
      assert.deepEqual(await acceptLines('\n    return total', 2, how), [partial(1), accepted]);
    });
  }

  it('reports a line once when VS Code reports it too (handleDidPartiallyAcceptCompletionItem, seen in code-server)', async () => {
    const s = await started();
    const client = s.lastClient();
    const item = tagged('i1', 'a = 1\nb = 2');
    s.ext.completionEvents.offered(uri, 2, 8, [item]);
    s.vscode.setActiveEditor(uri, 2, 8);
    s.vscode.onExecute = () => s.ext.completionEvents.partiallyAcceptedItem(item, 'a = 1\n'.length); // VS Code, while its command runs
    await s.vscode.run(COMMANDS.acceptNextLine);
    assert.deepEqual(s.vscode.executed, [['editor.action.inlineSuggest.acceptNextLine']]);
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
