// Bundles src/extension.ts and its runtime dependencies (vscode-languageclient
// and what it uses) into one CommonJS file, dist/extension.js, so the .vsix
// needs no node_modules. Writes the bundled packages' licenses to
// dist/THIRD_PARTY_NOTICES.txt.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const esbuild = require('esbuild');

const root = path.join(__dirname, '..');
const dist = path.join(root, 'dist');

/** node_modules package directories that contributed inputs to the bundle. */
function bundledPackages(metafile) {
  const dirs = new Set();
  for (const input of Object.keys(metafile.inputs)) {
    const absolute = path.resolve(process.cwd(), input);
    const match = /^(.*[\\/]node_modules[\\/](?:@[^\\/]+[\\/])?[^\\/]+)/.exec(absolute);
    if (match) {
      dirs.add(match[1]);
    }
  }
  return [...dirs].sort();
}

function notices(packageDirs) {
  const sections = [];
  for (const dir of packageDirs) {
    const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
    const licenseFile = fs.readdirSync(dir).find((name) => /^licen[cs]e(\.|$)/i.test(name));
    const text = licenseFile ? fs.readFileSync(path.join(dir, licenseFile), 'utf8').trim() : `License: ${manifest.license}`;
    sections.push(`${manifest.name} ${manifest.version}\n${'-'.repeat(40)}\n${text}\n`);
  }
  return `Third-party software bundled into dist/extension.js\n\n${sections.join('\n')}`;
}

async function main() {
  const result = await esbuild.build({
    entryPoints: [path.join(root, 'src', 'extension.ts')],
    outfile: path.join(dist, 'extension.js'),
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: ['vscode'],
    minify: true,
    keepNames: true,
    sourcemap: false,
    metafile: true,
    logLevel: 'info',
  });
  const packages = bundledPackages(result.metafile);
  fs.writeFileSync(path.join(dist, 'THIRD_PARTY_NOTICES.txt'), notices(packages));
  console.log(`bundled packages: ${packages.map((dir) => path.basename(dir)).join(', ')}`);
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
