// Runs the compiled unit tests (out/test/*.test.js) with node's built-in test
// runner. Lists the files itself: Node 20's `node --test DIR` would also run
// every helper and fixture under a `test` folder, and has no glob support.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const dir = path.join(__dirname, '..', 'out', 'test');
if (!fs.existsSync(dir)) {
  console.error(`${dir} does not exist: run npm run build first`);
  process.exit(1);
}
const files = fs
  .readdirSync(dir)
  .filter((name) => name.endsWith('.test.js'))
  .sort()
  .map((name) => path.join(dir, name));
const result = spawnSync(process.execPath, ['--test', ...process.argv.slice(2), ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
