"""The editor path on the default model: keystroke to inline item, on each backend, next to
a plain completion on the same backend.

A real `midword serve` process over stdio (JSON-RPC, as an editor runs it) holds a
2,000-line Python file. At a few spots in its second half a line is cleared and typed
again one character at a time; after each key the client sends the change and an
Automatic inline-completion request, as VS Code does, and times keystroke -> answer
(`maxTokens` 16, greedy, `multiline: always` so a completion is not cut at the end of
the line before its 16 tokens, and a time budget that never cuts it).

After each answer, untimed: ``midword/inspect`` gives the exact prompt window the server
used, and the same completion (greedy, exactly 16 new tokens) runs through plain
transformers `generate()` in this process, on the same threads:

* **cold**: tokenize the window and call `generate()`, what a plain pipeline does per
  request (the whole window is prefilled every time);
* **warm**: the same, with a `DynamicCache` kept between calls and cropped to the tokens
  the new prompt shares with the last one: plain `generate()` with the KV reuse the
  server has. This is the comparison the 1.1x goal is about.

With ``--backends llamacpp,torch`` (the default when llama-cpp-python is installed and the
model is a GGUF file) the same keys are typed into one server per backend. The llama.cpp
run's plain reference is a **naive llama.cpp completion**: llama-cpp-python's own
`Llama.generate()` on the window's tokens, greedy, which reuses the KV cache of the
prefix the prompt shares with the previous one (what llama.vscode's server does). The
closing table puts the three side by side: midword on llama.cpp, midword on torch, naive
llama.cpp (goals: midword on llama.cpp at most 1.10x the naive column and 0.5x torch).
Each server's RSS (``midword/stats``) is printed after its keys.

Where the server's time goes: its debug log (one line per answer, read from the
``window/logMessage`` notifications) splits each answer into the prepare step (VCT
moved to the prefix, covering tree built and scored by the model), sampling and post
processing; the rest of the client's latency is JSON-RPC, the event loop and the
queue (LSP overhead). ``--profile-keys N`` then types N keys through the server's
`Controller` in process under cProfile and prints the functions that take the time,
forward passes apart.

    python benchmarks/bench_editor_path.py [--model M] [--backends llamacpp,torch] [--spots 4]

>>> common_prefix([1, 2, 3], [1, 2, 4, 5])
2
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import random
import re
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midword.testing.timing import percentile

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SOURCES = ("argparse.py", "contextlib.py", "dataclasses.py", "functools.py")
URI = "file:///bench/editor_path.py"
ANSWER_LOG = re.compile(
    r": (?P<items>\d+) item\(s\) in (?P<total>[\d.]+) ms \(vct sync (?P<sync>[\d.]+), "
    r"model (?P<model>[\d.]+), post (?P<post>[\d.]+)\); leaf p=\S+; "
    r"tokens (?P<tokens>\d+) \(tree (?P<tree>\d+)\)"
)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def two_thousand_lines(lines: int) -> str:
    """``lines`` lines of standard-library Python (files joined, then cut)."""
    out: list[str] = []
    while len(out) < lines:
        for name in SOURCES:
            out += (STDLIB / name).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(out[:lines])


def pick_spots(text: str, spots: int, keys: int, seed: int) -> list[tuple[int, str, str]]:
    """(line number, indentation, code) of ``spots`` code lines in the file's second half
    with at least ``keys`` characters after the indentation, followed by three lines
    indented as deep (the server ends a completion at a dedent: there, a completion can
    run to its token limit).

    >>> pick_spots("x\\n" * 4 + "    a = 1\\n" + "    b = 2\\n" * 3, 1, 5, 0)
    [(4, '    ', 'a = 1')]
    """
    lines = text.splitlines()
    candidates = []
    for number in range(len(lines) // 2, len(lines) - 3):
        code = lines[number].lstrip(" ")
        indent = len(lines[number]) - len(code)
        follow = lines[number + 1 : number + 4]
        if (
            len(code) >= keys
            and not code.startswith(("#", '"', "'"))
            and all(line.strip() and len(line) - len(line.lstrip(" ")) >= indent for line in follow)
        ):
            candidates.append((number, lines[number][:indent], code))
    return sorted(random.Random(seed).sample(candidates, spots))


# ---------------------------------------------------------------------- the client side
class Buffer:
    """The client's copy of the document; edits go out as incremental didChange."""

    def __init__(self, client: Any, text: str) -> None:
        from lsprotocol import types

        self.types, self.client, self.lines, self.version = types, client, text.split("\n"), 1
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=URI, language_id="python", version=1, text=text
                )
            )
        )

    def replace(self, line: int, start: int, end: int, new: str) -> None:
        """Replace columns ``start:end`` of ``line`` (ASCII text: columns are UTF-16 units)."""
        t = self.types
        old = self.lines[line]
        self.lines[line] = old[:start] + new + old[end:]
        self.version += 1
        change = t.TextDocumentContentChangePartial(
            range=t.Range(start=t.Position(line, start), end=t.Position(line, end)), text=new
        )
        self.client.text_document_did_change(
            t.DidChangeTextDocumentParams(
                text_document=t.VersionedTextDocumentIdentifier(uri=URI, version=self.version),
                content_changes=[change],
            )
        )

    async def inline(self, line: int, column: int) -> list[str]:
        t = self.types
        result = await self.client.text_document_inline_completion_async(
            t.InlineCompletionParams(
                text_document=t.TextDocumentIdentifier(uri=URI),
                position=t.Position(line, column),
                context=t.InlineCompletionContext(
                    trigger_kind=t.InlineCompletionTriggerKind.Automatic
                ),
            )
        )
        items = result.items if isinstance(result, t.InlineCompletionList) else result or []
        return [item.insert_text for item in items]

    async def window(self) -> bytes:
        """The prompt window of the server's live VCT (``midword/inspect``)."""
        state = await self.client.protocol.send_request_async(
            "midword/inspect", {"textDocument": {"uri": URI}}
        )
        return bytes.fromhex(state.prefix)


