"""Completeness fuzz, long version: stream random texts byte by byte into the VCT and
check that the real encoding, cut after its first token past each checked cut point,
is a path of the streamed tree (the same check as tests/engine/test_completeness.py, which
runs 1 MB per tokenizer). Progress goes to stderr; per tokenizer it prints the bytes
streamed, cuts checked, mismatches and seconds.

Run: python benchmarks/bench_completeness.py [--megabytes 10] [--tokenizers llama3,qwen3]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from midword.testing.completeness import Config, Report, run
from midword.testing.fixtures import ALL_TOKENIZERS


def _progress(total: int) -> Callable[[Report], None]:
    def show(report: Report) -> None:
        print(
            f"\r  {report.tokenizer}: {report.bytes_streamed / 2**20:6.2f} / "
            f"{total / 2**20:.2f} MB, {report.cuts} cuts, {report.mismatches} mismatches, "
            f"{report.seconds:6.0f} s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


def _line(report: Report) -> str:
    return (
        f"{report.tokenizer:12s} {report.bytes_streamed:12d} {report.cuts:8d} "
        f"{report.tree_cuts:6d} {report.mismatches:10d} {report.added_text:6d} "
        f"{report.seconds:8.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=10.0, help="per tokenizer")
    parser.add_argument("--tokenizers", default=",".join(ALL_TOKENIZERS))
    parser.add_argument("--seed", type=int, default=1, help="the CI test uses seed 0")
    parser.add_argument("--cut-rate", type=float, default=Config.cut_rate)
    parser.add_argument("--tree-rate", type=float, default=Config.tree_rate)
    args = parser.parse_args()
    cfg = Config(args.cut_rate, args.tree_rate)
    total = int(args.megabytes * 2**20)
    print(
        f"{'tokenizer':12s} {'bytes':>12s} {'cuts':>8s} {'trees':>6s} {'mismatches':>10s} "
        f"{'added':>6s} {'seconds':>8s}",
        flush=True,
    )
    failed = False
    for name in args.tokenizers.split(","):
        report = run(name, total, args.seed, cfg, _progress(total))
        print(file=sys.stderr)
        print(_line(report), flush=True)
        for example in report.examples:
            print(f"    {example}", flush=True)
        failed |= report.mismatches > 0
    print("('trees': cuts also checked against the whole tree; 'added': fragments holding")
    print(" a non-special added text, such as Qwen's <think>)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
