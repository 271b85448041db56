/**
 * The server's lifecycle: find Python, check the imports, start the language
 * client, forward setting changes, restart on request (debounced, never
 * overlapping) and after crashes. No `vscode` import: the VS Code and
 * vscode-languageclient specifics come in through `ControllerDeps`.
 */
import type { CompletionEvents } from './completionEvents';
import { classifyConfigurationChange } from './configChange';
import type { ImportCheckResult } from './importCheck';
import { describeSource, type InterpreterResolution, type ResolvedInterpreter } from './interpreter';
import type { ServerOptions } from './options';
import { importCheckProblem, interpreterNotFoundProblem, serverFailedProblem, type StartProblem } from './problems';
import { RestartScheduler, type Timers } from './restartScheduler';
import type { ProgressValue, ServerStatus, StatusModel } from './statusModel';
import type { CursorDocument, CursorPosition } from './symbols';

/** The language client, as the controller sees it. */
export interface ServerClient {
  /** Launches the server and completes the initialize handshake; rejects when that fails. */
  start(): Promise<void>;
  /** Shuts the server down and releases the client (idempotent). */
  stop(): Promise<void>;
  /** `workspace/didChangeConfiguration` with `{ settings: options }`. */
  sendConfiguration(options: ServerOptions): Promise<void>;
  /** A custom notification (the acceptance log's events). */
  sendNotification(method: string, params: Record<string, unknown>): Promise<void>;
  readonly isRunning: boolean;
  /** `serverInfo.name` from the initialize result, once started (undefined when not sent). */
  readonly serverName: string | undefined;
}

/** The name midword's server gives in `serverInfo`: such a server sends `midword/status`. */
export const MIDWORD_SERVER_NAME = 'midword';

/** Callbacks from the client into the extension. */
export interface ClientHooks {
  /** Whether inline completions are on (checked on every request). */
  isEnabled(): boolean;
  /** Current server options (for `initializationOptions` and `workspace/configuration`). */
  currentOptions(): ServerOptions;
  onServerStatus(status: ServerStatus): void;
  onProgress(token: string | number, value: ProgressValue): void;
  onCompletionLatency(ms: number): void;
  /** The server went away after it was running, without being asked to stop. */
  onUnexpectedExit(detail: string): void;
  /** Inline items shown and accepted, reported to the server's acceptance log. */
  completionEvents?: CompletionEvents;
  /** Names the other completion providers offer at the cursor, for guided completions. */
  symbols?: SymbolSource;
}

/** The names for an inline request (src/symbols.ts's SymbolCollector). */
export interface SymbolSource {
  /** The names to send as `midwordCandidates`; undefined: send none. */
  collect(document: CursorDocument, position: CursorPosition): Promise<string[] | undefined>;
  /** Whether names are being collected at this cursor (midword's completion provider then stays out). */
  collecting(uri: string, line: number, character: number): boolean;
}

export interface LaunchSpec {
  python: string;
  cwd?: string;
}

export type ClientFactory = (launch: LaunchSpec, hooks: ClientHooks) => ServerClient;

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface SettingsSnapshot {
  options: ServerOptions;
  /** Invalid settings replaced by their defaults. */
  problems: string[];
  enabled: boolean;
  /** Raw `midword.python.path` ("" when unset). */
  pythonPath: string;
}

export interface ControllerDeps {
  resolveInterpreter(): Promise<InterpreterResolution>;
  checkImports(python: string, cwd: string | undefined): Promise<ImportCheckResult>;
  createClient: ClientFactory;
  readSettings(): SettingsSnapshot;
  /** Working directory of the check and of the server (the first workspace folder). */
  workingDirectory(): string | undefined;
  status: StatusModel;
  /** Pushes `status.view()` to the status bar. */
  renderStatus(): void;
  log: Logger;
  /** Shows an error notification with the problem's actions. */
  reportProblem(problem: StartProblem): void;
  completionEvents?: CompletionEvents;
  symbols?: SymbolSource;
  debounceMs?: number;
  timers?: Timers;
  /** Crashes tolerated within `crashWindowMs` before giving up (default 3 in 3 minutes). */
  maxCrashes?: number;
  crashWindowMs?: number;
  now?: () => number;
}

