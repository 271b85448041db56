"""Brute-force oracle for the Valid Covering Tree, built on the real ``tokenizers`` encoder.

A token sequence is a canonical prefix when, for some probe continuation
``y``, the real encoder's output for ``decode(T) + y`` starts with ``T``.
The oracle enumerates covering sequences directly from the definition
(paper definition 1) and filters them with that check; it shares nothing with
the engine but the probe list and the tokenizer file.
"""

from __future__ import annotations

import bisect
import codecs
import random

from midword.engine import build_tree
from midword.engine.tokenize.tokenizer import BPETokenizer
from midword.engine.tree.utf8 import PROBES
from tokenizers import Tokenizer

from midword.testing.chars import char_completions
from midword.testing.fixtures import real_encoder  # noqa: F401  (some tests import it from here)


def probe_strings(data: bytes) -> list[str] | None:
    """``data`` + each probe as text (None when ``data`` cannot start valid UTF-8 text)."""
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data, final=False)
    except UnicodeDecodeError:
        return None
    partial = dec.getstate()[0]
    heads = [text + c for c in char_completions(partial)] if partial else [text]
    return [h + y for h in heads for y in PROBES]


def canonical_prefixes(
    hf: Tokenizer,
    tok: BPETokenizer,
    seqs: list[tuple[int, ...]],
    memo: dict[tuple[int, ...], bool] | None = None,
) -> set:
    """The sequences of ``seqs`` that start the real encoding of some probed text.

    A sequence stops at the first probe that confirms it (most canonical sequences pass
    the first); a sequence that is not canonical costs every probe string.
    ``memo`` keeps verdicts between calls (the oracle asks again about x's nodes when
    it builds the tree of x + b).
    """
    memo = {} if memo is None else memo
    encode = hf.encode  # one call per string: cheaper here than encode_batch's rounds
    for seq in dict.fromkeys(seqs):
        if seq not in memo:
            n = len(seq)
            strings = probe_strings(tok.decode(seq)) or []
            memo[seq] = any(
                tuple(encode(x, add_special_tokens=False).ids[:n]) == seq for x in strings
            )
    return {seq for seq in seqs if memo[seq]}


def confirmed_through_leaves(
    hf: Tokenizer,
    tok: BPETokenizer,
    seqs: set[tuple[int, ...]],
    tree: set[tuple[int, ...]],
    memo: dict[tuple[int, ...], bool] | None = None,
) -> set[tuple[int, ...]]:
    """The sequences of ``seqs`` that stop inside a character and have a one-token
    extension in ``tree`` that `canonical_prefixes` confirms (a start of a canonical
    sequence is one too).

    Such a sequence may start an encoding only when particular text follows the
    character, which no probe supplies: Qwen's 'caf' '\xc3' starts the encoding of
    "caf\u00c8\ub2e4" ('caf' '\xc3' '\x88\ub2e4': BPE joins the character's last byte
    to the next one before its first), and of no text the probes make. The extensions
    are only candidates; each is confirmed by the real encoder, as any sequence is."""
    out = set()
    for seq in seqs:
        if not _ends_inside_char(tok.decode(seq)):
            continue
        longer = sorted(s for s in tree if len(s) == len(seq) + 1 and s[: len(seq)] == seq)
        if canonical_prefixes(hf, tok, longer, memo):
            out.add(seq)
    return out


