import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { deferred, harness, OK_CHECK } from './helpers/fakeController';
import { flush } from './helpers/manualTimers';

/** affectsConfiguration for the given full setting ids. */
function affects(...ids: string[]): (section: string) => boolean {
  return (section) => ids.some((id) => id === section || id.startsWith(`${section}.`));
}

describe('ServerController: start', () => {
  it('resolves Python, checks imports, starts the client with the current options', async () => {
    const h = harness({ settings: { topP: 0.5 } });
    h.controller.start();
    await h.controller.whenIdle();
    assert.deepEqual(h.checks, ['/venv/bin/python']);
    assert.equal(h.clients.length, 1);
    const client = h.lastClient();
    assert.deepEqual(client.launch, { python: '/venv/bin/python', cwd: '/ws' });
    assert.equal(client.hooks.currentOptions().topP, 0.5);
    assert.equal(client.started, 1);
    assert.equal(h.status.view().kind, 'ready');
    assert.deepEqual(
      h.views.map((view) => view.kind),
      ['starting', 'ready'],
    );
    assert.ok(h.logs.includes('info: Import check passed in 42 ms: Python 3.12.3, midword 0.1.0, torch 2.13.0.'));
    assert.deepEqual(h.problems, []);
  });

  it("midword's own server: 'starting' until its first midword/status, not a false 'ready'", async () => {
    const h = harness();
    h.prepareClient = (client) => {
      client.serverName = 'midword';
    };
    h.controller.start();
    await h.controller.whenIdle();
    assert.equal(h.lastClient().started, 1);
    assert.deepEqual(
      h.views.map((view) => view.kind),
      ['starting', 'starting'],
    );
    assert.match(h.status.view().tooltip, /waiting for its model status/);
    h.lastClient().hooks.onServerStatus({ state: 'loading', model: 'smollm2', message: 'weights', latencyMs: null });
    assert.equal(h.status.view().kind, 'loading');
    h.lastClient().hooks.onServerStatus({ state: 'ready', model: 'smollm2', message: '', latencyMs: null });
    assert.equal(h.status.view().kind, 'ready');
  });

  it('no interpreter: error status, a problem with Select Interpreter, no client', async () => {
    const h = harness({ resolution: { kind: 'not-found', message: 'No Python interpreter found: x.', notes: ['python3 is not on PATH.'], fromSetting: false } });
    h.controller.start();
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 0);
    assert.equal(h.checks.length, 0);
    assert.equal(h.status.view().kind, 'error');
    assert.equal(h.problems[0]?.kind, 'interpreter-not-found');
    assert.ok(h.problems[0].actions.includes('selectInterpreter'));
    assert.ok(h.logs.includes('info: python3 is not on PATH.'));
  });

  for (const [check, kind] of [
    [{ kind: 'midword-missing', missing: 'midword', detail: 'No module', python: '3.12' }, 'midword-missing'],
    [{ kind: 'torch-missing', detail: 'No module', python: '3.12' }, 'torch-missing'],
    [{ kind: 'timeout', timeoutMs: 30000 }, 'timeout'],
    [{ kind: 'interpreter-not-found', detail: 'ENOENT' }, 'interpreter-not-found'],
  ] as const) {
    it(`import check ${check.kind}: reports ${kind}, never launches the server`, async () => {
      const h = harness({ check });
      h.controller.start();
      await h.controller.whenIdle();
      assert.equal(h.clients.length, 0);
      assert.equal(h.problems.length, 1);
      assert.equal(h.problems[0]?.kind, kind);
      assert.equal(h.status.view().kind, 'error');
      assert.equal(h.status.view().command, 'midword.showLog');
    });
  }

  it('the server failing to initialize is reported as server-failed', async () => {
    const h = harness();
    h.prepareClient = (client) => {
      client.startError = new Error('Connection to server got closed');
    };
    h.controller.start();
    await h.controller.whenIdle();
    assert.equal(h.problems[0]?.kind, 'server-failed');
    assert.match(h.problems[0].message, /Connection to server got closed/);
    assert.equal(h.lastClient().stopped, 1, 'the failed client is released');
    assert.equal(h.controller.isServerRunning, false);
  });

  it('a fixed environment starts after Restart Server', async () => {
    const h = harness({ check: { kind: 'torch-missing', detail: 'x', python: '3' } });
    h.controller.start();
    await h.controller.whenIdle();
    assert.equal(h.status.view().kind, 'error');
    h.check = OK_CHECK;
    h.controller.requestRestart('command');
    await h.timers.tick(500);
    await h.controller.whenIdle();
    assert.equal(h.status.view().kind, 'ready');
    assert.equal(h.clients.length, 1);
  });
});

