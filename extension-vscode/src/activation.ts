/**
 * Wires the extension together: output channel, status bar item, commands,
 * settings and the server controller. Takes the `vscode` API as a parameter
 * (only types are imported here), so unit tests can pass a stub.
 */
import * as fs from 'node:fs';
import type * as vscode from 'vscode';

import { ACCEPTED_COMMAND, CompletionEvents } from './completionEvents';
import { ServerController, type ClientFactory, type SettingsSnapshot } from './controller';
import { checkImports, DEFAULT_CHECK_TIMEOUT_MS } from './importCheck';
import { resolveInterpreter } from './interpreter';
import { buildInitializationOptionsWithProblems, EXTENSION_SETTINGS, SECTION } from './options';
import { expandPathVariables, findOnPath, isExecutableFile } from './pathLookup';
import { ACTION_LABELS, type ProblemAction, type StartProblem } from './problems';
import { onPythonInterpreterChange, PYTHON_EXTENSION_ID, pythonExtensionInterpreter } from './pythonExtension';
import { StatusModel, type StatusView } from './statusModel';
import { EXECUTE_COMPLETION_PROVIDER, parseSymbolsSetting, SymbolCollector } from './symbols';
import { blockedReason, flippedLanguages, type Blocked, type LanguageSwitches } from './where';

/** The parts of the `vscode` module the extension uses. */
export type VscodeApi = Pick<
  typeof vscode,
  'window' | 'workspace' | 'commands' | 'extensions' | 'StatusBarAlignment' | 'ThemeColor' | 'ConfigurationTarget' | 'Uri'
>;

export const COMMANDS = {
  restartServer: 'midword.restartServer',
  toggle: 'midword.toggle',
  /** Flips the active editor's language in the user's `midword.languages`. */
  toggleLanguage: 'midword.toggleLanguage',
  showLog: 'midword.showLog',
  selectModelFolder: 'midword.selectModelFolder',
  acceptNextLine: 'midword.acceptNextLine',
  /** Run by VS Code when a midword inline item is accepted (the server puts it on each item). */
  completionAccepted: ACCEPTED_COMMAND,
} as const;

/** VS Code's own command that inserts the next line of the inline suggestion on screen. */
export const BUILTIN_ACCEPT_NEXT_LINE = 'editor.action.inlineSuggest.acceptNextLine';

export interface ActivationOptions {
  createClient: (output: vscode.LogOutputChannel) => ClientFactory;
  debounceMs?: number;
  checkTimeoutMs?: number;
}

export interface ActivatedExtension {
  controller: ServerController;
  completionEvents: CompletionEvents;
  symbols: SymbolCollector;
  status: StatusModel;
  statusItem: vscode.StatusBarItem;
  output: vscode.LogOutputChannel;
  dispose(): Promise<void>;
}

