"""Soak benchmark: a busy editor against a real `midword serve` over stdio (LSP).

N open Python buffers (default 40, 1 KB to 1 MB, one of them 10,000 lines) take a
stream of incremental edits at a target rate (default 1000 a second): typing,
backspaces, pastes of up to 5 KB, range deletions, cursor jumps, full replacements,
non-ASCII text and surrogate pairs, and buffers closed and opened again. Most edits
go to the active buffer, in bursts of typing with short pauses between them (people
and tools edit that way); a share (default 5%) goes to the other buffers all the
time. Every 50 ms an inline completion is asked at the active cursor; a third of the
requests are cancelled soon after. Every 20 s another buffer becomes the active one.

Printed at the end:

* edits a second reached (and sent in total);
* completion latency p50/p95/p99 over every request that was not cancelled (the time
  the editor waits for a response), and over the *settled* ones: requests whose
  buffer did not change until the answer came (the ones that can be answered, as
  the server drops answers for text that changed);
* answered (with items), empty, error and cancelled counts; items at a position other
  than the one asked about count as errors;
* the server's resident memory over time: start, max, end, and the slope over the
  second half (MB a minute); a cheap request's latency (midword/stats), and at the end
  whether the server's documents hold as many bytes as the client's.

Goal (issue 27), with the small test model on a 2-core CPU: 0 errors, p95 under 1 s
with 5% of edits in other buffers, and memory flat in the second half.

    python benchmarks/bench_soak.py [--quick] [--duration 300] [--buffers 40]
        [--rate 1000] [--elsewhere 0.05] [--cancel 0.33] [--request-ms 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from midword.server.document import Document, Range
from midword.server.positions import from_index, utf8_len
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from midword.models import shipped_test_model

STDLIB = Path(sysconfig.get_paths()["stdlib"])
REQUEST_CANCELLED = -32800
TYPED = "abcdefghijklmnopqrstuvwxyz    ____()[]:.,=+'\"0123456789"
UNUSUAL = ["é", "中", "ß", "→", "😀", "𝔘", "🙂", "Σ"]  # non-ASCII; three surrogate pairs
SWITCH_S = 20.0  # the active buffer changes this often
TICK_S = 0.01  # edits are sent in ticks of this length
BURST_S, PAUSE_S = (0.2, 0.8), (0.1, 0.4)  # typing bursts in the active buffer, and pauses
FLAT_MB_PER_MIN = 5.0  # "flat": the second half's RSS slope within this, either way


# ---------------------------------------------------------------------------- text
def corpus(limit: int = 4 << 20) -> str:
    """Standard-library Python source, about ``limit`` characters of it."""
    parts, size = [], 0
    for path in sorted(STDLIB.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    return "".join(parts)


def buffer_texts(count: int, source: str, rng: random.Random) -> list[str]:
    """``count`` texts, 1 KB to 1 MB (log-uniform), the first one 10,000 lines long."""
    lines = source.split("\n")
    texts = ["\n".join(lines[:10_000]) + "\n"]
    for _ in range(count - 1):
        size = int(2 ** rng.uniform(10, 20))
        start = rng.randrange(max(1, len(source) - size))
        start = source.find("\n", start) + 1
        texts.append(source[start : start + size])
    return texts


# ---------------------------------------------------------------------------- one buffer
class Buffer:
    """The client's copy of one open document and its cursor (line, string index)."""

    def __init__(self, client: LanguageClient, uri: str, text: str) -> None:
        self.client, self.uri = client, uri
        self.doc = Document(uri, text, 1)
        self.version = 1
        self.line, self.index = 0, 0
        self.edits = 0  # changes sent since opened (requests compare it)
        self.open(text)
        self.jump(random.Random(uri))

    def open(self, text: str) -> None:
        self.doc = Document(self.uri, text, self.version)
        item = types.TextDocumentItem(
            uri=self.uri, language_id="python", version=self.version, text=text
        )
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))

    def close(self) -> None:
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=self.uri)
            )
        )

    def jump(self, rng: random.Random) -> None:
        self.line = rng.randrange(len(self.doc.lines))
        self.index = rng.randrange(len(self.doc.body(self.line)) + 1)

    def position(self, line: int | None = None, index: int | None = None) -> types.Position:
        line = self.line if line is None else line
        index = self.index if index is None else index
        return types.Position(line, from_index(self.doc.body(line), index, "utf-16"))

    def replace(self, end_line: int, end_index: int, text: str) -> None:
        """Replace [cursor, end) with ``text``; the cursor goes to the end of the text."""
        rng = Range(self.line, *_columns(self, end_line, end_index))
        start, end = self.position(), self.position(end_line, end_index)
        self.doc.apply_change(rng, text, "utf-16")
        self.line, self.index = self.doc.last_edit.line, self.doc.last_edit.index
        self._send(types.TextDocumentContentChangePartial(range=types.Range(start, end), text=text))

    def replace_all(self, text: str) -> None:
        self.doc.replace_all(text, self.version + 1)
        self.line, self.index = 0, 0
        self._send(types.TextDocumentContentChangeWholeDocument(text=text))

    def _send(self, change: Any) -> None:
        self.version += 1
        self.edits += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=self.uri, version=self.version
                ),
                content_changes=[change],
            )
        )


