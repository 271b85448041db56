// Flat config: typescript-eslint with type information for src/, plain
// recommended rules for the Node build scripts.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const nodeGlobals = {
  require: 'readonly',
  module: 'writable',
  process: 'readonly',
  console: 'readonly',
  Buffer: 'readonly',
  __dirname: 'readonly',
};

export default tseslint.config(
  { ignores: ['out/**', 'dist/**', 'node_modules/**', '*.vsix'] },
  {
    files: ['src/**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.strictTypeChecked, ...tseslint.configs.stylisticTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
      eqeqeq: 'error',
      curly: 'error',
    },
  },
  {
    files: ['src/test/**/*.ts'],
    rules: {
      // node:test's describe/it return promises that the runner awaits.
      '@typescript-eslint/no-floating-promises': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  {
    files: ['scripts/**/*.js'],
    extends: [js.configs.recommended],
    languageOptions: { sourceType: 'commonjs', globals: nodeGlobals },
  },
  {
    // the code-server end-to-end test: Node ES modules (document: inside page.evaluate)
    files: ['e2e/**/*.mjs'],
    extends: [js.configs.recommended],
    languageOptions: {
      globals: { ...nodeGlobals, setTimeout: 'readonly', clearTimeout: 'readonly', fetch: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly', document: 'readonly' },
    },
    rules: { eqeqeq: 'error', curly: 'error' },
  },
  {
    // the e2e test's second extension (a stand-in language server): CommonJS, loaded by VS Code
    files: ['e2e/**/*.js'],
    extends: [js.configs.recommended],
    languageOptions: { sourceType: 'commonjs', globals: nodeGlobals },
    rules: { eqeqeq: 'error', curly: 'error' },
  },
  {
    files: ['eslint.config.mjs'],
    extends: [js.configs.recommended],
  },
);
