"""Team server benchmark: N editors typing into different files against one vLLM.

Each session is its own process with its own covering trees and `RemoteCompleter`
(what one `midword serve --engine vllm` holds per buffer), typing a different source
file of this repository one character at a time, a key every ``--key-ms`` (or as soon
as the previous completion is back, when that takes longer: an editor keeps one
request per buffer), with a greedy PBP completion after every key (``--temperature 1``:
a sampled one, seeded by the key). For N = 1, 4 and 16 sessions it prints:

* per-keystroke latency, p50 / p95 (the completion after the key, client side);
* requests per completion and bytes on the wire per completion (request and response
  bodies, both ways);
* the share of tree rows asked as chosen or top ids rather than full rows ("sparse"), and
  short rows asked again (vLLM batches; see engine/remote/backend.py);
* the server's prefix-cache hit rate over the run (``vllm:prefix_cache_hits_total`` /
  ``vllm:prefix_cache_queries_total`` from ``/metrics``), in tokens;
* full rows per completion, and the tokens drawn after the cursor node per completion
  (with those rejected: not a leaf there), when sampling at temperature 1.

``--leaf draws,rows`` measures sampling both ways, side by side: the cursor node's leaf
drawn by the server (the default) and its full row asked (``RemoteCompleter.draw_leaves
= False``, what midword did before).

Against a running server (``--url``), or one this script starts from the vLLM venv
(``--vllm-python``, default $MIDWORD_VLLM_PYTHON; CPU flags as in the tests) and stops
by its process group at the end.

    python benchmarks/bench_team.py [--url URL] [--sessions 1,4,16] [--keys 40]
    python benchmarks/bench_team.py --temperature 1 --sessions 1 --leaf draws,rows
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVED_NAME = "midword-bench"


@dataclass
class SessionResult:
    latencies_ms: list[float] = field(default_factory=list)
    requests: int = 0
    wire_bytes: int = 0
    chosen_rows: int = 0
    full_rows: int = 0
    retries: int = 0
    errors: int = 0
    leaf_draws: int = 0
    rejected_draws: int = 0


def source_files(count: int) -> list[Path]:
    """``count`` different Python files of this checkout, the longest first."""
    files = [p for d in ("engine", "server", "midword") for p in (ROOT / d).rglob("*.py")]
    files = sorted(files, key=lambda p: (-p.stat().st_size, str(p)))
    return files[:count]


def run_session(args: dict, index: int, start_at: float, out: multiprocessing.Queue) -> None:
    """One editor (a process): its figures, or one error when it could not run."""
    try:
        out.put(type_file(args, index, start_at).__dict__)
    except Exception as exc:  # the parent waits for one answer per session
        print(f"session {index}: {type(exc).__name__}: {exc}", file=sys.stderr)
        out.put(SessionResult(errors=1).__dict__)


def type_file(args: dict, index: int, start_at: float) -> SessionResult:
    """Type ``keys`` characters into file ``index``, completing after each."""
    from midword.engine import EngineError, Settings, connect_vllm, load_engine

    engine = load_engine(args["model"])
    model = connect_vllm(args["url"], engine, model_dir=args["model"], timeout=60)
    completer = model.completer(engine)
    completer.draw_leaves = args["leaf"] == "draws"
    text = source_files(args["sessions"])[index].read_bytes()
    start = _line_start(text, args["context_bytes"])
    settings = Settings(max_tokens=args["max_tokens"], temperature=args["temperature"], seed=0)
    completer.complete(text[:start], settings)  # the buffer is open: its window is scored
    result = SessionResult()
    while time.time() < start_at:
        time.sleep(0.01)
    for k in range(args["keys"]):
        key_time = time.perf_counter()
        before = model.client.stats.copy()
        try:
            completer.complete(text[: start + k + 1], replace(settings, seed=k))
        except EngineError:
            result.errors += 1
        result.latencies_ms.append((time.perf_counter() - key_time) * 1e3)
        spent = model.client.stats.minus(before)
        result.requests += spent.requests
        result.wire_bytes += spent.bytes_sent + spent.bytes_received
        result.chosen_rows += spent.chosen_rows + spent.top_rows
        result.full_rows += spent.full_rows
        result.retries += spent.retries
        result.leaf_draws += spent.leaf_draws
        result.rejected_draws += spent.rejected_draws
        wait = args["key_ms"] / 1e3 - (time.perf_counter() - key_time)
        if wait > 0:
            time.sleep(wait)
    model.close()
    return result


def _line_start(text: bytes, at_least: int) -> int:
    """The first line start at or after ``at_least`` bytes (typing starts on a new line)."""
    cut = text.find(b"\n", min(at_least, len(text) - 1))
    return cut + 1 if cut >= 0 else len(text) // 2


def prefix_cache(url: str) -> tuple[float, float]:
    """(hits, queries) of the server's prefix cache, in tokens, summed over engines."""
    request = urllib.request.Request(f"{url}/metrics")
    key = os.environ.get("MIDWORD_ENGINE_API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read().decode()
    hits = queries = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


def measure(args: argparse.Namespace, sessions: int, leaf: str) -> dict:
    """Run ``sessions`` editors at once; their figures together."""
    context = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = context.Queue()
    settings = {**vars(args), "sessions": max(args.sessions_list), "leaf": leaf}
    start_at = time.time() + 15.0 + 2.0 * sessions  # every session connected by then
    hits0, queries0 = prefix_cache(args.url)
    procs = [
        context.Process(target=run_session, args=(settings, i, start_at, queue))
        for i in range(sessions)
    ]
    for proc in procs:
        proc.start()
    results = [SessionResult(**queue.get(timeout=1800)) for _ in procs]
    for proc in procs:
        proc.join()
    hits1, queries1 = prefix_cache(args.url)
    latencies = [ms for r in results for ms in r.latencies_ms]
    completions = len(latencies)
    if completions < 2:
        sys.exit("no completions: see the sessions' errors above")
    quantiles = statistics.quantiles(latencies, n=20)
    return {
        "sessions": sessions,
        "leaf": leaf,
        "completions": completions,
        "p50_ms": statistics.median(latencies),
        "p95_ms": quantiles[18],
        "requests_per_completion": sum(r.requests for r in results) / completions,
        "kb_per_completion": sum(r.wire_bytes for r in results) / completions / 1e3,
        "chosen_share": _share(results),
        "prefix_cache_hit_rate": (hits1 - hits0) / max(1.0, queries1 - queries0),
        "retries": sum(r.retries for r in results),
        "errors": sum(r.errors for r in results),
        "full_rows_per_completion": sum(r.full_rows for r in results) / completions,
        "draws_per_completion": sum(r.leaf_draws for r in results) / completions,
        "rejected_draws": sum(r.rejected_draws for r in results),
    }


def _share(results: list[SessionResult]) -> float:
    chosen = sum(r.chosen_rows for r in results)
    return chosen / max(1, chosen + sum(r.full_rows for r in results))


# ------------------------------------------------------------------ a vLLM to measure
def start_vllm(python: str, model: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_LOOPBACK_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
        "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-logprobs", "-1", "--logprobs-mode", "raw_logprobs",
        "--enable-prefix-caching", "--block-size", "32",
    ]  # fmt: skip
    log = open(os.environ.get("TMPDIR", "/tmp") + f"/bench-team-vllm-{port}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"vLLM exited ({proc.returncode}); see {log.name}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    sys.exit("vLLM did not start in 10 minutes")


def stop_vllm(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def print_row(row: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(row))
    else:
        print(
            f"{row['sessions']:>3} {row['leaf']:>5} {row['completions']:>6} "
            f"{row['p50_ms']:>8.1f} {row['p95_ms']:>8.1f} "
            f"{row['requests_per_completion']:>9.2f} {row['kb_per_completion']:>8.1f} "
            f"{row['chosen_share']:>6.0%} {row['prefix_cache_hit_rate']:>9.1%} "
            f"{row['retries']:>7} {row['errors']:>6} {row['full_rows_per_completion']:>10.2f} "
            f"{row['draws_per_completion']:>11.2f} {row['rejected_draws']:>8}"
        )
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running vLLM (default: start one)")
    parser.add_argument("--vllm-python", default=os.environ.get("MIDWORD_VLLM_PYTHON"))
    parser.add_argument("--model", default=str(ROOT / "models" / "default"))
    parser.add_argument("--sessions", default="1,4,16", help="comma-separated N values")
    parser.add_argument("--keys", type=int, default=40, help="keystrokes per session")
    parser.add_argument("--key-ms", type=float, default=150.0, help="typing: a key every ...")
    parser.add_argument("--context-bytes", type=int, default=800, help="text before the cursor")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument(
        "--leaf",
        default="draws",
        help="draws, rows or both (draws,rows): how a sampled "
        "completion reads the cursor node (see the docstring)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per N")
    args = parser.parse_args()
    args.sessions_list = [int(n) for n in args.sessions.split(",")]
    leaf_modes = args.leaf.split(",")
    if not set(leaf_modes) <= {"draws", "rows"}:
        sys.exit("--leaf takes draws, rows or draws,rows")
    proc = None
    if args.url is None:
        if not args.vllm_python:
            sys.exit("give --url, or --vllm-python / MIDWORD_VLLM_PYTHON (.ci/vllm_setup)")
        proc, args.url = start_vllm(args.vllm_python, args.model)
    try:
        if not args.json:
            print(
                f"{'N':>3} {'leaf':>5} {'compl.':>6} {'p50 ms':>8} {'p95 ms':>8} "
                f"{'req/compl':>9} {'KB/compl':>8} {'sparse':>6} {'cache hit':>9} "
                f"{'retries':>7} {'errors':>6} {'full/compl':>10} {'draws/compl':>11} "
                f"{'rejected':>8}"
            )
        for n in args.sessions_list:
            for leaf in leaf_modes:
                print_row(measure(args, n, leaf), args.json)

    finally:
        if proc is not None:
            stop_vllm(proc)


if __name__ == "__main__":
    main()
