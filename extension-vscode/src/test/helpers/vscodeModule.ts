/**
 * A `vscode` module for code that does `require('vscode')` (vscode-languageclient,
 * the bundled dist/extension.js). It answers with a FakeVscode for what the
 * extension uses, small working classes for the types vscode-languageclient
 * constructs, and no-op functions returning disposables for everything else.
 * Install it before loading such code.
 */
import Module from 'node:module';

import type { FakeVscode } from './fakeVscode';

interface Disposable {
  dispose(): void;
}

const noopDisposable = (): Disposable => ({ dispose: () => undefined });

class StubDisposable {
  constructor(private readonly callback: () => unknown = () => undefined) {}
  static from(...items: { dispose(): unknown }[]): StubDisposable {
    return new StubDisposable(() => items.forEach((item) => item.dispose()));
  }
  dispose(): void {
    this.callback();
  }
}

class StubEventEmitter<T> {
  private listeners: ((value: T) => unknown)[] = [];
  readonly event = (listener: (value: T) => unknown): Disposable => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };
  fire(value: T): void {
    this.listeners.forEach((listener) => listener(value));
  }
  dispose(): void {
    this.listeners = [];
  }
}

class StubCancellationTokenSource {
  private readonly emitter = new StubEventEmitter<undefined>();
  readonly token = { isCancellationRequested: false, onCancellationRequested: this.emitter.event };
  cancel(): void {
    this.token.isCancellationRequested = true;
    this.emitter.fire(undefined);
  }
  dispose(): void {
    this.emitter.dispose();
  }
}