export class ServerController {
  private client: ServerClient | undefined;
  private interpreter: ResolvedInterpreter | undefined;
  private readonly scheduler: RestartScheduler;
  private readonly crashTimes: number[] = [];
  private enabled: boolean;
  private disposed = false;
  /** Completed (re)start runs, for tests and logs. */
  startCount = 0;

  constructor(private readonly deps: ControllerDeps) {
    this.enabled = deps.readSettings().enabled;
    this.deps.status.setEnabled(this.enabled);
    this.scheduler = new RestartScheduler(
      () => this.restartNow(),
      deps.debounceMs ?? 500,
      (error) => this.deps.log.error(`Restart failed: ${String(error)}`),
      deps.timers,
    );
  }

  /** A method, not a field read, so checks after an `await` are not narrowed away. */
  private isDisposed(): boolean {
    return this.disposed;
  }

  get isEnabled(): boolean {
    return this.enabled;
  }

  get currentInterpreter(): ResolvedInterpreter | undefined {
    return this.interpreter;
  }

  get isServerRunning(): boolean {
    return this.client?.isRunning === true;
  }

  /** First start (not debounced; still serialized with restarts). */
  start(): void {
    this.scheduler.runNow();
  }

  /** Debounced restart: a burst of requests restarts once; a request during a restart runs once after it. */
  requestRestart(reason: string): void {
    this.deps.log.info(`Restart requested (${reason}).`);
    this.scheduler.request();
  }

  /** Resolves when no start or restart is running or scheduled. */
  whenIdle(): Promise<void> {
    return this.scheduler.whenIdle();
  }

  /** A notification to the running server; dropped when none runs (events are best effort). */
  notifyServer(method: string, params: Record<string, unknown>): void {
    const client = this.client;
    if (client?.isRunning === true) {
      client.sendNotification(method, params).catch((error: unknown) => {
        this.deps.log.warn(`Could not send ${method}: ${String(error)}`);
      });
    }
  }

  /** A `workspace.onDidChangeConfiguration` event, as `affectsConfiguration`. */
  onConfigurationChanged(affects: (section: string) => boolean): void {
    const effects = classifyConfigurationChange(affects);
    if (effects.enablementChanged) {
      this.setEnabled(this.deps.readSettings().enabled);
    }
    if (effects.restartServer) {
      this.requestRestart('midword.python.path changed');
      return;
    }
    if (effects.forwardToServer) {
      void this.forwardSettings(effects.changedOptions, effects.reloadOptions);
    }
  }

  /** The Python extension's active interpreter changed; matters only without midword.python.path. */
  onPythonInterpreterChanged(): void {
    if (this.deps.readSettings().pythonPath.trim() === '') {
      this.requestRestart("the Python extension's interpreter changed");
    }
  }

  setEnabled(enabled: boolean): void {
    if (enabled === this.enabled) {
      return;
    }
    this.enabled = enabled;
    this.deps.log.info(`Inline completions ${enabled ? 'enabled' : 'disabled'}.`);
    this.deps.status.setEnabled(enabled);
    this.deps.renderStatus();
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    this.scheduler.dispose();
    await this.scheduler.whenIdle();
    await this.stopClient();
  }

  private async forwardSettings(changed: string[], reload: string[]): Promise<void> {
    const { options } = this.readOptions();
    const client = this.client;
    if (!client?.isRunning) {
      this.deps.log.info(`Settings changed (${changed.join(', ')}); the server will get them when it starts.`);
      return;
    }
    try {
      await client.sendConfiguration(options);
      const reloadNote = reload.length > 0 ? `; the server reloads the model for ${reload.join(', ')}` : '';
      this.deps.log.info(`Sent changed settings to the server (${changed.join(', ')})${reloadNote}.`);
    } catch (error) {
      this.deps.log.error(`Could not send settings to the server: ${String(error)}`);
    }
  }

  private readOptions(): { options: ServerOptions; problems: string[] } {
    const { options, problems } = this.deps.readSettings();
    for (const problem of problems) {
      this.deps.log.warn(problem);
    }
    return { options, problems };
  }