describe('ServerController: live settings', () => {
  async function started(): Promise<ReturnType<typeof harness>> {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    return h;
  }

  it('server options are forwarded with didChangeConfiguration (the whole options object), no restart', async () => {
    const h = await started();
    h.settings.temperature = 0.8;
    h.controller.onConfigurationChanged(affects('midword.temperature'));
    await flush();
    await h.timers.tick(2000);
    const client = h.lastClient();
    assert.equal(client.sent.length, 1);
    assert.equal(client.sent[0]?.temperature, 0.8);
    assert.equal(client.sent[0].maxTokens, 48, 'the full object, like initializationOptions');
    assert.equal(h.clients.length, 1);
    assert.equal(client.stopped, 0);
  });

  it('model/device/dtype are forwarded too (the server reloads), and the log says so', async () => {
    const h = await started();
    h.settings.model = '/models/m';
    h.controller.onConfigurationChanged(affects('midword.model'));
    await flush();
    await h.timers.tick(2000);
    assert.equal(h.lastClient().sent[0]?.model, '/models/m');
    assert.equal(h.clients.length, 1);
    assert.ok(h.logs.some((line) => line.includes('reloads the model for model')));
  });

  it('midword.python.path restarts the server process (debounced), and is not forwarded', async () => {
    const h = await started();
    const first = h.lastClient();
    h.settings['python.path'] = '/opt/python';
    h.controller.onConfigurationChanged(affects('midword.python.path'));
    h.controller.onConfigurationChanged(affects('midword.python.path'));
    h.controller.onConfigurationChanged(affects('midword.python.path'));
    await h.timers.tick(499);
    assert.equal(h.clients.length, 1);
    await h.timers.tick(1);
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 2, 'one restart for three changes');
    assert.equal(first.stopped, 1);
    assert.deepEqual(first.sent, []);
    assert.equal(h.lastClient().started, 1);
  });

  it('midword.enable toggles completions without a restart or a message to the server', async () => {
    const h = await started();
    h.settings.enable = false;
    h.controller.onConfigurationChanged(affects('midword.enable'));
    await h.timers.tick(2000);
    assert.equal(h.controller.isEnabled, false);
    assert.equal(h.lastClient().hooks.isEnabled(), false);
    assert.equal(h.status.view().kind, 'disabled');
    assert.equal(h.clients.length, 1);
    assert.deepEqual(h.lastClient().sent, []);
    h.settings.enable = true;
    h.controller.onConfigurationChanged(affects('midword.enable'));
    assert.equal(h.lastClient().hooks.isEnabled(), true);
    assert.equal(h.status.view().kind, 'ready');
  });

  it('changes while the server is not running are kept for the next start', async () => {
    const h = harness({ check: { kind: 'timeout', timeoutMs: 1 } });
    h.controller.start();
    await h.controller.whenIdle();
    h.settings.maxItems = 5;
    h.controller.onConfigurationChanged(affects('midword.maxItems'));
    await flush();
    assert.ok(h.logs.some((line) => line.includes('the server will get them when it starts')));
    h.check = OK_CHECK;
    h.controller.requestRestart('test');
    await h.timers.tick(500);
    await h.controller.whenIdle();
    assert.equal(h.lastClient().hooks.currentOptions().maxItems, 5);
  });

  it("the Python extension's interpreter change restarts only when midword.python.path is empty", async () => {
    const h = await started();
    h.controller.onPythonInterpreterChanged();
    await h.timers.tick(500);
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 2);
    h.settings['python.path'] = '/opt/python';
    h.controller.onPythonInterpreterChanged();
    await h.timers.tick(500);
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 2);
  });
});

