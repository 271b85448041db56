// Process and file plumbing for the code-server end-to-end test (vscode.e2e.mjs):
// a throwaway sandbox folder, processes started in their own process group and
// stopped by it, polling waits, and the artifacts kept when a run fails.
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** Folders of one run, all under one temporary root that is removed afterwards. */
export async function makeSandbox() {
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'midword-e2e-'));
  const dirs = {
    root,
    userData: path.join(root, 'user-data'),
    extensions: path.join(root, 'extensions'),
    workspace: path.join(root, 'workspace'),
    chromium: path.join(root, 'chromium'),
    logs: path.join(root, 'logs'),
    home: path.join(root, 'home'),
    xdgConfig: path.join(root, 'xdg', 'config'),
    xdgData: path.join(root, 'xdg', 'data'),
    xdgCache: path.join(root, 'xdg', 'cache'),
    xdgState: path.join(root, 'xdg', 'state'),
  };
  await Promise.all(Object.values(dirs).map((dir) => fs.mkdir(dir, { recursive: true })));
  return dirs;
}

/**
 * Environment with every XDG folder in the sandbox: code-server and Chromium
 * write ~/.config, ~/.local/share and ~/.cache whatever --user-data-dir says.
 */
export function sandboxEnv(dirs, extra = {}) {
  return {
    ...process.env,
    XDG_CONFIG_HOME: dirs.xdgConfig,
    XDG_DATA_HOME: dirs.xdgData,
    XDG_CACHE_HOME: dirs.xdgCache,
    XDG_STATE_HOME: dirs.xdgState,
    ...extra,
  };
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Processes started with startGroup, stopped on exit even when the test throws. */
const liveGroups = new Set();

/**
 * Starts `command` as the leader of a new process group (detached), its output
 * appended to `logFile`, so that stopGroup can end it with all its children.
 */
export function startGroup(command, args, { env, cwd, logFile }) {
  const log = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(command, args, { env, cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const group = { name: path.basename(command), child, exited, exitStatus: undefined };
  void exited.then((status) => {
    group.exitStatus = status;
    liveGroups.delete(group);
  });
  child.once('error', (error) => log.write(`spawn error: ${error.message}\n`));
  liveGroups.add(group);
  return group;
}

function signalGroup(group, signal) {
  try {
    process.kill(-group.child.pid, signal);
  } catch {
    // the group is gone already
  }
}

/** SIGTERM to the whole process group, SIGKILL to what is left after `graceMs`. */
export async function stopGroup(group, graceMs = 5000) {
  if (group === undefined || group.child.pid === undefined) {
    return;
  }
  signalGroup(group, 'SIGTERM');
  const done = await Promise.race([group.exited.then(() => true), sleep(graceMs).then(() => false)]);
  // children that outlive the leader (the midword server under the extension host) go too
  signalGroup(group, 'SIGKILL');
  if (!done) {
    await group.exited;
  }
}

/** Stops every group still running (those whose start failed half-way too). */
export async function stopAllGroups() {
  await Promise.all([...liveGroups].map((group) => stopGroup(group)));
}

/** Last resort at process exit (synchronous: only signals). */
function killLiveGroups() {
  for (const group of liveGroups) {
    signalGroup(group, 'SIGKILL');
  }
}
process.once('exit', killLiveGroups);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    killLiveGroups();
    process.exit(130);
  });
}

/**
 * Polls `probe` until it returns a value other than undefined/false, every
 * `intervalMs`, for at most `timeoutMs`; throws with `what` and the last
 * error when it never does.
 *
 * ```js
 * const text = await waitFor('the status bar', () => readStatus(page), { timeoutMs: 60_000 });
 * ```
 */
export async function waitFor(what, probe, { timeoutMs, intervalMs = 250 }) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false && value !== null) {
        return value;
      }
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}`);
    }
    await sleep(intervalMs);
  }
}

/** Resolves once `url` answers HTTP at all (any status). */
export async function waitForHttp(url, timeoutMs, group) {
  await waitFor(
    `${url} to answer`,
    async () => {
      if (group?.exitStatus !== undefined) {
        throw new Error(`${group.name} exited: ${JSON.stringify(group.exitStatus)}`);
      }
      const response = await fetch(url, { redirect: 'manual', signal: AbortSignal.timeout(5000) });
      return response.status > 0;
    },
    { timeoutMs, intervalMs: 500 },
  );
}

/** Files under `dir` (recursively) whose name passes `test`. */
export async function findFiles(dir, test) {
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries
    .filter((entry) => entry.isFile() && test(entry.name))
    .map((entry) => path.join(entry.parentPath ?? entry.path, entry.name));
}

/** JSON lines of a file; [] while it does not exist. */
export async function readJsonLines(file) {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
}

/** Copies the logs of a failed run into `artifactsDir` (best effort: the run already failed). */
export async function keepLogs(dirs, artifactsDir) {
  const logs = [
    ...(await findFiles(dirs.logs, () => true)),
    ...(await findFiles(dirs.userData, (name) => name.endsWith('.log'))),
  ];
  for (const file of logs) {
    const relative = path.relative(dirs.root, file).replaceAll(path.sep, '__');
    await fs.copyFile(file, path.join(artifactsDir, relative)).catch(() => undefined);
  }
}
