// A stand-in for a language server in midword's code-server end-to-end test
// (../vscode.e2e.mjs): a completion provider for Python that offers member
// names after `parser.`, among them one that exists nowhere else,
// `frobnicate_widgets`. It offers nothing until its command "midword e2e:
// Offer Test Names" runs, so that the test can ask the same cursor for an
// unguided suggestion first. Packaged into a .vsix by the test (vsce).
'use strict';
const vscode = require('vscode');

/** The member names offered; only the made-up one goes on from `frob`. */
const NAMES = ['frobnicate_widgets', 'format_help', 'parse_args'];

function activate(context) {
  let offering = false;
  context.subscriptions.push(
    vscode.commands.registerCommand('midwordE2e.offerNames', () => {
      offering = true;
    }),
    vscode.languages.registerCompletionItemProvider(
      { language: 'python' },
      {
        provideCompletionItems(document, position) {
          const before = document.lineAt(position.line).text.slice(0, position.character);
          if (!offering || !/\bparser\.\w*$/.test(before)) {
            return undefined;
          }
          return NAMES.map((name) => new vscode.CompletionItem(name, vscode.CompletionItemKind.Method));
        },
      },
    ),
  );
}

function deactivate() {}

module.exports = { activate, deactivate };