def _columns(buf: Buffer, end_line: int, end_index: int) -> tuple[int, int, int]:
    """(start character, end line, end character) of a change from the cursor."""
    start = from_index(buf.doc.body(buf.line), buf.index, "utf-16")
    return start, end_line, from_index(buf.doc.body(end_line), end_index, "utf-16")


def _ahead(buf: Buffer, count: int) -> tuple[int, int]:
    """The (line, index) about ``count`` characters after the cursor (or the text's end)."""
    line, index = buf.line, buf.index
    lines = buf.doc.lines
    while line < len(lines) - 1 and count > len(lines[line]) - index:
        count -= len(lines[line]) - index
        line, index = line + 1, 0
    return line, min(len(buf.doc.body(line)), index + count)


def random_edit(buf: Buffer, rng: random.Random, source: str) -> None:
    """One edit at the buffer's cursor, as editors send them."""
    roll = rng.random()
    if roll < 0.70:  # typing, now and then a non-ASCII character or a new line
        ch = rng.choice(UNUSUAL) if rng.random() < 0.05 else rng.choice(TYPED)
        buf.replace(buf.line, buf.index, "\n" if rng.random() < 0.04 else ch)
    elif roll < 0.90:  # backspace (across a line start too)
        if buf.index:
            buf.index -= 1
            buf.replace(buf.line, buf.index + 1, "")
        elif buf.line:
            buf.line, end = buf.line - 1, buf.line
            buf.index = len(buf.doc.body(buf.line))
            buf.replace(end, 0, "")
    elif roll < 0.93:  # a paste of up to 5 KB
        start = rng.randrange(len(source) - 5000)
        buf.replace(buf.line, buf.index, source[start : start + rng.randrange(1, 5000)])
    elif roll < 0.96:  # a range deletion as large as a paste (the text keeps its size)
        buf.replace(*_ahead(buf, rng.randrange(1, 5000)), "")
    elif roll < 0.9995:  # a cursor jump, then a character typed there
        buf.jump(rng)
        buf.replace(buf.line, buf.index, rng.choice(TYPED))
    else:  # a full replacement (the same size, other text)
        size = min(utf8_len(buf.doc.text()), 1 << 20)
        start = rng.randrange(max(1, len(source) - size))
        buf.replace_all(source[start : start + size])


# ---------------------------------------------------------------------------- measuring
@dataclass
class Outcome:
    sent: float
    seconds: float = 0.0
    kind: str = ""  # answered, empty, error, cancelled
    settled: bool = False  # the buffer did not change until the answer came


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MB)
    text_mb: list[float] = field(default_factory=list)  # the server's documents, MB
    cheap: list[float] = field(default_factory=list)  # midword/stats latency
    live: list[int] = field(default_factory=list)  # buffers holding a covering tree and KV cache
    edits: int = 0


