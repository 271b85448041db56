/** Finding executables on disk and on PATH. No `vscode` import. */
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

/** True when `file` is a regular file we may execute (on Windows: exists). */
export async function isExecutableFile(file: string, platform: NodeJS.Platform = process.platform): Promise<boolean> {
  try {
    const stat = await fs.stat(file);
    if (!stat.isFile()) {
      return false;
    }
    if (platform !== 'win32') {
      await fs.access(file, fs.constants.X_OK);
    }
    return true;
  } catch {
    return false;
  }
}

/** True when `value` names a file by path rather than a bare command looked up on PATH. */
export function looksLikePath(value: string): boolean {
  return value.includes('/') || value.includes('\\') || path.isAbsolute(value);
}

/** Full path of `command` found on `PATH` (with `PATHEXT` on Windows), or undefined. */
export async function findOnPath(
  command: string,
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
): Promise<string | undefined> {
  const pathVar = (platform === 'win32' ? (env.Path ?? env.PATH) : env.PATH) ?? '';
  const delimiter = platform === 'win32' ? ';' : ':';
  const extensions =
    platform === 'win32' && path.extname(command) === ''
      ? (env.PATHEXT ?? '.COM;.EXE;.BAT;.CMD').split(';').filter((ext) => ext !== '')
      : [''];
  for (const dir of pathVar.split(delimiter)) {
    if (dir === '') {
      continue;
    }
    for (const ext of extensions) {
      const candidate = path.join(dir, command + ext);
      if (await isExecutableFile(candidate, platform)) {
        return candidate;
      }
    }
  }
  return undefined;
}

export interface ExpandContext {
  /** First workspace folder, if any. */
  workspaceFolder?: string;
  homeDir?: string;
}

/** Expands `~`, `${userHome}`, `${workspaceFolder}` and `${env:NAME}`; resolves a relative path against the workspace folder. */
export function expandPathVariables(
  value: string,
  context: ExpandContext,
  env: NodeJS.ProcessEnv = process.env,
): string {
  const home = context.homeDir ?? os.homedir();
  let result = value.trim();
  if (result === '~' || result.startsWith('~/') || result.startsWith('~\\')) {
    result = home + result.slice(1);
  }
  result = result
    .replace(/\$\{userHome\}/g, home)
    .replace(/\$\{env:([^}]+)\}/g, (_match, name: string) => env[name] ?? '');
  if (context.workspaceFolder !== undefined) {
    result = result.replace(/\$\{workspaceFolder\}/g, context.workspaceFolder);
    if (looksLikePath(result) && !path.isAbsolute(result)) {
      result = path.resolve(context.workspaceFolder, result);
    }
  }
  return result;
}
