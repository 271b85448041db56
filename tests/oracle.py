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
import contextlib
import hashlib
import inspect
import os
import pickle
import random
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import tokenizers
from midword.engine import build_tree, cache_root
from midword.engine.tokenize.tokenizer import BPETokenizer
from midword.engine.tree import completions
from midword.engine.tree.utf8 import PROBES
from tokenizers import Tokenizer

from midword.testing import chars
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


KEPT_CHECK_STRINGS = 20_000  # probe strings encoded again, per kind, when a store opens
KEPT_DAYS = 30  # a store no run has opened for this long goes (its oracle or tokenizer changed)


class KeptVerdicts(dict):
    """`canonical_prefixes`' verdicts for one encoder, kept on disk between runs.

    A verdict is a pure function of the encoder (a tokenizer file and the ``tokenizers``
    release, or llama.cpp's vocabulary), the probes, the characters tried inside a cut
    character and the code that decides: the store's file is named by a digest of all of
    them and of the token bytes that spell each sequence (`_oracle_digest`), so any change
    starts an empty store and the brute force runs in full again. Only the oracle's side
    is kept: the engine's trees are built afresh on every run, and when a store opens, a
    sample of its verdicts of each kind is encoded again and must agree. (A run of spaces alone costs the brute force
    millions of encodings: half a vocabulary of straddling tokens, each tried with every
    probe; that was most of CI's test time.) ``MIDWORD_ORACLE_KEEP=0`` turns stores off.
    """

    opened: list[KeptVerdicts] = []

    def __init__(self, hf: Tokenizer, tok: BPETokenizer, identity: str) -> None:
        super().__init__()
        name = _oracle_digest(identity, tok)
        self.path = cache_root() / "oracle-verdicts" / f"{name}.pickle"
        if self.path.is_file():
            with self.path.open("rb") as f:
                self.update(pickle.load(f))
            self._check_some(hf, tok)
            self.path.touch()  # in use: `save` prunes stores no run opened for KEPT_DAYS
        self.saved = len(self)
        KeptVerdicts.opened.append(self)

    def _check_some(self, hf: Tokenizer, tok: BPETokenizer) -> None:
        rng = random.Random(len(self))
        for verdict in (True, False):
            kept = [seq for seq, v in self.items() if v is verdict]
            sample, budget = [], KEPT_CHECK_STRINGS
            for seq in rng.sample(kept, min(len(kept), KEPT_CHECK_STRINGS // len(PROBES))):
                budget -= len(probe_strings(tok.decode(seq)) or [])
                if budget < 0:
                    break
                sample.append(seq)
            again = canonical_prefixes(hf, tok, sample, {})
            wrong = [seq for seq in sample if (seq in again) is not verdict]
            assert not wrong, f"{self.path} disagrees with the encoder on {wrong[:3]}: delete it"

    def save(self) -> None:
        """Writes what this process added, merged with what other workers wrote meanwhile."""
        if len(self) == self.saved:
            return
        merged = dict(self)
        if self.path.is_file():
            with self.path.open("rb") as f:
                merged.update(pickle.load(f))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(merged, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self.path)  # whole files only: a reader never sees half of one
        self.saved = len(self)
        for old in self.path.parent.glob("*.pickle"):
            with contextlib.suppress(OSError):  # (another worker may prune it first)
                if time.time() - old.stat().st_mtime > KEPT_DAYS * 86400:
                    old.unlink()


_STORES: dict[tuple[int, int], tuple[object, object, dict[tuple[int, ...], bool]]] = {}


def kept_verdicts(hf: Tokenizer, tok: BPETokenizer) -> dict[tuple[int, ...], bool]:
    """The verdict store of this encoder and token bytes, opened once per process: a
    `KeptVerdicts` for a ``tokenizers`` encoder or one with an ``oracle_identity()``, else
    a plain dict (this process only)."""
    key = (id(hf), id(tok))
    if key not in _STORES:  # (the entry holds hf and tok, so their ids stay theirs)
        identity = _encoder_identity(hf)
        keep = identity is not None and os.environ.get("MIDWORD_ORACLE_KEEP", "1") != "0"
        store = KeptVerdicts(hf, tok, identity) if keep else {}
        _STORES[key] = (hf, tok, store)
    return _STORES[key][2]


def save_kept_verdicts() -> None:
    for store in KeptVerdicts.opened:
        store.save()


def _encoder_identity(hf: object) -> str | None:
    if isinstance(hf, Tokenizer):
        return f"tokenizers {tokenizers.__version__}\0{hf.to_str()}"
    identity = getattr(hf, "oracle_identity", None)
    return identity() if callable(identity) else None


def _oracle_digest(identity: str, tok: BPETokenizer) -> str:
    """What a verdict depends on: the encoder, the token bytes, the probes, the code that
    decides (`canonical_prefixes`, `probe_strings`, the characters tried inside a cut
    character) and the Unicode tables under it; not the store's own code."""
    deciding = [inspect.getsource(canonical_prefixes), inspect.getsource(probe_strings)]
    modules = [Path(completions.__file__), Path(chars.__file__)]
    parts = [
        identity,
        unicodedata.unidata_version,
        sys.version,
        repr(PROBES),
        *deciding,
        *(path.read_text() for path in modules),
        repr(tok.token_bytes),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


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
    children (checking the whole vocabulary there would take minutes). Verdicts go to
    ``memo``, else to the encoder's `kept_verdicts`.
    """
    memo = kept_verdicts(hf, tok) if memo is None else memo
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
