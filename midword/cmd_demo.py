"""Show the prompt boundary problem and its fix, through the real language server.

Starts `midword serve` as a subprocess and acts as an editor: it types a small Python
file into a buffer (incremental didChange, one character at a time), stops at four
cursors (mid-identifier, mid-number, after a space, on an empty line), and asks for an
inline completion at each, once with the naive pipeline (tokenize the prompt, then
generate) and once with midword's exact ByteSampler. It prints what each would insert
at the cursor ("|"), and how long the server took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass

from midword.cli import CommandError

# The demo file, typed top to bottom; each "|" is a cursor where completions are asked.
SAMPLE = (
    "import argparse\n"
    "import sys\n"
    "\n"
    "\n"
    "def main(argv):\n"
    "    parser = argparse.ArgumentPar|\n"
    "    parser.add_argument('--timeout', type=float, default=0.5|)\n"
    "    args = parser.parse_args(argv)\n"
    "    for name in |\n"
    "\n"
    "\n"
    "def helper(path):\n"
    "    |"
)
CASES = ("mid-identifier", "mid-number", "after a space", "empty line")
METHODS = ("naive", "bytesampler")


@dataclass
class Row:
    case: str
    context: str  # the end of the line before the cursor
    naive: str
    midword: str
    naive_ms: float
    midword_ms: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="",
        help="model directory or GGUF file (default: SmolLM2-135M, else the shipped model)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per completion")
    parser.add_argument("--json", action="store_true", help="print one JSON object per cursor")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the model")


def run(args: argparse.Namespace) -> int:
    try:
        rows = asyncio.run(_demo(args))
    except (OSError, TimeoutError, RuntimeError) as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        for row in rows:
            print(json.dumps(row.__dict__, ensure_ascii=False))
    else:
        _print_table(rows)
    return 0


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _demo(args: argparse.Namespace) -> list[Row]:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("midword-demo", "1")
    statuses: list[dict] = []
    client.feature("midword/status")(lambda params: statuses.append(params))
    if not args.model:
        from midword.models import default_model_note

        if (missing := default_model_note()) is not None:
            _note(missing)
    _note("starting the language server (python -m midword serve) ...")
    await client.start_io(sys.executable, "-m", "midword", "serve", "--log-level", "warning")
    options = {"model": args.model, "device": args.device, "maxTokens": args.max_tokens}
    options["timeBudgetMs"] = 60_000  # the demo shows what each method inserts, not a cut-off
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=options
        )
    )
    client.initialized(types.InitializedParams())
    try:
        await _wait_ready(statuses, args.timeout)
        return await _type_and_ask(client, options)
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()


async def _wait_ready(statuses: list, timeout: float) -> None:
    _note("loading the model ...")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = statuses[-1].state if statuses else ""
        if state == "ready":
            return
        if state == "error":
            raise RuntimeError(statuses[-1].message)
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the model did not load within {timeout:.0f} s")


async def _type_and_ask(client, options: dict) -> list[Row]:  # noqa: ANN001 (pygls client)
    from lsprotocol import types

    uri = "untitled:midword-demo.py"
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text="")
        )
    )
    text, version, rows = "", 1, []
    pieces = SAMPLE.split("|")
    _note("typing the file and asking for completions at each cursor ...")
    for case, piece in zip(CASES, pieces[:-1], strict=True):
        for ch in piece:
            version += 1
            _send_insert(client, uri, version, text, ch)
            text += ch
        results = {}
        for method in METHODS:
            client.workspace_did_change_configuration(
                types.DidChangeConfigurationParams(settings={**options, "method": method})
            )
            results[method] = await _ask(client, uri, text)
        context = text.split("\n")[-1]
        rows.append(
            Row(
                case,
                context,
                *results["naive"][:1],
                *results["bytesampler"][:1],
                results["naive"][1],
                results["bytesampler"][1],
            )
        )
    return rows


def _position(text: str):  # noqa: ANN202
    from lsprotocol import types

    line = text.count("\n")
    column = text[text.rfind("\n") + 1 :]
    return types.Position(line=line, character=len(column.encode("utf-16-le")) // 2)


def _send_insert(client, uri: str, version: int, text: str, ch: str) -> None:  # noqa: ANN001
    from lsprotocol import types

    at = _position(text)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=ch)
            ],
        )
    )


async def _ask(client, uri: str, text: str) -> tuple[str, float]:  # noqa: ANN001
    from lsprotocol import types

    started = time.perf_counter()
    result = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=_position(text),
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Automatic
            ),
        )
    )
    items = result.items if result is not None else []
    return (items[0].insert_text if items else ""), (time.perf_counter() - started) * 1000


def _print_table(rows: list[Row]) -> None:
    print("What each pipeline inserts at the cursor | (first line shown):\n")
    for row in rows:
        print(f"{row.case}:  ...{row.context[-40:]}|")
        print(f"  naive    {_show(row.naive):<48} {row.naive_ms:7.0f} ms")
        print(f"  midword  {_show(row.midword):<48} {row.midword_ms:7.0f} ms")
        print()


SHOW_CHARS = 48  # the width of the completion column


def _show(text: str) -> str:
    """The completion's first line, cut to the column's width.

    >>> _show("ser()\\n    x")
    'ser() ⏎ …'
    >>> len(_show("a" * 100)) == SHOW_CHARS
    True
    """
    first, _, rest = text.partition("\n")
    shown = repr(first)[1:-1]
    if len(shown) > SHOW_CHARS - 2:
        return shown[: SHOW_CHARS - 2] + " …"
    return (shown + (" ⏎ …" if rest else "")) or "(nothing)"