async def ask(client: LanguageClient, buf: Buffer, cancel: float | None, tally: Tally) -> None:
    """One inline request at the cursor; cancelled after ``cancel`` seconds when given."""
    pos, edits, outcome = buf.position(), buf.edits, Outcome(time.perf_counter())
    tally.outcomes.append(outcome)
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=buf.uri),
        position=pos,
        context=types.InlineCompletionContext(
            trigger_kind=types.InlineCompletionTriggerKind.Automatic
        ),
    )
    msg_id = f"soak-{next(_IDS)}"
    future = asyncio.wrap_future(
        client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)
    )
    if cancel is not None:
        await asyncio.sleep(cancel)
        client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    try:
        result = await future
    except JsonRpcException as exc:
        outcome.kind = "cancelled" if exc.code == REQUEST_CANCELLED else "error"
        if outcome.kind == "error":
            tally.errors.append(f"{exc.code}: {exc}")
        return
    finally:
        outcome.seconds = time.perf_counter() - outcome.sent
        outcome.settled = buf.edits == edits
    items = result.items if isinstance(result, types.InlineCompletionList) else result or []
    outcome.kind = "answered" if items else "empty"
    for item in items:
        if item.range is not None and (item.range.start != pos or item.range.end != pos):
            outcome.kind = "error"
            tally.errors.append(f"item at {item.range.start}, asked at {pos}")


_IDS = itertools.count()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def watch(
    client: LanguageClient, pid: int, tally: Tally, started: float, stop: asyncio.Event
) -> None:
    """Once a second until ``stop``: the server's RSS and the latency of a cheap request
    (not cancelled mid-request: pygls would then fail to hand over its answer)."""
    while not stop.is_set():
        tally.rss.append((time.perf_counter() - started, rss_mb(pid)))
        sent = time.perf_counter()
        stats = await client.protocol.send_request_async("midword/stats", {})
        tally.cheap.append(time.perf_counter() - sent)
        tally.text_mb.append(_field(stats, "documentBytes") / (1 << 20))
        tally.live.append(int(_field(stats, "liveDocuments")))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


# ---------------------------------------------------------------------------- the session
@dataclass
class Plan:
    duration: float
    rate: float
    elsewhere: float
    cancel: float
    request_s: float


class Session:
    """The busy editor: buffers, the active one, typing bursts and pauses."""

    def __init__(self, client: LanguageClient, texts: list[str], source: str, seed: int) -> None:
        self.client, self.source = client, source
        self.rng = random.Random(seed)
        self.buffers = [
            Buffer(client, f"file:///soak/buffer_{n:02d}.py", text) for n, text in enumerate(texts)
        ]
        self.active = self.buffers[1 % len(self.buffers)]
        self.typing_until = 0.0
        self.pause_until = 0.0

    def switch(self) -> None:
        self.active = self.rng.choice([b for b in self.buffers if b is not self.active])
        self.active.jump(self.rng)

    def typing(self, now: float) -> bool:
        """Whether the active buffer is in a typing burst now (bursts and pauses alternate)."""
        if now < self.typing_until:
            return True
        if now < self.pause_until:
            return False
        self.typing_until = now + self.rng.uniform(*BURST_S)
        self.pause_until = self.typing_until + self.rng.uniform(*PAUSE_S)
        return True

    def edit_elsewhere(self) -> None:
        buf = self.rng.choice([b for b in self.buffers if b is not self.active])
        if self.rng.random() < 0.002:  # closed and opened again
            buf.close()
            buf.version += 1
            buf.open(buf.doc.text())
            buf.jump(self.rng)
            return
        random_edit(buf, self.rng, self.source)


