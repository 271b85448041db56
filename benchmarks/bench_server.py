"""Language-server benchmark: keystroke replay with an inline completion after every key.

0. Startup: a real `midword serve` process; how soon `initialize` is answered (the model
   loads in the background) and when the model is ready.

Then runs the server's `Controller` in process (the code behind every LSP handler, without
the JSON-RPC transport) on the shipped default model, and prints:

1. Keystroke replay: type the first 300 lines of a held-out standard-library file one
   character at a time, asking for an inline completion after each key. Server overhead
   per keystroke = server-side time (didChange + completion) minus the model's forward
   passes; p50 / p95 (goal: p95 <= 2 ms). The same in CPU time of the server's two
   threads (event loop, model worker) minus the forward passes' CPU time: on a shared
   machine the wall clock also counts waits for a core. Tokens the model evaluates per
   keystroke to score the covering tree, next to the new trunk tokens + tail nodes (the
   goal). Cyclic garbage collections during the replay (the server freezes the model's
   objects out of them once it is loaded).
2. Incremental vs rebuild: typing at the end of a 10k-line buffer, with the live VCT and
   KV cache vs rebuilding both for every request; ratio of server-side time (goal >= 10x).
3. Typing through accepted text: at cut points inside lines of the file, the shown
   completion is typed one character at a time with an Automatic request after each
   (the real `Controller.inline` path, debounce off): the fraction of those keystrokes
   answered from the rest of the shown completion without a model call, and the
   latency (didChange + request) of those keystrokes and of the ones that went to the
   model in the same run, p50 / p95.
4. Fill-in-the-middle on and off: --fim-keys characters typed at a cursor in the middle
   of the file (the rest of it below), into two servers taking turns key by key, one
   with ``fim: off`` and one with ``fim: auto`` (the shipped model's template):
   per-keystroke latency, the part outside forward passes, tokens evaluated per key.

    python benchmarks/bench_server.py [--lines 300] [--keys 0] [--tail-keys 150] [--points 40]
        [--fim-keys 60] [--texts texts.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from midword.engine import ForwardDone, observe_forwards
from midword.server.controller import Controller
from midword.server.document import Range
from midword.server.worker import Answer

from midword.models import shipped_test_model
from midword.testing.timing import percentile

SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "contextlib.py"  # held out from training
URI = "file:///bench/replay.py"


class ForwardClock:
    """Total seconds spent in the model's forward passes (`observe_forwards`): wall clock,
    and CPU time of the calling thread (torch runs on it: the server sets 1 thread on a
    2-core machine)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        observe_forwards(self._add)

    def _add(self, done: ForwardDone) -> None:
        self.seconds += done.seconds
        self.cpu_seconds += done.cpu_seconds


class WorkerCPU:
    """CPU seconds of the model worker thread (syncs, requests), read from its own clock.

    Wall-clock overhead on a shared machine also counts the time the server's threads
    wait for a core; CPU time counts only the work they do, so the two side by side tell
    the server's cost from the machine's load.
    """

    def __init__(self, controller: Controller) -> None:
        thread = controller.host.worker_thread
        self._clock = time.pthread_getcpuclockid(thread.ident)

    @property
    def seconds(self) -> float:
        return time.clock_gettime(self._clock)


