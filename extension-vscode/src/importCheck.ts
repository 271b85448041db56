/**
 * Checks, in a short child process with a time limit, that the interpreter
 * can `import midword, torch`, and says precisely what is wrong when it
 * cannot. No `vscode` import.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';

/** Marks the one line of the check's output that carries its JSON verdict. */
export const CHECK_MARKER = 'MIDWORD_IMPORT_CHECK ';

/**
 * Run with `python -c`. Written to also run on Python 2 so that an old
 * interpreter gets a verdict instead of a syntax error. `midword` imports
 * torch lazily, but if its import does fail on torch, that is reported as
 * torch missing.
 */
export const CHECK_SCRIPT = [
  'import sys, json',
  'def out(d):',
  `    sys.stdout.write(${JSON.stringify(CHECK_MARKER)} + json.dumps(d) + "\\n")`,
  '    sys.stdout.flush()',
  '    sys.exit(0)',
  'def bad(module, e):',
  '    name = getattr(e, "name", None) or ""',
  '    if isinstance(e, ImportError) and (name == "torch" or name.startswith("torch.")):',
  '        status = "torch-missing"',
  '    elif isinstance(e, ImportError) and module == "torch":',
  '        status = "torch-missing"',
  '    elif isinstance(e, ImportError):',
  '        status = "midword-missing"',
  '    else:',
  '        status = "import-error"',
  '    out({"status": status, "module": module, "missing": name, "error": "%s: %s" % (type(e).__name__, e), "python": sys.version.split()[0]})',
  'try:',
  '    import midword',
  'except Exception as e:',
  '    bad("midword", e)',
  'try:',
  '    import torch',
  'except Exception as e:',
  '    bad("torch", e)',
  'out({"status": "ok", "python": sys.version.split()[0], "executable": sys.executable,',
  '     "midword": str(getattr(midword, "__version__", "?")), "torch": str(getattr(torch, "__version__", "?"))})',
].join('\n');

export const DEFAULT_CHECK_TIMEOUT_MS = 30_000;

export type ImportCheckResult =
  | { kind: 'ok'; python: string; midwordVersion: string; torchVersion: string; durationMs: number }
  /** The interpreter could not be started at all (no such file, not executable). */
  | { kind: 'interpreter-not-found'; detail: string }
  /** `import midword` failed with an ImportError; `missing` is the module Python could not find. */
  | { kind: 'midword-missing'; missing: string; detail: string; python: string }
  /** `import torch` failed with an ImportError. */
  | { kind: 'torch-missing'; detail: string; python: string }
  | { kind: 'timeout'; timeoutMs: number }
  /** Anything else: a crash, a non-import error, a program that is not Python. */
  | { kind: 'failed'; detail: string };

export interface ImportCheckOptions {
  timeoutMs?: number;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
}

interface Verdict {
  status?: unknown;
  module?: unknown;
  missing?: unknown;
  error?: unknown;
  python?: unknown;
  midword?: unknown;
  torch?: unknown;
}

function str(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

function lastLines(text: string, count: number): string {
  return text.trim().split(/\r?\n/).slice(-count).join('\n');
}

/** Turns the child's output into a result. Exported for tests. */
export function interpretCheckOutput(
  stdout: string,
  stderr: string,
  exitCode: number | null,
  signal: NodeJS.Signals | null,
  durationMs: number,
): ImportCheckResult {
  const line = stdout
    .split(/\r?\n/)
    .reverse()
    .find((candidate) => candidate.startsWith(CHECK_MARKER));
  if (line !== undefined) {
    let verdict: Verdict;
    try {
      verdict = JSON.parse(line.slice(CHECK_MARKER.length)) as Verdict;
    } catch {
      return { kind: 'failed', detail: `unreadable check output: ${line}` };
    }
    const python = str(verdict.python, '?');
    switch (verdict.status) {
      case 'ok':
        return {
          kind: 'ok',
          python,
          midwordVersion: str(verdict.midword, '?'),
          torchVersion: str(verdict.torch, '?'),
          durationMs,
        };
      case 'midword-missing':
        return { kind: 'midword-missing', missing: str(verdict.missing), detail: str(verdict.error), python };
      case 'torch-missing':
        return { kind: 'torch-missing', detail: str(verdict.error), python };
      default:
        return { kind: 'failed', detail: `importing ${str(verdict.module, '?')} failed: ${str(verdict.error)}` };
    }
  }
  const how = signal !== null ? `was killed by ${signal}` : `exited with code ${String(exitCode)}`;
  const output = lastLines(stderr !== '' ? stderr : stdout, 5);
  return { kind: 'failed', detail: output === '' ? `the interpreter ${how}` : `the interpreter ${how}: ${output}` };
}

const NOT_FOUND_CODES = new Set(['ENOENT', 'EACCES', 'ENOTDIR', 'EISDIR', 'ENOEXEC', 'EPERM']);

function killTree(child: ReturnType<typeof spawn>): void {
  if (process.platform !== 'win32' && child.pid !== undefined) {
    try {
      process.kill(-child.pid, 'SIGKILL');
      return;
    } catch {
      // fall through: the group may be gone already
    }
  }
  child.kill('SIGKILL');
}

/** Runs `python -c CHECK_SCRIPT`, killing it after `timeoutMs`. Never rejects. */
export function checkImports(python: string, options: ImportCheckOptions = {}): Promise<ImportCheckResult> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
  const started = Date.now();
  return new Promise<ImportCheckResult>((resolve) => {
    let settled = false;
    const finish = (result: ImportCheckResult): void => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(result);
      }
    };
    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(python, ['-c', CHECK_SCRIPT], {
        cwd: options.cwd,
        env: options.env ?? process.env,
        stdio: ['ignore', 'pipe', 'pipe'],
        windowsHide: true,
        // Its own process group on POSIX, so a timeout also kills what a wrapper script started.
        detached: process.platform !== 'win32',
      });
    } catch (error) {
      resolve({ kind: 'interpreter-not-found', detail: error instanceof Error ? error.message : String(error) });
      return;
    }
    const timer = setTimeout(() => {
      killTree(child);
      // A grandchild may still hold the pipes open; do not wait for it.
      child.stdout?.destroy();
      child.stderr?.destroy();
      finish({ kind: 'timeout', timeoutMs });
    }, timeoutMs);
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    child.on('error', (error: NodeJS.ErrnoException) => {
      if (options.cwd !== undefined && !fs.existsSync(options.cwd)) {
        finish({ kind: 'failed', detail: `the working directory ${options.cwd} does not exist` });
      } else if (error.code !== undefined && NOT_FOUND_CODES.has(error.code)) {
        finish({ kind: 'interpreter-not-found', detail: `${python}: ${error.code} (${error.message})` });
      } else {
        finish({ kind: 'failed', detail: error.message });
      }
    });
    child.on('close', (code, signal) => {
      finish(interpretCheckOutput(stdout, stderr, code, signal, Date.now() - started));
    });
  });
}