  private hooks(client: () => ServerClient | undefined): ClientHooks {
    return {
      isEnabled: () => this.enabled,
      completionEvents: this.deps.completionEvents,
      symbols: this.deps.symbols,
      currentOptions: () => this.deps.readSettings().options,
      onServerStatus: (status) => {
        this.deps.status.onServerStatus(status);
        if (status.state === 'error') {
          this.deps.log.error(`Server error: ${status.message}`);
        }
        this.deps.renderStatus();
      },
      onProgress: (token, value) => {
        this.deps.status.onProgress(token, value);
        this.deps.renderStatus();
      },
      onCompletionLatency: (ms) => {
        this.deps.status.onCompletionLatency(ms);
        this.deps.renderStatus();
      },
      onUnexpectedExit: (detail) => {
        // Only for the current client; an old one closing during a restart is expected.
        if (client() === this.client && this.client !== undefined) {
          this.handleCrash(detail);
        }
      },
    };
  }

  private handleCrash(detail: string): void {
    const now = (this.deps.now ?? Date.now)();
    const windowMs = this.deps.crashWindowMs ?? 3 * 60_000;
    const maxCrashes = this.deps.maxCrashes ?? 3;
    this.crashTimes.push(now);
    while (this.crashTimes.length > 0 && (this.crashTimes[0] ?? now) < now - windowMs) {
      this.crashTimes.shift();
    }
    const crashed = this.client;
    this.client = undefined;
    void crashed?.stop().catch(() => undefined);
    if (this.crashTimes.length <= maxCrashes) {
      this.deps.log.warn(`The server stopped unexpectedly (${detail}); restarting it.`);
      this.deps.status.setPhase('starting');
      this.deps.renderStatus();
      this.requestRestart('the server stopped unexpectedly');
      return;
    }
    const problem = serverFailedProblem(
      `it stopped ${this.crashTimes.length} times in ${Math.round(windowMs / 60_000)} minutes (${detail}); it will not be restarted automatically`,
    );
    this.fail(problem);
  }

  private fail(problem: StartProblem): void {
    this.deps.log.error(problem.message);
    this.deps.status.setPhase('error', problem.message);
    this.deps.renderStatus();
    this.deps.reportProblem(problem);
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client !== undefined) {
      try {
        await client.stop();
      } catch (error) {
        this.deps.log.warn(`Stopping the server failed: ${String(error)}`);
      }
    }
  }

  /** One (re)start: runs only inside the scheduler, so never twice at once. */
  private async restartNow(): Promise<void> {
    await this.stopClient();
    if (this.disposed) {
      return;
    }
    this.startCount += 1;
    this.deps.status.setPhase('starting');
    this.deps.status.setInterpreter('');
    this.deps.renderStatus();

    const resolution = await this.deps.resolveInterpreter();
    for (const note of resolution.notes) {
      this.deps.log.info(note);
    }
    if (resolution.kind === 'not-found') {
      this.interpreter = undefined;
      this.fail(interpreterNotFoundProblem(resolution.message));
      return;
    }
    const interpreter = resolution.interpreter;
    this.interpreter = interpreter;
    const description = `${interpreter.path} (${describeSource(interpreter.source)})`;
    this.deps.status.setInterpreter(description);
    this.deps.log.info(`Python: ${description}`);

    const cwd = this.deps.workingDirectory();
    const check = await this.deps.checkImports(interpreter.path, cwd);
    const problem = importCheckProblem(check, interpreter);
    if (problem !== undefined) {
      this.fail(problem);
      return;
    }
    if (check.kind === 'ok') {
      this.deps.log.info(
        `Import check passed in ${check.durationMs} ms: Python ${check.python}, midword ${check.midwordVersion}, torch ${check.torchVersion}.`,
      );
    }
    if (this.isDisposed()) {
      return;
    }

    const { options } = this.readOptions();
    this.deps.log.info(`Starting: ${interpreter.path} -m midword serve, initializationOptions ${JSON.stringify(options)}`);
    const created: ServerClient = this.deps.createClient({ python: interpreter.path, cwd }, this.hooks(() => created));
    this.client = created;
    try {
      await created.start();
    } catch (error) {
      if (this.client === created) {
        this.client = undefined;
      }
      await created.stop().catch(() => undefined);
      this.fail(serverFailedProblem(error instanceof Error ? error.message : String(error)));
      return;
    }
    if (this.client !== created) {
      return; // it crashed right after starting; handleCrash took over
    }
    this.deps.status.setPhase('running');
    // midword's server always sends a status once initialized: until it arrives the bar
    // must not say "ready" (text typed then finds the model still loading).
    this.deps.status.setAwaitsServerStatus(created.serverName === MIDWORD_SERVER_NAME);
    this.deps.renderStatus();
    this.deps.log.info('Server running.');
  }
}
