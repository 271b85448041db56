/**
 * User-facing messages for why the server cannot start, with the actions to
 * offer. Pure: the extension turns `actions` into message buttons.
 */
import type { ImportCheckResult } from './importCheck';
import { describeSource, type ResolvedInterpreter } from './interpreter';

export type ProblemAction = 'selectInterpreter' | 'openSettings' | 'showLog' | 'restartServer';

export type ProblemKind =
  | 'interpreter-not-found'
  | 'midword-missing'
  | 'torch-missing'
  | 'timeout'
  | 'check-failed'
  | 'server-failed';

export interface StartProblem {
  kind: ProblemKind;
  /** One paragraph, shown in the error notification and the status bar tooltip. */
  message: string;
  actions: ProblemAction[];
}

export const ACTION_LABELS: Record<ProblemAction, string> = {
  selectInterpreter: 'Select Interpreter',
  openSettings: 'Open Settings',
  showLog: 'Show Log',
  restartServer: 'Restart Server',
};

const INSTALL_HINT = 'pip install "midword[model,server]" (or pip install -e ".[model,server]" in a midword checkout)';

/** For a failed interpreter resolution (nothing to run). */
export function interpreterNotFoundProblem(message: string): StartProblem {
  return {
    kind: 'interpreter-not-found',
    message: `midword: ${message} Set midword.python.path to a Python 3.10+ interpreter that has midword and torch installed.`,
    actions: ['selectInterpreter', 'openSettings'],
  };
}

/** For a failed import check; undefined when the check passed. */
export function importCheckProblem(result: ImportCheckResult, interpreter: ResolvedInterpreter): StartProblem | undefined {
  const which = `${interpreter.path} (${describeSource(interpreter.source)})`;
  switch (result.kind) {
    case 'ok':
      return undefined;
    case 'interpreter-not-found':
      return interpreterNotFoundProblem(`The Python interpreter ${which} could not be started: ${result.detail}.`);
    case 'midword-missing': {
      const what =
        result.missing === 'midword' || result.missing === ''
          ? 'the midword package is not installed in it'
          : `importing midword failed because "${result.missing}" is missing`;
      return {
        kind: 'midword-missing',
        message: `midword: cannot start with ${which}: ${what} (${result.detail}). Install it into that interpreter: ${INSTALL_HINT}, or select another interpreter.`,
        actions: ['selectInterpreter', 'openSettings', 'showLog'],
      };
    }
    case 'torch-missing':
      return {
        kind: 'torch-missing',
        message: `midword: cannot start with ${which}: PyTorch (torch) is not installed in it (${result.detail}). Install it into that interpreter (pip install torch, see pytorch.org for GPU builds), or select another interpreter.`,
        actions: ['selectInterpreter', 'openSettings', 'showLog'],
      };
    case 'timeout':
      return {
        kind: 'timeout',
        message: `midword: checking ${which} timed out: "import midword, torch" did not finish within ${Math.round(result.timeoutMs / 1000)} s. The first import of torch can be slow; run Restart Server to try again, or select another interpreter.`,
        actions: ['restartServer', 'selectInterpreter', 'showLog'],
      };
    case 'failed':
      return {
        kind: 'check-failed',
        message: `midword: cannot start with ${which}: "import midword, torch" failed: ${result.detail}`,
        actions: ['selectInterpreter', 'openSettings', 'showLog'],
      };
  }
}

/** For a server that was launched but did not come up. */
export function serverFailedProblem(detail: string): StartProblem {
  return {
    kind: 'server-failed',
    message: `midword: the server (python -m midword serve) failed to start: ${detail}. The log has its output; a missing pygls means the server extra is not installed (${INSTALL_HINT}).`,
    actions: ['showLog', 'restartServer', 'openSettings'],
  };
}
