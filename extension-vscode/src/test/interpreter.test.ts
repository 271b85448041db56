import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import { resolveInterpreter, type InterpreterDeps, type PythonExtensionLookup } from '../interpreter';
import { expandPathVariables, findOnPath, isExecutableFile, looksLikePath } from '../pathLookup';
import { tempDir, writeExecutable } from './helpers/paths';

interface FakeWorld {
  setting?: string;
  pythonExtension?: PythonExtensionLookup | Error;
  onPath?: Record<string, string>;
  files?: string[];
}

function deps(world: FakeWorld, calls: string[] = []): InterpreterDeps {
  return {
    configuredPath: () => world.setting ?? '',
    expand: (value) => value.replace('~', '/home/u'),
    pythonExtension: () => {
      calls.push('pythonExtension');
      const result = world.pythonExtension ?? { note: 'The Python extension (ms-python.python) is not installed.' };
      return result instanceof Error ? Promise.reject(result) : Promise.resolve(result);
    },
    findOnPath: (command) => {
      calls.push(`path:${command}`);
      return Promise.resolve(world.onPath?.[command]);
    },
    isExecutableFile: (file) => Promise.resolve(world.files?.includes(file) === true),
  };
}

describe('resolveInterpreter: setting > Python extension > PATH', () => {
  const everything: FakeWorld = {
    setting: '/opt/py/bin/python',
    pythonExtension: { path: '/venv/bin/python' },
    onPath: { python3: '/usr/bin/python3', python: '/usr/bin/python' },
    files: ['/opt/py/bin/python', '/venv/bin/python', '/usr/bin/python3', '/usr/bin/python'],
  };

  it('uses the midword.python.path setting first, without asking the others', async () => {
    const calls: string[] = [];
    const result = await resolveInterpreter(deps(everything, calls));
    assert.deepEqual(result.kind === 'found' && result.interpreter, { path: '/opt/py/bin/python', source: 'setting' });
    assert.deepEqual(calls, []);
  });

  it('expands ~ in the setting', async () => {
    const result = await resolveInterpreter(deps({ setting: '~/py/bin/python', files: ['/home/u/py/bin/python'] }));
    assert.equal(result.kind === 'found' && result.interpreter.path, '/home/u/py/bin/python');
  });

  it('looks a bare command name in the setting up on PATH', async () => {
    const result = await resolveInterpreter(deps({ setting: 'python3.12', onPath: { 'python3.12': '/usr/bin/python3.12' } }));
    assert.deepEqual(result.kind === 'found' && result.interpreter, { path: '/usr/bin/python3.12', source: 'setting' });
  });

  it('a setting that points nowhere is an error, with no silent fallback', async () => {
    const calls: string[] = [];
    const result = await resolveInterpreter(deps({ ...everything, setting: '/nope/python' }, calls));
    assert.equal(result.kind, 'not-found');
    assert.ok(result.fromSetting);
    assert.match(result.message, /midword\.python\.path is set to "\/nope\/python", but there is no executable file/);
    assert.deepEqual(calls, []);
  });

  it('a bare command in the setting that is not on PATH is an error too', async () => {
    const result = await resolveInterpreter(deps({ setting: 'python9' }));
    assert.match(result.kind === 'not-found' ? result.message : '', /no such command is on PATH/);
  });

  it('without a setting, uses the Python extension interpreter', async () => {
    const calls: string[] = [];
    const result = await resolveInterpreter(deps({ ...everything, setting: '  ' }, calls));
    assert.deepEqual(result.kind === 'found' && result.interpreter, { path: '/venv/bin/python', source: 'python-extension' });
    assert.deepEqual(calls, ['pythonExtension']);
  });

  it('without the Python extension, uses python3 on PATH (and says why)', async () => {
    const result = await resolveInterpreter(deps({ onPath: everything.onPath, files: everything.files }));
    assert.deepEqual(result.kind === 'found' && result.interpreter, { path: '/usr/bin/python3', source: 'path' });
    assert.deepEqual(result.notes, ['The Python extension (ms-python.python) is not installed.']);
  });

  it('falls back to PATH when the extension has no active interpreter, fails, or names a missing file', async () => {
    for (const pythonExtension of [{ note: 'no active interpreter' }, new Error('boom'), { path: '/gone/python' }]) {
      const result = await resolveInterpreter(deps({ pythonExtension, onPath: everything.onPath, files: everything.files }));
      assert.equal(result.kind === 'found' && result.interpreter.source, 'path');
      assert.equal(result.notes.length, 1);
    }
  });

  it('uses python when there is no python3', async () => {
    const calls: string[] = [];
    const result = await resolveInterpreter(deps({ onPath: { python: '/usr/bin/python' } }, calls));
    assert.deepEqual(result.kind === 'found' && result.interpreter, { path: '/usr/bin/python', source: 'path' });
    assert.deepEqual(calls, ['pythonExtension', 'path:python3', 'path:python']);
  });

  it('nothing anywhere: not-found that names every place it looked', async () => {
    const result = await resolveInterpreter(deps({}));
    assert.equal(result.kind, 'not-found');
    assert.ok(!result.fromSetting);
    assert.match(result.message, /midword\.python\.path is empty.*Python extension.*python3 nor python/);
    assert.deepEqual(result.notes, [
      'The Python extension (ms-python.python) is not installed.',
      'python3 is not on PATH.',
      'python is not on PATH.',
    ]);
  });
});

describe('pathLookup', () => {
  it('findOnPath finds the first executable match and skips non-executables', async () => {
    const dir = tempDir();
    const a = path.join(dir, 'a');
    const b = path.join(dir, 'b');
    fs.mkdirSync(a);
    fs.writeFileSync(path.join(a, 'python3'), '', { mode: 0o644 }); // not executable
    writeExecutable(path.join(b, 'python3'), '#!/bin/sh\n');
    const env = { PATH: [path.join(dir, 'missing'), a, b].join(':') };
    assert.equal(await findOnPath('python3', env, 'linux'), path.join(b, 'python3'));
    assert.equal(await findOnPath('python2', env, 'linux'), undefined);
    assert.equal(await findOnPath('python3', {}, 'linux'), undefined);
  });

  it('isExecutableFile rejects directories and missing files', async () => {
    const dir = tempDir();
    assert.equal(await isExecutableFile(dir), false);
    assert.equal(await isExecutableFile(path.join(dir, 'none')), false);
    assert.equal(await isExecutableFile(writeExecutable(path.join(dir, 'x'), '#!/bin/sh\n')), true);
  });

  it('expandPathVariables handles ~, ${userHome}, ${workspaceFolder}, ${env:X} and relative paths', () => {
    const context = { workspaceFolder: '/ws', homeDir: '/home/u' };
    assert.equal(expandPathVariables('~/.venv/bin/python', context), '/home/u/.venv/bin/python');
    assert.equal(expandPathVariables('${userHome}/py', context), '/home/u/py');
    assert.equal(expandPathVariables('${workspaceFolder}/.venv/bin/python', context), '/ws/.venv/bin/python');
    assert.equal(expandPathVariables('.venv/bin/python', context), path.resolve('/ws', '.venv/bin/python'));
    assert.equal(expandPathVariables('${env:VENV}/bin/python', context, { VENV: '/v' }), '/v/bin/python');
    assert.equal(expandPathVariables('python3', context), 'python3');
    assert.equal(looksLikePath('python3'), false);
    assert.equal(looksLikePath('./python3'), true);
  });
});
