import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';

import { CHECK_MARKER, checkImports, interpretCheckOutput, type ImportCheckResult } from '../importCheck';
import type { ResolvedInterpreter } from '../interpreter';
import { ACTION_LABELS, importCheckProblem, interpreterNotFoundProblem, serverFailedProblem } from '../problems';
import { realPython3, tempDir, writeExecutable } from './helpers/paths';

const posix = process.platform !== 'win32';
const python3 = realPython3();

/** A fake interpreter: a shell script that ignores its arguments. */
function fakeInterpreter(dir: string, name: string, body: string): string {
  return writeExecutable(path.join(dir, name), `#!/bin/sh\n${body}\n`);
}

/**
 * A real python3 that sees only the packages in `packages` (name -> __init__.py
 * source): -S drops site-packages, PYTHONPATH points at a temp folder.
 */
function pythonWith(dir: string, name: string, packages: Record<string, string>): string {
  const root = path.join(dir, `${name}-packages`);
  for (const [pkg, source] of Object.entries(packages)) {
    fs.mkdirSync(path.join(root, pkg), { recursive: true });
    fs.writeFileSync(path.join(root, pkg, '__init__.py'), source);
  }
  fs.mkdirSync(root, { recursive: true });
  return fakeInterpreter(dir, name, `PYTHONPATH='${root}' exec '${python3 ?? 'python3'}' -S "$@"`);
}

describe('import check against fake interpreters (real child processes)', { skip: !posix && 'needs a POSIX shell' }, () => {
  let dir = '';
  before(() => {
    dir = tempDir('midword-check-');
  });

  it('interpreter not found: no such file', async () => {
    const result = await checkImports(path.join(dir, 'no-such-python'), { cwd: dir });
    assert.equal(result.kind, 'interpreter-not-found');
    assert.match(result.detail, /ENOENT/);
  });

  it('interpreter not found: not executable, or a directory', async () => {
    const plain = path.join(dir, 'plain-file');
    fs.writeFileSync(plain, 'not a program', { mode: 0o644 });
    for (const target of [plain, dir]) {
      const result = await checkImports(target, { cwd: dir });
      assert.equal(result.kind, 'interpreter-not-found', target);
    }
  });

  it('a missing working directory is not mistaken for a missing interpreter', async () => {
    const ok = fakeInterpreter(dir, 'cwd-python', 'exit 0');
    const result = await checkImports(ok, { cwd: path.join(dir, 'no-such-folder') });
    assert.deepEqual(result, { kind: 'failed', detail: `the working directory ${path.join(dir, 'no-such-folder')} does not exist` });
  });

  it('timeout: kills an interpreter that hangs and says so', async () => {
    const slow = fakeInterpreter(dir, 'slow-python', 'exec sleep 30');
    const started = Date.now();
    const result = await checkImports(slow, { cwd: dir, timeoutMs: 300 });
    assert.deepEqual(result, { kind: 'timeout', timeoutMs: 300 });
    assert.ok(Date.now() - started < 5000);
  });

  it('timeout also kills what a wrapper script started', async () => {
    const marker = path.join(dir, 'grandchild-alive');
    const wrapper = fakeInterpreter(dir, 'wrapper-python', `sleep 1 && touch '${marker}' &\nwait`);
    const result = await checkImports(wrapper, { cwd: dir, timeoutMs: 200 });
    assert.equal(result.kind, 'timeout');
    await new Promise((resolve) => setTimeout(resolve, 1300));
    assert.equal(fs.existsSync(marker), false, 'the grandchild was killed with its group');
  });

  it('a crash reports the exit code and the end of stderr', async () => {
    const crashing = fakeInterpreter(dir, 'crashing-python', 'echo "line 1" >&2; echo "Fatal Python error: boom" >&2; exit 3');
    const result = await checkImports(crashing, { cwd: dir });
    assert.equal(result.kind, 'failed');
    assert.match(result.detail, /exited with code 3: line 1\nFatal Python error: boom/);
  });

  it('the verdict line is found among other output', async () => {
    const chatty = fakeInterpreter(
      dir,
      'chatty-python',
      `echo "sitecustomize says hi"; echo '${CHECK_MARKER}{"status": "ok", "python": "3.12.1", "midword": "0.1.0", "torch": "2.13.0"}'`,
    );
    const result = await checkImports(chatty, { cwd: dir });
    assert.equal(result.kind, 'ok');
    assert.equal(result.torchVersion, '2.13.0');
  });

  describe('with a real python3 and fake packages', { skip: python3 === undefined && 'no python3 on PATH' }, () => {
    it('ok: midword and torch import', async () => {
      const python = pythonWith(dir, 'py-ok', { midword: '__version__ = "0.1.0"\n', torch: '__version__ = "2.13.0+cpu"\n' });
      const result = await checkImports(python, { cwd: dir });
      assert.equal(result.kind, 'ok', JSON.stringify(result));
      assert.equal(result.midwordVersion, '0.1.0');
      assert.equal(result.torchVersion, '2.13.0+cpu');
    });

    it('midword missing', async () => {
      const python = pythonWith(dir, 'py-no-midword', { torch: '' });
      const result = await checkImports(python, { cwd: dir });
      assert.equal(result.kind, 'midword-missing', JSON.stringify(result));
      assert.equal(result.missing, 'midword');
    });

    it('midword present but one of its own dependencies missing', async () => {
      const python = pythonWith(dir, 'py-broken-midword', { midword: 'import numpy_is_not_here\n', torch: '' });
      const result = await checkImports(python, { cwd: dir });
      assert.equal(result.kind, 'midword-missing', JSON.stringify(result));
      assert.equal(result.missing, 'numpy_is_not_here');
    });

    it('torch missing', async () => {
      const python = pythonWith(dir, 'py-no-torch', { midword: '' });
      const result = await checkImports(python, { cwd: dir });
      assert.equal(result.kind, 'torch-missing', JSON.stringify(result));
      assert.match(result.detail, /torch/);
    });

    it('torch missing, noticed while importing midword', async () => {
      const python = pythonWith(dir, 'py-eager-torch', { midword: 'import torch\n' });
      const result = await checkImports(python, { cwd: dir });
      assert.equal(result.kind, 'torch-missing', JSON.stringify(result));
    });

    it('torch installed but broken (not an ImportError)', async () => {
      const python = pythonWith(dir, 'py-broken-torch', { midword: '', torch: 'raise OSError("libtorch_cpu.so: cannot open shared object file")\n' });
      const result = await checkImports(python, { cwd: dir });
      assert.equal(result.kind, 'failed', JSON.stringify(result));
      assert.match(result.detail, /importing torch failed: OSError: libtorch_cpu\.so/);
    });
  });
});