class GCWatch:
    """Cyclic garbage collections while watching: passes per generation and the longest
    pause (an oldest-generation pass over an unfrozen model heap takes a few hundred ms)."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.longest = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.passes[info["generation"]] += 1
        self.longest = max(self.longest, time.perf_counter() - self._started)

    def stop(self) -> str:
        gc.callbacks.remove(self._on_gc)
        counts = ", ".join(f"gen{g} {n}" for g, n in enumerate(self.passes))
        return f"{counts}; longest pause {_ms(self.longest)}"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f} ms"


def _quantiles(seconds: list[float]) -> str:
    return ", ".join(f"p{round(100 * q)} {_ms(percentile(seconds, q))}" for q in (0.5, 0.95, 0.99))


async def ready_controller(options: dict) -> Controller:
    controller = Controller()
    controller.configure(options, initial=True)
    for _ in range(6000):
        if controller.host.ready:
            return controller
        if controller.host.status.state == "error":
            raise SystemExit(controller.host.status.message)
        await asyncio.sleep(0.05)
    raise SystemExit("model did not load")


async def keystroke(controller: Controller, text: str, line: int, col: int, version: int):
    """One typed character then an Automatic inline request; returns (seconds, answer)."""
    started = time.perf_counter()
    controller.change(URI, version, [(Range(line, col, line, col), text)])
    answer = await controller.answer_at_last_edit(URI)
    return time.perf_counter() - started, answer


@dataclass
class Key:
    """One keystroke: server seconds (wall), forward seconds (wall), the answer, and the CPU
    seconds of the server's threads (event loop + worker) and of the forward passes."""

    seconds: float
    forward: float
    answer: Answer
    cpu: float = 0.0
    forward_cpu: float = 0.0


