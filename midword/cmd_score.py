"""Score candidate continuations of a byte prefix exactly (issue 39).

The prefix is the PREFIX argument, the raw bytes of --prefix-file F, or standard
input when PREFIX is '-'. It may end inside a name: 'self.assertEq'.

The candidates are the text that would come after the prefix ('ual', 'ualsAny'),
each given with --candidate TEXT (repeatable) or one per line in --candidates FILE
(UTF-8; blank lines are skipped). With --names they are whole names instead
('assertEqual'): the name typed at the end of the prefix is taken off each (one that
does not extend it scores null).

--end identifier (default) scores log P(text goes on with the candidate and the name
ends there | prefix): after the candidate comes the end of the text or a byte that is
not an ASCII letter, digit or '_' (a non-ASCII character is taken to go on with the
name). --end none scores log P(text goes on with the candidate | prefix). Both are
exact: every canonical token sequence that covers the bytes counts.

--json prints one object per prefix on one line:

  {"end": "identifier" or "none",
   "candidates": [{"candidate": str, "logprob": float or null,
                   "reach_logprob": float or null}, ...],
   "inference_tokens": int}

in the order the candidates were given. "logprob" is the score under --end (natural
log, <= 0); "reach_logprob" the score with no end condition; null means probability
zero (or, with --names, a name that does not extend what was typed).
"inference_tokens" counts the tokens the model evaluated to answer. Without --json the
candidates are listed likeliest first. Errors print one line on stderr and exit with
status 2.

Examples:
  midword score 'self.assertEq' --candidate ual --candidate uals --candidate uil
  midword score --json --names --candidates names.txt 'os.pa'
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from midword.cli import CommandError, print_json
from midword.cmd_tree import add_prefix_arguments, read_prefixes
from midword.modelargs import add_engine_arguments, add_model_arguments, load_model_and_engine

END_CONDITIONS = ("identifier", "none")  # engine/sample/candidates.py (--help stays light)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_prefix_arguments(parser)
    add_model_arguments(parser)
    add_engine_arguments(parser)
    add_candidate_arguments(parser)
    parser.add_argument(
        "--names",
        action="store_true",
        help="the candidates are whole names: the name typed at the prefix's end is taken off",
    )
    parser.add_argument(
        "--end",
        choices=END_CONDITIONS,
        default="identifier",
        help="identifier (default): the name ends after the candidate; none: no condition",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object per prefix (see above)"
    )


def add_candidate_arguments(parser: argparse.ArgumentParser) -> None:
    """--candidate TEXT (repeatable) and --candidates FILE: shared with `midword complete`."""
    parser.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="TEXT",
        help="a candidate (repeatable)",
    )
    parser.add_argument(
        "--candidates", metavar="FILE", help="candidates, one per line (UTF-8, blank lines skipped)"
    )


def read_candidates(args: argparse.Namespace) -> list[str]:
    """The --candidate values, then the lines of --candidates FILE (blank ones skipped)."""
    candidates = list(args.candidate)
    if args.candidates:
        try:
            with open(args.candidates, encoding="utf-8") as fh:
                candidates.extend(line.rstrip("\r\n") for line in fh if line.strip())
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {args.candidates}: {exc}") from exc
    return candidates


def run(args: argparse.Namespace) -> int:
    from midword.engine import BackendError, ByteSampler, PrefixError

    prefixes = read_prefixes(args)
    candidates = read_candidates(args)
    if not candidates:
        raise CommandError("give candidates with --candidate TEXT or --candidates FILE")
    model, engine = load_model_and_engine(args)
    try:
        remote = getattr(model, "byte_sampler", None)  # as next-bytes: a remote sampler
        sampler = remote(engine) if remote is not None else ByteSampler(model, engine)
        for prefix in prefixes:
            spent = sampler.session.inference_tokens  # the session counts from its start
            rows = score(sampler, prefix, candidates, args.end, args.names)
            tokens = sampler.session.inference_tokens - spent
            if args.json:
                print_json({"end": args.end, "candidates": rows, "inference_tokens": tokens})
            else:
                _print_rows(rows, tokens)
    except (PrefixError, BackendError) as exc:
        raise CommandError(str(exc)) from exc
    return 0


def score(sampler: Any, prefix: bytes, candidates: list[str], end: str, names: bool) -> list[dict]:
    """One JSON row per candidate (in order): its scores, None where the probability is
    zero or a name does not extend what was typed."""
    from midword.engine import score_continuations, typed_identifier

    typed = typed_identifier(prefix) if names else b""
    rests = {c: c.encode()[len(typed) :] for c in candidates if c.encode().startswith(typed)}
    scores = score_continuations(sampler, prefix, list(rests.values()), end)
    by_rest = {s.continuation: s for s in scores}
    rows = []
    for candidate in candidates:
        found = by_rest.get(rests[candidate]) if candidate in rests else None
        logprob = found.logprob if found is not None else None
        reach = found.reach_logprob if found is not None else None
        rows.append({"candidate": candidate, "logprob": logprob, "reach_logprob": reach})
    return rows


def _print_rows(rows: list[dict], inference_tokens: int) -> None:
    print(f"({inference_tokens} inference tokens)")
    ranked = sorted(rows, key=lambda r: _finite(r["logprob"]), reverse=True)
    for row in ranked:
        lp = _finite(row["logprob"])
        print(f"{math.exp(lp):9.6f}  {lp:11.6f}  {row['candidate'] or repr('')}")


def _finite(value: float | None) -> float:
    return -math.inf if value is None else value
