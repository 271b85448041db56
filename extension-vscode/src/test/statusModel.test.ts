import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { formatLatency, parseProgressValue, parseServerStatus, shortModelName, StatusModel } from '../statusModel';

function running(): StatusModel {
  const model = new StatusModel();
  model.setPhase('starting');
  model.setPhase('running');
  return model;
}

describe('status bar model', () => {
  it('stopped -> starting -> running (no status yet) -> ready with model', () => {
    const model = new StatusModel();
    assert.equal(model.view().kind, 'stopped');
    model.setPhase('starting');
    model.setInterpreter('/usr/bin/python3 (found on PATH)');
    assert.equal(model.view().kind, 'starting');
    assert.match(model.view().text, /loading~spin/);
    assert.match(model.view().tooltip, /Python: \/usr\/bin\/python3/);
    model.setPhase('running');
    assert.equal(model.view().kind, 'ready');
    model.onServerStatus({ state: 'ready', model: '/models/qwen2.5-coder-0.5b/', message: 'loaded in 2.1 s', latencyMs: null });
    const view = model.view();
    assert.equal(view.kind, 'ready');
    assert.equal(view.text, '$(sparkle) midword qwen2.5-coder-0.5b');
    assert.match(view.tooltip, /midword ready: \/models\/qwen2\.5-coder-0\.5b\//);
    assert.match(view.tooltip, /loaded in 2\.1 s/);
    assert.equal(view.command, 'midword.showLog');
    assert.equal(view.error, false);
  });

  it("a server that announced midword/status shows 'starting' until the first one arrives", () => {
    const model = new StatusModel();
    model.setPhase('starting');
    model.setPhase('running');
    model.setAwaitsServerStatus(true);
    assert.equal(model.view().kind, 'starting');
    assert.match(model.view().tooltip, /^midword server started; waiting for its model status/);
    model.onServerStatus({ state: 'ready', model: 'm', message: '', latencyMs: null });
    assert.equal(model.view().kind, 'ready');
    // a restart forgets the promise together with the old status
    model.setPhase('starting');
    model.setPhase('running');
    assert.equal(model.view().kind, 'ready', 'a server that announced nothing is ready once running');
  });

  it('a status that arrives before the client reports running is kept', () => {
    const model = new StatusModel();
    model.setPhase('starting');
    model.onServerStatus({ state: 'loading', model: 'm', message: 'weights', latencyMs: null });
    model.setPhase('running');
    model.setAwaitsServerStatus(true);
    assert.equal(model.view().kind, 'loading');
  });

  it('progress begin / report / end drive the loading state, with percentage', () => {
    const model = running();
    model.onProgress('load-1', { kind: 'begin', title: 'Loading model', message: 'tokenizer', percentage: 0 });
    let view = model.view();
    assert.equal(view.kind, 'loading');
    assert.equal(view.text, '$(loading~spin) midword 0%');
    assert.match(view.tooltip, /^Loading model: tokenizer \(0%\)/);

    model.onProgress('load-1', { kind: 'report', message: 'weights', percentage: 42.4 });
    view = model.view();
    assert.equal(view.text, '$(loading~spin) midword 42%');
    assert.match(view.tooltip, /^Loading model: weights \(42%\)/);

    model.onProgress('load-1', { kind: 'report', message: 'warming up' });
    assert.equal(model.view().text, '$(loading~spin) midword 42%', 'percentage is kept when a report omits it');
    assert.match(model.view().tooltip, /warming up/);

    model.onProgress('load-1', { kind: 'end', message: 'done' });
    assert.equal(model.view().kind, 'ready');
  });

  it('progress without a percentage shows no number; reports for unknown tokens are ignored', () => {
    const model = running();
    model.onProgress(7, { kind: 'report', message: 'stray', percentage: 50 });
    assert.equal(model.view().kind, 'ready');
    model.onProgress(7, { kind: 'begin', title: 'Indexing' });
    assert.equal(model.view().text, '$(loading~spin) midword');
    assert.match(model.view().tooltip, /^Indexing/);
  });

  it('the newest of several progress tokens is shown; ending it reveals the older one', () => {
    const model = running();
    model.onProgress('a', { kind: 'begin', title: 'Loading model', percentage: 10 });
    model.onProgress('b', { kind: 'begin', title: 'Compiling', percentage: 70 });
    assert.match(model.view().tooltip, /^Compiling/);
    model.onProgress('b', { kind: 'end' });
    assert.match(model.view().tooltip, /^Loading model/);
    model.onProgress('a', { kind: 'end' });
    assert.equal(model.view().kind, 'ready');
  });

  it('midword/status loading -> ready -> error -> loading (reload) -> ready', () => {
    const model = running();
    model.onServerStatus({ state: 'loading', model: 'default', message: 'reading weights', latencyMs: null });
    assert.equal(model.view().kind, 'loading');
    assert.match(model.view().tooltip, /^Loading model: reading weights/);

    model.onServerStatus({ state: 'ready', model: 'default', message: '', latencyMs: null });
    assert.equal(model.view().kind, 'ready');

    model.onServerStatus({ state: 'error', model: 'default', message: 'CUDA out of memory', latencyMs: null });
    let view = model.view();
    assert.equal(view.kind, 'error');
    assert.equal(view.text, '$(error) midword');
    assert.equal(view.error, true);
    assert.equal(view.command, 'midword.showLog', 'clicking the error shows the log');
    assert.match(view.tooltip, /CUDA out of memory/);

    model.onServerStatus({ state: 'loading', model: 'other', message: '', latencyMs: null });
    assert.equal(model.view().kind, 'loading');
    model.onServerStatus({ state: 'ready', model: 'other', message: '', latencyMs: 80 });
    view = model.view();
    assert.equal(view.kind, 'ready');
    assert.equal(view.text, '$(sparkle) midword other 80 ms');
  });

  it('shows the last completion latency: the server figure first, else the measured round trip', () => {
    const model = running();
    model.onServerStatus({ state: 'ready', model: 'm', message: '', latencyMs: null });
    model.onCompletionLatency(231.6);
    assert.equal(model.view().text, '$(sparkle) midword m 232 ms');
    assert.match(model.view().tooltip, /Last round trip: 232 ms/);
    model.onServerStatus({ state: 'ready', model: 'm', message: '', latencyMs: 1234 });
    model.onCompletionLatency(1300);
    assert.equal(model.view().text, '$(sparkle) midword m 1.2 s');
    assert.match(model.view().tooltip, /Last completion: 1\.2 s \(server\)/);
    model.onServerStatus({ state: 'ready', model: 'm', message: '', latencyMs: null });
    assert.equal(model.latencyMs, 1234, 'a status without latency keeps the last one');
  });

  it('client errors (failed start) show the error with the log on click, and a restart clears it', () => {
    const model = new StatusModel();
    model.setPhase('starting');
    model.setPhase('error', 'midword: torch is not installed');
    const view = model.view();
    assert.equal(view.kind, 'error');
    assert.equal(view.error, true);
    assert.equal(view.command, 'midword.showLog');
    assert.match(view.tooltip, /torch is not installed\n\nClick to show the log\./);
    model.setPhase('starting');
    assert.equal(model.view().kind, 'starting');
  });

  it('a server error status from a previous run is forgotten on restart', () => {
    const model = running();
    model.onServerStatus({ state: 'error', model: 'm', message: 'bad', latencyMs: null });
    model.setPhase('starting');
    model.setPhase('running');
    assert.equal(model.view().kind, 'ready');
  });

  it('disabled: shows off, click toggles; errors still win', () => {
    const model = running();
    model.setEnabled(false);
    let view = model.view();
    assert.equal(view.kind, 'disabled');
    assert.equal(view.text, '$(circle-slash) midword');
    assert.equal(view.command, 'midword.toggle');
    model.onServerStatus({ state: 'error', model: '', message: 'x', latencyMs: null });
    assert.equal(model.view().kind, 'error');
    model.onServerStatus({ state: 'ready', model: '', message: '', latencyMs: null });
    model.setEnabled(true);
    view = model.view();
    assert.equal(view.kind, 'ready');
  });

  it('the active document off: "off for <language>" (click flips it) or "excluded file"; the global switch and errors still win', () => {
    const model = new StatusModel();
    model.setPhase('running');
    model.onServerStatus({ state: 'ready', model: '/m/tiny', message: '', latencyMs: null });
    model.setActiveBlocked({ kind: 'language', languageId: 'markdown' });
    let view = model.view();
    assert.equal(view.kind, 'off-here');
    assert.equal(view.text, '$(circle-slash) midword: off for markdown');
    assert.equal(view.command, 'midword.toggleLanguage');
    assert.match(view.tooltip, /midword\.languages/);
    model.setActiveBlocked({ kind: 'excluded', pattern: '.env' });
    view = model.view();
    assert.equal(view.text, '$(circle-slash) midword: excluded file');
    assert.match(view.tooltip, /"\.env" of midword\.excludeFiles/);
    assert.notEqual(view.command, 'midword.toggleLanguage');
    model.setEnabled(false);
    assert.equal(model.view().text, '$(circle-slash) midword');
    model.setEnabled(true);
    model.onServerStatus({ state: 'error', model: '', message: 'boom', latencyMs: null });
    assert.equal(model.view().kind, 'error');
    model.onServerStatus({ state: 'ready', model: '/m/tiny', message: '', latencyMs: null });
    model.setActiveBlocked(undefined);
    assert.equal(model.view().text, '$(sparkle) midword tiny');
  });

  it('parses midword/status and $/progress params defensively', () => {
    assert.deepEqual(parseServerStatus({ state: 'ready', model: 'm', message: 'ok', latencyMs: 12 }), {
      state: 'ready',
      model: 'm',
      message: 'ok',
      latencyMs: 12,
    });
    assert.deepEqual(parseServerStatus({ state: 'loading' }), { state: 'loading', model: '', message: '', latencyMs: null });
    assert.equal(parseServerStatus({ state: 'ready', fim: 'qwen-spm' })?.fim, 'qwen-spm');
    assert.equal(parseServerStatus({ state: 'ready', fim: 3 })?.fim, undefined);
    assert.equal(parseServerStatus({ state: 'ready', backend: 'llamacpp' })?.backend, 'llamacpp');
    assert.equal(parseServerStatus({ state: 'ready', backend: 7 })?.backend, undefined);
    assert.equal(parseServerStatus({ state: 'busy' }), undefined);
    assert.equal(parseServerStatus(null), undefined);
    assert.equal(parseServerStatus({ state: 'ready', latencyMs: -5 })?.latencyMs, null);
    assert.deepEqual(parseProgressValue({ kind: 'begin', title: 'T', percentage: 5 }), {
      kind: 'begin',
      title: 'T',
      message: undefined,
      percentage: 5,
    });
    assert.equal(parseProgressValue({ kind: 'other' }), undefined);
    assert.equal(parseProgressValue('x'), undefined);
  });

  it('shows the fill-in-the-middle template, or FIM off, when the server says', () => {
    const model = new StatusModel();
    model.setPhase('running');
    model.onServerStatus({ state: 'ready', model: 'SmolLM2-135M', message: '', latencyMs: null, fim: 'off' });
    assert.match(model.view().text, /midword SmolLM2-135M · FIM off/);
    model.onServerStatus({ state: 'ready', model: 'default', message: '', latencyMs: 40, fim: 'qwen-spm' });
    const view = model.view();
    assert.match(view.text, /· FIM qwen-spm 40 ms/);
    assert.match(view.tooltip, /Fill-in-the-middle: qwen-spm/);
    model.onServerStatus({ state: 'ready', model: 'm.gguf', message: '', latencyMs: null, backend: 'llamacpp' });
    assert.match(model.view().tooltip, /Runs on: llamacpp/);
    model.onServerStatus({ state: 'ready', model: 'm', message: '', latencyMs: null });
    assert.doesNotMatch(model.view().text, /FIM/);
  });

  it('formats names and latencies', () => {
    assert.equal(shortModelName('/a/b/model/'), 'model');
    assert.equal(shortModelName('C:\\models\\m1'), 'm1');
    assert.equal(shortModelName('default'), 'default');
    assert.equal(formatLatency(87.4), '87 ms');
    assert.equal(formatLatency(1500), '1.5 s');
    assert.equal(formatLatency(12_400), '12 s');
  });
});
