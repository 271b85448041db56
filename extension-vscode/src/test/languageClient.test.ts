/**
 * The real vscode-languageclient (through src/languageClient.ts) against a
 * fake server process, with a stubbed `vscode` module.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { after, before, describe, it } from 'node:test';

import { CompletionEvents, NOTIFICATIONS } from '../completionEvents';
import type { ClientHooks, ServerClient } from '../controller';
import { settingDefaults } from '../manifest';
import { FALLBACK_OPTIONS, type ServerOptions } from '../options';
import type { ProgressValue, ServerStatus } from '../statusModel';
import { CANDIDATES_FIELD, EXECUTE_COMPLETION_PROVIDER, SymbolCollector, type SymbolsSetting } from '../symbols';
import { fakeServerPython, serverMessages, waitFor, type FakeServerFiles } from './helpers/fakeServerLauncher';
import { FakeVscode } from './helpers/fakeVscode';
import { readPackageJson, tempDir } from './helpers/paths';
import { createVscodeModule, installVscodeModule, StubPosition, stubLogChannel, type VscodeModuleState } from './helpers/vscodeModule';

const posix = process.platform !== 'win32';

interface Recorded {
  statuses: ServerStatus[];
  progress: [string | number, ProgressValue][];
  latencies: number[];
  exits: string[];
}

describe('createLanguageClient with the real vscode-languageclient and a fake server', { skip: !posix && 'the fake interpreter is a shell script' }, () => {
  let files: FakeServerFiles;
  let state: VscodeModuleState;
  let client: ServerClient;
  let enabled = true;
  let options: ServerOptions = { ...FALLBACK_OPTIONS, maxItems: 2 };
  const recorded: Recorded = { statuses: [], progress: [], latencies: [], exits: [] };
  const channelLines: string[] = [];
  const completionEvents = new CompletionEvents((method, params) => void client.sendNotification(method, params));
  let fake: FakeVscode;
  let symbolsSetting: SymbolsSetting = 'off';
  const symbolLog: string[] = [];
  const symbols = new SymbolCollector({
    setting: () => symbolsSetting,
    provideCompletions: (uri, position) => fake.api().commands.executeCommand(EXECUTE_COMPLETION_PROVIDER, uri, position),
    log: (message) => symbolLog.push(message),
  });
  const hooks: ClientHooks = {
    completionEvents,
    symbols,
    isEnabled: () => enabled,
    currentOptions: () => options,
    onServerStatus: (status) => recorded.statuses.push(status),
    onProgress: (token, value) => recorded.progress.push([token, value]),
    onCompletionLatency: (ms) => recorded.latencies.push(ms),
    onUnexpectedExit: (detail) => recorded.exits.push(detail),
  };

  before(async () => {
    const dir = tempDir('midword-lc-');
    files = fakeServerPython(dir);
    fake = new FakeVscode(settingDefaults(readPackageJson()), dir);
    const stub = createVscodeModule(fake);
    state = stub.state;
    installVscodeModule(stub.module);
    const { createLanguageClient } = await import('../languageClient.js');
    client = createLanguageClient({ python: files.python, cwd: dir }, hooks, {
      outputChannel: stubLogChannel(channelLines) as never,
    });
    await client.start();
  });

  after(async () => {
    await client.stop();
  });

  it('launches "<python> -m midword serve" and sends the options as initializationOptions', () => {
    assert.equal(fs.readFileSync(files.args, 'utf8').trim(), '-m midword serve');
    const initialize = serverMessages(files).find((message) => message.method === 'initialize');
    assert.deepEqual(initialize?.params.initializationOptions, options);
    const capabilities = initialize.params.capabilities as {
      window?: { workDoneProgress?: boolean };
      experimental?: { midword?: { completionEvents?: boolean } };
    };
    assert.equal(capabilities.window?.workDoneProgress, true);
    assert.equal(capabilities.experimental?.midword?.completionEvents, true, 'asks for tagged items');
    assert.ok(client.isRunning);
    assert.equal(client.serverName, 'fake-midword', "serverInfo.name from the initialize result");
  });

  it('routes the server-created $/progress to the status hooks, then midword/status', async () => {
    await waitFor('midword/status ready', () => recorded.statuses.length > 0);
    assert.deepEqual(recorded.progress, [
      ['load-model', { kind: 'begin', title: 'Loading model', message: 'weights', percentage: 0 }],
      ['load-model', { kind: 'report', message: 'weights', percentage: 50 }],
      ['load-model', { kind: 'end', message: undefined }],
    ]);
    assert.deepEqual(recorded.statuses[0], { state: 'ready', model: 'fake-default', message: '', latencyMs: null });
  });

  it('answers a workspace/configuration pull for "midword" with the same options object', async () => {
    await waitFor('configuration result', () => serverMessages(files).some((m) => m.method === 'workspace/configuration result'));
    const pulled = serverMessages(files).find((m) => m.method === 'workspace/configuration result');
    const result = pulled?.params.result as unknown[];
    assert.deepEqual(result[0], options);
  });

  it('registers LSP inline completion (InlineCompletionItemFeature) for every file', () => {
    assert.equal(state.inlineProviders.length, 1);
    const selector = state.inlineProviders[0]?.selector as { scheme?: string; language?: string }[];
    assert.deepEqual(
      selector.map((filter) => [filter.scheme, filter.language]),
      [
        ['file', undefined],
        ['untitled', undefined],
        ['vscode-notebook-cell', undefined],
      ],
    );
  });

  it('inline completions: disabled -> null without asking the server; enabled -> the server items and a latency', async () => {
    const provider = state.inlineProviders[0]?.provider;
    assert.ok(provider?.provideInlineCompletionItems);
    const document = { uri: { toString: () => 'file:///ws/a.py', scheme: 'file', fsPath: '/ws/a.py' }, languageId: 'python', version: 1 };
    const position = new StubPosition(0, 20);
    const context = { triggerKind: 1, selectedCompletionInfo: undefined };
    const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };

    enabled = false;
    const off = await provider.provideInlineCompletionItems(document, position, context, token);
    assert.equal(off, null);
    assert.equal(serverMessages(files).filter((m) => m.method === 'textDocument/inlineCompletion').length, 0);

    enabled = true;
    const on = (await provider.provideInlineCompletionItems(document, position, context, token)) as { items?: { insertText: unknown }[] } | { insertText: unknown }[];
    const items = Array.isArray(on) ? on : (on.items ?? []);
    assert.equal(items[0]?.insertText, 'ual(result, expected)');
    const requests = serverMessages(files).filter((m) => m.method === 'textDocument/inlineCompletion');
    assert.equal(requests.length, 1);
    assert.deepEqual(requests[0]?.params.position, { line: 0, character: 20 });
    assert.equal(recorded.latencies.length, 1);
    await waitFor('status with latency', () => recorded.statuses.some((status) => status.latencyMs === 7));
  });

  it('the output channel shows each server log line once, at its level', async () => {
    await waitFor('the FutureWarning', () => channelLines.some((line) => line.includes('FutureWarning')));
    await waitFor('the ready record', () => channelLines.some((line) => line.includes('model fake-default ready')));
    // before initialize only stderr has the record: shown, at its level (not [error])
    assert.deepEqual(
      channelLines.filter((line) => line.includes('fake server starting')),
      ['info midword.server: fake server starting'],
    );
    // after it, window/logMessage has it: the stderr copy is dropped
    assert.deepEqual(
      channelLines.filter((line) => line.includes('model fake-default ready')),
      ['info model fake-default ready'],
    );
    // a debug record (window/logMessage type Log) is debug, not info
    await waitFor('the debug record', () => channelLines.some((line) => line.includes('c1: 1 item')));
    assert.deepEqual(
      channelLines.filter((line) => line.includes('c1: 1 item')),
      ['debug c1: 1 item(s) in 5.0 ms'],
    );
    // a library warning and its source line are warnings
    assert.deepEqual(
      channelLines.filter((line) => line.includes('FutureWarning') || line.includes('warnings.warn(')),
      ['warn py.warnings: /lib/transformers/x.py:12: FutureWarning: `foo` is deprecated', 'warn   warnings.warn('],
    );
    assert.deepEqual(channelLines.filter((line) => line.startsWith('error ')), []);
  });

  it('a tagged item: shown when it reaches VS Code, partly accepted through VS Code\'s item event', async () => {
    const provider = state.inlineProviders[0]?.provider;
    assert.ok(provider?.provideInlineCompletionItems);
    assert.equal(typeof provider.handleDidShowCompletionItem, 'function');
    assert.equal(typeof provider.handleDidPartiallyAcceptCompletionItem, 'function');
    const document = { uri: { toString: () => 'file:///ws/b.py', scheme: 'file', fsPath: '/ws/b.py' }, languageId: 'python', version: 1 };
    const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };
    const result = (await provider.provideInlineCompletionItems(document, new StubPosition(3, 8), { triggerKind: 1, selectedCompletionInfo: undefined }, token)) as
      | { items?: unknown[] }
      | unknown[];
    const items = Array.isArray(result) ? result : (result.items ?? []);
    const item = items[0] as { command?: { command: string; arguments: { id: string }[] } };
    assert.equal(item.command?.command, 'midword.completionAccepted');
    const id = item.command.arguments[0]?.id;
    const events = (): { method: string; params: Record<string, unknown> }[] =>
      serverMessages(files).filter((m) => m.method.startsWith('midword/completion') && m.params.id === id);
    await waitFor('shown', () => events().some((m) => m.method === NOTIFICATIONS.shown));
    provider.handleDidShowCompletionItem?.(item); // VS Code's own event: the same id is not sent twice
    provider.handleDidPartiallyAcceptCompletionItem?.(item, { kind: 0, acceptedLength: 4 });
    await waitFor('partial', () => events().some((m) => m.method === NOTIFICATIONS.partial));
    assert.deepEqual(
      events().map((m) => [m.method, m.params.id, m.params.acceptedLength]),
      [
        [NOTIFICATIONS.shown, id, undefined],
        [NOTIFICATIONS.partial, id, 4],
      ],
    );
    assert.deepEqual(events()[0]?.params, { id, method: 'bytesampler', context: 'inside_word' });
  });

  /** A document of one line, as VS Code gives it to the providers. */
  function documentWith(line: string): Record<string, unknown> {
    return {
      uri: { toString: () => 'file:///ws/c.py', scheme: 'file', fsPath: '/ws/c.py' },
      languageId: 'python',
      version: 1,
      lineAt: () => ({ text: line }),
    };
  }

  const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };

  /**
   * `vscode.executeCompletionItemProvider` as VS Code runs it: every registered
   * completion provider (midword's, from the client, and `other`) at the cursor, their
   * items merged into one list.
   */
  function runProvidersLikeVscode(document: Record<string, unknown>, other: () => unknown): void {
    fake.onExecute = async (command, _uri, position) => {
      if (command !== EXECUTE_COMPLETION_PROVIDER) {
        return undefined;
      }
      const context = { triggerKind: 0, triggerCharacter: undefined };
      const providers = [...state.completionProviders.map((entry) => entry.provider), { provideCompletionItems: other }];
      const answers = await Promise.all(providers.map((provider) => provider.provideCompletionItems?.(document, position, token, context)));
      const items = answers.flatMap((answer): unknown[] =>
        Array.isArray(answer) ? (answer as unknown[]) : ((answer as { items?: unknown[] } | null | undefined)?.items ?? []),
      );
      return { isIncomplete: false, items };
    };
  }

  const inlineRequests = (): Record<string, unknown>[] =>
    serverMessages(files).filter((m) => m.method === 'textDocument/inlineCompletion').map((m) => m.params);
  const completionRequests = (): number => serverMessages(files).filter((m) => m.method === 'textDocument/completion').length;

  it("registers midword's LSP completion provider (the server offers textDocument/completion)", () => {
    assert.equal(state.completionProviders.length, 1);
  });

  it('guided: the names other providers offer at the cursor go to the server as midwordCandidates; midword\'s own items do not', async () => {
    symbolsSetting = 'auto';
    const provider = state.inlineProviders[0]?.provider;
    assert.ok(provider?.provideInlineCompletionItems);
    const line = '    widget.frob';
    const document = documentWith(line);
    runProvidersLikeVscode(document, () => ({
      items: [
        { label: 'frobnicateAll', kind: 1 },
        { label: { label: 'frobnicate', description: 'made up' }, filterText: 'frobnicate', kind: 1 },
        { label: 'frobWord', kind: 0 }, // a word list's item: not a name the editor knows
        { label: 'size', kind: 9 },
      ],
    }));
    const inlineBefore = inlineRequests().length;
    const completionsBefore = completionRequests();
    const result = (await provider.provideInlineCompletionItems(document, new StubPosition(0, line.length), { triggerKind: 1, selectedCompletionInfo: undefined }, token)) as
      | { items?: { insertText: unknown }[] }
      | { insertText: unknown }[];
    const items = Array.isArray(result) ? result : (result.items ?? []);
    assert.equal(items[0]?.insertText, 'frobnicateAll()', 'the server answer, converted as vscode-languageclient converts it');
    const sent = inlineRequests().slice(inlineBefore);
    assert.equal(sent.length, 1);
    const params = sent[0];
    assert.ok(params);
    assert.deepEqual(params[CANDIDATES_FIELD], ['frobnicateAll', 'frobnicate']);
    assert.deepEqual(params.position, { line: 0, character: line.length });
    assert.deepEqual(params.textDocument, { uri: 'file:///ws/c.py' });
    assert.equal(completionRequests(), completionsBefore, "midword's completion provider did not ask the server (no model run)");
    assert.ok(!JSON.stringify(params).includes('midwordOwnItem'));
    assert.equal(symbols.collecting('file:///ws/c.py', 0, line.length), false);
    assert.deepEqual(
      fake.executed.filter(([command]) => command === EXECUTE_COMPLETION_PROVIDER).map(([, , position]) => position),
      [new StubPosition(0, line.length)],
    );
  });

  it("midword's completion provider still asks the server when no names are being collected", async () => {
    const completion = state.completionProviders[0]?.provider;
    assert.ok(completion?.provideCompletionItems);
    const before = completionRequests();
    await completion.provideCompletionItems(documentWith('x = fo'), new StubPosition(0, 6), token, { triggerKind: 0 });
    await waitFor('a textDocument/completion request', () => completionRequests() === before + 1);
  });

  it('unguided: outside a name, with no names extending the typed one, and with midword.symbols off', async () => {
    const provide = state.inlineProviders[0]?.provider.provideInlineCompletionItems;
    assert.ok(provide);
    const ask = async (line: string): Promise<void> => {
      const document = documentWith(line);
      runProvidersLikeVscode(document, () => [{ label: 'frobnicate', kind: 1 }]);
      await provide(document, new StubPosition(0, line.length), { triggerKind: 1, selectedCompletionInfo: undefined }, token);
    };
    const executedBefore = fake.executed.length;
    const inlineBefore = inlineRequests().length;
    symbolsSetting = 'auto';
    await ask('x = ');
    assert.equal(fake.executed.length, executedBefore, 'not in a name: the providers are not asked');
    await ask('x = widget.zz');
    assert.equal(fake.executed.length, executedBefore + 1, 'asked; none of the names goes on from "zz"');
    symbolsSetting = 'off';
    await ask('x = widget.frob');
    assert.equal(fake.executed.length, executedBefore + 1, 'off: never asked');
    const sent = inlineRequests().slice(inlineBefore);
    assert.equal(sent.length, 3);
    assert.ok(sent.every((params) => !(CANDIDATES_FIELD in params)), JSON.stringify(sent));
  });

  it('sendConfiguration sends workspace/didChangeConfiguration with { settings: options }', async () => {
    options = { ...options, temperature: 0.4, device: 'cpu' };
    await client.sendConfiguration(options);
    await waitFor('didChangeConfiguration', () => serverMessages(files).some((m) => m.method === 'workspace/didChangeConfiguration'));
    const change = serverMessages(files).find((m) => m.method === 'workspace/didChangeConfiguration');
    assert.deepEqual(change?.params, { settings: options });
  });

  it('a server crash after start is reported once through onUnexpectedExit', async () => {
    await client.sendConfiguration({ ...options, maxTokens: 13 });
    await waitFor('unexpected exit', () => recorded.exits.length > 0);
    assert.equal(recorded.exits.length, 1);
    await waitFor('client stopped', () => !client.isRunning);
  });
});
