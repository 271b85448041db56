/**
 * Settings -> server options. Pure: no `vscode` import, so the defaults dump
 * script (`out/dumpDefaultOptions.js`) and the unit tests can run it in plain
 * Node.
 *
 * The server's option names are the exact JSON keys of `initializationOptions`
 * (and of the `settings` object sent with `workspace/didChangeConfiguration`).
 * The VS Code setting ids are the same names under the `midword.` prefix.
 */

/** Configuration section of every midword setting. */
export const SECTION = 'midword';

/** Settings that belong to the extension itself and are never sent to the server. */
export const EXTENSION_SETTINGS = {
  /** Show inline completions (no restart; the server keeps running). */
  enable: 'enable',
  /** Interpreter running the server (changing it restarts the server process). */
  pythonPath: 'python.path',
  /** LSP message trace, read by vscode-languageclient itself. */
  traceServer: 'trace.server',
  /** Ask the other completion providers for the names at the cursor (src/symbols.ts); read at each request. */
  symbols: 'symbols',
} as const;

export const BACKENDS = ['auto', 'llamacpp', 'torch'] as const;
export const DEVICES = ['auto', 'cpu', 'cuda', 'mps'] as const;
export const DTYPES = ['auto', 'float32', 'float16', 'bfloat16', 'float64'] as const;
export const METHODS = ['bytesampler', 'healing1', 'healing2', 'healing4', 'naive'] as const;
export const MODES = ['pbp', 'bytes'] as const;
export const ENSEMBLE_COMBINE = ['mix', 'product'] as const;
export const MULTILINE = ['auto', 'always', 'never'] as const;
export const LOG_LEVELS = ['error', 'warning', 'info', 'debug'] as const;
/** Fill-in-the-middle templates (the server's engine/sample/fim.py TEMPLATES), plus auto and off. */
export const FIM_CHOICES = [
  'auto',
  'off',
  'qwen',
  'qwen-spm',
  'deepseek',
  'starcoder',
  'starcoder-spm',
  'codellama',
  'codestral',
] as const;
export const ENGINES = ['local', 'vllm'] as const;
export const CONTEXT_FILES = ['auto', 'off'] as const;

export interface ServerOptions {
  /** Model folder; "" = the default model shipped with midword. Reload. */
  model: string;
  /** What computes the model: auto = llama.cpp for a .gguf file (when installed), else torch. Reload. */
  backend: (typeof BACKENDS)[number];
  /** Reload. */
  device: (typeof DEVICES)[number];
  /** Reload. */
  dtype: (typeof DTYPES)[number];
  /**
   * Model folders of a byte-level ensemble; [] = no ensemble (`model` is used).
   * With two or more the server samples bytes with ByteSampler (`method` and
   * `mode` do not apply). Reload.
   */
  ensemble: readonly string[];
  /** One weight per ensemble folder; [] = equal weights. Reload. */
  ensembleWeights: readonly number[];
  /** mix = weighted average of probabilities; product = weighted sum of log-probabilities. Reload. */
  ensembleCombine: (typeof ENSEMBLE_COMBINE)[number];
  method: (typeof METHODS)[number];
  mode: (typeof MODES)[number];
  /** >= 0; 0 = greedy. */
  temperature: number;
  /** 0 < topP <= 1. */
  topP: number;
  maxTokens: number;
  timeBudgetMs: number;
  multiline: (typeof MULTILINE)[number];
  /** Cut where the completion's exact probability falls below this (0 <= p < 1); "auto" = 0.1 (provisional); 0 = off. */
  minConfidence: 'auto' | number;
  /** The most lines a completion spans; 1 = single-line mode, 0 = no limit. */
  maxLines: number;
  windowBytes: number;
  logLevel: (typeof LOG_LEVELS)[number];
  /** Items for an Invoked request. */
  maxItems: number;
  /** Append shown/accepted events of inline items to a local file (`midword stats` reads it). */
  acceptanceLog: boolean;
  /** When `device` is missing, serve on the best device there is instead of failing. */
  deviceFallback: boolean;
  /** local = in process; vllm = a vLLM server at `engineUrl` (API key from MIDWORD_ENGINE_API_KEY). Reload. */
  engine: (typeof ENGINES)[number];
  /** The vLLM server's URL (http:// or https://). Reload. */
  engineUrl: string;
  /** The served model's name; "" = the one the server serves. Reload. */
  engineModel: string;
  /** Fill-in-the-middle: auto = the model's own template (if it has FIM tokens), off, or a template. Reload. */
  fim: (typeof FIM_CHOICES)[number];
  /** Bytes of text after the cursor in a FIM prompt (whole lines after the cursor's). */
  suffixBytes: number;
  /** Wait of automatic requests for typing to pause: "auto" follows the typing speed (100-1000 ms), N ms, 0 = off. */
  debounceMs: 'auto' | number;
  /** auto = snippets of other open files of the same language go into the prompt; off = none. */
  contextFiles: (typeof CONTEXT_FILES)[number];
  /** Most bytes of the prompt those snippets take. */
  contextBytes: number;
  /** Language id -> completions on; "*" for the rest (VS Code merges the user's object over the default). */
  languages: Readonly<Record<string, boolean>>;
  /** Glob patterns of files never completed nor quoted into other buffers' prompts; [] = none. */
  excludeFiles: readonly string[];
  /** Names sent with a request (`midwordCandidates`) guide it only when the model gives them this much probability together. */
  symbolsMinMass: number;
}

