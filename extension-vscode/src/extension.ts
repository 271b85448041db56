/** Entry point (bundled into dist/extension.js). */
import * as vscode from 'vscode';

import { activateWith, type ActivatedExtension } from './activation';
import { createLanguageClient } from './languageClient';

let activated: ActivatedExtension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  activated = activateWith(vscode, context, {
    createClient: (outputChannel) => (launch, hooks) => createLanguageClient(launch, hooks, { outputChannel }),
  });
}

export async function deactivate(): Promise<void> {
  const current = activated;
  activated = undefined;
  await current?.dispose();
}
