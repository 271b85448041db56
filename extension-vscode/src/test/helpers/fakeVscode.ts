/**
 * A small in-memory stand-in for the parts of the `vscode` API that
 * activation.ts uses: settings with inspect/update and change events,
 * commands, messages, dialogs, a status bar item and a log channel.
 */
import type { VscodeApi } from '../../activation';

export type Listener<T> = (event: T) => unknown;

export class FakeEvent<T> {
  private listeners: Listener<T>[] = [];
  readonly event = (listener: Listener<T>): { dispose(): void } => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };
  fire(value: T): void {
    for (const listener of [...this.listeners]) {
      listener(value);
    }
  }
}

export interface FakeStatusItem {
  text: string;
  tooltip: unknown;
  command: unknown;
  backgroundColor: unknown;
  name: string | undefined;
  accessibilityInformation: unknown;
  visible: boolean;
  show(): void;
  hide(): void;
  dispose(): void;
}

export const Target = { Global: 1, Workspace: 2, WorkspaceFolder: 3 } as const;

export class FakeVscode {
  /** Setting values by full id, per scope. */
  readonly user = new Map<string, unknown>();
  readonly workspaceValues = new Map<string, unknown>();
  readonly defaults = new Map<string, unknown>();
  readonly updates: { id: string; value: unknown; target: unknown }[] = [];
  readonly commands = new Map<string, (...args: unknown[]) => unknown>();
  readonly executed: unknown[][] = [];
  /** What VS Code does when `commands.executeCommand` runs (recorded in `executed` either way). */
  onExecute: ((...args: unknown[]) => unknown) | undefined;
  readonly errors: { message: string; items: string[] }[] = [];
  readonly logLines: string[] = [];
  readonly statusItems: FakeStatusItem[] = [];
  readonly configChanged = new FakeEvent<{ affectsConfiguration(section: string): boolean }>();
  logShown = 0;
  /** What the next message / dialog / quick pick returns. */
  nextErrorChoice: string | undefined;
  nextOpenDialog: { fsPath: string }[] | undefined;
  nextQuickPick: string | undefined;
  openDialogCalls: unknown[] = [];
  extensionsInstalled = new Map<string, unknown>();
  readonly activeEditorChanged = new FakeEvent<unknown>();
  readonly documentOpened = new FakeEvent<unknown>();
  /** `window.activeTextEditor`: a document (uri, language) and a cursor. */
  activeEditor:
    | { document: { uri: { toString(): string }; languageId: string }; selection: { active: { line: number; character: number } } }
    | undefined;

  /** Makes an editor on `uri` with the cursor at (line, character) the active one, firing the event. */
  setActiveEditor(uri: string, line: number, character: number, languageId = 'python'): void {
    this.activeEditor = { document: { uri: { toString: () => uri }, languageId }, selection: { active: { line, character } } };
    this.activeEditorChanged.fire(this.activeEditor);
  }

  constructor(
    defaults: Map<string, unknown>,
    readonly workspaceFolder: string,
  ) {
    for (const [key, value] of defaults) {
      this.defaults.set(`midword.${key}`, value);
    }
  }

  /** As VS Code reads a setting: the most specific scope wins, except that objects are merged over each other. */
  private value(id: string): unknown {
    const layers = [this.defaults, this.user, this.workspaceValues].filter((scope) => scope.has(id)).map((scope) => scope.get(id));
    const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
    if (layers.length > 1 && layers.every(isObject)) {
      return Object.assign({}, ...layers) as unknown;
    }
    return layers[layers.length - 1];
  }

  /** Changes a user setting the way the Settings editor would, firing the event. */
  setUser(key: string, value: unknown): void {
    const id = `midword.${key}`;
    this.user.set(id, value);
    this.fireChange(id);
  }

  fireChange(id: string): void {
    this.configChanged.fire({ affectsConfiguration: (section) => id === section || id.startsWith(`${section}.`) });
  }

