"""Completion from a byte prefix: ByteSampler (PBP mode or byte mode), token healing and
the naive tokenize-then-generate baseline, all behind one API.

>>> from midword.engine.model.fake import FakeModel                             # doctest: +SKIP
>>> engine = load_engine("models/default")                                # doctest: +SKIP
>>> completer = Completer(FakeModel(engine.tok.size), engine)              # doctest: +SKIP
>>> completer.complete(b"self.assertEq", Settings(max_tokens=8)).text      # doctest: +SKIP
'ual(...'

``Completion.text`` is only what comes after the prefix. PBP mode samples one
leaf of the VCT by its exact probability and then generates ordinary tokens;
byte mode samples one byte at a time from the exact next-byte distribution.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..errors import BackendError
from ..model.backend import ScoringModel
from ..tree.tables import Engine
from ..tree.utf8 import split_utf8
from ..tree.vct import Tree
from .lazy_pbp import Draws, LazyTree
from .sampling import ByteSampler, LeafSet, session_rows
from .transform import NEG_INF, Transform, logsumexp

METHODS = ("bytesampler", "healing1", "healing2", "healing4", "naive")
MODES = ("pbp", "bytes")
SOLVES = ("lazy", "tree")

__all__ = ["METHODS", "MODES", "SOLVES", "Completer", "Completion", "Interrupted", "Settings"]

# Hooks for interactive callers (the language server):
StopCheck = Callable[[], bool]  # True: abandon this completion now (raises Interrupted)
Cut = Callable[[str], "int | None"]  # text so far -> where it must end (scope rules), or None


class Interrupted(Exception):
    """``complete`` was told to stop (cancelled, or superseded by a newer request)."""


@dataclass(frozen=True)
class Settings:
    """How to complete. ``temperature=0`` is greedy; ``level`` says where the transform
    applies in byte mode ("token": on leaf log-probs before aggregation, "byte": on the
    next-byte distribution); PBP mode always transforms at token level.

    ``solve`` says how PBP mode picks its leaf: "lazy" scores an internal node of the
    covering tree only when the search enters it (fewest inference tokens; the leaf's
    normalized log-prob is unknown, so ``leaf_logprob`` is None), "tree" scores the whole
    tree in one call first. Both are exact; a tree already scored at this prefix (the
    server scores it before a request's items) is always used as it is."""

    method: str = "bytesampler"
    mode: str = "pbp"
    max_tokens: int = 48
    max_bytes: int = 0  # 0: 4 bytes per allowed token
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    level: str = "token"
    solve: str = "lazy"
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    # never end at an end-of-text event (fixed-length runs, like generate(min_new_tokens=n))
    ignore_eos: bool = False
    # stop once the completion's log-probability (Completion.spans) falls below this:
    # engine/sample/confidence.py then cuts it back to a word boundary above it
    min_logprob: float = NEG_INF

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"unknown method {self.method!r}; expected one of {', '.join(METHODS)}"
            )
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")
        if self.solve not in SOLVES:
            raise ValueError(f"unknown solve {self.solve!r}; expected one of {', '.join(SOLVES)}")
        if self.level not in ("token", "byte"):
            raise ValueError(f"unknown level {self.level!r}; expected token or byte")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        Transform(self.temperature, self.top_k, self.top_p)  # validates them

    @cached_property
    def transform(self) -> Transform:
        """Made once per Settings (asked several times per generated token)."""
        return Transform(self.temperature, self.top_k, self.top_p)

    @property
    def byte_budget(self) -> int:
        return self.max_bytes or 4 * self.max_tokens


@dataclass
class Completion:
    """What comes after the prefix, and how it was obtained."""

    text: str
    data: bytes
    leaf_logprob: float | None
    tokens: int
    seconds: float
    stop_reason: str  # "eos", "stop", "cut", "time", "max_tokens", "max_bytes", "confidence"
    # per step (the leaf, then each token; in byte mode each byte): (end byte of its text
    # in ``data``, its log-probability given all before it under the model, None where
    # unknown); engine/sample/confidence.py reads them
    spans: tuple[tuple[int, float | None], ...] = ()

    def to_json(self) -> dict:
        """The public ``midword complete --json`` object."""
        return {
            "completion": self.text,
            "leaf_logprob": self.leaf_logprob,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 6),
        }


class _LazyRng:
    """``np.random.default_rng(seed)``, made on the first draw: greedy completions draw
    nothing, and making a generator costs more than the rest of a greedy keystroke's
    sampling. The draws are the generator's own, so a seed gives what it gave before."""

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self._rng: np.random.Generator | None = None

    def random(self) -> float:
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return float(self._rng.random())


