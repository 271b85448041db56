import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { classifyConfigurationChange } from '../configChange';

/** affectsConfiguration for a change of the given full setting ids (parents included, like VS Code). */
function affects(...ids: string[]): (section: string) => boolean {
  return (section) => ids.some((id) => id === section || id.startsWith(`${section}.`));
}

describe('classifyConfigurationChange', () => {
  it('midword.python.path restarts the server process and is not forwarded', () => {
    const effects = classifyConfigurationChange(affects('midword.python.path'));
    assert.equal(effects.restartServer, true);
    assert.equal(effects.forwardToServer, false);
    assert.equal(effects.enablementChanged, false);
  });

  it('midword.enable only toggles completions', () => {
    const effects = classifyConfigurationChange(affects('midword.enable'));
    assert.deepEqual(effects, {
      restartServer: false,
      forwardToServer: false,
      changedOptions: [],
      reloadOptions: [],
      enablementChanged: true,
    });
  });

  it('server options are forwarded, never a restart; model/device/dtype and the ensemble settings are marked as reloads', () => {
    for (const key of ['model', 'device', 'dtype', 'ensemble', 'ensembleWeights', 'ensembleCombine']) {
      const effects = classifyConfigurationChange(affects(`midword.${key}`));
      assert.equal(effects.restartServer, false, key);
      assert.equal(effects.forwardToServer, true, key);
      assert.deepEqual(effects.changedOptions, [key]);
      assert.deepEqual(effects.reloadOptions, [key]);
    }
    for (const key of ['method', 'mode', 'temperature', 'topP', 'maxTokens', 'timeBudgetMs', 'multiline', 'minConfidence', 'maxLines', 'windowBytes', 'logLevel', 'maxItems', 'acceptanceLog', 'symbolsMinMass']) {
      const effects = classifyConfigurationChange(affects(`midword.${key}`));
      assert.equal(effects.forwardToServer, true, key);
      assert.equal(effects.restartServer, false, key);
      assert.deepEqual(effects.changedOptions, [key]);
      assert.deepEqual(effects.reloadOptions, [], key);
    }
  });

  it('trace.server, symbols (read at each request) and unrelated settings do nothing', () => {
    for (const id of ['midword.trace.server', 'midword.symbols', 'editor.fontSize', 'python.defaultInterpreterPath']) {
      const effects = classifyConfigurationChange(affects(id));
      assert.equal(effects.restartServer || effects.forwardToServer || effects.enablementChanged, false, id);
    }
  });

  it('an ensemble change with a live one: only the ensemble settings reload, in option order', () => {
    const effects = classifyConfigurationChange(affects('midword.temperature', 'midword.ensembleCombine', 'midword.ensembleWeights'));
    assert.deepEqual(effects.changedOptions, ['ensembleWeights', 'ensembleCombine', 'temperature']);
    assert.deepEqual(effects.reloadOptions, ['ensembleWeights', 'ensembleCombine']);
  });

  it('a mixed change reports all of it', () => {
    const effects = classifyConfigurationChange(affects('midword.topP', 'midword.device', 'midword.enable'));
    assert.deepEqual(effects.changedOptions, ['device', 'topP']);
    assert.deepEqual(effects.reloadOptions, ['device']);
    assert.equal(effects.enablementChanged, true);
  });
});