function workspaceFolder(api: VscodeApi): string | undefined {
  return api.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

/** The workspace folder as a working directory: only when it exists on disk. */
function workingDirectory(api: VscodeApi): string | undefined {
  const folder = workspaceFolder(api);
  return folder !== undefined && fs.existsSync(folder) ? folder : undefined;
}

function expand(api: VscodeApi, value: string): string {
  return expandPathVariables(value, { workspaceFolder: workspaceFolder(api) });
}

export function readSettings(api: VscodeApi): SettingsSnapshot {
  const config = api.workspace.getConfiguration(SECTION);
  const { options, problems } = buildInitializationOptionsWithProblems((key) => config.get<unknown>(key), {
    expandPath: (value) => expand(api, value),
  });
  const pythonPath = config.get<unknown>(EXTENSION_SETTINGS.pythonPath);
  return {
    options,
    problems,
    enabled: config.get<unknown>(EXTENSION_SETTINGS.enable) !== false,
    pythonPath: typeof pythonPath === 'string' ? pythonPath : '',
  };
}

/** Where to write a setting so that it takes effect: where it is set now, else the user settings. */
function targetFor(api: VscodeApi, key: string): vscode.ConfigurationTarget {
  const inspected = api.workspace.getConfiguration(SECTION).inspect(key);
  if (inspected?.workspaceFolderValue !== undefined) {
    return api.ConfigurationTarget.WorkspaceFolder;
  }
  if (inspected?.workspaceValue !== undefined) {
    return api.ConfigurationTarget.Workspace;
  }
  return api.ConfigurationTarget.Global;
}

export async function updateSetting(api: VscodeApi, key: string, value: unknown): Promise<void> {
  await api.workspace.getConfiguration(SECTION).update(key, value, targetFor(api, key));
}

/** The part of a text document that decides whether midword completes it. */
interface DocumentIdentity {
  uri: { toString(): string };
  languageId: string;
}

/** Why the active editor's document gets no completions under the current settings. */
export function activeBlocked(api: VscodeApi): Blocked | undefined {
  const document = api.window.activeTextEditor?.document as DocumentIdentity | undefined;
  if (document === undefined) {
    return undefined;
  }
  return blockedReason({ uri: document.uri.toString(), languageId: document.languageId }, readSettings(api).options);
}

/**
 * Flips the active editor's language in the user settings' `midword.languages`
 * (VS Code lays them over the default); returns the language and its new state.
 */
export async function toggleActiveLanguage(api: VscodeApi): Promise<{ languageId: string; enabled: boolean } | undefined> {
  const document = api.window.activeTextEditor?.document as DocumentIdentity | undefined;
  if (document === undefined) {
    return undefined;
  }
  const config = api.workspace.getConfiguration(SECTION);
  const current = readSettings(api).options.languages;
  const userValue = config.inspect<LanguageSwitches>('languages')?.globalValue;
  const next = flippedLanguages(document.languageId, current, userValue);
  await config.update('languages', next, api.ConfigurationTarget.Global);
  return { languageId: document.languageId, enabled: next[document.languageId] === true };
}

export function applyStatusView(item: vscode.StatusBarItem, view: StatusView, errorBackground: vscode.ThemeColor): void {
  item.text = view.text;
  item.tooltip = view.tooltip;
  item.command = view.command;
  item.backgroundColor = view.error ? errorBackground : undefined;
  item.accessibilityInformation = { label: view.tooltip.split('\n')[0] ?? 'midword' };
  item.show();
}

export function activateWith(api: VscodeApi, context: vscode.ExtensionContext, options: ActivationOptions): ActivatedExtension {
  const output = api.window.createOutputChannel('midword', { log: true });
  const statusItem = api.window.createStatusBarItem('midword.status', api.StatusBarAlignment.Right, 100);
  statusItem.name = 'midword';
  const errorBackground = new api.ThemeColor('statusBarItem.errorBackground');
  const status = new StatusModel();
  const render = (): void => applyStatusView(statusItem, status.view(), errorBackground);

  let interpreterListener: { dispose(): unknown } | undefined;
  const watchPythonExtension = (): void => {
    interpreterListener ??= onPythonInterpreterChange(api.extensions, () => controller.onPythonInterpreterChanged());
  };

  const selectInterpreter = async (): Promise<void> => {
    const usesSetting = readSettings(api).pythonPath.trim() !== '';
    if (!usesSetting && api.extensions.getExtension(PYTHON_EXTENSION_ID) !== undefined) {
      await api.commands.executeCommand('python.setInterpreter');
      return;
    }
    const picked = await api.window.showOpenDialog({
      canSelectFiles: true,
      canSelectFolders: false,
      canSelectMany: false,
      openLabel: 'Use for midword',
      title: 'Python interpreter for the midword server',
    });
    const file = picked?.[0];
    if (file !== undefined) {
      await updateSetting(api, EXTENSION_SETTINGS.pythonPath, file.fsPath);
    }
  };

  const runAction = async (action: ProblemAction, problem: StartProblem): Promise<void> => {
    switch (action) {
      case 'selectInterpreter':
        return selectInterpreter();
      case 'openSettings': {
        const query = problem.kind === 'server-failed' ? `@ext:${context.extension.id}` : `${SECTION}.python.path`;
        await api.commands.executeCommand('workbench.action.openSettings', query);
        return;
      }
      case 'showLog':
        output.show(true);
        return;
      case 'restartServer':
        controller.requestRestart('asked from the error message');
        return;
    }
  };

  const reportProblem = (problem: StartProblem): void => {
    const labels = problem.actions.map((action) => ACTION_LABELS[action]);
    void Promise.resolve(api.window.showErrorMessage(problem.message, ...labels)).then(async (choice) => {
      const action = problem.actions.find((candidate) => ACTION_LABELS[candidate] === choice);
      if (action !== undefined) {
        await runAction(action, problem);
      }
    });
  };

  const completionEvents = new CompletionEvents((method, params) => controller.notifyServer(method, params));

  /** Names other providers offer at the cursor, for completions guided by them (midword.symbols). */
  const symbols = new SymbolCollector({
    setting: () => parseSymbolsSetting(api.workspace.getConfiguration(SECTION).get<unknown>(EXTENSION_SETTINGS.symbols)),
    provideCompletions: (uri, position) => api.commands.executeCommand(EXECUTE_COMPLETION_PROVIDER, uri, position),
    log: (message) => output.debug(message),
  });

  /** VS Code inserts the next line of the suggestion; when it is midword's, the server hears of it. */
  const acceptNextLine = async (): Promise<void> => {
    const editor = api.window.activeTextEditor;
    const active = editor?.selection.active;
    // named fields: vscode.Position keeps line and character behind getters, which a spread would drop
    const cursor =
      editor !== undefined && active !== undefined
        ? { uri: editor.document.uri.toString(), line: active.line, character: active.character }
        : undefined;
    await completionEvents.acceptNextLine(cursor, () => api.commands.executeCommand(BUILTIN_ACCEPT_NEXT_LINE));
  };

  const controller = new ServerController({
    resolveInterpreter: async () => {
      const result = await resolveInterpreter({
        configuredPath: () => readSettings(api).pythonPath,
        expand: (value) => expand(api, value),
        pythonExtension: () => pythonExtensionInterpreter(api.extensions, api.workspace.workspaceFolders?.[0]?.uri),
        findOnPath: (command) => findOnPath(command),
        isExecutableFile: (file) => isExecutableFile(file),
      });
      watchPythonExtension();
      return result;
    },
    checkImports: (python, cwd) => checkImports(python, { cwd, timeoutMs: options.checkTimeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS }),
    createClient: options.createClient(output),
    readSettings: () => readSettings(api),
    workingDirectory: () => workingDirectory(api),
    status,
    renderStatus: render,
    log: {
      info: (message) => output.info(message),
      warn: (message) => output.warn(message),
      error: (message) => output.error(message),
    },
    reportProblem,
    completionEvents,
    symbols,
    debounceMs: options.debounceMs,
  });

  const showWhereItCompletes = (): void => {
    status.setActiveBlocked(activeBlocked(api));
    render();
  };

  const toggleLanguage = async (): Promise<void> => {
    const flipped = await toggleActiveLanguage(api);
    if (flipped === undefined) {
      output.info('No active editor: no language to turn completions on or off for.');
      return;
    }
    output.info(`Completions ${flipped.enabled ? 'enabled' : 'disabled'} for ${flipped.languageId} (user settings, midword.languages).`);
    const inspected = api.workspace.getConfiguration(SECTION).inspect<LanguageSwitches>('languages');
    const overriding = [inspected?.workspaceValue, inspected?.workspaceFolderValue].some(
      (value) => value !== undefined && flipped.languageId in value,
    );
    if (overriding) {
      output.warn(`The workspace settings set midword.languages for ${flipped.languageId}; they take precedence over the user settings.`);
    }
    showWhereItCompletes();
  };

  const toggle = async (): Promise<void> => {
    const enabled = !controller.isEnabled;
    await updateSetting(api, EXTENSION_SETTINGS.enable, enabled);
    // The configuration event does the same; this makes the command take effect even if the write is slow.
    controller.setEnabled(enabled);
  };

  const selectModelFolder = async (): Promise<void> => {
    const current = readSettings(api).options.model;
    if (current !== '') {
      const choice = await api.window.showQuickPick(['Choose a model folder…', 'Use the default model shipped with midword'], {
        title: `midword model (now: ${current})`,
      });
      if (choice === undefined) {
        return;
      }
      if (choice.startsWith('Use the default')) {
        await updateSetting(api, 'model', '');
        return;
      }
    }
    const picked = await api.window.showOpenDialog({
      canSelectFiles: false,
      canSelectFolders: true,
      canSelectMany: false,
      openLabel: 'Use as midword model',
      title: 'Model folder (config.json, tokenizer.json, weights)',
      defaultUri: current !== '' ? api.Uri.file(current) : undefined,
    });
    const folder = picked?.[0];
    if (folder !== undefined) {
      await updateSetting(api, 'model', folder.fsPath);
    }
  };

  context.subscriptions.push(
    output,
    statusItem,
    api.commands.registerCommand(COMMANDS.restartServer, () => controller.requestRestart('Restart Server command')),
    api.commands.registerCommand(COMMANDS.toggle, toggle),
    api.commands.registerCommand(COMMANDS.toggleLanguage, toggleLanguage),
    api.commands.registerCommand(COMMANDS.showLog, () => output.show(true)),
    api.commands.registerCommand(COMMANDS.selectModelFolder, selectModelFolder),
    api.commands.registerCommand(COMMANDS.acceptNextLine, acceptNextLine),
    api.commands.registerCommand(COMMANDS.completionAccepted, (tags: unknown) => completionEvents.accepted(tags)),
    api.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(SECTION)) {
        controller.onConfigurationChanged((section) => event.affectsConfiguration(section));
        showWhereItCompletes();
      }
    }),
    api.window.onDidChangeActiveTextEditor(showWhereItCompletes),
    // a document whose language mode changes is closed and opened again with the new id
    api.workspace.onDidOpenTextDocument(showWhereItCompletes),
    { dispose: () => interpreterListener?.dispose() },
  );

  showWhereItCompletes();
  controller.start();

  return {
    controller,
    completionEvents,
    symbols,
    status,
    statusItem,
    output,
    dispose: () => controller.dispose(),
  };
}
