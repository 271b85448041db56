/**
 * Prints, as one JSON object on stdout, exactly the `initializationOptions`
 * the extension sends when every setting has the default declared in
 * package.json. A contract with the Python end-to-end tests:
 *
 *     node extension-vscode/out/dumpDefaultOptions.js
 *
 * (after `npm run ext:build`). Exit status 1, with the reasons on stderr, when
 * a declared default is not a valid server option.
 */
import { readManifest, settingDefaults } from './manifest';
import { buildInitializationOptionsWithProblems } from './options';

function main(): number {
  const defaults = settingDefaults(readManifest());
  const { options, problems } = buildInitializationOptionsWithProblems((key) => defaults.get(key));
  if (problems.length > 0) {
    for (const problem of problems) {
      process.stderr.write(`dumpDefaultOptions: invalid default in package.json: ${problem}\n`);
    }
    return 1;
  }
  process.stdout.write(`${JSON.stringify(options)}\n`);
  return 0;
}

process.exitCode = main();