async def run(session: Session, plan: Plan, tally: Tally) -> float:
    """Send edits and requests for ``plan.duration`` seconds; returns the seconds taken."""
    duty = statistics.mean(BURST_S) / (statistics.mean(BURST_S) + statistics.mean(PAUSE_S))
    active_rate = plan.rate * (1 - plan.elsewhere) / duty  # during bursts
    other_rate = plan.rate * plan.elsewhere
    started = time.perf_counter()
    next_request, next_switch, owed_active, owed_other = started, started + SWITCH_S, 0.0, 0.0
    pending: set[asyncio.Task] = set()
    now = last = started
    while now - started < plan.duration:
        tick, last = now - last, now  # a late tick owes the edits of its whole length
        if session.typing(now):
            owed_active += active_rate * tick
        owed_other += other_rate * tick
        while owed_active >= 1:
            random_edit(session.active, session.rng, session.source)
            owed_active -= 1
            tally.edits += 1
        while owed_other >= 1:
            session.edit_elsewhere()
            owed_other -= 1
            tally.edits += 1
        if now >= next_request:
            next_request += plan.request_s
            cancel = session.rng.uniform(0, 0.05) if session.rng.random() < plan.cancel else None
            task = asyncio.create_task(ask(session.client, session.active, cancel, tally))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if now >= next_switch:
            next_switch += SWITCH_S
            session.switch()
        await asyncio.sleep(max(0.0, TICK_S - (time.perf_counter() - now)))
        now = time.perf_counter()
    elapsed = time.perf_counter() - started
    if pending:
        await asyncio.wait(pending, timeout=120)
    return elapsed


# ---------------------------------------------------------------------------- report
def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    picks = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.95, 0.99)]
    return ", ".join(f"p{q} {1000 * v:.0f} ms" for q, v in zip((50, 95, 99), picks, strict=True))


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS over the second half of the run."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return 0.0
    ts, ms = [t for t, _ in half], [m for _, m in half]
    t_mean, m_mean = statistics.mean(ts), statistics.mean(ms)
    den = sum((t - t_mean) ** 2 for t in ts)
    return 60 * sum((t - t_mean) * (m - m_mean) for t, m in zip(ts, ms, strict=True)) / den


