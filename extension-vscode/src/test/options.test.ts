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
  type ServerOptionKey,
} from '../options';
import { EXTENSION_ROOT, readPackageJson } from './helpers/paths';

/** The server's documented defaults (issue 5), written out independently of the code. */
const SPEC_DEFAULTS = {
  model: '',
  backend: 'auto',
  device: 'auto',
  dtype: 'auto',
  ensemble: [],
  ensembleWeights: [],
  ensembleCombine: 'mix',
  method: 'bytesampler',
  mode: 'pbp',
  temperature: 0,
  topP: 1.0,
  maxTokens: 48,
  timeBudgetMs: 1500,
  multiline: 'auto',
  minConfidence: 0,
  maxLines: 0,
  windowBytes: 4096,
  logLevel: 'info',
  maxItems: 3,
  acceptanceLog: true,
  deviceFallback: true,
  engine: 'local',
  engineUrl: '',
  engineModel: '',
  fim: 'auto',
  suffixBytes: 1024,
  debounceMs: 'auto',
  contextFiles: 'auto',
  contextBytes: 1024,
  languages: { '*': true, plaintext: false, markdown: false, scminput: false },
  symbolsMinMass: 0,
  excludeFiles: [
    '.env',
    '.env.*',
    '*.env',
    '.envrc',
    '*.pem',
    '*.key',
    '*.p12',
    '*.pfx',
    'id_rsa*',
    'id_dsa*',
    'id_ecdsa*',
    'id_ed25519*',
    '.npmrc',
    '.pypirc',
    '.netrc',
    '_netrc',
    '.git-credentials',
    '.aws/credentials',
    'credentials*.json',
    'secrets.*',
  ],
};