  api(): VscodeApi {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the stub's closures read and write this fake
    const fake = this;
    const getConfiguration = (section?: string): unknown => {
      const full = (key: string): string => (section ? `${section}.${key}` : key);
      return {
        get: (key: string, fallback?: unknown) => fake.value(full(key)) ?? fallback,
        inspect: (key: string) => ({
          key: full(key),
          defaultValue: fake.defaults.get(full(key)),
          globalValue: fake.user.get(full(key)),
          workspaceValue: fake.workspaceValues.get(full(key)),
          workspaceFolderValue: undefined,
        }),
        update: (key: string, value: unknown, target: unknown) => {
          const id = full(key);
          fake.updates.push({ id, value, target });
          (target === Target.Global ? fake.user : fake.workspaceValues).set(id, value);
          fake.fireChange(id);
          return Promise.resolve();
        },
      };
    };
    const api = {
      window: {
        get activeTextEditor() {
          return fake.activeEditor;
        },
        onDidChangeActiveTextEditor: fake.activeEditorChanged.event,
        createOutputChannel: () => ({
          debug: (m: string) => fake.logLines.push(`debug ${m}`),
          info: (m: string) => fake.logLines.push(`info ${m}`),
          warn: (m: string) => fake.logLines.push(`warn ${m}`),
          error: (m: string) => fake.logLines.push(`error ${m}`),
          show: () => fake.logShown++,
          dispose: () => undefined,
        }),
        createStatusBarItem: () => {
          const item: FakeStatusItem = {
            text: '',
            tooltip: undefined,
            command: undefined,
            backgroundColor: undefined,
            name: undefined,
            accessibilityInformation: undefined,
            visible: false,
            show: () => (item.visible = true),
            hide: () => (item.visible = false),
            dispose: () => undefined,
          };
          fake.statusItems.push(item);
          return item;
        },
        showErrorMessage: (message: string, ...items: string[]) => {
          fake.errors.push({ message, items });
          const choice = fake.nextErrorChoice;
          fake.nextErrorChoice = undefined;
          return Promise.resolve(choice);
        },
        showOpenDialog: (options: unknown) => {
          fake.openDialogCalls.push(options);
          const picked = fake.nextOpenDialog;
          fake.nextOpenDialog = undefined;
          return Promise.resolve(picked);
        },
        showQuickPick: () => {
          const picked = fake.nextQuickPick;
          fake.nextQuickPick = undefined;
          return Promise.resolve(picked);
        },
      },
      workspace: {
        getConfiguration,
        onDidChangeConfiguration: fake.configChanged.event,
        onDidOpenTextDocument: fake.documentOpened.event,
        workspaceFolders: [{ uri: { fsPath: fake.workspaceFolder }, name: 'ws', index: 0 }],
      },
      commands: {
        registerCommand: (id: string, handler: (...args: unknown[]) => unknown) => {
          fake.commands.set(id, handler);
          return { dispose: () => fake.commands.delete(id) };
        },
        executeCommand: (...args: unknown[]) => {
          fake.executed.push(args);
          return Promise.resolve(fake.onExecute?.(...args));
        },
      },
      extensions: {
        getExtension: (id: string) => fake.extensionsInstalled.get(id),
      },
      StatusBarAlignment: { Left: 1, Right: 2 },
      ThemeColor: class {
        constructor(readonly id: string) {}
      },
      ConfigurationTarget: Target,
      Uri: { file: (fsPath: string) => ({ fsPath }) },
    };
    return api as unknown as VscodeApi;
  }

  run(command: string, ...args: unknown[]): Promise<unknown> {
    const handler = this.commands.get(command);
    if (handler === undefined) {
      return Promise.reject(new Error(`command ${command} is not registered`));
    }
    return Promise.resolve(handler(...args));
  }
}

/** An ExtensionContext with just what activation uses. */
export function fakeContext(): { subscriptions: { dispose(): unknown }[]; extension: { id: string } } {
  return { subscriptions: [], extension: { id: 'midword.midword' } };
}
