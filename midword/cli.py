"""The ``midword`` command line.

Each subcommand lives in its own module (``midword/cmd_<name>.py``) exposing
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only
when their command runs, so ``midword --help`` stays fast (no torch import).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from midword.subcommands import add_module_command

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "tree": ("midword.cmd_tree", "print the Valid Covering Tree of a byte prefix"),
    "next-bytes": ("midword.cmd_next_bytes", "print the exact next-byte distribution"),
    "complete": ("midword.cmd_complete", "complete a prefix (ByteSampler or a baseline)"),
    "score": ("midword.cmd_score", "score candidate continuations of a prefix exactly"),
    "bench": ("midword.bench.command", "headless benchmarks: humaneval, charlm, overhead"),
    "serve": ("midword.cmd_serve", "run the language server (LSP over stdio or TCP)"),
    "demo": ("midword.cmd_demo", "type a file into the server: naive vs midword, side by side"),
    "stats": ("midword.cmd_stats", "acceptance rate and retained characters of inline completions"),
}


class CommandError(Exception):
    """An error to report as one line on stderr with a non-zero exit."""


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data, for every ``--json`` output.

    The engine hands back numpy (or torch) integers, floats and arrays, which ``json``
    refuses; they become ``int``, ``float``, ``bool`` and lists here, once, at the
    boundary. Tuples become lists, mapping keys strings, and a float that is not finite
    becomes ``None`` (JSON has no infinity or NaN; a number that is null means "none").

    Example:
        >>> import numpy as np
        >>> to_json({"ids": np.array([3, 4]), "lp": np.float32(-0.5), 7: (np.int64(1),)})
        {'ids': [3, 4], 'lp': -0.5, '7': [1]}
        >>> to_json(float("-inf")) is None
        True
    """
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if hasattr(value, "tolist"):  # numpy scalar or array, torch tensor: Python values
        return to_json(value.tolist())
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def print_json(value: Any, stream: TextIO | None = None) -> None:
    """Write ``to_json(value)`` as one line of strict JSON (no NaN, ASCII only)."""
    out = sys.stdout if stream is None else stream
    out.write(json.dumps(to_json(value), allow_nan=False) + "\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only`` set, just that command's module is imported (fast start:
    ``midword serve`` must answer ``initialize`` quickly)."""
    parser = argparse.ArgumentParser(
        prog="midword",
        description=(
            "Exact completion at the cursor, even mid-word: ByteSampler over the "
            "Valid Covering Tree of the byte prefix."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        add_module_command(sub, name, module_name, help_text, "_module")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if not hasattr(args, "_module"):
        print(f"midword {args.command}: error: this command is unavailable", file=sys.stderr)
        return 2
    try:
        return int(args._module.run(args) or 0)
    except CommandError as exc:
        print(f"midword {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
