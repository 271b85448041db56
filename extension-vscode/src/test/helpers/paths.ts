/** Paths and temp files shared by the tests. */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** extension-vscode/ (tests run from out/test/). */
export const EXTENSION_ROOT = path.resolve(__dirname, '..', '..', '..');

export function readPackageJson(): unknown {
  return JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, 'package.json'), 'utf8')) as unknown;
}

export function tempDir(prefix = 'midword-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Writes an executable file (a fake interpreter). */
export function writeExecutable(file: string, content: string): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content, { mode: 0o755 });
  return file;
}

/** Full path of a real python3, if this machine has one. */
export function realPython3(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, 'python3');
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  return undefined;
}