async def replay(
    controller: Controller,
    base: str,
    typed: str,
    clock: ForwardClock,
    rebuild: bool,
    worker: WorkerCPU | None = None,
) -> list[Key]:
    """Type ``typed`` after ``base``, one `Key` per character."""
    controller.open(URI, base, 1)
    lines = base.split("\n")
    line, col, version = len(lines) - 1, len(lines[-1]), 1
    rows = []
    for ch in typed:
        if rebuild:
            controller.host.forget_documents()  # no live VCT, no KV cache: a cold request
        version += 1
        forward, forward_cpu = clock.seconds, clock.cpu_seconds
        worker_cpu, loop_cpu = worker.seconds if worker else 0.0, time.thread_time()
        seconds, answer = await keystroke(controller, ch, line, col, version)
        cpu = time.thread_time() - loop_cpu + (worker.seconds - worker_cpu if worker else 0.0)
        rows.append(
            Key(seconds, clock.seconds - forward, answer, cpu, clock.cpu_seconds - forward_cpu)
        )
        line, col = (line + 1, 0) if ch == "\n" else (line, col + len(ch.encode("utf-16-le")) // 2)
    controller.close(URI)
    return rows


def end_position(text: str) -> tuple[int, int]:
    """LSP (line, UTF-16 character) of the end of ``text``."""
    line = text.count("\n")
    last = text[text.rfind("\n") + 1 :]
    return line, len(last.encode("utf-16-le")) // 2


async def type_through(
    controller: Controller, text: str, points: int
) -> tuple[list[float], list[float], int]:
    """Section 3: (seconds of keystrokes answered without the model, seconds of keystrokes
    that went to the model, shown completions typed through)."""
    lines = text.split("\n")
    step = max(1, len(lines) // points)
    reused, modelled, shown_count = [], [], 0
    for number in range(0, len(lines), step):
        body = lines[number]
        if len(body.strip()) < 4:
            continue
        cut = sum(len(x) + 1 for x in lines[:number]) + len(body) // 2
        buffer = text[:cut]
        controller.open(URI, buffer, 1)
        version = 1
        shown = await controller.inline(URI, *end_position(buffer), False)  # cold: not counted
        if shown:
            shown_count += 1
        for ch in shown[0].text if shown else "":
            line, col = end_position(buffer)
            version += 1
            before = controller.counts["reusedAnswers"]
            started = time.perf_counter()
            controller.change(URI, version, [(Range(line, col, line, col), ch)])
            buffer += ch
            await controller.inline(URI, *end_position(buffer), False)
            seconds = time.perf_counter() - started
            (reused if controller.counts["reusedAnswers"] > before else modelled).append(seconds)
        controller.close(URI)
    return reused, modelled, shown_count


async def typing_in_the_middle(
    controllers: dict[str, Controller], text: str, keys: int, clock: ForwardClock
) -> dict[str, list[Key]]:
    """Section 4: ``keys`` characters typed at a cursor in the middle of ``text`` (the rest
    of the file below it), into each controller in turn, key by key (one model each)."""
    lines = text.split("\n")
    middle = len(lines) // 2
    cut = sum(len(x) + 1 for x in lines[:middle]) + len(lines[middle]) // 2
    before, after = text[:cut], text[cut:]
    typed = (after * 2)[:keys]  # what the file says next, typed again
    rows: dict[str, list[Key]] = {name: [] for name in controllers}
    for controller in controllers.values():
        controller.open(URI, before + after, 1)
    line, col = end_position(before)
    for version, ch in enumerate(typed, start=2):
        for name, controller in controllers.items():
            forward = clock.seconds
            seconds, answer = await keystroke(controller, ch, line, col, version)
            rows[name].append(Key(seconds, clock.seconds - forward, answer))
        line, col = (line + 1, 0) if ch == "\n" else (line, col + len(ch.encode("utf-16-le")) // 2)
    for controller in controllers.values():
        controller.close(URI)
    return rows


async def live_tail(controller: Controller) -> int:
    state = await controller.live_state(URI)
    return 0 if state is None else len(state["tree"]["nodes"])


async def startup() -> tuple[float, float, float]:
    """A real `midword serve` over stdio: seconds to spawn, to answer initialize, to be ready."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("bench", "1")
    states: list[str] = []
    client.feature("midword/status")(lambda params: states.append(params.state))
    started = time.perf_counter()
    await client.start_io(sys.executable, "-m", "midword", "serve", "--log-level", "error")
    spawned = time.perf_counter()
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
    answered = time.perf_counter()
    client.initialized(types.InitializedParams())
    while not states or states[-1] == "loading":
        await asyncio.sleep(0.01)
    ready = time.perf_counter()
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return spawned - started, answered - spawned, ready - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=300, help="lines of the file to type")
    parser.add_argument("--keys", type=int, default=0, help="stop after this many keys (0: all)")
    parser.add_argument("--tail-keys", type=int, default=150, help="keys typed in the 10k buffer")
    parser.add_argument("--max-tokens", type=int, default=2, help="tokens per completion")
    parser.add_argument("--points", type=int, default=40, help="cut points typed through (3.)")
    parser.add_argument("--through-tokens", type=int, default=8, help="tokens per completion (3.)")
    parser.add_argument(
        "--fim-keys", type=int, default=60, help="keys typed mid-file, FIM off and on (4.; 0: skip)"
    )
    parser.add_argument(
        "--texts",
        type=Path,
        help="write section 1's completion texts (a list per key) to this JSON file: two "
        "commits' files are equal when the speed work changed no completion",
    )
    args = parser.parse_args()

    # the figures are the small shipped model's, whatever the default model is now
    # (MIDWORD_DEFAULT_MODEL chooses another; the server subprocess inherits it)
    os.environ.setdefault("MIDWORD_DEFAULT_MODEL", str(shipped_test_model()))
    spawn_s, init_s, ready_s = await startup()
    print(
        f"0. startup over stdio: initialize answered {1000 * init_s:.0f} ms after the process "
        f"started ({1000 * spawn_s:.0f} ms to spawn); model ready after {ready_s:.1f} s"
    )

    clock = ForwardClock()
    options = {"maxTokens": args.max_tokens, "timeBudgetMs": 60_000, "device": "cpu"}
    controller = await ready_controller(options)
    text = "\n".join(SOURCE.read_text().split("\n")[: args.lines])
    typed = text[: args.keys] if args.keys else text
    print(f"model: {controller.host.status.model}; file: {SOURCE.name} ({len(typed)} keys)")

    worker = WorkerCPU(controller)
    collections = GCWatch()
    rows = await replay(controller, "", typed, clock, rebuild=False, worker=worker)
    collected = collections.stop()
    if args.texts:
        args.texts.write_text(json.dumps([k.answer.texts for k in rows]))
    print("\n1. keystroke replay (server side, in process)")
    print(f"   keys: {len(rows)}; mean server time {_ms(statistics.mean(k.seconds for k in rows))}")
    overhead = [k.seconds - k.forward for k in rows]
    print(f"   overhead excl. forward (wall clock): {_quantiles(overhead)}")
    cpu = [k.cpu - k.forward_cpu for k in rows]
    print(
        f"   the same in CPU time of the server's threads (the machine's load left out): {_quantiles(cpu)}"
    )
    print(f"   cyclic garbage collections during the replay: {collected}")
    prepare = [k.answer.sync_ms / 1000 for k in rows]
    print(
        f"   request's prepare step (VCT to the prefix, tree built and scored): {_quantiles(prepare)}"
    )
    tree_tokens = [k.answer.tree_tokens for k in rows]
    print(
        f"   tree tokens per key: mean {statistics.mean(tree_tokens):.2f}, "
        f"p50 {percentile(tree_tokens, 0.5)}, p95 {percentile(tree_tokens, 0.95)}"
    )

    big = "\n".join((text.split("\n") * (10_000 // max(1, args.lines) + 1))[:10_000]) + "\n"
    tail = text[: args.tail_keys]
    live = await replay(controller, big, tail, clock, rebuild=False)
    cold = await replay(controller, big, tail, clock, rebuild=True)
    live_s = sum(k.seconds for k in live)
    cold_s = sum(k.seconds for k in cold)
    print(f"\n2. incremental vs rebuild at the end of a 10k-line buffer ({len(tail)} keys)")
    print(
        f"   live VCT + KV reuse: {_ms(live_s / len(live))} per key "
        f"({statistics.mean(k.answer.tree_tokens for k in live):.1f} tree tokens)"
    )
    print(
        f"   rebuild each time:  {_ms(cold_s / len(cold))} per key "
        f"({statistics.mean(k.answer.tree_tokens for k in cold):.1f} tree tokens)"
    )
    print(f"   ratio: {cold_s / live_s:.1f}x")

    controller.configure({"maxTokens": args.through_tokens, "debounceMs": 0})
    reused, modelled, shown = await type_through(controller, text, args.points)
    keys = len(reused) + len(modelled)
    if not reused or not modelled:
        raise SystemExit(f"3. nothing typed through ({len(reused)} reused, {len(modelled)} not)")
    print(f"\n3. typing through accepted text ({shown} completions shown, {keys} keys typed)")
    print(f"   answered without a model call: {len(reused)}/{keys} = {len(reused) / keys:.1%}")
    print(f"   their latency (didChange + request): {_quantiles(reused)}")
    print(f"   keys that went to the model, same run: {_quantiles(modelled)}")
    controller.shutdown()

    if args.fim_keys:
        await fim_section(options, text, args.fim_keys, clock)


async def fim_section(options: dict, text: str, keys: int, clock: ForwardClock) -> None:
    """Section 4: fill-in-the-middle on and off, typing into the middle of a file."""
    controllers = {
        fim: await ready_controller({**options, "fim": fim, "debounceMs": 0})
        for fim in ("off", "auto")
    }
    template = controllers["auto"].host.status.fim or "off"
    rows = await typing_in_the_middle(controllers, text, keys, clock)
    print(f"\n4. typing in the middle of the file, FIM off and on ({keys} keys, taking turns)")
    for fim, keyed in rows.items():
        label = "FIM off" if fim == "off" else f"FIM {template}"
        tokens = statistics.mean(k.answer.tokens for k in keyed)
        print(
            f"   {label:<16} per key {_quantiles([k.seconds for k in keyed])}; outside forward "
            f"passes {_quantiles([k.seconds - k.forward for k in keyed])}; "
            f"tokens evaluated per key {tokens:.1f}"
        )
    off, on = (sum(k.seconds for k in rows[f]) for f in ("off", "auto"))
    print(f"   FIM on / off, ratio of total times: {on / off:.2f}")
    for controller in controllers.values():
        controller.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
