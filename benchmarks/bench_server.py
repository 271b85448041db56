"""Language-server benchmark: keystroke replay with an inline completion after every key.

0. Startup: a real `midword serve` process; how soon `initialize` is answered (the model
   loads in the background) and when the model is ready.

Then runs the server's `Controller` in process (the code behind every LSP handler, without
the JSON-RPC transport) on the shipped default model, and prints:

1. Keystroke replay: type the first 300 lines of a held-out standard-library file one
   character at a time, asking for an inline completion after each key. Server overhead
   per keystroke = server-side time (didChange + completion) minus the model's forward
   passes; p50 / p95 (goal: p95 <= 2 ms). Tokens the model evaluates per keystroke to
   score the covering tree, next to the new trunk tokens + tail nodes (the goal).
2. Incremental vs rebuild: typing at the end of a 10k-line buffer, with the live VCT and
   KV cache vs rebuilding both for every request; ratio of server-side time (goal >= 10x).

    python benchmarks/bench_server.py [--lines 300] [--keys 0] [--tail-keys 150]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from midword.engine.hf_backend import HFSession  # noqa: E402
from midword.server.controller import Controller  # noqa: E402
from midword.server.document import Range  # noqa: E402

SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "contextlib.py"  # held out from training
URI = "file:///bench/replay.py"


class ForwardClock:
    """Total seconds spent in the model's forward passes (HFSession._apply)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        original = HFSession._apply

        def timed(session: HFSession, step):  # noqa: ANN001, ANN202
            started = time.perf_counter()
            try:
                return original(session, step)
            finally:
                self.seconds += time.perf_counter() - started

        HFSession._apply = timed  # type: ignore[method-assign]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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
    doc = controller.documents[URI]
    cursor = doc.last_edit
    answer = await controller._run(doc, cursor, controller._scope(doc, cursor, "auto"), 1)
    return time.perf_counter() - started, answer


async def replay(controller: Controller, base: str, typed: str, clock: ForwardClock, rebuild: bool):
    """Type ``typed`` after ``base``; per key: (server seconds, forward seconds, answer)."""
    controller.open(URI, base, 1)
    lines = base.split("\n")
    line, col, version = len(lines) - 1, len(lines[-1]), 1
    rows = []
    for ch in typed:
        if rebuild:
            controller.host._documents.clear()  # no live VCT, no KV cache: a cold request
        version += 1
        before = clock.seconds
        seconds, answer = await keystroke(controller, ch, line, col, version)
        rows.append((seconds, clock.seconds - before, answer))
        line, col = (line + 1, 0) if ch == "\n" else (line, col + len(ch.encode("utf-16-le")) // 2)
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
    args = parser.parse_args()

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

    rows = await replay(controller, "", typed, clock, rebuild=False)
    overhead = [1000 * (s - f) for s, f, _ in rows]
    tree_tokens = [a.tree_tokens for _, _, a in rows]
    sync = [a.sync_ms for _, _, a in rows]
    print("\n1. keystroke replay (server side, in process)")
    print(
        f"   keys: {len(rows)}; mean server time {1000 * statistics.mean(s for s, _, _ in rows):.2f} ms"
    )
    print(
        f"   overhead excl. forward: p50 {percentile(overhead, 0.5):.2f} ms, "
        f"p95 {percentile(overhead, 0.95):.2f} ms, p99 {percentile(overhead, 0.99):.2f} ms"
    )
    print(
        f"   VCT work left for the request (the didChange sync did the rest): p50 {percentile(sync, 0.5):.2f} ms, p95 {percentile(sync, 0.95):.2f} ms"
    )
    print(
        f"   tree tokens per key: mean {statistics.mean(tree_tokens):.2f}, "
        f"p50 {percentile(tree_tokens, 0.5)}, p95 {percentile(tree_tokens, 0.95)}"
    )

    big = "\n".join((text.split("\n") * (10_000 // max(1, args.lines) + 1))[:10_000]) + "\n"
    tail = text[: args.tail_keys]
    live = await replay(controller, big, tail, clock, rebuild=False)
    cold = await replay(controller, big, tail, clock, rebuild=True)
    live_s = sum(s for s, _, _ in live)
    cold_s = sum(s for s, _, _ in cold)
    print(f"\n2. incremental vs rebuild at the end of a 10k-line buffer ({len(tail)} keys)")
    print(
        f"   live VCT + KV reuse: {1000 * live_s / len(live):.2f} ms per key "
        f"({statistics.mean(a.tree_tokens for _, _, a in live):.1f} tree tokens)"
    )
    print(
        f"   rebuild each time:  {1000 * cold_s / len(cold):.2f} ms per key "
        f"({statistics.mean(a.tree_tokens for _, _, a in cold):.1f} tree tokens)"
    )
    print(f"   ratio: {cold_s / live_s:.1f}x")
    controller.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