def _pick(logp: np.ndarray, greedy: bool, rng: Draws) -> int:
    """An index drawn from log-probs (argmax when greedy).

    The draw is ``rng.choice(n, p=softmax(logp))`` done by hand (inverse CDF on one
    ``rng.random()``, as numpy does it): the same index for the same seed, without
    choice's checks of p, which cost more than the draw over a 128k vocabulary.
    """
    best = int(np.argmax(logp))
    if logp[best] == NEG_INF:
        raise BackendError("nothing to sample: every continuation has probability zero")
    if greedy:
        return best
    cdf = np.cumsum(np.exp(logp - logp[best]))
    cdf /= cdf[-1]
    return int(cdf.searchsorted(rng.random(), side="right"))


def _choose(row: np.ndarray, transform: Transform, rng: Draws) -> int:
    """``_pick(transform.apply(row), ...)``: greedy is the row's argmax (what the one-hot
    row of ``apply`` gives, without its two vocabulary-sized copies)."""
    if transform.is_greedy:
        return int(np.argmax(row))
    return _pick(transform.apply(row), False, rng)


class _Output:
    """Accumulates completion bytes; applies stop strings, the cut hook and budgets."""

    def __init__(
        self,
        settings: Settings,
        should_stop: StopCheck | None = None,
        cut: Cut | None = None,
        deadline: float | None = None,
    ) -> None:
        self.settings = settings
        self.data = bytearray()
        self.reason = ""
        self.should_stop = should_stop
        self.cut = cut
        self.deadline = deadline
        self.spans: list[tuple[int, float | None]] = []
        self.logprob: float | None = 0.0  # the sum of the spans' (None: unknown)

    def before_step(self) -> bool:
        """Called before each model call: raises Interrupted, or True when time is up."""
        if self.should_stop is not None and self.should_stop():
            raise Interrupted("completion interrupted")
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.reason = "time"
            return True
        return False

    def add(self, data: bytes, logprob: float | None = None) -> bool:
        """Append one step's text and its log-probability; True when generation must stop."""
        self.data.extend(data)
        self.spans.append((len(self.data), logprob))
        self.logprob = None if self.logprob is None or logprob is None else self.logprob + logprob
        text = self.data.decode("utf-8", errors="ignore")
        cuts = [text.find(s) for s in self.settings.stop if s and s in text]
        if cuts:
            self.data = bytearray(text[: min(cuts)].encode())
            self.reason = "stop"
            return True
        end = self.cut(text) if self.cut is not None else None
        if end is not None:
            self.data = bytearray(text[:end].encode())
            self.reason = "cut"
            return True
        if len(self.data) >= self.settings.byte_budget and self.settings.mode == "bytes":
            self.reason = "max_bytes"
            return True
        if self.logprob is not None and self.logprob < self.settings.min_logprob:
            self.reason = "confidence"
            return True
        return False

    def result(self, leaf_lp: float | None, tokens: int, started: float) -> Completion:
        data = bytes(self.data)
        text = data.decode("utf-8", errors="ignore")
        seconds = time.perf_counter() - started
        return Completion(text, data, leaf_lp, tokens, seconds, self.reason, self._spans())

    def _spans(self) -> tuple[tuple[int, float | None], ...]:
        """The steps' spans within the text kept (a stop or cut may end it inside one)."""
        kept: list[tuple[int, float | None]] = []
        start = 0
        for end, logprob in self.spans:
            if start >= len(self.data) and kept:
                break
            kept.append((min(end, len(self.data)), logprob))
            start = end
        return tuple(kept)