def brute_force_tree(
    hf: Tokenizer,
    tok: BPETokenizer,
    prefix: bytes,
    end_sample: list[int],
    memo: dict[tuple[int, ...], bool] | None = None,
) -> set[tuple[int, ...]]:
    """All canonical sequences covering ``prefix`` (paper definition 1), found breadth-first.

    Nodes ending exactly at the end of the prefix get only ``end_sample`` as candidate
    children (checking the whole vocabulary there would take minutes).
    """
    by_bytes, items, keys = _vocab(tok)
    straddle: dict[int, list[int]] = {}
    found: set[tuple[int, ...]] = set()
    frontier: list[tuple[tuple[int, ...], int]] = [((), 0)]
    while frontier:
        inner: list[tuple[int, ...]] = []
        leaves: list[tuple[int, ...]] = []
        for path, pos in frontier:
            if pos == len(prefix):
                leaves.extend(path + (t,) for t in end_sample)
                continue
            rest = prefix[pos:]
            if pos not in straddle:  # tokens that start with rest: a range of the sorted vocabulary
                lo = bisect.bisect_left(keys, rest)
                hi = bisect.bisect_left(keys, rest + b"\xff" * (len(keys[-1]) + 256))
                straddle[pos] = [i for b, i in items[lo:hi] if len(b) > len(rest)]
            leaves.extend(path + (t,) for t in straddle[pos])
            for k in range(1, len(rest) + 1):
                # every token with these bytes (SentencePiece's <0x0A> and "\n" share them)
                inner.extend(path + (t,) for t in by_bytes.get(rest[:k], ()))
        found |= canonical_prefixes(hf, tok, leaves, memo)
        ok_inner = canonical_prefixes(hf, tok, inner, memo)
        found |= {p for p in ok_inner if len(tok.decode(p)) == len(prefix)}
        # a node that ends inside a character may be canonical only through the character
        # after the one it cuts (qwen3: 'e' '\xef\xbd' '\x9c력' is the encoding of 'e｜력',
        # while no probe after '｜' keeps '\xef\xbd' whole), so its leaves are still tried
        cut = [p for p in inner if p not in ok_inner and _ends_inside_char(tok.decode(p))]
        frontier = [(p, len(tok.decode(p))) for p in [*ok_inner, *cut]]
    return found


def _ends_inside_char(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


_VOCABS: dict[int, tuple] = {}


def _vocab(
    tok: BPETokenizer,
) -> tuple[dict[bytes, list[int]], list[tuple[bytes, int]], list[bytes]]:
    """Token lookup and the vocabulary sorted by bytes (built once per tokenizer)."""
    if id(tok) not in _VOCABS:
        items = sorted((b, i) for i, b in enumerate(tok.token_bytes) if b is not None)
        by_bytes: dict[bytes, list[int]] = {}
        for b, i in items:
            by_bytes.setdefault(b, []).append(i)
        _VOCABS[id(tok)] = (by_bytes, items, [b for b, _ in items])
    return _VOCABS[id(tok)]


def tree_sequences(tree, end_sample: list[int]) -> set[tuple[int, ...]]:
    """The covering sequences of an engine tree, relative to its trunk, in the oracle's terms."""
    sample = set(end_sample)
    out: set[tuple[int, ...]] = set()
    for node in tree.nodes:
        if node.ends_at_prefix_end:
            out.add(tuple(node.path))
            out |= {tuple(node.path) + (int(t),) for t in node.leaves if int(t) in sample}
        else:
            out |= {tuple(node.path) + (int(t),) for t in node.leaves}
    return out


def sample_ids(tok: BPETokenizer, n: int, rng: random.Random) -> list[int]:
    ids = [i for i, b in enumerate(tok.token_bytes) if b is not None]
    return rng.sample(ids, min(n, len(ids)))


def assert_trees_match_brute_force(
    eng, hf: Tokenizer, prefixes: list[bytes], rng: random.Random, n_sample: int = 150
) -> None:
    """Each prefix's covering tree equals `brute_force_tree` over the real encoder, on a
    sample of end tokens plus the first `n_sample` leaves the tree claims at the prefix end.
    A prefix that stops inside a character: the oracle samples the completions of its
    lead, so what it finds must be in the tree (the chain-rule tests check the rest)."""
    for prefix in prefixes:
        tree = build_tree(eng, prefix)
        ends = [n for n in tree.nodes if n.ends_at_prefix_end]
        claimed = [int(t) for n in ends for t in n.leaves[:n_sample]]
        sample = sample_ids(eng.tok, n_sample, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        truth = brute_force_tree(hf, eng.tok, prefix, sample)
        if _ends_inside_char(prefix):
            assert truth <= mine, (prefix, sorted(truth - mine)[:5])
        else:
            assert mine == truth, (prefix, sorted(mine ^ truth)[:5])