describe('ServerController: restarts', () => {
  it('N rapid Restart Server requests -> exactly one restart', async () => {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    for (let i = 0; i < 8; i++) {
      h.controller.requestRestart('command');
      await h.timers.tick(50);
    }
    await h.timers.tick(500);
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 2);
    assert.equal(h.clients[0]?.stopped, 1);
  });

  it('a restart requested during a restart waits and runs once after it; never two servers at once', async () => {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    const gate = deferred();
    h.checkGate = gate.promise;
    h.controller.requestRestart('first');
    await h.timers.tick(500);
    assert.equal(h.checks.length, 2, 'second start is in its import check');
    h.controller.requestRestart('during 1');
    await h.timers.tick(500);
    h.controller.requestRestart('during 2');
    await h.timers.tick(500);
    assert.equal(h.checks.length, 2, 'nothing overlaps the running restart');
    h.checkGate = undefined;
    gate.resolve();
    await h.controller.whenIdle();
    assert.equal(h.checks.length, 3, 'exactly one more restart');
    assert.equal(h.clients.length, 3);
    const running = h.clients.filter((client) => client.running);
    assert.equal(running.length, 1);
    assert.equal(running[0], h.lastClient());
  });

  it('a crash restarts the server; too many crashes in a short time stop trying', async () => {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    for (let crash = 1; crash <= 3; crash++) {
      h.lastClient().crash();
      assert.equal(h.status.view().kind, 'starting');
      await h.timers.tick(500);
      await h.controller.whenIdle();
      assert.equal(h.clients.length, crash + 1);
      assert.equal(h.status.view().kind, 'ready');
    }
    h.lastClient().crash();
    await h.timers.tick(5000);
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 4);
    assert.equal(h.status.view().kind, 'error');
    assert.equal(h.problems[0]?.kind, 'server-failed');
    assert.match(h.problems[0].message, /stopped 4 times in 3 minutes/);
  });

  it('a crash report from an old client (already replaced) is ignored', async () => {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    const old = h.lastClient();
    h.controller.requestRestart('x');
    await h.timers.tick(500);
    await h.controller.whenIdle();
    old.crash();
    await h.timers.tick(1000);
    await h.controller.whenIdle();
    assert.equal(h.clients.length, 2);
    assert.equal(h.status.view().kind, 'ready');
  });

  it('server notifications reach the status bar through the hooks', async () => {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    const hooks = h.lastClient().hooks;
    hooks.onProgress('t', { kind: 'begin', title: 'Loading model', percentage: 30 });
    assert.equal(h.views[h.views.length - 1]?.text, '$(loading~spin) midword 30%');
    hooks.onProgress('t', { kind: 'end' });
    hooks.onServerStatus({ state: 'ready', model: 'tiny', message: '', latencyMs: 55 });
    assert.equal(h.views[h.views.length - 1]?.text, '$(sparkle) midword tiny 55 ms');
    hooks.onServerStatus({ state: 'error', model: 'tiny', message: 'oom', latencyMs: null });
    assert.equal(h.views[h.views.length - 1]?.kind, 'error');
    assert.ok(h.logs.includes('error: Server error: oom'));
  });

  it('dispose stops the server and drops scheduled restarts', async () => {
    const h = harness();
    h.controller.start();
    await h.controller.whenIdle();
    h.controller.requestRestart('x');
    await h.controller.dispose();
    await h.timers.tick(1000);
    assert.equal(h.clients.length, 1);
    assert.equal(h.lastClient().stopped, 1);
  });
});
