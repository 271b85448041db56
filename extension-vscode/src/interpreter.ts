/**
 * Which Python runs the server: the `midword.python.path` setting, then the
 * Python extension's active interpreter, then `python3` (then `python`) on
 * PATH. No `vscode` import: everything it needs comes in as `InterpreterDeps`.
 */
import { looksLikePath } from './pathLookup';

export type InterpreterSource = 'setting' | 'python-extension' | 'path';

export interface ResolvedInterpreter {
  /** Executable to run (absolute path, or as configured). */
  path: string;
  source: InterpreterSource;
}

export type InterpreterResolution =
  | { kind: 'found'; interpreter: ResolvedInterpreter; notes: string[] }
  | { kind: 'not-found'; message: string; notes: string[]; fromSetting: boolean };

export interface PythonExtensionLookup {
  /** Executable of the active interpreter; undefined when there is none. */
  path?: string;
  /** Why there is none (not installed, no active environment, API error...). */
  note?: string;
}

export interface InterpreterDeps {
  /** Raw value of `midword.python.path` ("" when unset). */
  configuredPath(): string;
  /** `~`, `${workspaceFolder}`... expansion for the setting. */
  expand(value: string): string;
  /** The Python extension's active interpreter. */
  pythonExtension(): Promise<PythonExtensionLookup>;
  findOnPath(command: string): Promise<string | undefined>;
  isExecutableFile(file: string): Promise<boolean>;
}

/** Commands tried on PATH, in order. */
export const PATH_COMMANDS: readonly string[] = ['python3', 'python'];

export function describeSource(source: InterpreterSource): string {
  switch (source) {
    case 'setting':
      return 'from the midword.python.path setting';
    case 'python-extension':
      return "the Python extension's active interpreter";
    case 'path':
      return 'found on PATH';
  }
}

async function fromSetting(configured: string, deps: InterpreterDeps): Promise<InterpreterResolution> {
  const expanded = deps.expand(configured);
  if (looksLikePath(expanded)) {
    if (await deps.isExecutableFile(expanded)) {
      return { kind: 'found', interpreter: { path: expanded, source: 'setting' }, notes: [] };
    }
    return {
      kind: 'not-found',
      fromSetting: true,
      notes: [],
      message: `midword.python.path is set to "${configured}", but there is no executable file at ${expanded}.`,
    };
  }
  const onPath = await deps.findOnPath(expanded);
  if (onPath !== undefined) {
    return { kind: 'found', interpreter: { path: onPath, source: 'setting' }, notes: [] };
  }
  return {
    kind: 'not-found',
    fromSetting: true,
    notes: [],
    message: `midword.python.path is set to "${configured}", but no such command is on PATH.`,
  };
}

/**
 * An explicit setting is final: when it points nowhere the result is
 * not-found (no silent fallback to another Python). Without a setting, a
 * missing or unusable Python extension interpreter falls through to PATH.
 */
export async function resolveInterpreter(deps: InterpreterDeps): Promise<InterpreterResolution> {
  const configured = deps.configuredPath().trim();
  if (configured !== '') {
    return fromSetting(configured, deps);
  }

  const notes: string[] = [];
  let fromExtension: PythonExtensionLookup;
  try {
    fromExtension = await deps.pythonExtension();
  } catch (error) {
    fromExtension = { note: `Python extension lookup failed: ${String(error)}` };
  }
  if (fromExtension.path !== undefined && fromExtension.path !== '') {
    if (await deps.isExecutableFile(fromExtension.path)) {
      return { kind: 'found', interpreter: { path: fromExtension.path, source: 'python-extension' }, notes };
    }
    notes.push(`The Python extension's interpreter ${fromExtension.path} is not an executable file; trying PATH.`);
  } else if (fromExtension.note !== undefined) {
    notes.push(fromExtension.note);
  }

  for (const command of PATH_COMMANDS) {
    const found = await deps.findOnPath(command);
    if (found !== undefined) {
      return { kind: 'found', interpreter: { path: found, source: 'path' }, notes };
    }
    notes.push(`${command} is not on PATH.`);
  }
  return {
    kind: 'not-found',
    fromSetting: false,
    notes,
    message:
      'No Python interpreter found: midword.python.path is empty, the Python extension has no active interpreter, ' +
      `and neither ${PATH_COMMANDS.join(' nor ')} is on PATH.`,
  };
}
