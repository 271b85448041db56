/**
 * The vscode-languageclient side: launches `python -m midword serve` over
 * stdio, sends the settings as `initializationOptions`, and hooks the
 * server's status and progress notifications into the status bar. Inline
 * completions themselves are vscode-languageclient's own
 * InlineCompletionItemFeature; the middleware here switches them off
 * (midword.enable), times them, and adds the names other providers offer at the
 * cursor (src/symbols.ts) as `midwordCandidates`, sending that request itself.
 */
import * as readline from 'node:readline';
import type { Readable } from 'node:stream';
import * as vscode from 'vscode';
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  InlineCompletionRequest,
  LanguageClient,
  State,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
  type ClientCapabilities,
  type Disposable,
  type FeatureState,
  type InlineCompletionParams,
  type InlineCompletionRegistrationOptions,
  type LanguageClientOptions,
  type ServerOptions as LaunchOptions,
  type StaticFeature,
} from 'vscode-languageclient/node';

import { EXPERIMENTAL_CAPABILITY, type CompletionEvents } from './completionEvents';
import type { ClientHooks, LaunchSpec, ServerClient } from './controller';
import { SECTION, type ServerOptions } from './options';
import { StderrRouter } from './serverLog';
import { parseProgressValue, parseServerStatus, STATUS_NOTIFICATION } from './statusModel';
import { CANDIDATES_FIELD } from './symbols';

export const CLIENT_ID = 'midword';
export const CLIENT_NAME = 'midword';

/** Every file and unsaved buffer, in any language (notebook cells included). */
export const DOCUMENT_SELECTOR = [{ scheme: 'file' }, { scheme: 'untitled' }, { scheme: 'vscode-notebook-cell' }];

/** Arguments after the interpreter. */
export const SERVER_ARGS: readonly string[] = ['-m', 'midword', 'serve'];

/**
 * Takes over `window/workDoneProgress/create` (registered after the built-in
 * ProgressFeature, so its handler wins) and routes the token's `$/progress`
 * values to the status bar item instead of a separate progress indicator.
 */
class ProgressToStatusFeature implements StaticFeature {
  private readonly subscriptions = new Map<string | number, Disposable>();

  constructor(
    private readonly client: LanguageClient,
    private readonly onProgress: ClientHooks['onProgress'],
  ) {}

  fillClientCapabilities(capabilities: ClientCapabilities): void {
    capabilities.window = { ...capabilities.window, workDoneProgress: true };
    // asks the server to tag inline items for the acceptance log (src/completionEvents.ts)
    const experimental = (capabilities.experimental ?? {}) as Record<string, unknown>;
    capabilities.experimental = { ...experimental, ...EXPERIMENTAL_CAPABILITY };
  }

  initialize(): void {
    this.client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
      this.subscriptions.get(token)?.dispose();
      const subscription = this.client.onProgress(WorkDoneProgress.type, token, (raw) => {
        const value = parseProgressValue(raw);
        if (value === undefined) {
          return;
        }
        this.onProgress(token, value);
        if (value.kind === 'end') {
          this.subscriptions.get(token)?.dispose();
          this.subscriptions.delete(token);
        }
      });
      this.subscriptions.set(token, subscription);
    });
  }

  getState(): FeatureState {
    return { kind: 'static' };
  }

  clear(): void {
    for (const subscription of this.subscriptions.values()) {
      subscription.dispose();
    }
    this.subscriptions.clear();
  }
}

type InlineProviderRegistration = (options: InlineCompletionRegistrationOptions) => [Disposable, vscode.InlineCompletionItemProvider];

/**
 * vscode-languageclient's inline completion provider, registered with VS
 * Code's item events as well (`handleDidShowCompletionItem`,
 * `handleDidPartiallyAcceptCompletionItem`) for the acceptance log. VS Code
 * calls them where its API offers them (a proposed API in VS Code 1.91).
 * The feature class is not exported, so its registration method is wrapped
 * on the instance.
 */
function addItemEvents(
  feature: object,
  events: () => CompletionEvents | undefined,
  asSelector: (selector: InlineCompletionRegistrationOptions['documentSelector']) => vscode.DocumentSelector,
): void {
  const target = feature as { registerLanguageProvider: InlineProviderRegistration };
  const original = target.registerLanguageProvider.bind(feature);
  target.registerLanguageProvider = (options) => {
    const [registration, provider] = original(options);
    registration.dispose(); // registered again below, with the event handlers
    const withEvents = {
      provideInlineCompletionItems: provider.provideInlineCompletionItems.bind(provider),
      handleDidShowCompletionItem: (item: unknown): void => events()?.shown(item),
      handleDidPartiallyAcceptCompletionItem: (item: unknown, info: unknown): void => {
        const length = typeof info === 'number' ? info : (info as { acceptedLength?: unknown } | undefined)?.acceptedLength;
        if (typeof length === 'number') {
          events()?.partiallyAcceptedItem(item, length);
        }
      },
    };
    return [vscode.languages.registerInlineCompletionItemProvider(asSelector(options.documentSelector), withEvents), withEvents];
  };
}

