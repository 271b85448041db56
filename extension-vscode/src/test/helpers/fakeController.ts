/** A ServerController wired to fakes: a scripted interpreter, import check and client. */
import { ServerController, type ClientHooks, type LaunchSpec, type ServerClient, type SettingsSnapshot } from '../../controller';
import type { ImportCheckResult } from '../../importCheck';
import type { InterpreterResolution } from '../../interpreter';
import { buildInitializationOptions, type ServerOptions } from '../../options';
import type { StartProblem } from '../../problems';
import { StatusModel, type StatusView } from '../../statusModel';
import { deferred, ManualTimers } from './manualTimers';

export class FakeClient implements ServerClient {
  started = 0;
  stopped = 0;
  sent: ServerOptions[] = [];
  running = false;
  /** Set to make start() fail, or hold it open with a deferred. */
  startError: Error | undefined;
  startGate: Promise<void> | undefined;
  /** What the fake server calls itself in `serverInfo`. */
  serverName: string | undefined = undefined;

  constructor(
    readonly launch: LaunchSpec,
    readonly hooks: ClientHooks,
  ) {}

  async start(): Promise<void> {
    this.started++;
    if (this.startGate !== undefined) {
      await this.startGate;
    }
    if (this.startError !== undefined) {
      throw this.startError;
    }
    this.running = true;
  }

  stop(): Promise<void> {
    this.stopped++;
    this.running = false;
    return Promise.resolve();
  }

  sendConfiguration(options: ServerOptions): Promise<void> {
    this.sent.push(options);
    return Promise.resolve();
  }

  /** Custom notifications sent, as [method, params]. */
  notifications: [string, Record<string, unknown>][] = [];

  sendNotification(method: string, params: Record<string, unknown>): Promise<void> {
    this.notifications.push([method, params]);
    return Promise.resolve();
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** The server process dies. */
  crash(): void {
    this.running = false;
    this.hooks.onUnexpectedExit('exit code 1');
  }
}

export interface Harness {
  controller: ServerController;
  status: StatusModel;
  timers: ManualTimers;
  clients: FakeClient[];
  problems: StartProblem[];
  logs: string[];
  views: StatusView[];
  settings: Record<string, unknown>;
  resolution: InterpreterResolution;
  check: ImportCheckResult;
  checks: string[];
  /** Applied to each new client before start(). */
  prepareClient?: (client: FakeClient) => void;
  checkGate?: Promise<void>;
  lastClient(): FakeClient;
}

export const OK_CHECK: ImportCheckResult = { kind: 'ok', python: '3.12.3', midwordVersion: '0.1.0', torchVersion: '2.13.0', durationMs: 42 };

export function harness(initial: Partial<Pick<Harness, 'resolution' | 'check'>> & { settings?: Record<string, unknown> } = {}): Harness {
  const timers = new ManualTimers();
  const status = new StatusModel();
  const h: Harness = {
    controller: undefined as unknown as ServerController,
    status,
    timers,
    clients: [],
    problems: [],
    logs: [],
    views: [],
    settings: { enable: true, 'python.path': '', ...initial.settings },
    resolution: initial.resolution ?? {
      kind: 'found',
      interpreter: { path: '/venv/bin/python', source: 'python-extension' },
      notes: [],
    },
    check: initial.check ?? OK_CHECK,
    checks: [],
    lastClient() {
      const client = h.clients[h.clients.length - 1];
      if (client === undefined) {
        throw new Error('no client yet');
      }
      return client;
    },
  };
  const readSettings = (): SettingsSnapshot => ({
    options: buildInitializationOptions((key) => h.settings[key]),
    problems: [],
    enabled: h.settings.enable !== false,
    pythonPath: typeof h.settings['python.path'] === 'string' ? h.settings['python.path'] : '',
  });
  h.controller = new ServerController({
    resolveInterpreter: () => Promise.resolve(h.resolution),
    checkImports: async (python) => {
      h.checks.push(python);
      if (h.checkGate !== undefined) {
        await h.checkGate;
      }
      return h.check;
    },
    createClient: (launch, hooks) => {
      const client = new FakeClient(launch, hooks);
      h.prepareClient?.(client);
      h.clients.push(client);
      return client;
    },
    readSettings,
    workingDirectory: () => '/ws',
    status,
    renderStatus: () => h.views.push(status.view()),
    log: {
      info: (message) => h.logs.push(`info: ${message}`),
      warn: (message) => h.logs.push(`warn: ${message}`),
      error: (message) => h.logs.push(`error: ${message}`),
    },
    reportProblem: (problem) => h.problems.push(problem),
    debounceMs: 500,
    timers,
    now: () => timers.now,
  });
  return h;
}

export { deferred };
