"""Print the Valid Covering Tree of a byte prefix (trunk, internal nodes, leaves).

The prefix is the PREFIX argument (UTF-8), the raw bytes of --prefix-file F,
or standard input when PREFIX is '-'. --json prints one object:
{"trunk": [ids], "nodes": [{"path": [ids], "ends_at_prefix_end": bool,
"leaves": [ids]}], "internal_count": n, "leaf_count": n}.
"""

from __future__ import annotations

import argparse
import json
import sys

from midword.cli import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "prefix", nargs="?", help="prefix text, or '-' to read raw bytes from stdin"
    )
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json or a model directory")
    parser.add_argument("--prefix-file", help="read the prefix as raw bytes from this file")
    parser.add_argument("--json", action="store_true", help="print the tree as one JSON object")
    parser.add_argument("--max-leaves", type=int, default=8, help="leaves shown per node (text)")


def read_prefix(args: argparse.Namespace) -> bytes:
    """The prefix bytes from the argument, --prefix-file, or stdin ('-')."""
    if args.prefix_file:
        try:
            with open(args.prefix_file, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise CommandError(f"cannot read {args.prefix_file}: {exc.strerror}") from exc
    if args.prefix is None:
        raise CommandError("give a PREFIX, '-' for stdin, or --prefix-file")
    if args.prefix == "-":
        return sys.stdin.buffer.read()
    try:
        return args.prefix.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CommandError(
            "the prefix contains a lone surrogate; pass raw bytes with --prefix-file"
        ) from exc


def run(args: argparse.Namespace) -> int:
    from midword.engine import PrefixError, build_tree, load_engine
    from midword.engine.tokenizer import TokenizerError

    prefix = read_prefix(args)
    try:
        engine = load_engine(args.tokenizer)
        tree = build_tree(engine, prefix)
    except (TokenizerError, PrefixError) as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        json.dump(tree.to_json(), sys.stdout)
        sys.stdout.write("\n")
        return 0
    tok = engine.tok
    show = lambda ids: " ".join(repr(tok.decode([i]))[1:] for i in ids)  # noqa: E731
    print(f"trunk ({len(tree.trunk)} tokens): {show(tree.trunk[-12:])}")
    for node in tree.nodes:
        mark = "  [ends at prefix end]" if node.ends_at_prefix_end else ""
        print(f"  node [{show(node.path)}]{mark}: {len(node.leaves)} leaves")
        print(
            f"      {show(node.leaves[: args.max_leaves].tolist())}{' ...' if len(node.leaves) > args.max_leaves else ''}"
        )
    print(f"internal nodes: {tree.internal_count}  leaves: {tree.leaf_count}")
    return 0
