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

from midword.engine.tokenizer import BPETokenizer
from midword.engine.vct import PROBES, char_completions
from tokenizers import Tokenizer


def real_encoder(path: str) -> Tokenizer:
    hf = Tokenizer.from_file(str(path))
    hf.encode_special_tokens = True  # special-token text is text
    return hf


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


def canonical_prefixes(hf: Tokenizer, tok: BPETokenizer, seqs: list[tuple[int, ...]]) -> set:
    """The sequences of ``seqs`` that start the real encoding of some probed text.

    Probes go in rounds, and a sequence leaves as soon as one probe confirms it (most
    canonical sequences pass the first probe): the same verdicts, far fewer encodings.
    """
    strings = {i: probe_strings(tok.decode(seq)) or [] for i, seq in enumerate(seqs)}
    ok: set[tuple[int, ...]] = set()
    pending = [i for i in strings if strings[i]]
    k = 0
    while pending:
        encs = hf.encode_batch([strings[i][k] for i in pending], add_special_tokens=False)
        for i, enc in zip(pending, encs, strict=True):
            if tuple(enc.ids[: len(seqs[i])]) == seqs[i]:
                ok.add(seqs[i])
        k += 1
        pending = [i for i in pending if seqs[i] not in ok and k < len(strings[i])]
    return ok


def brute_force_tree(
    hf: Tokenizer, tok: BPETokenizer, prefix: bytes, end_sample: list[int]
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
                t = by_bytes.get(rest[:k])
                if t is not None:
                    inner.append(path + (t,))
        found |= canonical_prefixes(hf, tok, leaves)
        ok_inner = canonical_prefixes(hf, tok, inner)
        found |= {p for p in ok_inner if len(tok.decode(p)) == len(prefix)}
        frontier = [(p, len(tok.decode(p))) for p in ok_inner]
    return found


_VOCABS: dict[int, tuple] = {}


def _vocab(tok: BPETokenizer) -> tuple[dict[bytes, int], list[tuple[bytes, int]], list[bytes]]:
    """Token lookup and the vocabulary sorted by bytes (built once per tokenizer)."""
    if id(tok) not in _VOCABS:
        items = sorted((b, i) for i, b in enumerate(tok.token_bytes) if b is not None)
        _VOCABS[id(tok)] = (dict(items), items, [b for b, _ in items])
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