export class StubPosition {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class StubRange {
  constructor(
    readonly start: StubPosition,
    readonly end: StubPosition,
  ) {}
}

export class StubInlineCompletionItem {
  constructor(
    readonly insertText: unknown,
    readonly range?: unknown,
    readonly command?: unknown,
  ) {}
}

export class StubInlineCompletionList {
  constructor(readonly items: unknown[]) {}
}

class StubUri {
  constructor(
    readonly scheme: string,
    readonly fsPath: string,
  ) {}
  static file(fsPath: string): StubUri {
    return new StubUri('file', fsPath);
  }
  static parse(value: string): StubUri {
    const scheme = /^([a-z-]+):/.exec(value)?.[1] ?? 'file';
    return new StubUri(scheme, value.replace(/^file:\/\//, ''));
  }
  toString(): string {
    return this.scheme === 'file' ? `file://${this.fsPath}` : `${this.scheme}:${this.fsPath}`;
  }
}

/** Any other class vscode-languageclient extends or instantiates. */
class StubGeneric {
  readonly args: unknown[];
  constructor(...args: unknown[]) {
    this.args = args;
  }
}

/** A namespace: known members from `known`, any other member a no-op returning a disposable. */
function namespace(known: object): unknown {
  return new Proxy(known, {
    get(target, property) {
      if (typeof property === 'symbol' || Object.prototype.hasOwnProperty.call(target, property)) {
        return (target as Record<string | symbol, unknown>)[property];
      }
      return noopDisposable;
    },
  });
}

const LogLevel = { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 };

/** A LogOutputChannel that stores its lines. */
export function stubLogChannel(lines: string[] = []): Record<string, unknown> {
  const log = (level: string) => (message: string) => lines.push(`${level} ${message}`);
  return {
    name: 'midword',
    logLevel: LogLevel.Info,
    onDidChangeLogLevel: noopDisposable,
    trace: log('trace'),
    debug: log('debug'),
    info: log('info'),
    warn: log('warn'),
    error: (message: unknown) => lines.push(`error ${String(message)}`),
    append: (value: string) => lines.push(value),
    appendLine: (value: string) => lines.push(value),
    replace: () => undefined,
    clear: () => undefined,
    show: () => undefined,
    hide: () => undefined,
    dispose: () => undefined,
  };
}

export interface VscodeModuleState {
  /** Inline completion providers registered through `languages.registerInlineCompletionItemProvider`. */
  inlineProviders: { selector: unknown; provider: Record<string, (...args: unknown[]) => unknown> }[];
  /** Completion providers registered through `languages.registerCompletionItemProvider`. */
  completionProviders: { selector: unknown; provider: Record<string, (...args: unknown[]) => unknown> }[];
  /** Lines written to output channels created through `window.createOutputChannel`. */
  channelLines: string[];
}

/** Builds the module around a FakeVscode (settings, commands, status bar, messages). */
export function createVscodeModule(fake: FakeVscode): { module: Record<string, unknown>; state: VscodeModuleState } {
  const state: VscodeModuleState = { inlineProviders: [], completionProviders: [], channelLines: [] };
  const api = fake.api() as unknown as Record<string, Record<string, unknown>>;
  const window = api.window ?? {};
  const workspace = api.workspace ?? {};
  const moduleObject: Record<string, unknown> = {
    version: '1.99.0',
    Disposable: StubDisposable,
    EventEmitter: StubEventEmitter,
    CancellationTokenSource: StubCancellationTokenSource,
    CancellationError: class CancellationError extends Error {},
    Position: StubPosition,
    Range: StubRange,
    InlineCompletionItem: StubInlineCompletionItem,
    InlineCompletionList: StubInlineCompletionList,
    Uri: StubUri,
    ThemeColor: api.ThemeColor,
    StatusBarAlignment: api.StatusBarAlignment,
    ConfigurationTarget: api.ConfigurationTarget,
    LogLevel,
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    InlineCompletionTriggerKind: { Invoke: 0, Automatic: 1 },
    window: namespace({
      ...window,
      createOutputChannel: () => stubLogChannel(state.channelLines),
      activeTextEditor: undefined,
      visibleTextEditors: [],
      tabGroups: { all: [], onDidChangeTabs: noopDisposable, onDidChangeTabGroups: noopDisposable },
      withProgress: (_options: unknown, task: (progress: unknown, token: unknown) => unknown) =>
        task({ report: () => undefined }, new StubCancellationTokenSource().token),
    }),
    workspace: namespace({
      ...workspace,
      textDocuments: [],
      notebookDocuments: [],
    }),
    languages: namespace({
      match: () => 10,
      registerInlineCompletionItemProvider: (selector: unknown, provider: Record<string, (...args: unknown[]) => unknown>) => {
        state.inlineProviders.push({ selector, provider });
        return { dispose: () => (state.inlineProviders = state.inlineProviders.filter((p) => p.provider !== provider)) };
      },
      registerCompletionItemProvider: (selector: unknown, provider: Record<string, (...args: unknown[]) => unknown>) => {
        state.completionProviders.push({ selector, provider });
        return { dispose: () => (state.completionProviders = state.completionProviders.filter((p) => p.provider !== provider)) };
      },
    }),
    commands: namespace(api.commands ?? {}),
    extensions: api.extensions,
    env: namespace({ language: 'en', appName: 'Visual Studio Code (stub)', machineId: 'stub', sessionId: 'stub', uiKind: 1 }),
  };
  const module = new Proxy(moduleObject, {
    get(target, property) {
      if (typeof property === 'symbol' || property in target) {
        return target[property as string];
      }
      // Enums and classes nobody in these tests looks into.
      return StubGeneric;
    },
  });
  return { module, state };
}

const STUB_ID = '/virtual/vscode-stub.js';

/** Makes `require('vscode')` return `moduleObject` for the rest of this process. */
export function installVscodeModule(moduleObject: object): void {
  const loader = Module as unknown as {
    _resolveFilename: (request: string, ...rest: unknown[]) => string;
  };
  const original = loader._resolveFilename;
  loader._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]): string {
    return request === 'vscode' ? STUB_ID : original.call(this, request, ...rest);
  };
  const cached = new Module(STUB_ID);
  cached.filename = STUB_ID;
  cached.loaded = true;
  cached.exports = moduleObject;
  require.cache[STUB_ID] = cached;
}
