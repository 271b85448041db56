"""ByteSampler operations on a scored Valid Covering Tree (paper section 3.2, appendix F).

Everything here is exact with respect to the tree: the probability that the
model's text starts with the prefix ``x`` is

    P(x) = P(trunk) * ( sum of P(path + leaf) over leaves that reach past x
                      + sum of P(path) over nodes that end exactly at x )

and the next-byte distribution is ``P(x b) / P(x)`` for every byte ``b``, plus
``eos``: the text is exactly ``x`` and the model emits a special (stop) token
after the canonical encoding of ``x``. These conditionals are *exact*, so the
chain rule ``log P(x) + log P(b | x) == log P(x b)`` holds to rounding; they may
sum to a little less than one, the rest being the mass the model puts on
non-canonical continuations (a token pair BPE would never produce). Samplers
renormalize over what is left.

Example (a fake model, so the numbers are arbitrary but deterministic):

>>> from midword.engine.model.fake import FakeModel                        # doctest: +SKIP
>>> engine = load_engine("models/default")                           # doctest: +SKIP
>>> sampler = ByteSampler(FakeModel(engine.tok.size), engine)         # doctest: +SKIP
>>> sampler.reset(b"def f")                                           # doctest: +SKIP
>>> dist = sampler.next_bytes()                                       # doctest: +SKIP
>>> round(float(np.exp(dist.next[ord("(")] )), 3)                     # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

import numpy as np

from ..errors import BackendError
from ..model.backend import ScoringModel, ScoringSession, TreeScoringSession
from ..tokenize.bpe import BPETokenizer
from ..tree.tables import Engine
from ..tree.vct import VCT, Tree
from .start import choose_start, tokenizer_facts
from .transform import NEG_INF, Transform, logsumexp

__all__ = [
    "ByteSampler",
    "LeafSet",
    "NextBytes",
    "TrunkAnchor",
    "session_rows",
    "start_token",
]

Rows = Sequence[np.ndarray] | np.ndarray  # per node: float64 [V] log-probs (read only)
TRUNK_CHUNK = 64  # trunk tokens scored per call when the prefix probability is tracked
_AS_IS = Transform()  # the default transform: the model's distribution as it is


@dataclass
class NextBytes:
    """Exact next-byte distribution after a prefix (natural logs).

    ``next[b]`` = log P(b | prefix) for the 256 byte values; ``eos`` = log
    P(text ends here | prefix) (a special token follows the canonical encoding);
    ``events`` = special token id -> its share of ``eos``; ``prefix_logprob`` =
    log P(prefix) when the sampler tracks it (else None).
    """

    next: np.ndarray
    eos: float
    events: dict[int, float] = field(default_factory=dict)
    prefix_logprob: float | None = None
    inference_tokens: int = 0

    def normalized(self) -> np.ndarray:
        """float64 [257]: bytes then eos, renormalized to sum to one (what samplers draw from)."""
        both = np.concatenate([self.next, [self.eos]])
        total = logsumexp(both)
        if total == NEG_INF:
            raise BackendError("the model gives no mass to any continuation of this prefix")
        return both - total


@dataclass
class _ScoredTree:
    tree: Tree
    node_lp: np.ndarray  # [N] log P(node path | trunk)
    rows: Rows  # [N][V] next-token log-probs at each node (transformed if asked)
    offsets: list[int]  # [N] bytes of the prefix after each node (0: the node ends at x)
    buckets: tuple[np.ndarray, float] | None = None  # `_aggregate`'s result, once computed


@dataclass
class LeafSet:
    """The leaves of a scored tree: leaf ``k`` is ``tree.nodes[node[k]].path + (token[k],)``
    with log-probability ``weights[k]`` given the trunk."""

    tree: Tree
    node: np.ndarray  # [L] index into tree.nodes (int32 where this module makes it)
    token: np.ndarray  # [L] token ids (int32 where this module makes it)
    weights: np.ndarray  # [L] float64

    @property
    def size(self) -> int:
        return int(self.weights.size)

    def sequence(self, k: int) -> tuple[int, ...]:
        return self.tree.nodes[int(self.node[k])].path + (int(self.token[k]),)


@dataclass
class TrunkAnchor:
    """Where `ByteSampler.relative_prefix` measures prefix log-probabilities from.

    ``base`` is the trunk the anchor was made at; ``known[i]`` = log P(base[:i]) - log
    P(base) for the points of ``base`` that are known (at least ``len(base)``, where it is
    0); ``scored`` and ``cum`` stand in for the sampler's own `_scored` and `_cum` while
    the anchor is in use: ``cum[i]`` = log P(scored[:i]) - log P(base), NaN below the point
    where ``scored`` was last anchored (never read: a trunk that leaves ``scored`` there is
    anchored again first)."""

    base: list[int]
    scored: list[int]
    cum: list[float]
    known: dict[int, float]

    @classmethod
    def at(cls, trunk: Sequence[int]) -> TrunkAnchor:
        base = list(trunk)
        return cls(base, list(base), [math.nan] * len(base) + [0.0], {len(base): 0.0})


def start_token(model: ScoringModel, engine: Engine) -> int:
    """The token every sequence is conditioned on (`ByteSampler`'s ``start_id`` overrides
    it): the BOS when the tokenizer puts it before every text, else the vocabulary's
    ``<|endoftext|>``, else the BOS or EOS that is not a chat-turn marker (the rule and
    why: :mod:`midword.engine.sample.start`)."""
    return choose_start(model, engine.tok, tokenizer_facts(getattr(engine.tok, "source", "")))


class ByteSampler:
    """A live VCT scored by a model: prefix probability, next bytes, leaves.

    ``track_prefix=True`` keeps log P(trunk) up to date (needed for
    ``prefix_logprob``; costs the trunk's log-probs, which the KV cache needs anyway).
    """

    def __init__(
        self,
        model: ScoringModel,
        engine: Engine,
        *,
        track_prefix: bool = True,
        start_id: int | None = None,
    ) -> None:
        tok = engine.tok
        if model.vocab_size < tok.size:
            raise BackendError(
                f"model vocabulary ({model.vocab_size}) is smaller than the tokenizer's "
                f"({tok.size}): they do not belong together"
            )
        self.model = model
        self.engine = engine
        self.tok = tok
        self.track_prefix = track_prefix
        self.start_id = start_token(model, engine) if start_id is None else start_id
        self.session: ScoringSession = model.session(bos_id=self.start_id)
        self.vct = VCT(engine)
        # token byte lengths (a node's offset sums a few of them per keystroke), and
        # byte k of every token, by k (the tokenizer's: shared by its samplers)
        self._lengths = ByteLengths(tok.token_bytes)
        self._bytes = token_bytes_by_position(tok)
        self._special = np.array(
            [i for i in tok.special_ids if i < model.vocab_size], dtype=np.int64
        )
        self._scored: list[int] = []  # trunk tokens whose log-probs are summed in _cum
        self._cum: list[float] = [0.0]  # _cum[i] = log P(first i scored trunk tokens)
        self._cache: tuple[int, Transform, _ScoredTree] | None = None
        self._relative: TrunkAnchor | None = None  # set within `relative_prefix`

    # ---------------------------------------------------------------- the prefix
    @property
    def event_ids(self) -> np.ndarray:
        """The special tokens that end the text: leaves of the node ``tree.complete``."""
        return self._special

    @property
    def prefix(self) -> bytes:
        return self.vct.prefix

    def reset(self, prefix: bytes = b"") -> None:
        """Condition on ``prefix`` (keeps the KV cache for the shared part)."""
        current = self.vct.prefix
        if current == prefix:
            return  # nothing changed: keep the tree and its scores
        common = _common_len(current, prefix)
        if common < len(current):
            self.vct.truncate(common)
        self.vct.push_bytes(prefix[common:])
        self._cache = None

    def push(self, data: bytes) -> None:
        self.vct.push_bytes(data)
        self._cache = None

    def forget_scores(self) -> None:
        """Drop what was scored for this prefix: the session's context before the trunk
        changed (a fill-in-the-middle prompt moved), so those rows are stale."""
        self._cache = None
        del self._scored[:]
        del self._cum[1:]

    # ---------------------------------------------------------------- scoring
    def _score(self, transform: Transform = _AS_IS) -> _ScoredTree:
        key = len(self.vct.prefix)
        if self._cache is not None and self._cache[0] == key and self._cache[1] == transform:
            return self._cache[2]
        tree = self.vct.tree()
        paths = [n.path for n in tree.nodes]
        if self.track_prefix:
            if self._relative is not None:
                self._anchor(tree.trunk)
            rows = self._score_tracking(tree.trunk, paths)
        else:
            rows = self._rows(tree.trunk, paths)  # [N][V]
        if not transform.is_identity:
            rows = transform.apply(np.stack(rows))
        node_lp, offsets = _node_scores(paths, rows, tree.rest, self._lengths)
        scored = _ScoredTree(tree, node_lp, rows, offsets)
        self._cache = (key, transform, scored)
        return scored

    def _score_tracking(self, trunk: list[int], paths: list[tuple[int, ...]]) -> np.ndarray:
        """Node rows, and log P(trunk) brought up to date, in as few calls as possible."""
        common = 0
        limit = min(len(trunk), len(self._scored))
        while common < limit and trunk[common] == self._scored[common]:
            common += 1
        del self._scored[common:]
        del self._cum[common + 1 :]
        while len(trunk) - len(self._scored) > TRUNK_CHUNK:  # long new trunk: chunks
            chunk = trunk[len(self._scored) : len(self._scored) + TRUNK_CHUNK]
            lp = self._rows(self._scored, [tuple(chunk[:j]) for j in range(len(chunk))])
            self._extend(chunk, lp)
        ext = tuple(trunk[len(self._scored) :])
        asked = [ext[:j] for j in range(len(ext))] + [ext + p for p in paths]
        lp = self._rows(self._scored, asked)
        self._extend(list(ext), lp[: len(ext)])
        return lp[len(ext) :]

    # ------------------------------------------------------ relative prefix log-probs
    @contextmanager
    def relative_prefix(self, anchor: TrunkAnchor | None = None) -> Iterator[TrunkAnchor]:
        """Within the block the sampler tracks the prefix probability *relative* to a
        trunk: `prefix_logprob` and `NextBytes.prefix_logprob` give log P(prefix) - log
        P(base), ``base`` the trunk of the current prefix when a new anchor is made
        (``anchor=None``; the anchor is yielded, and passing it to a later block goes on
        from what it has summed). Outside, the sampler is as it was (a sampler built with
        ``track_prefix=False`` stays so).

        Why it is exact: log P(prefix) = log P(trunk) + the log of the tree's mass beyond
        the trunk (the shift `next_bytes` divides by), and log P(trunk) is the sum of the
        model's log-prob of each trunk token after those before it. For two trunks ``T``
        and ``base`` that share their first ``c`` tokens, log P(T) - log P(base) = the
        sum over ``T[c:]`` - the sum over ``base[c:]``: the shared part, the prompt window
        of ~1,500 tokens, cancels, so only tokens past it are read, and those are the rows
        a tracking sampler reads anyway (the KV session scores new trunk tokens in the
        same call as the tree). A trunk that extends ``base`` (the usual case: the prefix
        grew) costs nothing more; one that leaves it at ``c`` has ``base[c:]`` scored
        once, from ``base[:c]``. The difference of two values is then log P(y) - log
        P(x), exactly what full tracking gives, to rounding: P(y | x) = P(y) / P(x) for a
        ``y`` that extends ``x``, with one tree scoring at ``y`` instead of one per byte.

        The scored tree of the current prefix is kept across the block's edges when its
        trunk is the one the log-probs are summed for, else scored again when needed.
        """
        if self._relative is not None:
            raise RuntimeError("relative_prefix blocks do not nest")
        if anchor is None:
            anchor = TrunkAnchor.at(self.vct.tree().trunk)
        saved = (self.track_prefix, self._scored, self._cum)
        self.track_prefix, self._scored, self._cum = True, anchor.scored, anchor.cum
        self._relative = anchor
        self._drop_untracked_tree()
        try:
            yield anchor
        finally:
            self.track_prefix, self._scored, self._cum = saved
            self._relative = None
            self._drop_untracked_tree()

    def _drop_untracked_tree(self) -> None:
        """Forget the scored tree when log P(trunk) is tracked for another trunk than its
        own (the tree is scored again, and the trunk tracked, at the next question)."""
        cache = self._cache
        if self.track_prefix and cache is not None and cache[2].tree.trunk != self._scored:
            self._cache = None

    def _anchor(self, trunk: list[int]) -> None:
        """Within `relative_prefix`: make ``cum`` known where ``trunk`` leaves the tokens
        scored so far (usually it is already: the trunk grew from ``base``)."""
        rel = self._relative
        assert rel is not None
        if not math.isnan(self._cum[_common_tokens(trunk, self._scored)]):
            return
        c = _common_tokens(trunk, rel.base)
        k = min(i for i in rel.known if i >= c)  # the nearest known point after c
        span = rel.base[c:k]
        if span:  # log P(base[c:k] | base[:c]): base's own tokens, scored once
            rows = self._rows(rel.base[:c], [tuple(span[:j]) for j in range(len(span))])
            total = rel.known[k]
            for j in range(len(span) - 1, -1, -1):
                total -= float(rows[j][span[j]])
                rel.known[c + j] = total
        self._scored[:] = rel.base[:c]
        self._cum[:] = [math.nan] * c + [rel.known[c]]

    def _rows(self, trunk: list[int], paths: list[tuple[int, ...]]) -> Rows:
        return session_rows(self.session, trunk, paths)

    def _extend(self, tokens: list[int], rows: Rows) -> None:
        for token, row in zip(tokens, rows, strict=True):
            self._cum.append(self._cum[-1] + float(row[token]))
            self._scored.append(token)

    # ---------------------------------------------------------------- leaves
    def leaf_set(self, transform: Transform = _AS_IS) -> LeafSet:
        """Every covering sequence (below the trunk) with its log-probability given the trunk,
        as arrays (a tree can have thousands of leaves; tuples for each would cost
        milliseconds per keystroke).

        Includes, for the node that ends the complete encoding of the prefix, its
        end-of-text events ``path + (special,)``.
        """
        sc = self._score(transform)
        owners: list[int] = []  # node of each run of leaves
        runs: list[np.ndarray] = []
        for i, node in enumerate(sc.tree.nodes):
            owners.append(i)
            runs.append(node.leaves)
            if node.path == sc.tree.complete and self._special.size:
                owners.append(i)
                runs.append(self._special)
        if not runs:
            empty = np.zeros(0, dtype=np.int32)
            return LeafSet(sc.tree, empty, empty, np.zeros(0))
        return _leaf_arrays(sc, owners, runs)

    def leaf_next_bytes(self, leaf_set: LeafSet) -> np.ndarray:
        """int64 [L]: the byte each leaf of ``leaf_set`` (this sampler's, at its prefix)
        puts right after the prefix, -1 for an end-of-text event: a caller that knows the
        next byte keeps the leaves that agree with it (guided completion, issue 39)."""
        tree = leaf_set.tree
        offsets = np.array([tree.rest - sum(self._lengths[t] for t in n.path) for n in tree.nodes])
        at = offsets[leaf_set.node] if offsets.size else np.zeros(0, dtype=np.int64)
        has = self._bytes.lengths[leaf_set.token] > at  # a special token has no bytes
        out = np.full(leaf_set.size, -1, dtype=np.int64)
        out[has] = self._bytes.at(at[has], leaf_set.token[has])
        return out

    def leaves(self, transform: Transform = _AS_IS) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """`leaf_set` as (list of token sequences, log-probs)."""
        leaf_set = self.leaf_set(transform)
        return [leaf_set.sequence(k) for k in range(leaf_set.size)], leaf_set.weights

    def _mass(self, sc: _ScoredTree) -> tuple[np.ndarray, float]:
        sums, shift = _aggregate(sc, self._bytes)
        if self.vct.empty_behind_lead:  # SentencePiece's empty text: the empty sequence
            shift = 0.0  # covers it, so its whole mass counts (as at a ByteLevel root)
        return sums, shift

    def prefix_logprob(self) -> float:
        """log P(the model's text starts with the prefix)."""
        if not self.track_prefix:
            raise ValueError("this sampler does not track the prefix probability")
        sc = self._score()
        return self._cum[-1] + self._mass(sc)[1]

    def next_bytes(self, transform: Transform = _AS_IS) -> NextBytes:
        """The exact next-byte distribution (token-level ``transform`` applied to leaves)."""
        sc = self._score(transform)
        sums, shift = self._mass(sc)
        events: dict[int, float] = {}
        for i, node in enumerate(sc.tree.nodes):
            if node.path == sc.tree.complete and self._special.size:
                lp = sc.node_lp[i] + sc.rows[i][self._special] - shift
                events = {int(t): float(v) for t, v in zip(self._special, lp, strict=True)}
        eos = logsumexp(np.array(list(events.values()))) if events else NEG_INF
        prefix_lp = self._cum[-1] + shift if self.track_prefix else None
        return NextBytes(sums - shift, eos, events, prefix_lp, self.session.inference_tokens)


def _node_scores(
    paths: list[tuple[int, ...]], rows: Rows, rest: int, lengths: ByteLengths | Sequence[int]
) -> tuple[np.ndarray, list[int]]:
    """([N] log P(node path | trunk), [N] bytes of the prefix after each node's path).

    Nodes come parents first (``Tree.nodes``), so a parent's value is ready before its
    children's.
    """
    node_lp = np.zeros(len(paths))
    index = {p: i for i, p in enumerate(paths)}
    offsets = []
    for i, path in enumerate(paths):
        if path:
            parent = index[path[:-1]]
            node_lp[i] = node_lp[parent] + rows[parent][path[-1]]
        offsets.append(rest - sum(lengths[t] for t in path))
    return node_lp, offsets


def _leaf_arrays(sc: _ScoredTree, owners: list[int], runs: list[np.ndarray]) -> LeafSet:
    """The `LeafSet` of runs of leaf tokens, run k hanging off node ``owners[k]``.

    Every field filled run by run, the weights as each run's row values plus its node's
    log-prob, in place: a tree's node that ends at the prefix has almost the whole
    vocabulary as leaves, and [L] temporaries beside the fields (all the rows' values, the
    node log-probs repeated) would be 2.3 MiB more at the peak at 151k tokens. Nodes and
    token ids in int32 (1.1 MiB less than int64).
    """
    total = sum(run.size for run in runs)
    node = np.empty(total, dtype=np.int32)
    token = np.empty(total, dtype=np.int32)
    weights = np.empty(total)
    at = 0
    for i, run in zip(owners, runs, strict=True):
        end = at + run.size
        node[at:end] = i
        token[at:end] = run
        part = weights[at:end]
        part[:] = sc.rows[i].take(run)
        part += sc.node_lp[i]  # (each element: the same float64 sum as before)
        at = end
    return LeafSet(sc.tree, node, token, weights)


def session_rows(
    session: ScoringSession, trunk: Sequence[int], paths: Sequence[tuple[int, ...]]
) -> Rows:
    """Log-prob rows after ``trunk + path``; our own sessions hand them out without
    stacking them into a copy (anything else, a counting wrapper say, is asked
    ``logprobs``). The rows may be read-only.
    """
    if isinstance(session, TreeScoringSession) or hasattr(session, "logprob_rows"):
        return session.logprob_rows(trunk, paths)  # a FIM PromptedSession has them too
    return session.logprobs(trunk, paths)


# Terms below exp(-665) may be subnormal in a float64 sum (relative error > 1e-16):
# `_aggregate` then takes the slower log-domain path for the whole tree.
LOG_TINY = -665.0


def _aggregate(sc: _ScoredTree, by_pos: BytesByPosition) -> tuple[np.ndarray, float]:
    """(float64 [256] log of the leaf path probabilities grouped by next byte, log mass).

    The mass is what `ByteSampler` divides by: leaves that reach past the prefix
    plus the nodes that end exactly at it (see the module docstring). Computed once
    per scored tree: node path log-probs are <= 0 (the root's is 0), so the
    probabilities are summed as they are, with one exp and one bincount per node; a
    tree with terms that small falls back to the exact log-domain sums.
    """
    if sc.buckets is None:
        sc.buckets = _linear_sums(sc, by_pos) or _log_sums(sc, by_pos)
    return sc.buckets


def _node_leaves(sc: _ScoredTree, by_pos: BytesByPosition, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(next byte, log P(path + leaf | trunk)) of node i's leaves.

    ``take`` on 1-D rows: a 2-D fancy index ``rows[i, leaves]`` is several times
    slower, and a column of a [V, max_len] table is a cache miss per leaf.
    """
    leaves = sc.tree.nodes[i].leaves
    values = sc.rows[i].take(leaves)  # a fresh array: fine to change in place
    values += sc.node_lp[i]
    return by_pos.row(int(sc.offsets[i])).take(leaves), values


def _linear_sums(sc: _ScoredTree, by_pos: BytesByPosition) -> tuple[np.ndarray, float] | None:
    """`_aggregate` in probability space; None when some term is too small for it."""
    sums = np.zeros(256)
    mass = 0.0
    for i, node in enumerate(sc.tree.nodes):
        if sc.offsets[i] == 0:
            if _too_small(sc.node_lp[i : i + 1]):
                return None
            mass += float(np.exp(sc.node_lp[i]))
        if not node.leaves.size:
            continue
        first, values = _node_leaves(sc, by_pos, i)
        if _too_small(values):
            return None
        part = np.bincount(first, weights=np.exp(values, out=values), minlength=256)
        sums += part
        if sc.offsets[i] > 0:
            mass += float(part.sum())
    with np.errstate(divide="ignore"):
        return np.log(sums), (float(np.log(mass)) if mass > 0 else NEG_INF)


def _too_small(values: np.ndarray) -> bool:
    """True if a finite value is below LOG_TINY (-inf terms are exact zeros: fine)."""
    if not values.size or float(values.min()) >= LOG_TINY:
        return False
    return bool(np.any((values < LOG_TINY) & np.isfinite(values)))


def _log_sums(sc: _ScoredTree, by_pos: BytesByPosition) -> tuple[np.ndarray, float]:
    """`_aggregate` in the log domain: exact whatever the magnitudes, but slower."""
    firsts: list[np.ndarray] = []
    values: list[np.ndarray] = []
    parts: list[np.ndarray] = []
    for i, node in enumerate(sc.tree.nodes):
        if sc.offsets[i] == 0:
            parts.append(sc.node_lp[i : i + 1])
        if node.leaves.size:
            first, value = _node_leaves(sc, by_pos, i)
            firsts.append(first)
            values.append(value)
            if sc.offsets[i] > 0:
                parts.append(value)
    if not values:
        sums = np.full(256, NEG_INF)
    else:
        sums = _bucket_logsumexp(np.concatenate(firsts), np.concatenate(values))
    return sums, (logsumexp(np.concatenate(parts)) if parts else NEG_INF)


def _bucket_logsumexp(buckets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """float64 [256]: logsumexp of ``values`` grouped by byte, -inf for empty groups."""
    out = np.full(256, NEG_INF)
    if values.size == 0:
        return out
    order = np.argsort(buckets, kind="stable")
    buckets, values = buckets[order], values[order]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    tops = np.maximum.reduceat(values, starts)
    safe = np.where(np.isfinite(tops), tops, 0.0)
    sums = np.add.reduceat(
        np.exp(values - np.repeat(safe, np.diff(np.r_[starts, values.size]))), starts
    )
    with np.errstate(divide="ignore"):
        out[buckets[starts]] = np.where(np.isfinite(tops), safe + np.log(sums), NEG_INF)
    return out


# per tokenizer: `token_tables` (weak keys: a tokenizer no longer used takes its tables along)
_BY_POSITION: WeakKeyDictionary[BPETokenizer, BytesByPosition] = WeakKeyDictionary()


def token_bytes_by_position(tok: BPETokenizer) -> BytesByPosition:
    """The `BytesByPosition` of ``tok``'s tokens: made once per tokenizer and shared by
    the samplers over it, one per open document (3.3 MiB each at 151k tokens when every
    sampler made its own). Read only.

    >>> from midword.engine import load_tokenizer
    >>> tok = load_tokenizer("models/default")
    >>> rows = token_bytes_by_position(tok)
    >>> token_bytes_by_position(tok) is rows, int(rows.lengths[72]) == len(tok.token_bytes[72])
    (True, True)
    """
    got = _BY_POSITION.get(tok)
    if got is None:
        got = _BY_POSITION[tok] = BytesByPosition(tok.token_bytes)
    return got


class ByteLengths:
    """``lengths[t]``: the byte length of token ``t`` (0 for a special token), read off
    its bytes: a node's offset sums a handful per keystroke, and a list of them all is
    1.2 MiB at 151k tokens.

    >>> ByteLengths([b"ab", None])[0], ByteLengths([b"ab", None])[1]
    (2, 0)
    """

    __slots__ = ("_bytes",)

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        self._bytes = token_bytes

    def __getitem__(self, token: int) -> int:
        b = self._bytes[token]
        return len(b) if b is not None else 0


class BytesByPosition:
    """Byte k of every token, as one uint8 [V] row per position k (zero where a token has
    no byte k): a node's next bytes are one contiguous row. A row is made on first use
    and kept; all of them at once would be [max_len, V], 18.5 MiB for Qwen2's 128-byte
    tokens (twice that while made), nearly all zeros past the first positions.
    ``lengths``: every token's byte count (0 for None), read only.

    >>> rows = BytesByPosition([b"ab", None, b"c"])
    >>> rows.row(0).tolist(), rows.row(1).tolist(), rows.at(np.array([1]), np.array([0])).tolist()
    ([97, 0, 99], [98, 0, 0], [98])
    >>> rows.lengths.tolist()
    [2, 0, 1]
    """

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        texts = [b or b"" for b in token_bytes]
        self._flat = np.frombuffer(b"".join(texts), dtype=np.uint8)  # every token's bytes
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        starts = np.cumsum(lengths) - lengths  # where each token's bytes start
        # in the smallest unsigned types that hold them (uint8, uint32: 1.6 MiB less)
        self.lengths = _narrow(lengths)
        self.lengths.setflags(write=False)
        self._start = _narrow(starts)
        self._rows: dict[int, np.ndarray] = {}

    def row(self, k: int) -> np.ndarray:
        """uint8 [V]: byte k of every token (0 for those no longer than k); read only."""
        got = self._rows.get(k)
        if got is None:
            got = np.zeros(len(self.lengths), dtype=np.uint8)
            has = self.lengths > k
            got[has] = self._flat[self._start[has] + k]
            got.setflags(write=False)
            self._rows[k] = got
        return got

    def at(self, positions: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Byte ``positions[i]`` of token ``tokens[i]`` (each token longer than that)."""
        return self._flat[self._start[tokens].astype(np.int64) + positions]


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative ``values`` in the smallest unsigned type that holds them all."""
    return values.astype(np.min_scalar_type(int(values.max(initial=0))))


def _common_tokens(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists (a trunk is ~1,500 tokens:
    the usual case, one extending the other, is one C-level comparison)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_len(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix (the server asks per keystroke): typing's usual
    case, ``b`` extending ``a``, is one C-level ``startswith``; else arrays are compared."""
    if b.startswith(a):
        return len(a)
    n = min(len(a), len(b))
    diff = np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n)
    return int(np.argmax(diff)) if diff.any() else n
