import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { onPythonInterpreterChange, PYTHON_EXTENSION_ID, pythonExtensionInterpreter, type ExtensionLike } from '../pythonExtension';

function extensions(extension: ExtensionLike | undefined): { getExtension(id: string): ExtensionLike | undefined } {
  return {
    getExtension: (id) => (id === PYTHON_EXTENSION_ID ? extension : undefined),
  };
}

function pythonExtension(exports: unknown, options: { active?: boolean; activate?: () => Promise<unknown> } = {}): ExtensionLike & { activated: number } {
  const extension = {
    isActive: options.active ?? true,
    exports,
    activated: 0,
    activate: () => {
      extension.activated++;
      return options.activate ? options.activate() : Promise.resolve(exports);
    },
  };
  return extension;
}

function environments(active: unknown, resolved?: unknown): { environments: unknown } {
  return {
    environments: {
      getActiveEnvironmentPath: () => active,
      resolveEnvironment: (env: unknown) => {
        assert.equal(env, active);
        return resolved instanceof Error ? Promise.reject(resolved) : Promise.resolve(resolved);
      },
    },
  };
}

describe("the Python extension's active interpreter", () => {
  it('not installed', async () => {
    assert.deepEqual(await pythonExtensionInterpreter(extensions(undefined)), {
      note: 'The Python extension (ms-python.python) is not installed.',
    });
  });

  it('activates an inactive extension, then uses the resolved executable', async () => {
    const ext = pythonExtension(environments({ id: 'x', path: '/venv' }, { executable: { uri: { fsPath: '/venv/bin/python' } } }), {
      active: false,
    });
    assert.deepEqual(await pythonExtensionInterpreter(extensions(ext)), { path: '/venv/bin/python' });
    assert.equal(ext.activated, 1);
  });

  it('uses the environment path when resolveEnvironment has no executable', async () => {
    const ext = pythonExtension(environments({ id: 'x', path: '/usr/bin/python3' }, undefined));
    assert.deepEqual(await pythonExtensionInterpreter(extensions(ext)), { path: '/usr/bin/python3' });
  });

  it('activation failure, activation timeout, no API, no active environment, API throws: a note, never a throw', async () => {
    const cases: [ExtensionLike, RegExp][] = [
      [pythonExtension({}, { active: false, activate: () => Promise.reject(new Error('kaput')) }), /did not activate: kaput/],
      [pythonExtension({}, { active: false, activate: () => new Promise(() => undefined) }), /did not activate: .*longer than 50 ms/],
      [pythonExtension(undefined), /no environments API/],
      [pythonExtension({ environments: {} }), /no environments API/],
      [pythonExtension(environments(undefined)), /no active interpreter/],
      [pythonExtension(environments({ id: 'x', path: '' })), /no active interpreter/],
      [pythonExtension(environments({ id: 'x', path: '/p' }, new Error('resolve failed'))), /API failed: resolve failed/],
      [
        pythonExtension({
          environments: {
            getActiveEnvironmentPath: () => {
              throw new Error('sync throw');
            },
          },
        }),
        /API failed: sync throw/,
      ],
    ];
    for (const [ext, expected] of cases) {
      const result = await pythonExtensionInterpreter(extensions(ext), undefined, 50);
      assert.equal(result.path, undefined);
      assert.match(result.note ?? '', expected);
    }
  });

  it('subscribes to interpreter changes only when the extension is active and has the event', () => {
    let listener: (() => void) | undefined;
    const ext = pythonExtension({
      environments: {
        getActiveEnvironmentPath: () => undefined,
        onDidChangeActiveEnvironmentPath: (l: () => void) => {
          listener = l;
          return { dispose: () => undefined };
        },
      },
    });
    let changes = 0;
    assert.ok(onPythonInterpreterChange(extensions(ext), () => changes++));
    listener?.();
    assert.equal(changes, 1);
    assert.equal(onPythonInterpreterChange(extensions(undefined), () => changes++), undefined);
    assert.equal(onPythonInterpreterChange(extensions(pythonExtension(environments(undefined), { active: false })), () => changes++), undefined);
  });
});
