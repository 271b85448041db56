import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { RestartScheduler } from '../restartScheduler';
import { deferred, flush, ManualTimers } from './helpers/manualTimers';

/** A task whose runs we can hold open and count. */
function controllableTask(): { task: () => Promise<void>; runs: number; active: number; maxActive: number; finish: () => void } {
  const state = {
    runs: 0,
    active: 0,
    maxActive: 0,
    finishers: [] as (() => void)[],
    task: async (): Promise<void> => {
      state.runs++;
      state.active++;
      state.maxActive = Math.max(state.maxActive, state.active);
      const gate = deferred();
      state.finishers.push(gate.resolve);
      await gate.promise;
      state.active--;
    },
    finish: (): void => {
      state.finishers.shift()?.();
    },
  };
  return state;
}

describe('RestartScheduler', () => {
  it('N rapid requests -> exactly one run, after the debounce delay', async () => {
    const timers = new ManualTimers();
    let runs = 0;
    const scheduler = new RestartScheduler(() => {
      runs++;
      return Promise.resolve();
    }, 500, undefined, timers);
    for (let i = 0; i < 10; i++) {
      scheduler.request();
      await timers.tick(100);
    }
    assert.equal(runs, 0, 'each request restarts the delay');
    await timers.tick(399); // 499 ms after the last request
    assert.equal(runs, 0);
    await timers.tick(1);
    assert.equal(runs, 1);
    await timers.tick(5000);
    assert.equal(runs, 1);
    assert.equal(timers.count, 0);
  });

  it('a request during a restart waits, then runs once after it; never overlapping', async () => {
    const timers = new ManualTimers();
    const t = controllableTask();
    const scheduler = new RestartScheduler(t.task, 500, undefined, timers);
    scheduler.request();
    await timers.tick(500);
    assert.equal(t.runs, 1);
    assert.ok(scheduler.isRunning);

    // Several requests while the first restart runs (their debounce delays expire meanwhile).
    scheduler.request();
    await timers.tick(600);
    scheduler.request();
    await timers.tick(600);
    assert.equal(t.runs, 1, 'no second run while the first is running');

    t.finish();
    await flush();
    assert.equal(t.runs, 2, 'exactly one more run after the running one');
    assert.equal(t.maxActive, 1);
    t.finish();
    await flush();
    await timers.tick(5000);
    assert.equal(t.runs, 2);
    assert.equal(scheduler.isRunning, false);
    await scheduler.whenIdle();
  });

  it('a request whose delay is still pending when the run ends runs after its delay', async () => {
    const timers = new ManualTimers();
    const t = controllableTask();
    const scheduler = new RestartScheduler(t.task, 500, undefined, timers);
    scheduler.runNow();
    assert.equal(t.runs, 1);
    scheduler.request();
    t.finish();
    await flush();
    assert.equal(t.runs, 1);
    await timers.tick(500);
    assert.equal(t.runs, 2);
    t.finish();
    await flush();
  });

  it('runNow skips the delay but still never overlaps', async () => {
    const timers = new ManualTimers();
    const t = controllableTask();
    const scheduler = new RestartScheduler(t.task, 500, undefined, timers);
    scheduler.runNow();
    scheduler.runNow();
    scheduler.runNow();
    assert.equal(t.runs, 1);
    t.finish();
    await flush();
    assert.equal(t.runs, 2);
    t.finish();
    await flush();
    assert.equal(t.runs, 2);
    assert.equal(t.maxActive, 1);
  });

  it('a failing run is reported and does not block later runs', async () => {
    const timers = new ManualTimers();
    const errors: unknown[] = [];
    let runs = 0;
    const scheduler = new RestartScheduler(
      () => {
        runs++;
        return Promise.reject(new Error(`failure ${runs}`));
      },
      10,
      (error) => errors.push(error),
      timers,
    );
    scheduler.request();
    await timers.tick(10);
    scheduler.request();
    await timers.tick(10);
    assert.equal(runs, 2);
    assert.deepEqual(errors.map(String), ['Error: failure 1', 'Error: failure 2']);
  });

  it('dispose drops scheduled runs and whenIdle resolves', async () => {
    const timers = new ManualTimers();
    let runs = 0;
    const scheduler = new RestartScheduler(() => {
      runs++;
      return Promise.resolve();
    }, 500, undefined, timers);
    scheduler.request();
    const idle = scheduler.whenIdle();
    scheduler.dispose();
    await idle;
    await timers.tick(1000);
    scheduler.request();
    await timers.tick(1000);
    assert.equal(runs, 0);
  });

  it('works with real timers too (short debounce)', async () => {
    let runs = 0;
    const scheduler = new RestartScheduler(async () => {
      runs++;
      await new Promise((resolve) => setTimeout(resolve, 30));
    }, 20);
    for (let i = 0; i < 5; i++) {
      scheduler.request();
    }
    await new Promise((resolve) => setTimeout(resolve, 35)); // first run has started
    scheduler.request();
    scheduler.request();
    await new Promise((resolve) => setTimeout(resolve, 10));
    await scheduler.whenIdle();
    assert.equal(runs, 2);
  });
});