export type ServerOptionKey = keyof ServerOptions;

/** Options whose change makes the server reload the model (the extension only forwards them). */
export const RELOAD_OPTION_KEYS: readonly ServerOptionKey[] = [
  'model',
  'backend',
  'device',
  'deviceFallback',
  'dtype',
  'ensemble',
  'ensembleWeights',
  'ensembleCombine',
  'engine',
  'engineUrl',
  'engineModel',
  'fim',
];

/** Every server option, in the order they are sent. */
export const SERVER_OPTION_KEYS: readonly ServerOptionKey[] = [
  ...RELOAD_OPTION_KEYS,
  'method',
  'mode',
  'temperature',
  'topP',
  'maxTokens',
  'timeBudgetMs',
  'multiline',
  'minConfidence',
  'maxLines',
  'windowBytes',
  'logLevel',
  'maxItems',
  'acceptanceLog',
  'suffixBytes',
  'debounceMs',
  'contextFiles',
  'contextBytes',
  'languages',
  'excludeFiles',
  'symbolsMinMass',
];

/**
 * Fallback for a setting whose value is missing or invalid. Must equal the
 * defaults declared in package.json (a unit test checks it).
 */
export const FALLBACK_OPTIONS: Readonly<ServerOptions> = Object.freeze({
  model: '',
  backend: 'auto',
  device: 'auto',
  dtype: 'auto',
  ensemble: Object.freeze([]),
  ensembleWeights: Object.freeze([]),
  ensembleCombine: 'mix',
  method: 'bytesampler',
  mode: 'pbp',
  temperature: 0,
  topP: 1,
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
  languages: Object.freeze({ '*': true, plaintext: false, markdown: false, scminput: false }),
  excludeFiles: Object.freeze([
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
  ]),
  symbolsMinMass: 0,
});

/** Reads one setting by its key relative to `midword.` (e.g. `topP`); `undefined` when unset. */
export type SettingGetter = (key: string) => unknown;

export interface BuildOptions {
  /** Expands `~`, `${workspaceFolder}`, ... in the model path and the ensemble folders. Identity when absent. */
  expandPath?: (value: string) => string;
}

export interface BuildResult {
  options: ServerOptions;
  /** One line per setting that was invalid and replaced by its default. */
  problems: string[];
}

type Check<T> = (value: unknown) => value is T;

function oneOf<const T extends readonly string[]>(choices: T): Check<T[number]> {
  return (value: unknown): value is T[number] =>
    typeof value === 'string' && (choices as readonly string[]).includes(value);
}

function numberIn(min: number, max: number, opts: { minExclusive?: boolean; integer?: boolean }): Check<number> {
  return (value: unknown): value is number =>
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (opts.minExclusive === true ? value > min : value >= min) &&
    value <= max &&
    (opts.integer !== true || Number.isInteger(value));
}

const isString: Check<string> = (value: unknown): value is string => typeof value === 'string';

const isBoolean: Check<boolean> = (value: unknown): value is boolean => typeof value === 'boolean';

const isFiniteNumber: Check<number> = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);

const isPattern: Check<string> = (value: unknown): value is string => typeof value === 'string' && value.trim() !== '';

const isLanguageSwitches: Check<Readonly<Record<string, boolean>>> = (value: unknown): value is Readonly<Record<string, boolean>> =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && Object.values(value).every((on) => typeof on === 'boolean');

function arrayOf<T>(element: Check<T>): Check<readonly T[]> {
  return (value: unknown): value is readonly T[] => Array.isArray(value) && value.every((item) => element(item));
}

