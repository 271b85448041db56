"""Print the exact next-byte distribution after a byte prefix.

The prefix is PREFIX (UTF-8), the raw bytes of --prefix-file F, or stdin when
PREFIX is '-'. It may end inside a UTF-8 character. --json prints one object
(a public contract, kept stable):

  {"prefix_logprob": x, "next": {"0": lp, ..., "255": lp, "eos": lp},
   "inference_tokens": n}

with natural-log probabilities; impossible bytes are omitted. "eos" is the
probability that the text ends exactly at the prefix (a special token follows).
The values may sum to a little less than one: the rest is what the model puts
on token sequences no tokenizer would produce.
"""

from __future__ import annotations

import argparse
import json
import math

from midword.cli import CommandError
from midword.cmd_tree import read_prefix
from midword.modelargs import add_model_arguments, load_model_and_engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "prefix", nargs="?", help="prefix text, or '-' to read raw bytes from stdin"
    )
    parser.add_argument("--prefix-file", help="read the prefix as raw bytes from this file")
    add_model_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--top", type=int, default=10, help="bytes shown in text output")


def run(args: argparse.Namespace) -> int:
    from midword.engine import PrefixError
    from midword.engine.sampling import ByteSampler

    prefix = read_prefix(args)
    model, engine = load_model_and_engine(args)
    try:
        sampler = ByteSampler(model, engine)
        sampler.reset(prefix)
        dist = sampler.next_bytes()
    except PrefixError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        nxt = {str(b): float(v) for b, v in enumerate(dist.next) if math.isfinite(v)}
        if math.isfinite(dist.eos):
            nxt["eos"] = float(dist.eos)
        print(
            json.dumps(
                {
                    "prefix_logprob": dist.prefix_logprob,
                    "next": nxt,
                    "inference_tokens": dist.inference_tokens,
                }
            )
        )
        return 0
    print(f"log P(prefix) = {dist.prefix_logprob:.6f}   ({dist.inference_tokens} inference tokens)")
    entries = [(float(v), repr(bytes([b]))) for b, v in enumerate(dist.next) if math.isfinite(v)]
    if math.isfinite(dist.eos):
        entries.append((float(dist.eos), "<end of text>"))
    for lp, name in sorted(entries, reverse=True)[: args.top]:
        print(f"{math.exp(lp):9.6f}  {name}")
    return 0