class ProcessClock:
    """CPU time and run-queue wait of all threads of a process, in seconds (Linux
    ``/proc/PID/task/*/schedstat``; zeros elsewhere). On a shared machine the wait tells
    the time a thread was ready to run but had no core from the work it did."""

    def __init__(self, pid: int) -> None:
        self.tasks = Path(f"/proc/{pid}/task")

    def read(self) -> tuple[float, float]:
        run = wait = 0
        for task in self.tasks.glob("*/schedstat") if self.tasks.is_dir() else ():
            try:
                fields = task.read_text().split()
            except OSError:
                continue  # a thread that just ended
            run, wait = run + int(fields[0]), wait + int(fields[1])
        return run / 1e9, wait / 1e9


@dataclass
class Key:
    """One keystroke: client latency, the server's split of it, and plain generate()."""

    latency: float
    items: int
    split: dict[str, float]
    server_cpu: float = 0.0
    server_wait: float = 0.0
    client_cpu: float = 0.0
    typed: str = ""
    item: str = ""
    plain_text: str = ""
    cold: float = 0.0
    warm: float = 0.0
    cold_cpu: float = 0.0
    warm_cpu: float = 0.0
    warm_first: float = 0.0  # the plain run's time to its first token (prompt prefill)
    warm_tokens: int = 0  # tokens the plain run evaluated (llama.cpp: counted)
    window_tokens: int = 0
    new_tokens: int = 0
    same_text: bool = False


@dataclass
class ServerLog:
    """Answer lines of the server's debug log, as they arrive."""

    answers: list[dict[str, float]] = field(default_factory=list)

    def on_message(self, params: Any) -> None:
        match = ANSWER_LOG.search(params.message)
        if match:
            self.answers.append({k: float(v) for k, v in match.groupdict().items()})

    async def next_answer(self, seen: int) -> dict[str, float]:
        for _ in range(200):  # the log line may trail the response by a loop turn
            if len(self.answers) > seen:
                return self.answers[seen]
            await asyncio.sleep(0.005)
        return {}


