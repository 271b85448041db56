"""Cost of exactness: inference tokens (paper table 2) and wall clock (table 12).

1. Inference tokens per prompt-boundary solve: random windows of --window
   characters (default 100) from the text folder, so most end mid-word. Plain BPE
   evaluates 1 + len(encode(window)) tokens; ByteSampler's whole-tree solve evaluates
   the trunk plus the internal nodes of the Valid Covering Tree (one forward call,
   empty cache): what the prefix probability and each byte-mode step cost. The
   difference is the overhead (the paper reports +0.72 for OLMo 2). PBP mode's lazy
   solve (the default: internal nodes scored only when its leaf search enters them)
   is counted too, on a one-leaf PBP completion at temperature 1 (seed: the window).

2. Wall clock for one fixed prompt (the first --prompt-bytes bytes of the longest
   text file), --runs runs each, temperature 1: normal sampling (tokenize, then
   sample --tokens tokens), ByteSampler PBP mode (exact prompt, then --tokens
   tokens) and byte sampling (one exact next-byte distribution per byte, as many
   bytes as normal sampling produced on average). Every run starts from an empty
   KV cache, so prompt processing is included. Speed is completion bytes per second.
   The methods take turns (run 0 of each, then run 1 of each, ...), so a change in the
   machine's load hits them alike; each method's time is compared with normal sampling
   as the ratio of total times and as the median of the paired per-run ratios with
   their interquartile range (`paired_ratios`). A spread too wide for the median to
   mean anything is flagged in the table.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass
from typing import Any

from midword.bench import common, data, plots

DEFAULT_OUT = "bench-results/overhead"
DEFAULT_LIMIT = 3000
WALL_METHODS = ("normal", "pbp", "bytes")
WALL_LABELS = {
    "normal": "Normal sampling (plain BPE prompt)",
    "pbp": "ByteSampler PBP mode",
    "bytes": "ByteSampler byte sampling",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_common_arguments(parser, DEFAULT_OUT, DEFAULT_LIMIT, "random windows")
    data.add_text_arguments(parser)
    parser.add_argument("--window", type=int, default=100, help="window characters (default 100)")
    parser.add_argument(
        "--runs", type=int, default=10, help="wall-clock runs per method (default 10)"
    )
    parser.add_argument(
        "--tokens", type=int, default=128, help="tokens per sampling run (default 128)"
    )
    parser.add_argument(
        "--prompt-bytes", type=int, default=636, help="wall-clock prompt size (default 636)"
    )


def make_window(docs: list[data.TextFile], seed: int, index: int, size: int) -> str:
    """Window ``index``: a random ``size``-character substring (depends on seed and index).

    >>> make_window([data.TextFile("a", "abcdefgh")], 0, 0, 3) in "abcdefgh"
    True
    """
    rng = random.Random(f"overhead-{seed}-{index}")
    doc = rng.choices(docs, weights=[max(1, len(d.text) - size) for d in docs])[0]
    start = rng.randrange(0, max(1, len(doc.text) - size))
    return doc.text[start : start + size]


def fixed_prompt(docs: list[data.TextFile], size: int) -> bytes:
    """The first ``size`` bytes of the longest document, cut back to a whole character."""
    text = max(docs, key=lambda d: len(d.text)).text.encode("utf-8")[:size]
    return text.decode("utf-8", errors="ignore").encode("utf-8")


class Runner:
    """The model-side work of this benchmark."""

    def __init__(self, model: Any, engine: Any) -> None:
        from midword.engine import ByteSampler, Completer

        self.tok = engine.tok
        self.sampler = ByteSampler(model, engine, track_prefix=False)
        self.completer = Completer(model, engine)

    def window(self, text: str, seed: int = 0) -> dict[str, Any]:
        session = self.sampler.session
        session.reset()
        before = int(session.inference_tokens)
        timer = common.Timer()
        self.sampler.reset(text.encode("utf-8"))
        self.sampler.next_bytes()  # scores the whole tree: the prompt-boundary solve
        tree = self.sampler.vct.tree()
        plain = 1 + len(self.tok.encode(text))
        used = int(session.inference_tokens) - before
        seconds = timer.seconds()
        lazy = self.lazy_solve(text, seed)
        return {
            "plain_tokens": plain,
            "bytesampler_tokens": used,
            "overhead": used - plain,
            "tree_nodes": len(tree.nodes),
            "seconds": round(seconds, 4),
            "lazy_tokens": lazy,
            "lazy_overhead": lazy - plain,
        }

    def lazy_solve(self, text: str, seed: int) -> int:
        """Inference tokens of PBP mode's lazy solve of ``text`` (one leaf, empty cache)."""
        from midword.engine import Settings

        session = self.completer.session
        session.reset()
        before = int(session.inference_tokens)
        settings = Settings(max_tokens=1, temperature=1.0, seed=seed, solve="lazy")
        self.completer.complete(text.encode("utf-8"), settings)
        return int(session.inference_tokens) - before

    def wall(self, method: str, prompt: bytes, tokens: int, nbytes: int, seed: int) -> dict:
        from midword.engine import Settings

        if method == "bytes":
            s = Settings(
                mode="bytes",
                max_tokens=max(1, nbytes // 4 + 1),
                max_bytes=nbytes,
                temperature=1.0,
                seed=seed,
            )
        else:
            s = Settings(
                method="naive" if method == "normal" else "bytesampler",
                max_tokens=tokens,
                temperature=1.0,
                seed=seed,
            )
        self.completer.session.reset()  # include prompt processing in every run
        done = self.completer.complete(prompt, s)
        return {"seconds": done.seconds, "bytes": len(done.data), "stop_reason": done.stop_reason}


def run(args: argparse.Namespace) -> int:
    docs = data.load_texts(args.text, args.glob)
    settings = {
        **common.model_settings(args),
        "benchmark": "overhead",
        **data.text_settings(args),
        "window": args.window,
        "tokens": args.tokens,
        "prompt_bytes": args.prompt_bytes,
    }
    rundir = common.RunDir(args.out, settings)
    timer = common.Timer()
    windows = [f"window/{i}" for i in range(args.limit)]
    # run r of every method, then run r + 1: the methods share the machine's load
    walls = [f"wall/{m}/{r}" for r in range(args.runs) for m in WALL_METHODS]
    todo = [k for k in windows + walls if not rundir.done(k)]
    if todo:
        runner = Runner(*common.load_model(args))
        _do(args, rundir, runner, docs, todo)
    wanted = set(windows + walls)
    markdown, summary = report([r for r in rundir.records() if r["key"] in wanted])
    _plot(rundir, summary)
    common.finish(rundir, markdown, summary, timer.seconds())
    return 0


def _do(
    args: argparse.Namespace, rundir: common.RunDir, runner: Runner, docs: list, todo: list[str]
) -> None:
    prompt = fixed_prompt(docs, args.prompt_bytes)
    bar = common.progress(len(todo), "overhead")
    for key in todo:
        kind, *rest = key.split("/")
        if kind == "window":
            text = make_window(docs, args.seed, int(rest[0]), args.window)
            record = {"key": key, "kind": kind, **runner.window(text, seed=int(rest[0]))}
        else:
            method, index = rest[0], int(rest[1])
            nbytes = _normal_bytes(rundir) if method == "bytes" else 0
            result = runner.wall(method, prompt, args.tokens, nbytes, args.seed * 1000 + index)
            record = {"key": key, "kind": kind, "method": method, **result}
        rundir.add(record)
        bar.update(1)
    bar.close()


def _normal_bytes(rundir: common.RunDir) -> int:
    """Byte sampling produces as many bytes as normal sampling did on average."""
    sizes = [r["bytes"] for r in rundir.records() if r.get("method") == "normal"]
    return max(1, round(common.mean(sizes))) if sizes else 128


def report(records: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Both tables from the records."""
    win = [r for r in records if r["kind"] == "window"]
    plain = common.mean([r["plain_tokens"] for r in win])
    ours = common.mean([r["bytesampler_tokens"] for r in win])
    over = [r["overhead"] for r in win]
    se = common.std(over) / len(over) ** 0.5 if over else float("nan")
    lazy_win = [r for r in win if "lazy_tokens" in r]  # records of older runs lack it
    lazy_over = [r["lazy_overhead"] for r in lazy_win]
    lazy_se = common.std(lazy_over) / len(lazy_over) ** 0.5 if lazy_over else float("nan")
    md = ["## Inference tokens per prompt-boundary solve (paper table 2)\n\n"]
    md.append(
        common.markdown_table(
            ["Method", "windows", "inference tokens", "overhead vs BPE", "ms per solve"],
            [
                ["No mitigation (plain BPE)", len(win), common.fmt(plain, 2), "0", "-"],
                [
                    "ByteSampler, whole tree (prefix probability, byte mode)",
                    len(win),
                    common.fmt(ours, 2),
                    f"{common.mean(over):+.2f} ± {common.fmt(se, 2)}",
                    common.fmt(1000 * common.mean([r["seconds"] for r in win]), 1),
                ],
                [
                    "ByteSampler PBP mode, lazy solve (sampled leaf)",
                    len(lazy_win),
                    common.fmt(common.mean([r["lazy_tokens"] for r in lazy_win]), 2),
                    f"{common.mean(lazy_over):+.2f} ± {common.fmt(lazy_se, 2)}"
                    if lazy_win
                    else "-",
                    "-",
                ],
            ],
        )
    )
    wall = _wall_stats(records)
    md.append("\n## Wall clock vs standard sampling (paper table 12)\n\n")
    rows = []
    for m in WALL_METHODS:
        s = wall.get(m)
        if s:
            rows.append(
                [
                    WALL_LABELS[m],
                    s["runs"],
                    common.fmt(s["seconds"], 2),
                    common.fmt(s["total_seconds"], 2),
                    common.fmt(s["bytes"], 0),
                    f"{common.fmt(s['speed'], 1)} ± {common.fmt(s['speed_std'], 1)}",
                    f"{common.fmt(s['ratio'], 2)}x",
                    _paired_cell(s),
                ]
            )
    md.append(
        common.markdown_table(
            [
                "Method",
                "runs",
                "mean time (s)",
                "total time (s)",
                "bytes",
                "speed (bytes/s)",
                "time / normal (totals)",
                "paired time ratio: median [IQR]",
            ],
            rows,
        )
    )
    md.append(
        "\nTime ratios are this method's time over normal sampling's (above 1: slower). "
        "Paired ratios divide run r of a method by run r of normal sampling.\n"
    )
    summary = {
        "windows": len(win),
        "plain_tokens": plain,
        "bytesampler_tokens": ours,
        "overhead": common.mean(over),
        "overhead_se": se,
        "lazy_overhead": common.mean(lazy_over) if lazy_over else None,
        "lazy_overhead_se": lazy_se if lazy_over else None,
        "wall": wall,
        "overheads": over,
        "lazy_overheads": lazy_over,
    }
    return "".join(md), summary


def _wall_stats(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: runs, mean and total seconds, mean bytes, speed (bytes/s, mean ± std
    over runs), and its time against normal sampling: ``ratio`` (total over total) and
    ``paired`` (`paired_ratios` of the runs both have)."""
    by_method = {m: [r for r in records if r.get("method") == m] for m in WALL_METHODS}
    out: dict[str, dict[str, Any]] = {}
    for m, runs in by_method.items():
        if runs:
            speeds = [r["bytes"] / r["seconds"] for r in runs if r["seconds"] > 0]
            out[m] = {
                "runs": len(runs),
                "seconds": common.mean([r["seconds"] for r in runs]),
                "total_seconds": sum(r["seconds"] for r in runs),
                "bytes": common.mean([r["bytes"] for r in runs]),
                "speed": common.mean(speeds),
                "speed_std": common.std(speeds),
            }
    base = {_run_index(r): r["seconds"] for r in by_method["normal"]}
    for m, s in out.items():
        mine = {_run_index(r): r["seconds"] for r in by_method[m]}
        both = sorted(set(mine) & set(base))
        paired = paired_ratios([mine[i] for i in both], [base[i] for i in both])
        s["ratio"] = paired.of_totals
        s["paired"] = paired.to_json()
    return out


def _run_index(record: dict[str, Any]) -> int:
    return int(record["key"].rsplit("/", 1)[1])


def _paired_cell(stats: dict[str, Any]) -> str:
    paired = stats["paired"]
    if not paired["pairs"]:
        return "-"
    cell = (
        f"{common.fmt(paired['median'], 2)}x "
        f"[{common.fmt(paired['q1'], 2)}, {common.fmt(paired['q3'], 2)}]"
    )
    return cell if paired["meaningful"] else f"{cell} (spread too wide: {paired['why']})"


# a paired median whose interquartile range is wider than this share of it says little
SPREAD_LIMIT = 0.25
MIN_PAIRS = 3


@dataclass(frozen=True)
class PairedRatios:
    """How one method's times compare with a baseline's, run by run.

    of_totals: sum of ours / sum of theirs (one slow run weighs what it cost);
    median, q1, q3: of the per-pair ratios ours[i] / theirs[i];
    meaningful: False when there are fewer than MIN_PAIRS pairs or the interquartile
    range is wider than SPREAD_LIMIT times the median (``why`` says which).
    """

    pairs: int
    of_totals: float
    median: float
    q1: float
    q3: float
    meaningful: bool
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "of_totals": self.of_totals,
            "median": self.median,
            "q1": self.q1,
            "q3": self.q3,
            "meaningful": self.meaningful,
            "why": self.why,
        }


def paired_ratios(ours: list[float], theirs: list[float]) -> PairedRatios:
    """Ratio of total times and the median of paired ratios, with their spread.

    The old "ratio" was a mean of per-run speeds, which one fast run dominates; these
    are what a reader expects from "A takes x times as long as B".

    >>> r = paired_ratios([2.0, 2.2, 1.8, 2.0], [1.0, 1.0, 1.0, 1.0])
    >>> r.of_totals, r.median, r.meaningful
    (2.0, 2.0, True)
    >>> paired_ratios([1.0, 9.0, 1.0], [1.0, 1.0, 1.0]).of_totals
    3.6666666666666665
    """
    if len(ours) != len(theirs):
        raise ValueError(f"{len(ours)} runs against {len(theirs)}: ratios need pairs")
    nan = math.nan
    if not ours or sum(theirs) <= 0:
        return PairedRatios(len(ours), nan, nan, nan, nan, False, "no pairs")
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b > 0]
    of_totals = sum(ours) / sum(theirs)
    median = statistics.median(ratios)
    if len(ratios) < 2:
        q1 = q3 = median
    else:
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    why = ""
    if len(ratios) < MIN_PAIRS:
        why = f"{len(ratios)} pair(s), fewer than {MIN_PAIRS}"
    elif q3 - q1 > SPREAD_LIMIT * median:
        why = f"IQR {q3 - q1:.2f} is over {SPREAD_LIMIT:.0%} of the median"
    return PairedRatios(len(ratios), of_totals, median, q1, q3, not why, why)


def _plot(rundir: common.RunDir, summary: dict[str, Any]) -> None:
    plots.histogram(
        rundir.path / "overhead_tokens.png",
        {
            "whole tree - plain BPE": summary["overheads"],
            "lazy PBP solve - plain BPE": summary["lazy_overheads"],
        },
        "Extra inference tokens per prompt-boundary solve",
        "tokens",
        bins=20,
    )
    wall = summary["wall"]
    names = [m for m in WALL_METHODS if m in wall]
    plots.grouped_bars(
        rundir.path / "speed.png",
        names,
        {"bytes/s": [wall[m]["speed"] for m in names]},
        "Sampling speed (completion bytes per second)",
        "bytes/s",
    )
