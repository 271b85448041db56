// Checks the packaged .vsix (a zip): it holds the bundled entry point, the
// manifest, README, CHANGELOG, LICENSE and icon, and none of the sources,
// tests, source maps, build configs or node_modules (vscode-languageclient is
// bundled into dist/extension.js). Prints the size and the file list.
// Usage: node scripts/check-vsix.js [path/to/file.vsix]
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
const vsixPath = process.argv[2] ?? path.join(root, `${manifest.name}-${manifest.version}.vsix`);

/** Entry names from the zip's central directory. */
function zipEntries(buffer) {
  const eocdSignature = 0x06054b50;
  let eocd = -1;
  for (let i = buffer.length - 22; i >= Math.max(0, buffer.length - 22 - 0xffff); i--) {
    if (buffer.readUInt32LE(i) === eocdSignature) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) {
    throw new Error('not a zip file (no end of central directory record)');
  }
  const count = buffer.readUInt16LE(eocd + 10);
  let offset = buffer.readUInt32LE(eocd + 16);
  const entries = [];
  for (let i = 0; i < count; i++) {
    if (buffer.readUInt32LE(offset) !== 0x02014b50) {
      throw new Error(`bad central directory entry at ${offset}`);
    }
    const size = buffer.readUInt32LE(offset + 24);
    const nameLength = buffer.readUInt16LE(offset + 28);
    const extraLength = buffer.readUInt16LE(offset + 30);
    const commentLength = buffer.readUInt16LE(offset + 32);
    entries.push({ name: buffer.toString('utf8', offset + 46, offset + 46 + nameLength), size });
    offset += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

const REQUIRED = [
  'extension.vsixmanifest',
  'extension/package.json',
  `extension/${manifest.main.replace(/^\.\//, '')}`,
  'extension/readme.md',
  'extension/changelog.md',
  'extension/LICENSE.txt',
  `extension/${manifest.icon}`,
];

const FORBIDDEN = [
  [/(^|\/)node_modules\//, 'node_modules (runtime dependencies are bundled into dist/extension.js)'],
  [/^extension\/src\//, 'sources'],
  [/\.ts$/, 'TypeScript sources'],
  [/\.map$/, 'source maps'],
  [/(^|\/)test\//, 'tests'],
  [/\.test\.js$/, 'tests'],
  [/^extension\/out\//, 'tsc output (the bundle is in dist/)'],
  [/^extension\/scripts\//, 'build scripts'],
  [/tsconfig.*\.json$/, 'tsconfig'],
  [/eslint\.config/, 'eslint config'],
  [/\.vscodeignore$/, '.vscodeignore'],
  [/\.vsix$/, 'an older .vsix'],
];

function main() {
  if (!fs.existsSync(vsixPath)) {
    console.error(`check-vsix: ${vsixPath} does not exist (run npm run package)`);
    return 1;
  }
  const buffer = fs.readFileSync(vsixPath);
  const entries = zipEntries(buffer);
  const names = entries.map((entry) => entry.name);
  const problems = [];
  for (const required of REQUIRED) {
    if (!names.some((name) => name.toLowerCase() === required.toLowerCase())) {
      problems.push(`missing ${required}`);
    }
  }
  for (const name of names) {
    for (const [pattern, what] of FORBIDDEN) {
      if (pattern.test(name)) {
        problems.push(`${name}: ${what} must not be packaged`);
      }
    }
  }
  console.log(`${path.relative(process.cwd(), vsixPath)}: ${(buffer.length / 1024).toFixed(1)} KiB, ${entries.length} files`);
  for (const entry of entries) {
    console.log(`  ${entry.name} (${entry.size} bytes)`);
  }
  if (problems.length > 0) {
    console.error(`check-vsix: ${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
    return 1;
  }
  console.log('check-vsix: ok');
  return 0;
}

process.exitCode = main();
