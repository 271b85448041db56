/**
 * What a settings change means for the running server. Pure: the caller
 * passes `ConfigurationChangeEvent.affectsConfiguration`.
 */
import { EXTENSION_SETTINGS, RELOAD_OPTION_KEYS, SECTION, SERVER_OPTION_KEYS, type ServerOptionKey } from './options';

export interface ConfigChangeEffects {
  /** `midword.python.path` changed: the server process must be restarted. */
  restartServer: boolean;
  /** A server option changed: send `workspace/didChangeConfiguration`. */
  forwardToServer: boolean;
  /** Server options that changed (forwarded, never a restart of the process). */
  changedOptions: ServerOptionKey[];
  /** Of those, the ones that make the server reload its model. */
  reloadOptions: ServerOptionKey[];
  /** `midword.enable` changed: turn inline completions on or off, nothing else. */
  enablementChanged: boolean;
}

export function classifyConfigurationChange(affects: (section: string) => boolean): ConfigChangeEffects {
  const setting = (key: string): boolean => affects(`${SECTION}.${key}`);
  const changedOptions = SERVER_OPTION_KEYS.filter(setting);
  return {
    restartServer: setting(EXTENSION_SETTINGS.pythonPath),
    forwardToServer: changedOptions.length > 0,
    changedOptions,
    reloadOptions: changedOptions.filter((key) => RELOAD_OPTION_KEYS.includes(key)),
    enablementChanged: setting(EXTENSION_SETTINGS.enable),
  };
}
