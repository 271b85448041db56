/**
 * Reads the setting defaults declared in the extension's package.json
 * (`contributes.configuration.properties`). Pure: no `vscode` import.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

import { SECTION } from './options';

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The `contributes.configuration.properties` object of a manifest (configuration may be one object or a list). */
export function settingProperties(manifest: unknown): Record<string, Record<string, unknown>> {
  const contributes = isRecord(manifest) ? manifest.contributes : undefined;
  const configuration = isRecord(contributes) ? contributes.configuration : undefined;
  const sections = Array.isArray(configuration) ? configuration : [configuration];
  const result: Record<string, Record<string, unknown>> = {};
  for (const section of sections) {
    const properties = isRecord(section) ? section.properties : undefined;
    if (!isRecord(properties)) {
      continue;
    }
    for (const [id, schema] of Object.entries(properties)) {
      if (isRecord(schema)) {
        result[id] = schema;
      }
    }
  }
  return result;
}

/** Default value of every `midword.*` setting, keyed without the `midword.` prefix. */
export function settingDefaults(manifest: unknown): Map<string, unknown> {
  const prefix = `${SECTION}.`;
  const defaults = new Map<string, unknown>();
  for (const [id, schema] of Object.entries(settingProperties(manifest))) {
    if (id.startsWith(prefix) && 'default' in schema) {
      defaults.set(id.slice(prefix.length), schema.default);
    }
  }
  return defaults;
}

/** The extension's package.json, found next to the compiled `out/` (or bundled `dist/`) folder. */
export function readManifest(fromDir: string = __dirname): unknown {
  return JSON.parse(fs.readFileSync(path.join(fromDir, '..', 'package.json'), 'utf8')) as unknown;
}