def report(tally: Tally, elapsed: float, plan: Plan, consistent: bool) -> dict[str, Any]:
    done = [o for o in tally.outcomes if o.kind != "cancelled"]
    counts = {k: sum(o.kind == k for o in tally.outcomes) for k in ("answered", "empty", "error")}
    counts["cancelled"] = sum(o.kind == "cancelled" for o in tally.outcomes)
    settled = [o for o in done if o.settled]
    rss = [m for _, m in tally.rss]
    p95 = sorted(o.seconds for o in done)[int(0.95 * len(done))] if done else float("inf")
    slope = slope_mb_per_min(tally.rss)
    figures = {
        "edits_per_s": tally.edits / elapsed,
        "edits": tally.edits,
        "requests": len(tally.outcomes),
        **counts,
        "settled": len(settled),
        "settled_answered": sum(o.kind == "answered" for o in settled),
        "p95_s": p95,
        "rss_start_mb": rss[0] if rss else 0,
        "rss_max_mb": max(rss, default=0),
        "rss_end_mb": rss[-1] if rss else 0,
        "rss_slope_mb_per_min": slope,
        "documents_consistent": consistent,
    }
    print(
        f"\nbusy editor for {elapsed:.0f} s (target {plan.rate:.0f} edits/s, "
        f"{100 * plan.elsewhere:.0f}% elsewhere, a request every {1000 * plan.request_s:.0f} ms)"
    )
    print(f"  edits/s reached: {figures['edits_per_s']:.0f} ({tally.edits} edits)")
    print(
        f"  requests: {len(tally.outcomes)}: answered {counts['answered']}, empty "
        f"{counts['empty']}, errors {counts['error']}, cancelled {counts['cancelled']}"
    )
    print(f"  latency, every request not cancelled: {quantiles([o.seconds for o in done])}")
    print(
        f"  latency, settled requests ({len(settled)}, "
        f"{figures['settled_answered']} with items): {quantiles([o.seconds for o in settled])}"
    )
    answered = [o.seconds for o in done if o.kind == "answered"]
    print(f"  latency, answered with items: {quantiles(answered)}")
    print(f"  a cheap request (midword/stats): {quantiles(tally.cheap)}")
    print(
        f"  server RSS: start {figures['rss_start_mb']:.0f} MB, max {figures['rss_max_mb']:.0f}"
        f" MB, end {figures['rss_end_mb']:.0f} MB; second-half slope {slope:+.1f} MB/min"
    )
    if tally.text_mb:
        print(
            f"  documents' text: {tally.text_mb[0]:.1f} MB at the start, "
            f"{tally.text_mb[-1]:.1f} MB at the end"
        )
    if tally.live:  # bounded state still filling in the second half shows in the slope
        print(
            f"  buffers holding a covering tree and KV cache (8 at most): "
            f"{tally.live[len(tally.live) // 2]} at half time, {tally.live[-1]} at the end"
        )
    print(f"  server documents hold the client's bytes: {consistent}")
    for error in tally.errors[:5]:
        print(f"  error: {error}")
    goal = counts["error"] == 0 and p95 < 1.0 and abs(slope) < FLAT_MB_PER_MIN and consistent
    print(
        f"  goal (0 errors, p95 < 1 s, |RSS slope| < {FLAT_MB_PER_MIN:g} MB/min, documents "
        f"consistent): "
        f"{'met' if goal else 'NOT met'}"
    )
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of editing")
    parser.add_argument("--quick", action="store_true", help="30 s instead")
    parser.add_argument("--buffers", type=int, default=40)
    parser.add_argument("--rate", type=float, default=1000.0, help="edits a second in all")
    parser.add_argument("--elsewhere", type=float, default=0.05, help="share of edits elsewhere")
    parser.add_argument("--cancel", type=float, default=1 / 3, help="share of requests cancelled")
    parser.add_argument("--request-ms", type=float, default=50.0, help="ms between requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model", default="", help="model folder (default: the small test model shipped)"
    )
    parser.add_argument("--options", default="{}", help="more server options (JSON)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    plan = Plan(
        30.0 if args.quick else args.duration,
        args.rate,
        args.elsewhere,
        args.cancel,
        args.request_ms / 1000,
    )
    client = LanguageClient("bench-soak", "1")
    states: list[str] = []
    client.feature("midword/status")(lambda params: states.append(params.state))
    await client.start_io(sys.executable, "-m", "midword", "serve", "--log-level", "warning")
    server = client._server
    drain = asyncio.create_task(_drain(server.stderr))
    model = args.model or str(shipped_test_model())
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options={"model": model, **json.loads(args.options)},
        )
    )
    client.initialized(types.InitializedParams())
    while not states or states[-1] == "loading":
        await asyncio.sleep(0.05)
    if states[-1] != "ready":
        raise SystemExit(f"the server is not ready: {states[-1]}")
    source = corpus()
    rng = random.Random(args.seed)
    session = Session(client, buffer_texts(args.buffers, source, rng), source, args.seed)
    sizes = sorted(utf8_len(b.doc.text()) for b in session.buffers)
    print(f"model {model}")
    print(
        f"{len(sizes)} buffers, {sizes[0] / 1024:.0f} KB to {sizes[-1] / 1024:.0f} KB, "
        f"{sum(sizes) / (1 << 20):.1f} MB in all; server pid {server.pid}, cores "
        f"{os.cpu_count()}"
    )
    tally = Tally()
    loads = os.getloadavg()  # the machine may be shared: its load goes with the figures
    started = time.perf_counter()
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(client, server.pid, tally, started, stop))
    elapsed = await run(session, plan, tally)
    stop.set()
    await watcher
    stats = await client.protocol.send_request_async("midword/stats", {})
    held = sum(utf8_len(b.doc.text()) for b in session.buffers)
    served = _field(stats, "documentBytes")
    figures = report(tally, elapsed, plan, served == held)
    figures["load_average"] = [loads, os.getloadavg()]
    figures["flat_mb_per_min"] = FLAT_MB_PER_MIN
    start, end = (" ".join(f"{x:.1f}" for x in row) for row in (loads, os.getloadavg()))
    print(f"  load average (1, 5, 15 min): {start} at the start, {end} at the end")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    drain.cancel()


def _field(obj: Any, name: str) -> Any:
    """A field of a custom request's result (pygls gives an object, or a dict)."""
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


async def _drain(stream: asyncio.StreamReader | None) -> None:
    """Read the server's log (stderr) so that it never blocks on a full pipe."""
    while stream is not None and await stream.readline():
        pass


if __name__ == "__main__":
    asyncio.run(main())
