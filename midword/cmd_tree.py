"""Print the Valid Covering Tree of a byte prefix: every token sequence the tokenizer
could produce for a text that starts with the prefix, as one shared trunk and a small
tree of alternatives at the end (internal nodes, and the leaves below them).

The prefix is the PREFIX argument, the raw bytes of --prefix-file F, or standard
input when PREFIX is '-'. It is UTF-8 text that may stop inside a character (an
argument's bytes are taken as the shell passes them).

--json prints one object per prefix on one line (a public contract, kept stable):

  {"trunk": [id, ...],
   "nodes": [{"path": [id, ...], "ends_at_prefix_end": bool, "leaves": [id, ...]}, ...],
   "internal_count": int, "leaf_count": int}

Every id is a token id of the tokenizer (an int, 0 <= id < vocabulary size).
"trunk" holds the tokens every covering of the prefix starts with. Each entry of
"nodes" is an internal node of the branching tail: "path" is its token ids below
the trunk; the bytes of trunk + path stop short of the prefix's end, or end
exactly there when "ends_at_prefix_end" is true (then "leaves" holds every valid
next token). "leaves" are the child tokens that complete a covering from the
node: the bytes of trunk + path + [leaf] start with the whole prefix.
"internal_count" is len(nodes) and "leaf_count" the number of leaves in all.

Several prefixes (PREFIX ... and --prefix-file F ..., in that order) need --json
and print one object per line (JSON Lines), in order; the tokenizer loads once.
Errors print one line on stderr and exit with status 2.

A .gguf file's tokenizer is rebuilt from its metadata alone; one midword cannot rebuild
exactly is refused in one line naming what is not modelled.

Examples:
  midword tree --tokenizer models/default 'self.assertEq'
  printf 'x = \\xe6\\x97' | midword tree --tokenizer models/default --json -
  midword tree --tokenizer models/default --json 'import nump' 'x = 12345'
  midword tree --tokenizer qwen2.5-coder-1.5b-instruct-q8_0.gguf 'import nump'
"""

from __future__ import annotations

import argparse
import sys

from midword.cli import CommandError, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_prefix_arguments(parser)
    parser.add_argument(
        "--tokenizer",
        required=True,
        metavar="PATH",
        help="tokenizer.json, a model directory holding one, or a .gguf file (its tokenizer "
        "rebuilt from the metadata; no weights are read)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object per prefix (see above)"
    )
    parser.add_argument(
        "--max-leaves",
        type=int,
        default=8,
        metavar="N",
        help="leaves shown per node in text output (default 8)",
    )


def add_prefix_arguments(parser: argparse.ArgumentParser) -> None:
    """PREFIX ... and --prefix-file F (repeatable): shared by tree, next-bytes, complete."""
    parser.add_argument(
        "prefix",
        nargs="*",
        metavar="PREFIX",
        help="prefix text, or '-' to read raw bytes from stdin (several need --json)",
    )
    parser.add_argument(
        "--prefix-file",
        action="append",
        default=[],
        metavar="F",
        help="read a prefix as raw bytes from this file (repeatable)",
    )


def read_prefixes(args: argparse.Namespace) -> list[bytes]:
    """The prefixes: each PREFIX (stdin's raw bytes for '-'), then each --prefix-file.

    An argument's bytes are the ones typed: a shell passes bytes that are not UTF-8
    to Python as escaped surrogates, which encode back to those bytes.
    """
    prefixes = [_argument_bytes(text) for text in args.prefix]
    if args.prefix.count("-") > 1:
        raise CommandError("'-' (standard input) can be given once")
    prefixes = [sys.stdin.buffer.read() if p is None else p for p in prefixes]
    for path in args.prefix_file:
        try:
            with open(path, "rb") as fh:
                prefixes.append(fh.read())
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    if not prefixes:
        raise CommandError("give a PREFIX, '-' for stdin, or --prefix-file F")
    if len(prefixes) > 1 and not args.json:
        raise CommandError("several prefixes need --json (one object per line)")
    return prefixes


def _argument_bytes(text: str) -> bytes | None:
    """The bytes of one PREFIX argument; None for '-' (read stdin)."""
    if text == "-":
        return None
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise CommandError(
            "the prefix contains a lone surrogate; pass raw bytes with --prefix-file"
        ) from exc


def run(args: argparse.Namespace) -> int:
    from midword.engine import (
        PrefixError,
        PretokenizerError,
        TokenizerError,
        build_tree,
        load_engine,
    )

    prefixes = read_prefixes(args)
    try:
        engine = load_engine(args.tokenizer)
    except (TokenizerError, PretokenizerError, OSError) as exc:
        raise CommandError(f"cannot load the tokenizer: {_one_line(exc)}") from exc
    for prefix in prefixes:
        try:
            tree = build_tree(engine, prefix)
        except PrefixError as exc:
            raise CommandError(str(exc)) from exc
        if args.json:
            print_json(tree.to_json())
        else:
            _print_tree(engine.tok, tree, args.max_leaves)
    return 0


def _one_line(exc: Exception) -> str:
    """The error's message on one line (a JSON error may hold a newline).

    >>> _one_line(ValueError("a\\n  b"))
    'a b'
    """
    return " ".join(str(exc).split())


def _print_tree(tok, tree, max_leaves: int) -> None:  # noqa: ANN001 (engine types: lazy import)
    def show(ids) -> str:  # noqa: ANN001
        return " ".join(repr(tok.decode([int(i)]))[1:] for i in ids)

    print(f"trunk ({len(tree.trunk)} tokens): {show(tree.trunk[-12:])}")
    for node in tree.nodes:
        mark = "  [ends at prefix end]" if node.ends_at_prefix_end else ""
        more = " ..." if len(node.leaves) > max_leaves else ""
        print(f"  node [{show(node.path)}]{mark}: {len(node.leaves)} leaves")
        print(f"      {show(node.leaves[:max_leaves])}{more}")
    print(f"internal nodes: {tree.internal_count}  leaves: {tree.leaf_count}")
