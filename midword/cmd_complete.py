"""Complete a byte prefix with a local model (only the text after the prefix is printed).

The prefix is PREFIX (UTF-8), the raw bytes of --prefix-file F, or stdin when
PREFIX is '-'. --json prints one object (a public contract, kept stable):

  {"completion": str, "leaf_logprob": float or null, "tokens": int, "seconds": float}

--method bytesampler (default) conditions exactly on the bytes; healing1/2/4
(token healing) and naive are the baselines. --mode pbp samples one leaf of the
Valid Covering Tree and then ordinary tokens; --mode bytes samples byte by byte.
"""

from __future__ import annotations

import argparse
import json
import sys

from midword.cli import CommandError
from midword.cmd_tree import read_prefix
from midword.modelargs import add_model_arguments, load_model_and_engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from midword.engine.generate import METHODS, MODES

    parser.add_argument(
        "prefix", nargs="?", help="prefix text, or '-' to read raw bytes from stdin"
    )
    parser.add_argument("--prefix-file", help="read the prefix as raw bytes from this file")
    add_model_arguments(parser)
    parser.add_argument("--method", choices=METHODS, default="bytesampler")
    parser.add_argument("--mode", choices=MODES, default="pbp")
    parser.add_argument("--max-tokens", type=int, default=48, help="token budget (default 48)")
    parser.add_argument("--max-bytes", type=int, default=0, help="byte budget in byte mode")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 means greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument(
        "--level",
        choices=("token", "byte"),
        default="token",
        help="where transforms apply in byte mode (token: on leaf log-probs)",
    )
    parser.add_argument("--seed", type=int, help="random seed (reproducible sampling)")
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from midword.engine.backend import BackendError
    from midword.engine.generate import Completer, Settings
    from midword.engine.vct import PrefixError

    prefix = read_prefix(args)
    try:
        settings = Settings(
            method=args.method,
            mode=args.mode,
            max_tokens=args.max_tokens,
            max_bytes=args.max_bytes,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            level=args.level,
            seed=args.seed,
            stop=tuple(args.stop),
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    model, engine = load_model_and_engine(args)
    try:
        result = Completer(model, engine).complete(prefix, settings)
    except (PrefixError, BackendError) as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        sys.stdout.write(result.text + "\n")
    return 0