class Completer:
    """Completes byte prefixes with one model; keeps its KV cache between calls
    (consecutive prefixes of one buffer share most of it)."""

    def __init__(self, model: ScoringModel, engine: Engine, start_id: int | None = None) -> None:
        self.model = model
        self.engine = engine
        self.tok = engine.tok
        self.sampler = ByteSampler(model, engine, track_prefix=False, start_id=start_id)
        self.session = self.sampler.session
        self.start_id = self.sampler.start_id if start_id is None else start_id
        self._special = set(self.tok.special_ids) | {
            i for i in range(self.tok.size, model.vocab_size)
        }
        self._special_ids = np.array(sorted(self._special), dtype=np.int64)
        self._leaves: tuple[bytes, Transform, LeafSet] | None = None  # see leaf_set

    def complete(
        self,
        prefix: bytes,
        settings: Settings = Settings(),
        *,
        should_stop: StopCheck | None = None,
        cut: Cut | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """Complete ``prefix``; raises PrefixError for bad input, BackendError for model errors.

        Interactive hooks: ``should_stop`` is polled before every model call (True raises
        `Interrupted`); ``cut(text)`` returns where the text must end (stop reason "cut");
        at ``deadline`` (a ``time.perf_counter()`` value) the text so far is returned
        (stop reason "time").
        """
        started = time.perf_counter()
        rng = _LazyRng(settings.seed)
        out = _Output(settings, should_stop, cut, deadline)
        if settings.method == "bytesampler" and settings.mode == "bytes":
            return self._bytes_mode(prefix, settings, rng, started, out)
        if settings.method == "bytesampler":
            return self._pbp(prefix, settings, rng, started, out)
        backtrack = 0 if settings.method == "naive" else int(settings.method[len("healing") :])
        return self._healing(prefix, backtrack, settings, rng, started, out)

    def positions_used(self) -> int:
        """Positions the prompt at the current prefix takes: the start token and the
        covering tree's settled tokens (what must fit the model's context)."""
        return 1 + len(self.sampler.vct.tree().trunk)

    def context_changed(self) -> None:
        """The session's context before the prefix changed (a fill-in-the-middle prompt
        moved, engine/sample/fim.py): what was scored for the current prefix is stale."""
        self._leaves = None
        self.sampler.forget_scores()

    def leaf_set(self, transform: Transform | None = None) -> LeafSet:
        """The sampler's leaf set at its prefix, kept for the next call at the same prefix:
        the server scores the tree before a request's items, then each item asks again,
        and the set is a concatenation over thousands of leaves. Treat it as read-only."""
        transform = transform or Transform()
        prefix = self.sampler.prefix
        kept = self._leaves
        if kept is not None and kept[0] == prefix and kept[1] == transform:
            return kept[2]
        self._leaves = None  # a stale set goes before the new one is made (3.4 MiB each)
        leaf_set = self.sampler.leaf_set(transform)
        self._leaves = (prefix, transform, leaf_set)
        return leaf_set

    # ------------------------------------------------------------------ PBP
    def _pbp(
        self, prefix: bytes, s: Settings, rng: Draws, started: float, out: _Output
    ) -> Completion:
        self.sampler.reset(prefix)
        out.before_step()  # the tree may take a while: honour a cancel before scoring it
        greedy = s.transform.is_greedy  # greedy: the single most likely leaf
        transform = Transform() if greedy else s.transform
        tree = self.sampler.vct.tree()
        if s.solve == "tree" or self._scored_at(prefix, transform):
            seq, leaf_lp = self._pick_leaf(self.leaf_set(transform), s, greedy, rng)
        else:
            seq, leaf_lp = self._lazy_leaf(tree, transform, s, greedy, rng, out), None
        if seq[-1] in self._special:
            out.reason = "eos"
            return out.result(leaf_lp, 1, started)
        if out.add(self.tok.decode(seq)[tree.rest :], leaf_lp):
            return out.result(leaf_lp, 1, started)
        tokens = self._generate(list(tree.trunk) + list(seq), s, rng, out, budget=s.max_tokens - 1)
        return out.result(leaf_lp, 1 + tokens, started)

    def _scored_at(self, prefix: bytes, transform: Transform) -> bool:
        kept = self._leaves
        return kept is not None and kept[0] == prefix and kept[1] == transform

    def _pick_leaf(
        self, leaf_set: LeafSet, s: Settings, greedy: bool, rng: Draws
    ) -> tuple[tuple[int, ...], float]:
        """(leaf sequence, its log-prob among all leaves) from the whole scored tree."""
        if not leaf_set.size:
            raise BackendError("no token sequence covers this prefix")
        weights = leaf_set.weights
        if s.ignore_eos:  # end-of-text leaves are out: the text goes on
            weights = np.where(np.isin(leaf_set.token, self._special_ids), NEG_INF, weights)
        k = _pick(weights, greedy, rng)
        return leaf_set.sequence(k), float(weights[k] - logsumexp(weights))

    def _lazy_leaf(
        self, tree: Tree, transform: Transform, s: Settings, greedy: bool, rng: Draws, out: _Output
    ) -> tuple[int, ...]:
        """The leaf chosen by a `LazyTree` over the session (nodes scored as entered)."""

        def fetch(paths: list[tuple[int, ...]]) -> Sequence[np.ndarray]:
            if out.should_stop is not None and out.should_stop():
                raise Interrupted("completion interrupted")
            return session_rows(self.session, tree.trunk, paths)

        events = None if s.ignore_eos else self.sampler.event_ids  # as `leaf_set` has them
        apply = None if transform.is_identity else transform.apply
        lazy = LazyTree(tree, fetch, apply, events)
        return (lazy.greedy() if greedy else lazy.sample(rng)).sequence

    def _generate(
        self, context: list[int], s: Settings, rng: Draws, out: _Output, budget: int
    ) -> int:
        """Plain token-level sampling after ``context``; returns the number of tokens made."""
        made = 0
        while made < budget:
            if out.before_step():
                return made
            row = session_rows(self.session, context, [()])[0]  # read-only: the session's
            if s.ignore_eos:
                row = row.copy()
                row[self._special_ids] = NEG_INF
            t = _choose(row, s.transform, rng)
            made += 1
            if t in self._special:
                out.reason = "eos"
                return made
            context.append(t)
            if out.add(self.tok.token_bytes[t] or b"", float(row[t])):
                return made
        out.reason = out.reason or "max_tokens"
        return made

    # ------------------------------------------------------------------ bytes
    def _bytes_mode(
        self, prefix: bytes, s: Settings, rng: Draws, started: float, out: _Output
    ) -> Completion:
        self.sampler.reset(prefix)
        plain = s.level == "byte" or s.transform.is_greedy  # greedy: the likeliest byte
        token_level = Transform() if plain else s.transform
        made = 0
        while not out.before_step():
            dist = self.sampler.next_bytes(token_level).normalized()  # [257]
            if s.ignore_eos:
                dist[256] = NEG_INF
            model = dist  # the model's own when ``plain`` (token_level is the identity)
            if s.level == "byte" and not s.transform.is_greedy:
                dist = s.transform.apply(dist)
            b = _pick(dist, s.transform.is_greedy, rng)
            exact = float(model[b]) if plain else None
            if b == 256:
                out.reason = "eos"
                break
            self.sampler.push(bytes([b]))
            made += 1
            if out.add(bytes([b]), exact):
                break
        return out.result(None, made, started)

    # ------------------------------------------------------------------ baselines
    def _healing(
        self,
        prefix: bytes,
        k: int,
        s: Settings,
        rng: Draws,
        started: float,
        out: _Output,
    ) -> Completion:
        """Token healing with ``k`` tokens backed off (k=0: naive). The removed bytes are a
        hard constraint: generated tokens must agree with them until they are consumed."""
        text, partial = split_utf8(prefix)
        ids = self.tok.encode(text)
        # bytes the encoding spells before the text (a SentencePiece dummy-prefix space)
        lead = len(self.tok.decode(ids)) - len(text.encode()) if ids else 0
        base = ids[: max(0, len(ids) - k)]
        need = prefix[max(0, len(self.tok.decode(base)) - lead) :]
        context = list(base)
        made = 0
        while need and made < s.max_tokens:
            if out.before_step():
                return out.result(None, made, started)
            row = self.session.logprobs(context, [()])[0]
            allowed = self.compatible_tokens(need)
            masked = np.full_like(row, float("-inf"))
            masked[allowed] = row[allowed]
            t = _pick(s.transform.apply(masked), s.transform.is_greedy, rng)
            made += 1
            context.append(t)
            tb = self.tok.token_bytes[t] or b""
            extra = tb[len(need) :] if len(tb) > len(need) else b""
            need = need[len(tb) :] if len(tb) < len(need) else b""
            if extra and out.add(extra):
                return out.result(None, made, started)
        if made >= s.max_tokens:
            out.reason = "max_tokens"
            return out.result(None, made, started)
        made += self._generate(context, s, rng, out, budget=s.max_tokens - made)
        return out.result(None, made, started)

    def compatible_tokens(self, need: bytes) -> np.ndarray:
        """Token ids whose bytes are a prefix of ``need`` or start with it: what token
        healing lets the first generated token be when ``need`` was backed off the prompt."""
        ids = [
            self.tok.bytes_to_id[need[:n]]
            for n in range(1, len(need))
            if need[:n] in self.tok.bytes_to_id
        ]
        lo, hi = self.engine.token_range(need)
        ids.extend(self.engine.sorted_ids[lo:hi].tolist())
        return np.array(sorted(set(ids)), dtype=np.int64)
