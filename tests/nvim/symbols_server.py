"""A stand-in for another language server (pyright, jedi-language-server) in the Neovim
test of symbols guidance (tests/editors/test_nvim.py): it offers the same made-up member
names at every position, so the test knows exactly which names midword.lua may pass on.

    python tests/nvim/symbols_server.py [--delay-ms N] NAME...

Each NAME becomes one completion item: ``label`` or ``label=filterText`` (an item whose
label is not a plain name, as clangd's ``foo(int)`` with the filter text ``foo``).
``--delay-ms`` answers late, to stand for a server slower than the client's time budget.
"""

from __future__ import annotations

import argparse
import time

from lsprotocol import types
from pygls.lsp.server import LanguageServer


def items(specs: list[str]) -> list[types.CompletionItem]:
    """``label`` or ``label=filterText`` specs as completion items."""
    out = []
    for spec in specs:
        label, _, filter_text = spec.partition("=")
        kind = types.CompletionItemKind.Method
        out.append(types.CompletionItem(label=label, kind=kind, filter_text=filter_text or None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("names", nargs="+")
    args = parser.parse_args()
    server = LanguageServer("symbols-stub", "0.1")
    offered = items(args.names)

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["."])
    )
    def completion(ls: LanguageServer, params: types.CompletionParams) -> types.CompletionList:
        # Blocking on purpose: a slow server is slow for the whole request.
        time.sleep(args.delay_ms / 1000)
        return types.CompletionList(is_incomplete=False, items=offered)

    server.start_io()


if __name__ == "__main__":
    main()