# ---------------------------------------------------------------------- plain generate()
class PlainGenerate:
    """transformers' own `generate()`: greedy, exactly the asked number of new tokens."""

    label = "plain generate()"

    def __init__(self, folder: str, dtype: str, device: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
        self.model.to(device).eval()
        self.device = device
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        self.settings = {"do_sample": False, "pad_token_id": pad, "top_p": None, "top_k": None}
        self.cache: Any = None
        self.cached_ids: list[int] = []

    def ids(self, prompt: str) -> list[int]:
        ids = self.tok(prompt, add_special_tokens=False)["input_ids"]
        bos = self.tok.bos_token_id  # midword scores BOS + window: the same work here
        return ([bos] if bos is not None else []) + list(ids)

    def cold(self, prompt: str, new: int) -> tuple[float, float, str, int]:
        """Seconds and CPU seconds (tokenizing included), the completion, prompt tokens."""
        started, cpu = time.perf_counter(), time.process_time()
        ids = self.ids(prompt)
        out = self._generate(ids, None, new)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        return seconds, cpu, self.tok.decode(out[len(ids) :]), len(ids)

    def warm(self, prompt: str, new: int) -> tuple[float, float, str, int]:
        """`cold`'s figures, reusing the KV rows of the tokens shared with the previous
        call."""
        from transformers import DynamicCache

        started, cpu = time.perf_counter(), time.process_time()
        ids = self.ids(prompt)
        if self.cache is None:
            self.cache = DynamicCache()
            self.cached_ids = []
        keep = min(common_prefix(ids, self.cached_ids), len(ids) - 1)
        drop = self.cache.get_seq_length() - keep
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5: a negative count of rows to remove
        out = self._generate(ids, self.cache, new)
        self.cached_ids = out[: self.cache.get_seq_length()]
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        return seconds, cpu, self.tok.decode(out[len(ids) :]), len(ids)

    def _generate(self, ids: list[int], cache: Any, new: int) -> list[int]:
        torch = self.torch
        tensor = torch.tensor([ids], device=self.device)
        with torch.inference_mode():
            out = self.model.generate(
                tensor,
                attention_mask=torch.ones_like(tensor),
                **self.settings,
                max_new_tokens=new,
                min_new_tokens=new,
                cache=cache,
            )
        return out[0].tolist()


class PlainLlama:
    """A naive llama.cpp completion: llama-cpp-python's `Llama.generate()` on the window's
    tokens (BOS as the file says), greedy, exactly the asked number of new tokens; it
    reuses the KV rows of the prefix the prompt shares with the previous call (`warm`),
    or starts from an empty cache (`cold`)."""

    label = "naive llama.cpp (Llama.generate)"
    first = 0.0  # seconds to the first token of the last call
    evaluated = 0  # tokens the last call's decodes evaluated (its prefill's and generation's)

    def __init__(self, path: str, threads: int, n_ctx: int = 4096) -> None:
        from llama_cpp import Llama

        # flash attention on: llama-server (llama.vscode's server) leaves it on "auto", which
        # turns it on for the CPU; llama-cpp-python's Llama turns it off unless asked
        from llama_cpp import llama_cpp as ll

        decode = ll.llama_decode

        def counted(ctx: Any, batch: Any) -> int:  # Llama's decodes call it by module
            self.evaluated += batch.n_tokens
            return decode(ctx, batch)

        ll.llama_decode = counted  # the benchmark's own process: midword's server is another
        self.llm = Llama(
            path, n_ctx=n_ctx, n_threads=threads, n_batch=512, flash_attn=True, verbose=False
        )

    def ids(self, prompt: str) -> list[int]:
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)

    def warm(self, prompt: str, new: int) -> tuple[float, float, str, int]:
        return self._run(prompt, new, reset=False)

    def cold(self, prompt: str, new: int) -> tuple[float, float, str, int]:
        return self._run(prompt, new, reset=True)

    def _run(self, prompt: str, new: int, reset: bool) -> tuple[float, float, str, int]:
        started, cpu = time.perf_counter(), time.process_time()
        ids = self.ids(prompt)
        if reset:
            self.llm.reset()
        self.evaluated = 0
        out: list[int] = []
        for token in self.llm.generate(ids, temp=0.0, top_k=1, reset=True):
            out.append(token)
            if len(out) == 1:
                self.first = time.perf_counter() - started
            if len(out) >= new:
                break
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        text = self.llm.detokenize(out).decode("utf-8", errors="replace")
        return seconds, cpu, text, len(ids)


