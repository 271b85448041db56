"""Shared machinery of the benchmarks: the output folder, resumable sample logs,
progress bars, markdown tables and small statistics.

Every benchmark writes into its ``--out`` folder:

* ``run.json``: the settings that determine the results (a rerun with other
  settings into the same folder is refused, so samples never mix);
* ``samples.jsonl``: one JSON object per sample, appended as soon as it is done;
  a rerun skips every key already there (an interrupted run resumes);
* ``results.md`` / ``results.json``: the tables, recomputed from all samples;
* ``*.png``: plots.

>>> markdown_table(["a", "b"], [[1, 0.5]])
'| a | b |\\n|---|---|\\n| 1 | 0.5 |\\n'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from midword.cli import CommandError


class RunDir:
    """An output folder with its settings and resumable ``samples.jsonl``.

    >>> import tempfile
    >>> run = RunDir(tempfile.mkdtemp(), {"seed": 0})
    >>> run.add({"key": "a", "x": 1}); run.done("a"), len(run.records())
    (True, 1)
    """

    def __init__(self, out: str | Path, settings: dict[str, Any]) -> None:
        self.path = Path(out)
        self.path.mkdir(parents=True, exist_ok=True)
        self._check_settings(settings)
        self.samples = self.path / "samples.jsonl"
        self._records: dict[str, dict[str, Any]] = {}
        if self.samples.exists():
            self._load()

    def _check_settings(self, settings: dict[str, Any]) -> None:
        stored = self.path / "run.json"
        current = json.loads(json.dumps(settings))  # normalise tuples etc.
        if stored.exists():
            old = json.loads(stored.read_text(encoding="utf-8"))
            diff = sorted(k for k in set(old) | set(current) if old.get(k) != current.get(k))
            if diff:
                raise CommandError(
                    f"{self.path} holds a run with other settings ({', '.join(diff)}); "
                    "use another --out, or delete the folder to start over"
                )
        stored.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def _load(self) -> None:
        with open(self.samples, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by an interrupted run: redo that sample
                self._records[record["key"]] = record

    def done(self, key: str) -> bool:
        return key in self._records

    def add(self, record: dict[str, Any]) -> None:
        """Append one finished sample (flushed at once, so an interrupt loses nothing)."""
        self._records[record["key"]] = record
        with open(self.samples, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, default=_builtin) + "\n")

    def records(self) -> list[dict[str, Any]]:
        return list(self._records.values())

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.write_text(text, encoding="utf-8")
        return path


def _builtin(value: Any) -> Any:
    """JSON fallback for numpy scalars (engine results are often numpy values)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def progress(total: int, desc: str) -> Any:
    """A progress bar on stderr (tqdm); ``.update(n)`` and ``.close()``."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=1.0, dynamic_ncols=True)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table (cells formatted with ``str``)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; nan for no values.

    >>> mean([1, 2]), math.isnan(mean([]))
    (1.5, True)
    """
    return sum(values) / len(values) if values else math.nan


def std(values: Sequence[float]) -> float:
    """Sample standard deviation; nan below two values."""
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def fmt(value: float, digits: int = 3) -> str:
    """A table cell: fixed digits, '-' for nan.

    >>> fmt(0.12345), fmt(float("nan"))
    ('0.123', '-')
    """
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


CUTS = ("mid-word", "after space", "other")


def cut_kind(before: str, after: str) -> str:
    """Where a prompt was cut, from the character before the cut and the one after it.

    "mid-word": both are ASCII letters or digits (the cut splits an identifier, a keyword
    or a number: where plain tokenization is most often wrong); "after space": the prompt
    ends with a space (the cut BPE handles worst among the others: the space usually
    belongs to the next token); "other": everything else (after a newline, punctuation,
    an underscore, non-ASCII text, or an empty side).

    >>> cut_kind("    ret", "urn"), cut_kind("return ", "x"), cut_kind("f(", "x")
    ('mid-word', 'after space', 'other')
    >>> cut_kind("x ", "y"), cut_kind("", "a"), cut_kind("é", "a")
    ('after space', 'other', 'other')
    """
    last, first = before[-1:], after[:1]
    if _is_ascii_alnum(last) and _is_ascii_alnum(first):
        return "mid-word"
    return "after space" if last == " " else "other"


def _is_ascii_alnum(ch: str) -> bool:
    return len(ch) == 1 and ch.isascii() and ch.isalnum()


def add_common_arguments(parser: argparse.ArgumentParser, out: str, limit: int, what: str) -> None:
    """--model/--tokenizer/--device/--dtype plus --limit, --seed and --out."""
    from midword.modelargs import add_model_arguments

    add_model_arguments(parser)
    parser.add_argument(
        "--limit", type=int, default=limit, help=f"number of {what} (default {limit})"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: small models gain nothing from more, and on a "
        "busy machine two threads ran 10x slower than one; 0: torch's choice)",
    )
    parser.add_argument(
        "--out", default=out, help=f"output folder; a rerun resumes it (default {out})"
    )


def model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The part of run.json that identifies the model."""
    return {
        "model": str(args.model),
        "tokenizer": args.tokenizer,
        "dtype": args.dtype,
        "seed": args.seed,
    }


def load_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """(model, engine) from the model options, after applying --threads."""
    from midword.modelargs import load_model_and_engine

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return load_model_and_engine(args)


class Timer:
    """Wall-clock seconds since creation.

    >>> Timer().seconds() >= 0
    True
    """

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.start


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Consecutive slices of at most ``size`` items.

    >>> [list(c) for c in chunks([1, 2, 3], 2)]
    [[1, 2], [3]]
    """
    for i in range(0, len(items), size):
        yield items[i : i + size]


def finish(run: RunDir, markdown: str, summary: dict[str, Any], seconds: float) -> None:
    """Write results.md / results.json and print the tables on stdout."""
    run.write("results.md", markdown)
    summary = {**summary, "wall_seconds_this_run": round(seconds, 1)}
    run.write("results.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print(markdown)
    print(f"results in {run.path} ({seconds:.0f} s this run)", file=sys.stderr)
