/**
 * The server's stderr in the midword output channel, each line at its own level.
 *
 * vscode-languageclient logs every stderr line as an error. The server's log
 * lines (`2026-01-02 03:04:05,678 INFO midword.server: model ready`) carry
 * their level; library warnings come through Python's logging as
 * `WARNING py.warnings: ...FutureWarning...`. Once the client runs, the
 * server sends its own (`midword.*`) records as `window/logMessage` too, so
 * their stderr copies are dropped: each line shows once. Lines without a
 * header continue the record above (a traceback, a warning's source line);
 * before any header they are errors (a crash while starting). Pure: no
 * `vscode` import.
 */

export type ChannelLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

export interface RoutedLine {
  level: ChannelLevel;
  text: string;
}

/** `<date> <time>,<ms> LEVEL logger: message` (server/logs.py FORMAT). */
const RECORD = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$/;
/** A warning printed by Python's `warnings` module itself: `file.py:12: FutureWarning: ...`. */
const PYTHON_WARNING = /^\S.*:\d+: \w*Warning: /;

const LEVELS: Record<string, ChannelLevel> = {
  DEBUG: 'debug',
  INFO: 'info',
  WARNING: 'warn',
  ERROR: 'error',
  CRITICAL: 'error',
};

/** True for the server's own loggers (`midword`, `midword.server`, ...). */
export function isServerLogger(name: string): boolean {
  return name === 'midword' || name.startsWith('midword.');
}

export class StderrRouter {
  /** Set once the server sends its records as `window/logMessage` (after initialize). */
  clientReceivesLogs = false;
  private record: { level: ChannelLevel; dropped: boolean } = { level: 'error', dropped: false };

  /** Where one stderr line goes; `undefined` when it duplicates a `window/logMessage`. */
  route(line: string): RoutedLine | undefined {
    const header = RECORD.exec(line);
    if (header !== null) {
      const [, levelName = 'ERROR', logger = '', message = ''] = header;
      this.record = {
        level: LEVELS[levelName] ?? 'error',
        dropped: this.clientReceivesLogs && isServerLogger(logger),
      };
      return this.record.dropped ? undefined : { level: this.record.level, text: `${logger}: ${message}` };
    }
    if (PYTHON_WARNING.test(line)) {
      this.record = { level: 'warn', dropped: false };
    }
    return this.record.dropped ? undefined : { level: this.record.level, text: line };
  }
}