function isInlineCompletionFeature(feature: object): boolean {
  const registrationType = (feature as { registrationType?: { method?: unknown } }).registrationType;
  return registrationType?.method === InlineCompletionRequest.method;
}

/**
 * vscode-languageclient forces an error notification when start() fails
 * ("couldn't create connection to server"); the extension reports that
 * itself, with actions, so the forced one would be a second popup. Such
 * messages still go to the log.
 */
class MidwordLanguageClient extends LanguageClient {
  completionEvents: CompletionEvents | undefined;

  override error(message: string, data?: unknown, showNotification: boolean | 'force' = true): void {
    super.error(message, data, showNotification === 'force' ? false : showNotification);
  }

  /** Runs inside LanguageClient's constructor too, for the built-in features. */
  override registerFeature(feature: Parameters<LanguageClient['registerFeature']>[0]): void {
    if (isInlineCompletionFeature(feature)) {
      addItemEvents(
        feature,
        () => this.completionEvents,
        (selector) => this.protocol2CodeConverter.asDocumentSelector(selector ?? DOCUMENT_SELECTOR),
      );
    }
    super.registerFeature(feature);
  }
}

/**
 * The channel as vscode-languageclient gets it: `window/logMessage` of type Log
 * (the server's debug records; the type Debug is LSP 3.18, which older clients
 * reject) reaches it as `appendLine`, which a log channel would show as info.
 */