describe('settings -> initializationOptions', () => {
  const defaults = settingDefaults(readPackageJson());

  it('package.json declares a midword.* setting for every server option, plus the extension settings', () => {
    const declared = [...defaults.keys()].sort();
    assert.deepEqual(declared, [...SERVER_OPTION_KEYS, 'enable', 'python.path', 'trace.server', 'symbols'].sort());
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
    assert.ok(!('symbols' in options), 'midword.symbols is read by the extension at each request');
  });

  it('passes valid user values through unchanged', () => {
    const values: Record<string, unknown> = {
      model: '/models/qwen',
      backend: 'llamacpp',
      device: 'cuda',
      dtype: 'bfloat16',
      ensemble: ['/models/base', '/models/expert', '/models/anti'],
      ensembleWeights: [1, 1, -1],
      ensembleCombine: 'product',
      method: 'healing2',
      mode: 'bytes',
      temperature: 0.7,
      topP: 0.9,
      maxTokens: 128,
      timeBudgetMs: 800,
      multiline: 'never',
      minConfidence: 0.25,
      maxLines: 1,
      windowBytes: 8192,
      logLevel: 'debug',
      maxItems: 5,
      acceptanceLog: false,
      deviceFallback: false,
      engine: 'vllm',
      engineUrl: 'https://gpu-box:8000',
      engineModel: 'qwen-coder',
      fim: 'qwen-spm',
      suffixBytes: 2048,
      debounceMs: 250,
      contextFiles: 'off',
      contextBytes: 512,
      languages: { '*': false, python: true },
      excludeFiles: ['*.secret'],
      symbolsMinMass: 0.2,
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

  it('debounceMs takes "auto" or whole milliseconds; contextFiles auto | off; contextBytes >= 0', () => {
    for (const valid of ['auto', 0, 250]) {
      const { options, problems } = buildInitializationOptionsWithProblems((key) => (key === 'debounceMs' ? valid : undefined));
      assert.equal(options.debounceMs, valid);
      assert.deepEqual(problems, []);
    }
    const invalid: [string, unknown][] = [
      ['debounceMs', 'fast'],
      ['debounceMs', -1],
      ['debounceMs', 12.5],
      ['debounceMs', true],
      ['contextFiles', 'on'],
      ['contextBytes', -5],
    ];
    for (const [key, value] of invalid) {
      const { options, problems } = buildInitializationOptionsWithProblems((k) => (k === key ? value : undefined));
      assert.equal(options[key as ServerOptionKey], FALLBACK_OPTIONS[key as ServerOptionKey], key);
      assert.equal(problems.length, 1, `${key} = ${JSON.stringify(value)}`);
      assert.match(String(problems[0]), new RegExp(`midword\\.${key} = `));
    }
  });

  it('minConfidence takes "auto" or a number in [0, 1); maxLines an integer >= 0 (0 = no limit); symbolsMinMass a number in [0, 1]', () => {
    for (const [key, valid] of [
      ['minConfidence', 'auto'],
      ['minConfidence', 0],
      ['minConfidence', 0.99],
      ['maxLines', 0],
      ['maxLines', 1],
      ['maxLines', 40],
      ['symbolsMinMass', 0],
      ['symbolsMinMass', 1],
      ['symbolsMinMass', 0.3],
    ] as [string, unknown][]) {
      const { options, problems } = buildInitializationOptionsWithProblems((k) => (k === key ? valid : undefined));
      assert.equal(options[key as ServerOptionKey], valid, key);
      assert.deepEqual(problems, []);
    }
    const invalid: [string, unknown][] = [
      ['minConfidence', 1],
      ['minConfidence', -0.1],
      ['minConfidence', 'high'],
      ['minConfidence', true],
      ['maxLines', -1],
      ['maxLines', 1.5],
      ['maxLines', '2'],
      ['symbolsMinMass', -0.01],
      ['symbolsMinMass', 1.5],
      ['symbolsMinMass', 'auto'],
    ];
    for (const [key, value] of invalid) {
      const { options, problems } = buildInitializationOptionsWithProblems((k) => (k === key ? value : undefined));
      assert.equal(options[key as ServerOptionKey], FALLBACK_OPTIONS[key as ServerOptionKey], key);
      assert.equal(problems.length, 1, `${key} = ${JSON.stringify(value)}`);
      assert.match(String(problems[0]), new RegExp(`midword\\.${key} = `));
    }
  });

  it('languages takes an object of booleans, excludeFiles a list of patterns; [] is valid; anything else falls back', () => {
    const none = buildInitializationOptionsWithProblems((key) => (key === 'excludeFiles' ? [] : undefined));
    assert.deepEqual(none.options.excludeFiles, []);
    assert.deepEqual(none.problems, []);
    const invalid: [string, unknown][] = [
      ['languages', ['markdown']],
      ['languages', { markdown: 'no' }],
      ['languages', true],
      ['excludeFiles', '.env'],
      ['excludeFiles', ['.env', 3]],
      ['excludeFiles', ['']],
    ];
    for (const [key, value] of invalid) {
      const { options, problems } = buildInitializationOptionsWithProblems((k) => (k === key ? value : undefined));
      const label = `${key} = ${JSON.stringify(value)}`;
      assert.deepEqual(options[key as ServerOptionKey], FALLBACK_OPTIONS[key as ServerOptionKey], label);
      assert.equal(problems.length, 1, label);
      assert.match(problems[0] ?? '', new RegExp(`^midword\\.${key} = .* is invalid \\(expected `), label);
    }
  });

  it('object options are fresh copies too', () => {
    const a = buildInitializationOptions(() => undefined);
    (a.languages as Record<string, boolean>).rust = false;
    assert.equal(FALLBACK_OPTIONS.languages.rust, undefined);
    assert.equal(buildInitializationOptions(() => undefined).languages.rust, undefined);
  });

  it('ensemble settings: anything but an array of strings / finite numbers, or mix | product, falls back with a problem', () => {
    const invalid: [string, unknown, unknown][] = [
      ['ensemble', '/models/a', []],
      ['ensemble', ['/models/a', 3], []],
      ['ensemble', [null], []],
      ['ensemble', { 0: '/models/a' }, []],
      ['ensembleWeights', 1, []],
      ['ensembleWeights', [1, '2'], []],
      ['ensembleWeights', [1, Number.NaN], []],
      ['ensembleWeights', [Number.POSITIVE_INFINITY], []],
      ['ensembleWeights', [[1]], []],
      ['ensembleCombine', 'sum', 'mix'],
      ['ensembleCombine', ['mix'], 'mix'],
      ['ensembleCombine', 'Product', 'mix'],
    ];
    for (const [key, value, fallback] of invalid) {
      const { options, problems } = buildInitializationOptionsWithProblems((k) => (k === key ? value : undefined));
      const label = `${key} = ${String(value)}`;
      assert.deepEqual(options[key as keyof typeof options], fallback, label);
      assert.equal(problems.length, 1, label);
      assert.match(problems[0] ?? '', new RegExp(`^midword\\.${key} = .* is invalid \\(expected `), label);
    }
    const { problems } = buildInitializationOptionsWithProblems(
      (key) => ({ ensemble: ['/a', '/b'], ensembleWeights: [2, 0.5], ensembleCombine: 'mix' })[key],
    );
    assert.deepEqual(problems, []);
    assert.match(
      buildInitializationOptionsWithProblems((key) => (key === 'ensembleWeights' ? [1, 'x'] : undefined)).problems[0] ?? '',
      /midword\.ensembleWeights = \[1,"x"\] is invalid \(expected an array of finite numbers\); using \[\]/,
    );
  });

  it('array options are fresh copies: neither the fallbacks nor the setting values are shared', () => {
    const weights = [1, 2];
    const first = buildInitializationOptions((key) => (key === 'ensembleWeights' ? weights : undefined));
    assert.deepEqual(first.ensembleWeights, [1, 2]);
    assert.notEqual(first.ensembleWeights, weights);
    const a = buildInitializationOptions(() => undefined);
    const b = buildInitializationOptions(() => undefined);
    assert.notEqual(a.ensemble, b.ensemble);
    assert.notEqual(a.ensemble, FALLBACK_OPTIONS.ensemble);
    (a.ensemble as string[]).push('/leak');
    assert.deepEqual(b.ensemble, []);
    assert.deepEqual(FALLBACK_OPTIONS.ensemble, []);
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

  it('expands and trims every ensemble folder like the model path', () => {
    const expand = (value: string): string => value.replace('${workspaceFolder}', '/ws');
    const options = buildInitializationOptions(
      (key) => (key === 'ensemble' ? [' ${workspaceFolder}/base', '/models/expert ', ''] : undefined),
      { expandPath: expand },
    );
    assert.deepEqual(options.ensemble, ['/ws/base', '/models/expert', '']);
  });

  it('the new ensemble settings are declared as package.json says (types, enum, scope, ordered like the server options)', () => {
    const properties = settingProperties(readPackageJson());
    const schema = (id: string): Record<string, unknown> => {
      const found = properties[id];
      assert.ok(found !== undefined, id);
      return found;
    };
    const ensemble = schema('midword.ensemble');
    assert.equal(ensemble.type, 'array');
    assert.deepEqual(ensemble.items, { type: 'string' });
    assert.equal(ensemble.scope, schema('midword.model').scope);
    assert.equal(ensemble.scope, 'machine-overridable');
    const weights = schema('midword.ensembleWeights');
    assert.equal(weights.type, 'array');
    assert.deepEqual(weights.items, { type: 'number' });
    const combine = schema('midword.ensembleCombine');
    assert.equal(combine.type, 'string');
    assert.deepEqual(combine.enum, ['mix', 'product']);
    assert.equal((combine.enumDescriptions as unknown[]).length, 2);
    // The settings UI shows them in the order of the server options.
    const orders = SERVER_OPTION_KEYS.map((key) => properties[`midword.${key}`]?.order as number);
    assert.deepEqual([...orders].sort((x, y) => x - y), orders);
    assert.equal(new Set(Object.values(properties).map((schema) => schema.order)).size, Object.keys(properties).length);
  });

  it('an untrusted workspace cannot choose the interpreter or the models (restricted settings)', () => {
    const manifest = readPackageJson() as { capabilities: { untrustedWorkspaces: { restrictedConfigurations: string[] } } };
    assert.deepEqual(
      [...manifest.capabilities.untrustedWorkspaces.restrictedConfigurations].sort(),
      ['midword.engine', 'midword.engineUrl', 'midword.ensemble', 'midword.model', 'midword.python.path'],
    );
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
    assert.match(String(properties['midword.symbols']?.markdownDescription), /Applied live/);
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