const CHECKS: { [K in ServerOptionKey]: { check: Check<ServerOptions[K]>; expected: string } } = {
  model: { check: isString, expected: 'a string' },
  backend: { check: oneOf(BACKENDS), expected: BACKENDS.join(' | ') },
  device: { check: oneOf(DEVICES), expected: DEVICES.join(' | ') },
  dtype: { check: oneOf(DTYPES), expected: DTYPES.join(' | ') },
  ensemble: { check: arrayOf(isString), expected: 'an array of strings' },
  ensembleWeights: { check: arrayOf(isFiniteNumber), expected: 'an array of finite numbers' },
  ensembleCombine: { check: oneOf(ENSEMBLE_COMBINE), expected: ENSEMBLE_COMBINE.join(' | ') },
  method: { check: oneOf(METHODS), expected: METHODS.join(' | ') },
  mode: { check: oneOf(MODES), expected: MODES.join(' | ') },
  temperature: { check: numberIn(0, Infinity, {}), expected: 'a number >= 0' },
  topP: { check: numberIn(0, 1, { minExclusive: true }), expected: 'a number with 0 < topP <= 1' },
  maxTokens: { check: numberIn(1, Infinity, { integer: true }), expected: 'an integer >= 1' },
  timeBudgetMs: { check: numberIn(1, Infinity, { integer: true }), expected: 'an integer >= 1' },
  multiline: { check: oneOf(MULTILINE), expected: MULTILINE.join(' | ') },
  minConfidence: {
    check: (value: unknown): value is 'auto' | number =>
      value === 'auto' || (numberIn(0, Infinity, {})(value) && value < 1),
    expected: '"auto" or a number with 0 <= minConfidence < 1 (0 = off)',
  },
  maxLines: { check: numberIn(0, Infinity, { integer: true }), expected: 'an integer >= 0 (0 = no limit)' },
  windowBytes: { check: numberIn(1, Infinity, { integer: true }), expected: 'an integer >= 1' },
  logLevel: { check: oneOf(LOG_LEVELS), expected: LOG_LEVELS.join(' | ') },
  maxItems: { check: numberIn(1, Infinity, { integer: true }), expected: 'an integer >= 1' },
  acceptanceLog: { check: isBoolean, expected: 'true or false' },
  deviceFallback: { check: isBoolean, expected: 'true or false' },
  engine: { check: oneOf(ENGINES), expected: ENGINES.join(' | ') },
  engineUrl: {
    check: (value: unknown): value is string =>
      typeof value === 'string' && (value === '' || /^https?:\/\//.test(value)),
    expected: 'an http:// or https:// URL',
  },
  engineModel: { check: isString, expected: 'a string' },
  fim: { check: oneOf(FIM_CHOICES), expected: FIM_CHOICES.join(' | ') },
  suffixBytes: { check: numberIn(0, Infinity, { integer: true }), expected: 'an integer >= 0' },
  debounceMs: {
    check: (value: unknown): value is 'auto' | number =>
      value === 'auto' || numberIn(0, Infinity, { integer: true })(value),
    expected: '"auto" or an integer >= 0 (milliseconds; 0 = off)',
  },
  contextFiles: { check: oneOf(CONTEXT_FILES), expected: CONTEXT_FILES.join(' | ') },
  contextBytes: { check: numberIn(0, Infinity, { integer: true }), expected: 'an integer >= 0' },
  languages: { check: isLanguageSwitches, expected: 'an object of language ids to true or false, "*" for the rest' },
  excludeFiles: { check: arrayOf(isPattern), expected: 'a list of glob patterns' },
  symbolsMinMass: { check: numberIn(0, 1, {}), expected: 'a number with 0 <= symbolsMinMass <= 1' },
};

/** A fresh copy of an array or object value (so options never share the frozen fallbacks or VS Code's read-only objects). */
function own<T>(value: T): T {
  if (Array.isArray(value)) {
    return [...(value as unknown[])] as T;
  }
  return typeof value === 'object' && value !== null ? { ...value } : value;
}

function readOption<K extends ServerOptionKey>(key: K, get: SettingGetter, problems: string[]): ServerOptions[K] {
  const raw = get(key);
  const { check, expected } = CHECKS[key];
  if (raw === undefined || raw === null) {
    return own(FALLBACK_OPTIONS[key]);
  }
  if (check(raw)) {
    return own(raw);
  }
  problems.push(
    `${SECTION}.${key} = ${JSON.stringify(raw)} is invalid (expected ${expected}); using ${JSON.stringify(FALLBACK_OPTIONS[key])}`,
  );
  return own(FALLBACK_OPTIONS[key]);
}

/** The server options (and the problems found) for the given settings. */
export function buildInitializationOptionsWithProblems(get: SettingGetter, build: BuildOptions = {}): BuildResult {
  const problems: string[] = [];
  const values: Partial<Record<ServerOptionKey, unknown>> = {};
  for (const key of SERVER_OPTION_KEYS) {
    values[key] = readOption(key, get, problems);
  }
  const options = values as ServerOptions;
  const expandFolder = (folder: string): string => {
    const trimmed = folder.trim();
    return trimmed !== '' && build.expandPath !== undefined ? build.expandPath(trimmed) : trimmed;
  };
  options.model = expandFolder(options.model);
  options.ensemble = options.ensemble.map(expandFolder);
  return { options, problems };
}

/**
 * The `initializationOptions` sent to `python -m midword serve`, and the
 * `settings` of every `workspace/didChangeConfiguration` after that.
 */
export function buildInitializationOptions(get: SettingGetter, build: BuildOptions = {}): ServerOptions {
  return buildInitializationOptionsWithProblems(get, build).options;
}
