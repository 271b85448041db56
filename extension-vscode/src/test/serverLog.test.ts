import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { isServerLogger, StderrRouter } from '../serverLog';

const record = (level: string, logger: string, message: string): string => `2026-11-26 00:43:01,757 ${level} ${logger}: ${message}`;

describe('StderrRouter', () => {
  it('gives each record its own level, not [error]', () => {
    const router = new StderrRouter();
    assert.deepEqual(router.route(record('INFO', 'midword.server', 'model default ready')), { level: 'info', text: 'midword.server: model default ready' });
    assert.deepEqual(router.route(record('DEBUG', 'midword.server', 'c1: 1 item')), { level: 'debug', text: 'midword.server: c1: 1 item' });
    assert.deepEqual(router.route(record('WARNING', 'urllib3', 'retrying')), { level: 'warn', text: 'urllib3: retrying' });
    assert.deepEqual(router.route(record('CRITICAL', 'midword', 'out of memory')), { level: 'error', text: 'midword: out of memory' });
  });

  it("library warnings (transformers' FutureWarning) are warnings, with their continuation lines", () => {
    const router = new StderrRouter();
    router.clientReceivesLogs = true;
    const warning = record('WARNING', 'py.warnings', '/site-packages/transformers/utils.py:88: FutureWarning: `x` is deprecated');
    assert.equal(router.route(warning)?.level, 'warn');
    assert.deepEqual(router.route('  warnings.warn('), { level: 'warn', text: '  warnings.warn(' });
    // printed by the warnings module itself, before logging was set up
    assert.equal(router.route('/site-packages/torch/x.py:3: UserWarning: TypedStorage is deprecated')?.level, 'warn');
    assert.equal(router.route('  return self.fget.__get__(instance, owner)()')?.level, 'warn');
  });

  it("drops the server's own records once the client receives them as window/logMessage", () => {
    const router = new StderrRouter();
    assert.equal(router.route(record('INFO', 'midword.server', 'starting'))?.level, 'info', 'before initialize: only here');
    router.clientReceivesLogs = true;
    assert.equal(router.route(record('INFO', 'midword.server', 'model default ready')), undefined);
    assert.equal(router.route(record('ERROR', 'midword.server', 'failed')), undefined);
    assert.equal(router.route('Traceback (most recent call last):'), undefined, 'its traceback goes with it');
    assert.equal(router.route(record('WARNING', 'transformers', 'slow tokenizer'))?.level, 'warn', 'a library record stays');
    assert.equal(router.route(record('INFO', 'midwordish', 'not ours'))?.level, 'info');
  });

  it('lines before any record are errors (a crash while starting)', () => {
    const router = new StderrRouter();
    assert.deepEqual(router.route('Traceback (most recent call last):'), { level: 'error', text: 'Traceback (most recent call last):' });
    assert.equal(router.route("ModuleNotFoundError: No module named 'torch'")?.level, 'error');
  });

  it('knows the server loggers', () => {
    assert.ok(isServerLogger('midword') && isServerLogger('midword.server'));
    assert.ok(!isServerLogger('midwordx') && !isServerLogger('py.warnings'));
  });
});