# ---------------------------------------------------------------------- the run
async def start_server(args: argparse.Namespace, log: ServerLog, backend: str) -> Any:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("bench-editor-path", "1")
    states: list[str] = []
    client.feature("midword/status")(lambda params: states.append(params.state))
    client.feature(types.WINDOW_LOG_MESSAGE)(lambda params: log.on_message(params))
    os.environ["MIDWORD_THREADS"] = str(args.threads)
    await client.start_io(sys.executable, "-m", "midword", "serve", "--log-level", "debug")
    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()
        )
    )
    await client.initialize_async(
        types.InitializeParams(
            capabilities=caps, initialization_options=server_options(args, backend)
        )
    )
    client.initialized(types.InitializedParams())
    # pygls pipes the server's stderr: read it, or a full pipe would block the server's log
    client.stderr_reader = asyncio.create_task(_drain(client._server.stderr))
    while not states or states[-1] == "loading":
        await asyncio.sleep(0.05)
    if states[-1] == "error":
        raise SystemExit("the server could not load the model")
    return client


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


def server_options(args: argparse.Namespace, backend: str = "auto") -> dict[str, Any]:
    return {
        "model": args.model,
        "backend": backend,
        "device": args.device,
        "dtype": args.dtype,
        "maxTokens": args.tokens,
        "timeBudgetMs": 600_000,
        "multiline": "always",
        "logLevel": "debug",
        "windowBytes": args.window_bytes,
        "debounceMs": 0,  # the keystroke's own cost: no wait for typing to pause
    }


async def type_spots(
    client: Any, log: ServerLog, plain: Any, text: str, args: argparse.Namespace
) -> list[Key]:
    buffer = Buffer(client, text)
    server = ProcessClock(client._server.pid)
    keys: list[Key] = []
    for line, indent, code in pick_spots(text, args.spots, args.keys, args.seed):
        column = len(indent)
        buffer.replace(line, column, column + len(code), "")
        # the editor was already here: the window's first prefill is not a keystroke's cost
        await buffer.inline(line, column)
        plain.warm((await buffer.window()).decode("utf-8"), 1)
        seen = len(log.answers)
        for ch in code[: args.keys]:
            cpu, wait = server.read()
            client_cpu = time.process_time()
            started = time.perf_counter()
            buffer.replace(line, column, column, ch)
            column += 1
            items = await buffer.inline(line, column)
            latency = time.perf_counter() - started
            client_cpu = time.process_time() - client_cpu
            split = await log.next_answer(seen)
            cpu_after, wait_after = server.read()
            seen = len(log.answers)
            key = Key(latency, len(items), split, cpu_after - cpu, wait_after - wait, client_cpu)
            window = (await buffer.window()).decode("utf-8")
            key.new_tokens = new_tokens(split, args.tokens)
            key.warm, key.warm_cpu, plain_text, key.window_tokens = plain.warm(
                window, key.new_tokens
            )
            key.warm_first = getattr(plain, "first", 0.0)
            key.warm_tokens = getattr(plain, "evaluated", 0)
            if len(keys) % args.cold_every == 0:  # a whole-window prefill: the slow reference
                key.cold, key.cold_cpu, _, _ = plain.cold(window, key.new_tokens)
            key.same_text = bool(items) and plain_text.startswith(items[0])
            key.typed, key.item, key.plain_text = (
                window[-24:],
                items[0] if items else "",
                plain_text,
            )
            keys.append(key)
        buffer.replace(line, column, column, code[args.keys :])  # the file is whole again
        print(f"   spot at line {line + 1}: {args.keys} keys", file=sys.stderr)
    return keys


