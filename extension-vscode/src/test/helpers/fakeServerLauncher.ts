/** A fake interpreter that passes the import check and runs fixtures/fakeServer.js as the server. */
import * as fs from 'node:fs';
import * as path from 'node:path';

import { CHECK_MARKER } from '../../importCheck';
import { writeExecutable } from './paths';

export interface FakeServerFiles {
  python: string;
  /** What the server received, one JSON object per line. */
  log: string;
  /** The arguments the server was started with. */
  args: string;
}

export function fakeServerPython(dir: string): FakeServerFiles {
  const server = path.join(__dirname, '..', 'fixtures', 'fakeServer.js');
  const log = path.join(dir, 'server-log.jsonl');
  const args = path.join(dir, 'server-args.txt');
  const verdict = JSON.stringify({ status: 'ok', python: '3.12.3', midword: '0.1.0', torch: '2.13.0' });
  const python = writeExecutable(
    path.join(dir, 'fake-python'),
    [
      '#!/bin/sh',
      `if [ "$1" = "-c" ]; then echo '${CHECK_MARKER}${verdict}'; exit 0; fi`,
      `echo "$@" > '${args}'`,
      `MIDWORD_FAKE_LOG='${log}' exec '${process.execPath}' '${server}'`,
      '',
    ].join('\n'),
  );
  return { python, log, args };
}

export function serverMessages(files: FakeServerFiles): { method: string; params: Record<string, unknown> }[] {
  if (!fs.existsSync(files.log)) {
    return [];
  }
  return fs
    .readFileSync(files.log, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as { method: string; params: Record<string, unknown> });
}

export async function waitFor(what: string, predicate: () => boolean, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  while (!predicate()) {
    if (Date.now() - started > timeoutMs) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
