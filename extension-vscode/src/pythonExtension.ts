/**
 * The Python extension's (ms-python.python) active interpreter, through its
 * public `environments` API. Every step is guarded: the extension may be
 * missing, inactive, failing to activate, or an older version without the API.
 * No `vscode` import: the caller passes `vscode.extensions`.
 */
import type { PythonExtensionLookup } from './interpreter';

export const PYTHON_EXTENSION_ID = 'ms-python.python';

export interface DisposableLike {
  dispose(): unknown;
}

/** The part of `vscode.Extension` used here. */
export interface ExtensionLike {
  readonly isActive: boolean;
  readonly exports: unknown;
  activate(): PromiseLike<unknown>;
}

/** The part of `vscode.extensions` used here. */
export interface ExtensionsLike {
  getExtension(id: string): ExtensionLike | undefined;
}

interface EnvironmentPath {
  id?: unknown;
  path?: unknown;
}

interface ResolvedEnvironment {
  executable?: { uri?: { fsPath?: unknown } };
}

interface EnvironmentsApi {
  getActiveEnvironmentPath(resource?: unknown): EnvironmentPath | undefined;
  resolveEnvironment?(environment: EnvironmentPath | string): PromiseLike<ResolvedEnvironment | undefined>;
  onDidChangeActiveEnvironmentPath?(listener: (event: unknown) => unknown): DisposableLike;
}

function environmentsApi(exports: unknown): EnvironmentsApi | undefined {
  if (typeof exports !== 'object' || exports === null) {
    return undefined;
  }
  const environments = (exports as { environments?: unknown }).environments;
  if (typeof environments !== 'object' || environments === null) {
    return undefined;
  }
  const api = environments as Partial<EnvironmentsApi>;
  return typeof api.getActiveEnvironmentPath === 'function' ? (api as EnvironmentsApi) : undefined;
}

function withTimeout<T>(promise: PromiseLike<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    Promise.resolve(promise).then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}

async function activeApi(extensions: ExtensionsLike, timeoutMs: number): Promise<EnvironmentsApi | string> {
  const extension = extensions.getExtension(PYTHON_EXTENSION_ID);
  if (extension === undefined) {
    return 'The Python extension (ms-python.python) is not installed.';
  }
  try {
    if (!extension.isActive) {
      await withTimeout(extension.activate(), timeoutMs, 'Activating the Python extension');
    }
  } catch (error) {
    return `The Python extension did not activate: ${error instanceof Error ? error.message : String(error)}`;
  }
  return environmentsApi(extension.exports) ?? 'The Python extension has no environments API (too old?).';
}

/** The active interpreter's executable, or a note saying why there is none. */
export async function pythonExtensionInterpreter(
  extensions: ExtensionsLike,
  resource?: unknown,
  timeoutMs = 10_000,
): Promise<PythonExtensionLookup> {
  const api = await activeApi(extensions, timeoutMs);
  if (typeof api === 'string') {
    return { note: api };
  }
  try {
    const active = api.getActiveEnvironmentPath(resource);
    if (active === undefined || typeof active.path !== 'string' || active.path === '') {
      return { note: 'The Python extension has no active interpreter.' };
    }
    if (api.resolveEnvironment !== undefined) {
      const resolved = await withTimeout(api.resolveEnvironment(active), timeoutMs, 'Resolving the Python environment');
      const executable = resolved?.executable?.uri?.fsPath;
      if (typeof executable === 'string' && executable !== '') {
        return { path: executable };
      }
    }
    // Without a resolved executable, the environment path is usually the executable itself.
    return { path: active.path };
  } catch (error) {
    return { note: `The Python extension's API failed: ${error instanceof Error ? error.message : String(error)}` };
  }
}

/** Calls `listener` when the Python extension's active interpreter changes (when the extension is active). */
export function onPythonInterpreterChange(extensions: ExtensionsLike, listener: () => void): DisposableLike | undefined {
  const extension = extensions.getExtension(PYTHON_EXTENSION_ID);
  if (!extension?.isActive) {
    return undefined;
  }
  const api = environmentsApi(extension.exports);
  if (api?.onDidChangeActiveEnvironmentPath === undefined) {
    return undefined;
  }
  try {
    return api.onDidChangeActiveEnvironmentPath(() => listener());
  } catch {
    return undefined;
  }
}
