"""Print the exact next-byte distribution after a byte prefix.

The prefix is the PREFIX argument, the raw bytes of --prefix-file F, or standard
input when PREFIX is '-'. It is UTF-8 text that may stop inside a character (an
argument's bytes are taken as the shell passes them).

--json prints one object per prefix on one line (a public contract, kept stable):

  {"prefix_logprob": float or null,
   "next": {"0": lp, ..., "255": lp, "eos": lp},
   "inference_tokens": int}

All values are natural logs (<= 0). "next" maps a byte value b, written in
decimal, to log P(b | prefix) = log P(prefix + b) - log P(prefix); bytes that
cannot follow are omitted. "eos" (also omitted when impossible) is the log
probability that the text ends exactly at the prefix (a special token follows
its canonical encoding). The probabilities sum to at most one: the rest is what
the model puts on token sequences no tokenizer would produce (little on text like
what it was trained on, much more on text it never saw, such as a cut inside a
character it does not know).
"prefix_logprob" is log P(prefix) (null only if it is not a finite number);
"inference_tokens" counts the tokens the model evaluated to answer.

With --suffix TEXT or --suffix-file PATH and a model trained for fill-in-the-middle
(--fim auto|NAME, docs/fim.md), the distribution is the middle's at the cursor;
"prefix_logprob" is then log P of the bytes the covering tree covers given the FIM
prompt: the prefix (templates whose prefix and middle share one token segment) or
nothing (the others: 0).

Several prefixes (PREFIX ... and --prefix-file F ..., in that order) need --json
and print one object per line (JSON Lines), in order. The model loads once and
keeps its cache from one prefix to the next, so a prefix that starts like the one
before costs fewer inference tokens; the probabilities are those a run of its
own gives.
Errors print one line on stderr and exit with status 2.

Examples:
  midword next-bytes 'def __in'
  midword next-bytes --json 'x = 12' 'import nump'
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from midword.cli import CommandError, print_json
from midword.cmd_tree import add_prefix_arguments, read_prefixes
from midword.modelargs import (
    add_engine_arguments,
    add_fim_arguments,
    add_model_arguments,
    fim_template,
    load_model_and_engine,
    read_suffix,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_prefix_arguments(parser)
    add_model_arguments(parser)
    add_engine_arguments(parser)
    add_fim_arguments(parser)
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object per prefix (see above)"
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="bytes shown in text output (default 10)"
    )


def run(args: argparse.Namespace) -> int:
    from midword.engine import BackendError, ByteSampler, PrefixError, PromptedModel, move_sampler

    prefixes = read_prefixes(args)
    model, engine = load_model_and_engine(args)
    template = fim_template(args, model, engine)
    if template is not None:
        model = PromptedModel(model)  # its session's context is the FIM prompt
    try:
        # a remote model's sampler asks for only the log-probs it reads (chosen ids)
        remote = getattr(model, "byte_sampler", None)
        sampler = remote(engine) if remote is not None else ByteSampler(model, engine)
    except BackendError as exc:
        raise CommandError(str(exc)) from exc
    for prefix in prefixes:
        spent = sampler.session.inference_tokens  # the session counts from its start
        try:
            if template is None:
                sampler.reset(prefix)
            else:
                move_sampler(sampler, template, prefix, read_suffix(args) or b"")
            dist = sampler.next_bytes()
        except (PrefixError, BackendError) as exc:
            raise CommandError(str(exc)) from exc
        tokens = dist.inference_tokens - spent
        if args.json:
            print_json(contract(dist, tokens))
        else:
            _print_top(dist, tokens, args.top)
    return 0


def contract(dist: Any, inference_tokens: int) -> dict:
    """The public JSON object of a NextBytes (impossible bytes left out)."""
    nxt = {str(b): float(lp) for b, lp in enumerate(dist.next) if math.isfinite(lp)}
    if math.isfinite(dist.eos):
        nxt["eos"] = float(dist.eos)
    return {
        "prefix_logprob": dist.prefix_logprob,
        "next": nxt,
        "inference_tokens": inference_tokens,
    }


def _print_top(dist: Any, inference_tokens: int, top: int) -> None:
    print(f"log P(prefix) = {dist.prefix_logprob:.6f}   ({inference_tokens} inference tokens)")
    entries = [(float(v), repr(bytes([b]))) for b, v in enumerate(dist.next) if math.isfinite(v)]
    if math.isfinite(dist.eos):
        entries.append((float(dist.eos), "<end of text>"))
    for lp, name in sorted(entries, reverse=True)[:top]:
        print(f"{math.exp(lp):9.6f}  {name}")