def new_tokens(split: dict[str, float], default: int) -> int:
    """Tokens the server's completion produced: the leaf, then one per sampling step (each
    step evaluates the token before it), from its log line; ``default`` without one.

    >>> new_tokens({"tokens": 18, "tree": 3}, 16), new_tokens({}, 16)
    (16, 16)
    """
    if not split:
        return default
    return max(1, 1 + int(split["tokens"] - split["tree"]))


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.0f} ms"


def report(keys: list[Key], backend: str = "torch", plain: str = "plain generate()") -> None:
    cold = [k for k in keys if k.cold > 0]
    paths = {  # name: (keys, wall seconds, CPU seconds)
        f"midword serve over stdio ({backend}): keystroke -> inline item": (
            keys,
            [k.latency for k in keys],
            [k.server_cpu + k.client_cpu for k in keys],
        ),
        f"{plain}, KV cache reused (warm)": (
            keys,
            [k.warm for k in keys],
            [k.warm_cpu for k in keys],
        ),
        f"{plain}, whole window each time (cold; {len(cold)} keys)": (
            cold,
            [k.cold for k in cold],
            [k.cold_cpu for k in cold],
        ),
    }
    print(
        f"keys: {len(keys)}; prompt window {statistics.mean(k.window_tokens for k in keys):.0f}"
        f" tokens, new tokens {statistics.mean(k.new_tokens for k in keys):.2f} (mean)"
    )
    print("| path | wall p50 | wall p95 | CPU p50 | CPU p95 |\n| --- | --- | --- | --- | --- |")
    for name, (_, wall, cpu) in paths.items():
        cells = [_ms(percentile(v, q)) for v in (wall, cpu) for q in (0.5, 0.95)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name, (subset, wall, cpu) in zip(("warm", "cold"), list(paths.values())[1:], strict=True):
        ours = ([k.latency for k in subset], [k.server_cpu + k.client_cpu for k in subset])
        ratios = [
            f"{percentile(ours[i], q) / percentile(base, q):.2f}x"
            for i, base in enumerate((wall, cpu))
            for q in (0.5, 0.95)
        ]
        paired = statistics.median(a / b for a, b in zip(ours[0], wall, strict=True))
        print(
            f"midword / plain ({name}, same keys): wall p50 {ratios[0]}, p95 {ratios[1]}; CPU "
            f"p50 {ratios[2]}, p95 {ratios[3]}; median of per-key wall ratios {paired:.2f}x"
        )
    report_split(keys)
    print(f"\nexamples (end of the prompt | midword's item | {plain}'s text):")
    for key in keys[:: max(1, len(keys) // 4)]:
        print(f"   {key.typed!r} | {key.item!r} | {key.plain_text!r}")


def report_split(keys: list[Key]) -> None:
    split = [k for k in keys if k.split]
    if not split:
        print("no answer lines in the server log")
        return

    def med(values: Any) -> float:
        return statistics.median(list(values))

    lsp = [1000 * k.latency - k.split["total"] for k in split]
    print(
        "\nserver side, medians: answer "
        f"{med(k.split['total'] for k in split):.1f} ms = prepare (VCT to the prefix, tree "
        f"built and scored) {med(k.split['sync'] for k in split):.1f} + sampling "
        f"{med(k.split['model'] for k in split):.1f} + post "
        f"{med(k.split['post'] for k in split):.2f}; LSP overhead (latency - answer) "
        f"p50 {percentile(lsp, 0.5):.1f}, p95 {percentile(lsp, 0.95):.1f} ms"
    )
    if any(k.warm_first for k in split):  # llama.cpp: the naive run's own split
        rest = [(k.warm - k.warm_first) / max(1, k.new_tokens - 1) for k in split]
        ours = [k.split["model"] / max(1, k.new_tokens - 1) for k in split]
        print(
            f"the same keys' split, medians: midword prepare {med(k.split['sync'] for k in split):.1f}"
            f" ms, then {med(ours):.2f} ms a token; naive first token (prompt prefill) "
            f"{1000 * med(k.warm_first for k in split):.1f} ms, then {1000 * med(rest):.2f} ms a "
            f"token; LSP overhead {med(lsp):.1f} ms; tokens evaluated, mean: midword "
            f"{statistics.mean(k.split['tokens'] for k in split):.2f}, naive "
            f"{statistics.mean(k.warm_tokens for k in split):.2f}"
        )
    print(
        f"per key, medians: server process CPU {_ms(med(k.server_cpu for k in keys))}, its "
        f"threads' run-queue wait {_ms(med(k.server_wait for k in keys))}; client CPU "
        f"{_ms(med(k.client_cpu for k in keys))}"
    )
    print(
        f"tokens per answer, mean: tree {statistics.mean(k.split['tree'] for k in split):.2f}; "
        f"new tokens {statistics.mean(k.new_tokens for k in keys):.2f} (plain generate() makes "
        f"as many); answers with an item {sum(k.items > 0 for k in keys)}/{len(keys)}; "
        f"the item a prefix of plain generate()'s text: {sum(k.same_text for k in keys)}"
    )


# ---------------------------------------------------------------------- in-process profile
async def profile(text: str, args: argparse.Namespace, backend: str = "auto") -> None:
    """The same kind of keys through the server's Controller in process, under cProfile."""
    from midword.server.controller import Controller
    from midword.server.document import Range

    controller = Controller()
    controller.configure({**server_options(args, backend), "logLevel": "error"}, initial=True)
    while not controller.host.ready:
        if controller.host.status.state == "error":
            raise SystemExit(controller.host.status.message)
        await asyncio.sleep(0.05)
    line, indent, code = pick_spots(text, 1, args.profile_keys, args.seed + 1)[0]
    controller.open(URI, text, 1)
    column = len(indent)
    controller.change(URI, 2, [(Range(line, column, line, len(indent) + len(code)), "")])

    async def ask() -> None:
        await controller.answer_at_last_edit(URI)

    await ask()  # the window's first prefill
    # CPU time of the profiled thread: on a shared machine wall time mostly counts waits
    profiler = cProfile.Profile(time.thread_time)
    started = time.perf_counter()
    for version, ch in enumerate(code[: args.profile_keys], start=3):
        controller.change(URI, version, [(Range(line, column, line, column), ch)])
        column += 1
        # every model call, tree and sample runs on the host's worker thread: profile it there
        # (the event loop's share is the LSP overhead measured over stdio)
        controller.host.run_on_worker(profiler.enable)
        await ask()
        controller.host.run_on_worker(profiler.disable)
    seconds = time.perf_counter() - started
    controller.shutdown()
    print(
        f"\nin-process profile: {args.profile_keys} keys, {_ms(seconds / args.profile_keys)} "
        "per key (wall); cumulative CPU seconds of the worker thread's main functions:"
    )
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(r"midword|engine|server|generation|modeling", 30)


def side_by_side(runs: dict[str, list[Key]]) -> None:
    """The closing table: midword on each backend, and the naive llama.cpp completion
    (the llama.cpp run's warm reference), over the same keys; ratios per key, paired."""
    cols: dict[str, tuple[list[float], list[float]]] = {}
    for backend, keys in runs.items():
        cols[f"midword on {backend}"] = (
            [k.latency for k in keys],
            [k.server_cpu + k.client_cpu for k in keys],
        )
    if "llamacpp" in runs:
        keys = runs["llamacpp"]
        cols["naive llama.cpp, prefix cache reused"] = (
            [k.warm for k in keys],
            [k.warm_cpu for k in keys],
        )
    ran = [  # keys every midword run sent to the model (not answered by typing through)
        i
        for i in range(min(len(keys) for keys in runs.values()))
        if all(keys[i].split for keys in runs.values())
    ]
    print(f"\n## side by side (same keys; {len(ran)} of them ran the model in every run)\n")
    print("| path | wall p50 | wall p95 | CPU p50 | CPU p95 |\n| --- | --- | --- | --- | --- |")
    for name, (wall, cpu) in cols.items():
        cells = [_ms(percentile(v, q)) for v in (wall, cpu) for q in (0.5, 0.95)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if ran:  # the same table over the keys the model answered in every run
        cols = {name: ([w[i] for i in ran], [c[i] for i in ran]) for name, (w, c) in cols.items()}
        print("\nkeys the model answered in every run:\n")
        print("| path | wall p50 | wall p95 | CPU p50 | CPU p95 |\n| --- | --- | --- | --- | --- |")
        for name, (wall, cpu) in cols.items():
            cells = [_ms(percentile(v, q)) for v in (wall, cpu) for q in (0.5, 0.95)]
            print(f"| {name} | " + " | ".join(cells) + " |")
    pairs = [
        ("midword on llamacpp", "naive llama.cpp, prefix cache reused", 1.10),
        ("midword on llamacpp", "midword on torch", 0.5),
    ]
    for ours, base, goal in pairs:
        if ours not in cols or base not in cols:
            continue
        n = min(len(cols[ours][0]), len(cols[base][0]))
        wall = [cols[ours][0][i] / cols[base][0][i] for i in range(n)]
        cpu = [cols[ours][1][i] / max(cols[base][1][i], 1e-9) for i in range(n)]
        print(
            f"{ours} / {base}: wall p50 ratio "
            f"{percentile(cols[ours][0], 0.5) / percentile(cols[base][0], 0.5):.2f}x, median of "
            f"per-key ratios {statistics.median(wall):.2f}x (CPU {statistics.median(cpu):.2f}x);"
            f" goal at most {goal:.2f}x"
        )


def default_backends(model: str) -> str:
    """llamacpp,torch for a GGUF file when llama-cpp-python is installed, else torch."""
    from midword.engine import choose_backend

    return "llamacpp,torch" if choose_backend(model).backend == "llamacpp" else "torch"


def main() -> None:
    from midword.models import default_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model (default: midword's default)")
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated: llamacpp, torch (default: both for a GGUF file when "
        "llama-cpp-python is installed, else torch)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1, help="model threads, both sides")
    parser.add_argument("--lines", type=int, default=2000, help="lines in the file")
    parser.add_argument("--spots", type=int, default=4, help="lines typed again")
    parser.add_argument("--keys", type=int, default=24, help="keys typed at each spot")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per completion")
    parser.add_argument(
        "--window-bytes", type=int, default=4096, help="the server's prompt window (its default)"
    )
    parser.add_argument("--profile-keys", type=int, default=16, help="0: no profile")
    parser.add_argument(
        "--cold-every", type=int, default=4, help="cold plain completion on every Nth key (slow)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.model = str(args.model or default_model())
    backends = (args.backends or default_backends(args.model)).split(",")

    import torch

    torch.set_num_threads(args.threads)
    text = two_thousand_lines(args.lines)
    print(
        f"model: {args.model}; backends: {', '.join(backends)}; {args.lines}-line file; "
        f"{args.spots} spots x {args.keys} keys; {args.tokens} tokens; {args.threads} "
        f"thread(s) each side; {args.device}, {args.dtype}"
    )
    asyncio.run(run(args, text, backends))


def plain_reference(args: argparse.Namespace, backend: str) -> Any:
    """The plain completion the backend's keys are compared with, on the same threads."""
    if backend == "llamacpp":
        return PlainLlama(args.model, args.threads)
    from midword.engine import prepare_model

    folder = prepare_model(args.model, args.device, args.dtype)
    return PlainGenerate(folder, args.dtype, args.device)


async def run(args: argparse.Namespace, text: str, backends: list[str]) -> None:
    runs: dict[str, list[Key]] = {}
    for backend in backends:
        plain = plain_reference(args, backend)
        log = ServerLog()
        client = await start_server(args, log, backend)
        try:
            runs[backend] = await type_spots(client, log, plain, text, args)
            stats = await client.protocol.send_request_async("midword/stats", {})
            rss = getattr(stats, "rssBytes", 0)
        finally:
            await client.shutdown_async(None)
            client.exit(None)
            await client.stop()
        print(f"\n# {backend}: server RSS after its keys {rss / 2**20:.0f} MiB\n")
        report(runs[backend], backend, plain.label)
        del plain
    side_by_side(runs)
    if args.profile_keys:
        await profile(text, args, backends[0])


if __name__ == "__main__":
    main()
