/**
 * The vscode-languageclient side: launches `python -m midword serve` over
 * stdio, sends the settings as `initializationOptions`, and hooks the
 * server's status and progress notifications into the status bar. Inline
 * completions themselves are vscode-languageclient's own
 * InlineCompletionItemFeature; the middleware here only switches them off
 * (midword.enable) and times them.
 */
import type * as vscode from 'vscode';
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  State,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
  type ClientCapabilities,
  type Disposable,
  type FeatureState,
  type LanguageClientOptions,
  type ServerOptions as LaunchOptions,
  type StaticFeature,
} from 'vscode-languageclient/node';

import type { ClientHooks, LaunchSpec, ServerClient } from './controller';
import { SECTION, type ServerOptions } from './options';
import { parseProgressValue, parseServerStatus, STATUS_NOTIFICATION } from './statusModel';

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

/**
 * vscode-languageclient forces an error notification when start() fails
 * ("couldn't create connection to server"); the extension reports that
 * itself, with actions, so the forced one would be a second popup. Such
 * messages still go to the log.
 */
class MidwordLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown, showNotification: boolean | 'force' = true): void {
    super.error(message, data, showNotification === 'force' ? false : showNotification);
  }
}

export interface LanguageClientDeps {
  outputChannel: vscode.LogOutputChannel;
}

/** Builds the client options; exported for tests of the middleware. */
export function clientOptions(hooks: ClientHooks, deps: LanguageClientDeps, onClosed: () => void): LanguageClientOptions {
  return {
    documentSelector: DOCUMENT_SELECTOR,
    outputChannel: deps.outputChannel,
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
        const result = await next(document, position, context, token);
        if (!token.isCancellationRequested) {
          hooks.onCompletionLatency(performance.now() - started);
        }
        return result;
      },
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
  const client = new MidwordLanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, clientOptions(hooks, deps, onClosed));
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
    sendConfiguration: (options) =>
      client.sendNotification(DidChangeConfigurationNotification.type, { settings: options }),
    get isRunning(): boolean {
      return client.state === State.Running;
    },
  };
}
