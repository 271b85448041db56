"""Byte-level ensembles and proxy tuning over models whose tokenizers differ
(paper sections 4.3 and 4.4, appendix B.2).

Every member keeps its own `ByteSampler` (its own Valid Covering Tree and KV
cache) on the same byte prefix, so all members speak the same alphabet: the 256
byte values, end of text, and any special events mapped across them explicitly.
Their next-byte distributions are combined

* ``"mix"``: weighted probability averaging, ``p = sum_i w_i p_i / sum_i w_i``;
* ``"product"``: weighted log-probability sums renormalized at byte level,
  ``p ∝ prod_i p_i ** w_i``. Proxy tuning is the product with weights
  ``(1, 1, -1)`` over (base, expert, anti-expert).

End of text is mapped automatically: a member's end-of-text mass is what its
sampler reports as ``eos`` (the text ends at the prefix and the model emits one
of its special tokens). A special token is offered as an event of its own only
through an explicit mapping ``events={"name": [id in member 0 or None, ...]}``
(that token then no longer counts as end of text for its member).

Each member's distribution is renormalized over the outcomes the ensemble offers
before combining (the exact conditionals leave out non-canonical mass), so an
ensemble of one model (weight 1) reproduces that model's distribution.

Example (two local models with different tokenizers):

>>> ens = Ensemble.from_dirs(["models/default", "/models/qwen"], [0.5, 0.5])  # doctest: +SKIP
>>> ens.reset(b"def pri")                                                    # doctest: +SKIP
>>> dist = ens.distribution()                                                # doctest: +SKIP
>>> float(np.exp(dist.logp).sum())                                           # doctest: +SKIP
1.0
>>> ens.complete(b"def pri", Settings(mode="bytes", max_bytes=8)).text       # doctest: +SKIP
'nt(x)'
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import BackendError
from ..model.backend import ScoringModel
from ..tree.tables import Engine
from .generate import Completion, Settings, _Output, _pick
from .sampling import ByteSampler
from .transform import NEG_INF, Transform, logsumexp

__all__ = [
    "COMBINES",
    "PROXY_WEIGHTS",
    "Ensemble",
    "EnsembleNext",
    "combine_distributions",
    "check_weights",
]

COMBINES = ("mix", "product")
PROXY_WEIGHTS = (1.0, 1.0, -1.0)  # base + expert - anti-expert
BYTE_SETTINGS = Settings(mode="bytes", level="byte")
EOS = 256  # index of end of text in every distribution; mapped events follow it


def check_weights(weights: Sequence[float], members: int, combine: str) -> tuple[float, ...]:
    """Validated weights (ValueError with a one-line reason otherwise).

    Mix weights are non-negative with a positive sum (they are normalized);
    product weights are any finite numbers, not all zero (they are exponents, so
    a negative weight is an anti-expert).

    >>> check_weights([1, 3], 2, "mix")
    (0.25, 0.75)
    >>> check_weights([1, 1, -1], 3, "product")
    (1.0, 1.0, -1.0)
    >>> check_weights([1], 2, "mix")
    Traceback (most recent call last):
    ...
    ValueError: 1 weight for 2 models: give one weight per model
    """
    if combine not in COMBINES:
        raise ValueError(f"unknown combine {combine!r}; expected one of {', '.join(COMBINES)}")
    if members < 1:
        raise ValueError("an ensemble needs at least one model")
    values = tuple(float(w) for w in weights)
    if len(values) != members:
        noun = "weight" if len(values) == 1 else "weights"
        raise ValueError(f"{len(values)} {noun} for {members} models: give one weight per model")
    if not all(math.isfinite(w) for w in values):
        raise ValueError(f"weights must be finite numbers, got {list(values)}")
    if not any(values):
        raise ValueError("at least one weight must be non-zero")
    if combine == "mix":
        if any(w < 0 for w in values):
            raise ValueError(f"mix weights must be >= 0 (use product for negative ones): {values}")
        total = sum(values)
        values = tuple(w / total for w in values)
    return values


def combine_distributions(
    dists: Sequence[np.ndarray], weights: Sequence[float], combine: str
) -> np.ndarray:
    """Combine normalized log-distributions (same layout) into one normalized log-distribution.

    ``mix``: log of sum_i w_i p_i (weights already normalized). ``product``: the
    renormalized sum of w_i log p_i, where an outcome that any member with a
    non-zero weight calls impossible stays impossible, whatever the sign of its
    weight (a zero times anything is zero; an anti-expert's zero must not become
    an infinity). Members with weight zero are ignored. BackendError when no
    outcome is left.

    >>> half, sure, tilt = np.log([[0.5, 0.5, 1e-300], [1.0, 1e-300, 1e-300], [0.2, 0.8, 1e-300]])
    >>> half[2] = sure[1] = sure[2] = tilt[2] = -np.inf  # impossible outcomes
    >>> np.exp(combine_distributions([half, sure], [0.5, 0.5], "mix")).round(2)
    array([0.75, 0.25, 0.  ])
    >>> np.exp(combine_distributions([half, tilt], [1, 1], "product")).round(2)
    array([0.2, 0.8, 0. ])
    >>> np.exp(combine_distributions([half, sure], [1, 1], "product")).round(2)
    array([1., 0., 0.])
    """
    used = [(w, d) for w, d in zip(weights, dists, strict=True) if w != 0]
    if combine == "mix":
        with np.errstate(divide="ignore"):
            stacked = np.stack([math.log(w) + d for w, d in used])
        out = _logsumexp_rows(stacked)
    elif combine == "product":
        impossible = np.any(np.stack([d == NEG_INF for _, d in used]), axis=0)
        # where any member says -inf the result is -inf anyway; zeroing those entries first
        # keeps an anti-expert's -inf * -1 from turning into +inf or nan
        total = sum(w * np.where(d == NEG_INF, 0.0, d) for w, d in used)
        out = np.where(impossible, NEG_INF, total)
    else:
        raise ValueError(f"unknown combine {combine!r}; expected one of {', '.join(COMBINES)}")
    total = logsumexp(out)
    if total == NEG_INF:
        raise BackendError(
            "the models agree on no next byte here: every byte and end of text is "
            "impossible for at least one of them"
        )
    return out - total


def _logsumexp_rows(stacked: np.ndarray) -> np.ndarray:
    """logsumexp over axis 0 that is -inf (not nan) where every row is -inf."""
    top = np.max(stacked, axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(
            np.isfinite(top), safe + np.log(np.sum(np.exp(stacked - safe), axis=0)), NEG_INF
        )


@dataclass
class EnsembleNext:
    """The combined next-step distribution after a prefix (natural logs, normalized).

    ``logp`` is [257 + K]: bytes 0..255, end of text (index 256), then the K
    mapped events in the order of ``event_names``. ``members[i]`` is member i's
    own distribution in the same layout (renormalized over these outcomes), None
    for a member with weight zero (never scored).
    """

    logp: np.ndarray
    members: list[np.ndarray | None]
    event_names: tuple[str, ...]
    inference_tokens: int

    @property
    def next(self) -> np.ndarray:
        """[256] log-probabilities of the next byte."""
        return self.logp[:256]

    @property
    def eos(self) -> float:
        """log-probability that the text ends here."""
        return float(self.logp[EOS])


class _Member:
    """One model of the ensemble: its sampler and the special ids it maps to events."""

    def __init__(self, model: ScoringModel, engine: Engine, event_ids: list[int | None]) -> None:
        self.sampler = ByteSampler(model, engine, track_prefix=False)
        specials = set(engine.tok.special_ids)
        for t in event_ids:
            if t is not None and t not in specials:
                raise ValueError(
                    f"token {t} is not a special token of {getattr(model, 'name', 'a model')}: "
                    "only special tokens can be mapped to events"
                )
        self.event_ids = event_ids

    def distribution(self) -> np.ndarray:
        """[257 + K] normalized log-probs: bytes, end of text, mapped events."""
        nb = self.sampler.next_bytes(Transform())  # exact conditionals, no token transform
        # end of text = every special token of this member except those mapped to events
        mapped = {t for t in self.event_ids if t is not None}
        eos = nb.eos
        if mapped:
            eos = logsumexp(np.array([lp for t, lp in nb.events.items() if t not in mapped]))
        events = [NEG_INF if t is None else nb.events.get(t, NEG_INF) for t in self.event_ids]
        out = np.concatenate([nb.next, [eos], events])
        total = logsumexp(out)
        if total == NEG_INF:
            raise BackendError(
                f"{getattr(self.sampler.model, 'name', 'a member model')} gives no mass to "
                "any continuation of this prefix"
            )
        return out - total


class Ensemble:
    """Byte-level ensemble of (model, engine) pairs whose tokenizers may differ.

    ``combine`` is "mix" or "product" (see the module docstring); ``events``
    maps an event name to one special token id per member (None: the member has
    no such event, i.e. probability zero). ValueError for bad weights or mappings.

    >>> ens = Ensemble([(base, eng_a), (expert, eng_b), (anti, eng_b)],   # doctest: +SKIP
    ...                PROXY_WEIGHTS, "product")
    >>> ens.complete(b"x = ", Settings(mode="bytes", max_bytes=4)).data    # doctest: +SKIP
    b'1\\n\\n'
    """

    def __init__(
        self,
        members: Sequence[tuple[ScoringModel, Engine]],
        weights: Sequence[float],
        combine: str = "mix",
        events: Mapping[str, Sequence[int | None]] | None = None,
    ) -> None:
        self.weights = check_weights(weights, len(members), combine)
        self.combine = combine
        events = dict(events or {})
        for name, ids in events.items():
            if name in ("eos", "") or len(ids) != len(members):
                raise ValueError(
                    f"event {name!r} must be a new name with one token id (or None) per model"
                )
        self.event_names = tuple(events)
        columns = [[ids[i] for ids in events.values()] for i in range(len(members))]
        self.members = [
            _Member(model, engine, cols)
            for (model, engine), cols in zip(members, columns, strict=True)
        ]
        # members weighted zero are never reset, pushed or scored: they cost nothing
        self._active = [m for w, m in zip(self.weights, self.members, strict=True) if w != 0]
        # the shortest context among the scored members: every prompt must fit it (None:
        # no member declares one)
        lengths = [getattr(model, "context_length", None) for model, _ in members]
        known = [n for n, w in zip(lengths, self.weights, strict=True) if n and w != 0]
        self.context_length: int | None = min(known) if known else None

    @classmethod
    def from_dirs(
        cls,
        dirs: Sequence[str | Path],
        weights: Sequence[float],
        combine: str = "mix",
        device: str = "auto",
        dtype: str = "auto",
        events: Mapping[str, Sequence[int | None]] | None = None,
    ) -> Ensemble:
        """Load each model directory (its own tokenizer.json) and build the ensemble.

        Weights are checked before anything loads, tokenizers before any model. Raises
        ValueError (weights, dtype), TokenizerError or OSError (tokenizer), BackendError
        (model, or a vocabulary smaller than its tokenizer's).

        >>> Ensemble.from_dirs(["a", "b"], [1.0], "mix")
        Traceback (most recent call last):
        ...
        ValueError: 1 weight for 2 models: give one weight per model
        """
        from ..model.hf_loading import load_hf_model
        from ..tree.tables import load_engine

        check_weights(weights, len(dirs), combine)
        engines = [load_engine(str(d)) for d in dirs]  # fails fast, before any weights load
        models = [load_hf_model(d, device=device, dtype=dtype) for d in dirs]
        return cls(list(zip(models, engines, strict=True)), weights, combine, events)

    # ------------------------------------------------------------------ prefix
    def positions_used(self) -> int:
        """The most positions any scored member's prompt takes now (start token and its
        tree's settled tokens): what must fit the shortest member context."""
        return max(1 + len(m.sampler.vct.tree().trunk) for m in self._active)

    @property
    def prefix(self) -> bytes:
        return self._active[0].sampler.prefix

    def reset(self, prefix: bytes = b"") -> None:
        """Condition every member on ``prefix`` (each keeps its cache for the shared part)."""
        for m in self._active:
            m.sampler.reset(prefix)

    def push(self, data: bytes) -> None:
        """Append bytes to the prefix of every member."""
        for m in self._active:
            m.sampler.push(data)

    # ------------------------------------------------------------------ scoring
    def distribution(self) -> EnsembleNext:
        """The combined distribution after the current prefix (BackendError if none is left)."""
        pairs = zip(self.weights, self.members, strict=True)
        dists = [m.distribution() if w != 0 else None for w, m in pairs]
        logp = combine_distributions(
            [d for d in dists if d is not None], [w for w in self.weights if w != 0], self.combine
        )
        used = sum(m.sampler.session.inference_tokens for m in self._active)
        return EnsembleNext(logp, dists, self.event_names, used)

    # ------------------------------------------------------------------ sampling
    def complete(
        self,
        prefix: bytes,
        settings: Settings = BYTE_SETTINGS,
        *,
        should_stop: Callable[[], bool] | None = None,
        cut: Callable[[str], int | None] | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """Sample byte by byte from the combined distribution (like `Completer` in byte mode).

        Transforms (temperature 0 = greedy, top-k, top-p) apply to the combined
        distribution; ``settings.seed`` makes sampling reproducible; stop strings,
        ``max_bytes`` (else 4 per allowed token) and the interactive hooks
        ``should_stop``/``cut``/``deadline`` behave as in `Completer.complete`.
        Stop reason "eos" for end of text, the event's name for a mapped event.
        ``tokens`` counts the sampled bytes; ``leaf_logprob`` is None.
        """
        started = time.perf_counter()
        # _Output checks the byte budget only in byte mode: the ensemble always samples bytes.
        s = settings if settings.mode == "bytes" else replace(settings, mode="bytes")
        rng = np.random.default_rng(s.seed)
        out = _Output(s, should_stop, cut, deadline)
        self.reset(prefix)
        made = 0
        while not out.before_step():
            k = self._sample(s.transform, rng)
            if k >= EOS:
                out.reason = "eos" if k == EOS else self.event_names[k - EOS - 1]
                break
            self.push(bytes([k]))
            made += 1
            if out.add(bytes([k])):
                break
        return out.result(None, made, started)

    def _sample(self, transform: Transform, rng: np.random.Generator) -> int:
        logp = self.distribution().logp
        if not transform.is_greedy:
            logp = transform.apply(logp)
        return _pick(logp, transform.is_greedy, rng)
