import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import { settingDefaults, settingProperties } from '../manifest';
import {
  buildInitializationOptions,
  buildInitializationOptionsWithProblems,
  FALLBACK_OPTIONS,
  RELOAD_OPTION_KEYS,
  SERVER_OPTION_KEYS,
} from '../options';
import { EXTENSION_ROOT, readPackageJson } from './helpers/paths';

/** The server's documented defaults (issue 5), written out independently of the code. */
const SPEC_DEFAULTS = {
  model: '',
  device: 'auto',
  dtype: 'auto',
  method: 'bytesampler',
  mode: 'pbp',
  temperature: 0,
  topP: 1.0,
  maxTokens: 48,
  timeBudgetMs: 1500,
  multiline: 'auto',
  windowBytes: 4096,
  logLevel: 'info',
  maxItems: 3,
};

describe('settings -> initializationOptions', () => {
  const defaults = settingDefaults(readPackageJson());

  it('package.json declares a midword.* setting for every server option, plus enable and python.path', () => {
    const declared = [...defaults.keys()].sort();
    assert.deepEqual(declared, [...SERVER_OPTION_KEYS, 'enable', 'python.path', 'trace.server'].sort());
  });

  it('the declared defaults are the server defaults and the in-code fallbacks', () => {
    const fromManifest = buildInitializationOptions((key) => defaults.get(key));
    assert.deepEqual(fromManifest, SPEC_DEFAULTS);
    assert.deepEqual({ ...FALLBACK_OPTIONS }, SPEC_DEFAULTS);
  });

  it('sends exactly the server option keys, in order, and none of the extension settings', () => {
    const options = buildInitializationOptions(() => undefined);
    assert.deepEqual(Object.keys(options), [...SERVER_OPTION_KEYS]);
    assert.ok(!('enable' in options));
    assert.ok(!('python.path' in options) && !('python' in options));
  });

  it('passes valid user values through unchanged', () => {
    const values: Record<string, unknown> = {
      model: '/models/qwen',
      device: 'cuda',
      dtype: 'bfloat16',
      method: 'healing2',
      mode: 'bytes',
      temperature: 0.7,
      topP: 0.9,
      maxTokens: 128,
      timeBudgetMs: 800,
      multiline: 'never',
      windowBytes: 8192,
      logLevel: 'debug',
      maxItems: 5,
      enable: false,
      'python.path': '/usr/bin/python3',
    };
    const { options, problems } = buildInitializationOptionsWithProblems((key) => values[key]);
    assert.deepEqual(problems, []);
    const expected = Object.fromEntries(SERVER_OPTION_KEYS.map((key) => [key, values[key]]));
    assert.deepEqual(options, expected);
  });

  it('replaces invalid values by the default and says why', () => {
    const values: Record<string, unknown> = {
      device: 'tpu',
      temperature: -1,
      topP: 0,
      maxTokens: 1.5,
      windowBytes: '4096',
      logLevel: 'trace',
      model: 42,
    };
    const { options, problems } = buildInitializationOptionsWithProblems((key) => values[key]);
    assert.equal(options.device, 'auto');
    assert.equal(options.temperature, 0);
    assert.equal(options.topP, 1);
    assert.equal(options.maxTokens, 48);
    assert.equal(options.windowBytes, 4096);
    assert.equal(options.logLevel, 'info');
    assert.equal(options.model, '');
    assert.equal(problems.length, 7);
    assert.match(problems.join('\n'), /midword\.device = "tpu" is invalid \(expected auto \| cpu \| cuda \| mps\)/);
    assert.match(problems.join('\n'), /midword\.topP = 0 is invalid/);
  });

  it('topP = 1 and temperature = 0 are valid edges', () => {
    const { problems } = buildInitializationOptionsWithProblems((key) => ({ topP: 1, temperature: 0 })[key]);
    assert.deepEqual(problems, []);
  });

  it('expands the model path, trims it, and leaves "" alone', () => {
    const expand = (value: string): string => value.replace('${workspaceFolder}', '/ws');
    assert.equal(buildInitializationOptions((key) => (key === 'model' ? ' ${workspaceFolder}/m ' : undefined), { expandPath: expand }).model, '/ws/m');
    let called = false;
    const options = buildInitializationOptions(() => undefined, {
      expandPath: (value) => {
        called = true;
        return value;
      },
    });
    assert.equal(options.model, '');
    assert.equal(called, false);
  });

  it('the settings that reload the model say so in package.json; the others say they apply live', () => {
    const properties = settingProperties(readPackageJson());
    for (const key of SERVER_OPTION_KEYS) {
      const description = String(properties[`midword.${key}`]?.markdownDescription);
      if (RELOAD_OPTION_KEYS.includes(key)) {
        assert.match(description, /reloads the model/, key);
      } else {
        assert.match(description, /Applied live/, key);
      }
    }
    assert.match(String(properties['midword.python.path']?.markdownDescription), /restarts the server/);
    assert.match(String(properties['midword.enable']?.markdownDescription), /No restart/);
  });
});

describe('out/dumpDefaultOptions.js', () => {
  it('prints the initializationOptions built from the package.json defaults, as JSON', () => {
    const script = path.join(EXTENSION_ROOT, 'out', 'dumpDefaultOptions.js');
    const stdout = execFileSync(process.execPath, [script], { encoding: 'utf8' });
    assert.equal(stdout.trim().split('\n').length, 1);
    assert.deepEqual(JSON.parse(stdout), SPEC_DEFAULTS);
  });

  it('works from any working directory (the Python e2e test runs it from the repo root)', () => {
    const stdout = execFileSync(process.execPath, ['extension-vscode/out/dumpDefaultOptions.js'], {
      encoding: 'utf8',
      cwd: path.dirname(EXTENSION_ROOT),
    });
    assert.deepEqual(JSON.parse(stdout), SPEC_DEFAULTS);
  });
});