export function logTypeAsDebug(channel: vscode.LogOutputChannel): vscode.LogOutputChannel {
  return new Proxy(channel, {
    get(target, property, receiver) {
      if (property === 'appendLine') {
        return (message: string): void => target.debug(message);
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Server stderr into the output channel at each line's level, without the lines logMessage repeats. */
function stderrToChannel(router: StderrRouter): (input: Readable, channel: vscode.LogOutputChannel) => void {
  return (input, channel) => {
    readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', (line: string) => {
      const routed = router.route(line);
      if (routed !== undefined) {
        channel[routed.level](routed.text);
      }
    });
  };
}

export interface LanguageClientDeps {
  outputChannel: vscode.LogOutputChannel;
  /** Routes the server's stderr lines (one per client; tests pass their own). */
  stderrRouter?: StderrRouter;
}

/** A function, so that a check after an `await` is not narrowed away by one before it. */
function isCancelled(token: vscode.CancellationToken): boolean {
  return token.isCancellationRequested;
}

type InlineResult = vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined;

/**
 * `textDocument/inlineCompletion` with `midwordCandidates` in its params: the
 * middleware's `next` builds the params itself, so such a request is sent here.
 */
export type InlineWithCandidates = (
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  candidates: readonly string[],
  token: vscode.CancellationToken,
) => Promise<InlineResult>;

/** Sends the inline request with candidates as vscode-languageclient sends it without them. */
function inlineWithCandidates(client: () => LanguageClient): InlineWithCandidates {
  return async (document, position, context, candidates, token) => {
    const current = client();
    const params: InlineCompletionParams & { [CANDIDATES_FIELD]: readonly string[] } = {
      ...current.code2ProtocolConverter.asInlineCompletionParams(document, position, context),
      [CANDIDATES_FIELD]: candidates,
    };
    try {
      const result = await current.sendRequest(InlineCompletionRequest.type, params, token);
      if (token.isCancellationRequested) {
        return null;
      }
      return await current.protocol2CodeConverter.asInlineCompletionResult(result, token);
    } catch (error) {
      return current.handleFailedRequest(InlineCompletionRequest.type, token, error, null);
    }
  };
}

/** Builds the client options; exported for tests of the middleware. */
export function clientOptions(
  hooks: ClientHooks,
  deps: LanguageClientDeps,
  onClosed: () => void,
  withCandidates?: InlineWithCandidates,
): LanguageClientOptions {
  const router = deps.stderrRouter ?? new StderrRouter();
  return {
    documentSelector: DOCUMENT_SELECTOR,
    outputChannel: logTypeAsDebug(deps.outputChannel),
    stdioOptions: {
      stdout: (input, channel) => {
        readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', (line: string) => channel.info(line));
      },
      stderr: stderrToChannel(router),
    },
    initializationOptions: (): ServerOptions => hooks.currentOptions(),
    // The extension reports start failures itself (with actions), not as a bare notification.
    initializationFailedHandler: () => false,
    errorHandler: {
      error: (_error, _message, count) => ({
        action: count !== undefined && count <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown,
        handled: true,
      }),
      closed: () => {
        onClosed();
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    },
    middleware: {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        if (!hooks.isEnabled()) {
          return null;
        }
        const started = performance.now();
        const candidates = withCandidates !== undefined ? await hooks.symbols?.collect(document, position) : undefined;
        if (isCancelled(token)) {
          return null; // typed on while the other providers answered
        }
        const result =
          candidates !== undefined && withCandidates !== undefined
            ? await withCandidates(document, position, context, candidates, token)
            : await next(document, position, context, token);
        if (!token.isCancellationRequested) {
          hooks.onCompletionLatency(performance.now() - started);
          const items = Array.isArray(result) ? result : (result?.items ?? []);
          hooks.completionEvents?.offered(document.uri.toString(), position.line, position.character, items);
        }
        return result;
      },
      // The symbols collection runs every completion provider, midword's too: at that
      // cursor midword's answers nothing, without asking the server (no model run).
      provideCompletionItem: (document, position, context, token, next) =>
        hooks.symbols?.collecting(document.uri.toString(), position.line, position.character) === true
          ? null
          : next(document, position, context, token),
      workspace: {
        // A server that pulls section "midword" gets the same object as initializationOptions.
        configuration: async (params, token, next) => {
          const result: unknown = await next(params, token);
          if (!Array.isArray(result)) {
            return result as never;
          }
          return params.items.map((item, index): unknown =>
            item.section === SECTION ? hooks.currentOptions() : (result[index] as unknown),
          );
        },
      },
    },
  };
}

/** A vscode-languageclient LanguageClient running `<python> -m midword serve`. */
export function createLanguageClient(launch: LaunchSpec, hooks: ClientHooks, deps: LanguageClientDeps): ServerClient {
  const serverOptions: LaunchOptions = {
    command: launch.python,
    args: [...SERVER_ARGS],
    // No `transport`: stdio pipes all the same, but TransportKind.stdio would append "--stdio" to the arguments.
    options: { cwd: launch.cwd },
  };
  let reachedRunning = false;
  let stopping = false;
  const onClosed = (): void => {
    // Before "running", start() rejects and the controller reports that instead.
    if (reachedRunning && !stopping) {
      hooks.onUnexpectedExit('the server process exited; see the log');
    }
  };
  const router = deps.stderrRouter ?? new StderrRouter();
  const created: { client?: LanguageClient } = {};
  const current = (): LanguageClient => {
    if (created.client === undefined) {
      throw new Error('the language client is not created yet');
    }
    return created.client;
  };
  const options = clientOptions(hooks, { ...deps, stderrRouter: router }, onClosed, inlineWithCandidates(current));
  const client = new MidwordLanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, options);
  created.client = client;
  client.completionEvents = hooks.completionEvents;
  client.registerFeature(new ProgressToStatusFeature(client, (token, value) => {
      hooks.onProgress(token, value);
    }));
  client.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
    const status = parseServerStatus(params);
    if (status !== undefined) {
      hooks.onServerStatus(status);
    } else {
      deps.outputChannel.warn(`Ignored malformed ${STATUS_NOTIFICATION} params: ${JSON.stringify(params)}`);
    }
  });
  client.onDidChangeState(({ newState }) => {
    if (newState === State.Running) {
      reachedRunning = true;
    }
    // From initialize on, the server sends its own records as window/logMessage as well.
    router.clientReceivesLogs = newState === State.Running;
  });
  return {
    start: () => client.start(),
    stop: async () => {
      if (stopping) {
        return;
      }
      stopping = true;
      try {
        await client.dispose(2000);
      } catch (err) {
        // A server that died while starting leaves the client "startFailed", and dispose()
        // then throws "Client is not running": there is nothing left to stop.
        if (reachedRunning) {
          throw err;
        }
      }
    },
    sendConfiguration: (settings) =>
      client.sendNotification(DidChangeConfigurationNotification.type, { settings }),
    sendNotification: (method, params) => client.sendNotification(method, params),
    get isRunning(): boolean {
      return client.state === State.Running;
    },
    get serverName(): string | undefined {
      return client.initializeResult?.serverInfo?.name;
    },
  };
}