describe('interpretCheckOutput', () => {
  it('a killed process without a verdict is a failure naming the signal', () => {
    const result = interpretCheckOutput('', '', null, 'SIGSEGV', 5);
    assert.deepEqual(result, { kind: 'failed', detail: 'the interpreter was killed by SIGSEGV' });
  });

  it('an unreadable verdict is a failure', () => {
    assert.equal(interpretCheckOutput(`${CHECK_MARKER}{not json`, '', 0, null, 5).kind, 'failed');
  });
});

describe('start problems: distinct, actionable messages', () => {
  const interpreter: ResolvedInterpreter = { path: '/venv/bin/python', source: 'python-extension' };
  const problem = (result: ImportCheckResult): ReturnType<typeof importCheckProblem> => importCheckProblem(result, interpreter);

  it('ok is no problem', () => {
    assert.equal(problem({ kind: 'ok', python: '3.12', midwordVersion: '0.1.0', torchVersion: '2.13', durationMs: 1 }), undefined);
  });

  it('interpreter not found offers Select Interpreter and Open Settings', () => {
    const p = interpreterNotFoundProblem('No Python interpreter found: nothing.');
    assert.equal(p.kind, 'interpreter-not-found');
    assert.deepEqual(p.actions.slice(0, 2), ['selectInterpreter', 'openSettings']);
    assert.match(p.message, /Set midword\.python\.path/);
    const spawnFailure = problem({ kind: 'interpreter-not-found', detail: 'ENOENT' });
    assert.equal(spawnFailure?.kind, 'interpreter-not-found');
    assert.match(spawnFailure.message, /\/venv\/bin\/python \(the Python extension's active interpreter\) could not be started/);
  });

  it('midword missing tells how to install it', () => {
    const p = problem({ kind: 'midword-missing', missing: 'midword', detail: "ModuleNotFoundError: No module named 'midword'", python: '3.12' });
    assert.equal(p?.kind, 'midword-missing');
    assert.match(p.message, /the midword package is not installed in it/);
    assert.match(p.message, /pip install "midword\[model,server\]"/);
    assert.deepEqual(p.actions.slice(0, 2), ['selectInterpreter', 'openSettings']);
    const dependency = problem({ kind: 'midword-missing', missing: 'numpy', detail: 'x', python: '3.12' });
    assert.match(dependency?.message ?? '', /importing midword failed because "numpy" is missing/);
  });

  it('torch missing says torch', () => {
    const p = problem({ kind: 'torch-missing', detail: "No module named 'torch'", python: '3.12' });
    assert.equal(p?.kind, 'torch-missing');
    assert.match(p.message, /PyTorch \(torch\) is not installed/);
    assert.ok(p.actions.includes('selectInterpreter'));
  });

  it('timeout offers a retry', () => {
    const p = problem({ kind: 'timeout', timeoutMs: 30_000 });
    assert.equal(p?.kind, 'timeout');
    assert.match(p.message, /timed out.*within 30 s/);
    assert.equal(p.actions[0], 'restartServer');
  });

  it('every kind has a different message and every action a label', () => {
    const messages = [
      problem({ kind: 'interpreter-not-found', detail: 'x' }),
      problem({ kind: 'midword-missing', missing: 'midword', detail: 'x', python: '3' }),
      problem({ kind: 'torch-missing', detail: 'x', python: '3' }),
      problem({ kind: 'timeout', timeoutMs: 1000 }),
      problem({ kind: 'failed', detail: 'x' }),
      serverFailedProblem('x'),
    ];
    assert.equal(new Set(messages.map((m) => m?.kind)).size, 6);
    for (const m of messages) {
      for (const action of m?.actions ?? []) {
        assert.ok(ACTION_LABELS[action]);
      }
    }
    assert.equal(ACTION_LABELS.selectInterpreter, 'Select Interpreter');
    assert.equal(ACTION_LABELS.openSettings, 'Open Settings');
  });
});
