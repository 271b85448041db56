"""Guided completion (issue 39): the next name comes from a list the editor knows (its
language server's symbols), chosen by the model's exact probabilities; the rest is an
ordinary exact completion from the text after the name.

Given a byte prefix that may end inside a name (``self.assertEq``) and candidate names
(``assertEqual``, ``assertEquals``, ``assertIn``, ...):

1. the name typed so far is the identifier at the end of the prefix (`typed_identifier`);
   the candidates that extend it are the ones whose exact scores count
   (`score_continuations`'s), by default with the name ending after them
   (``end="identifier"``);
2. one is chosen from their renormalized scores, with the temperature, top-k and top-p of
   the `Settings` (greedy: the likeliest), scoring only the names the choice needs
   (`likeliest_continuation`, `draw_continuation`: a search of their byte trie);
3. with ``end="identifier"``, the byte after the name is drawn from the exact next-byte
   distribution restricted to the bytes that end a name and the end of text (the same
   transform); the completion then goes on as `Completer.complete` would from the prefix,
   the name and that byte: a leaf of the covering tree at prefix + name that puts the byte
   next (the tree the search scored for the name: `_leaf_after`), then ordinary tokens.
   The ByteSampler conditions on any byte prefix, so each step is the model's exact
   distribution given what was chosen before it.

The guidance stands aside, with a reason the caller may log, when no candidate extends
what was typed or the candidates together hold less than ``min_mass`` of the probability
(the model wants something else there: a keyword, a new name, an expression). The caller
then gets no completion, or with ``fallback=True`` the unguided one.

With ``end="identifier"`` names are different texts (``assertEqual`` ended is not
``assertEquals``), so their probabilities add up to at most one; with ``end="none"`` a name
that extends another also counts in the shorter one's.
A fill-in-the-middle completer guides the same way: move it to the cursor
(`FimCompleter.move_to`) and pass its ``completer`` with the bytes it covers, and the
name typed at the end of the prefix (a template whose middle starts a token segment of
its own covers none of the prefix: the rest of a name is then the middle's start).

>>> from midword.engine import load_engine
>>> from midword.engine.model.fake import FakeModel
>>> engine = load_engine("models/default")
>>> completer = Completer(FakeModel(engine.tok.size, seed=1), engine)
>>> names = ["assertEqual", "assertEquals", "assertIn"]
>>> guided = complete_guided(completer, b"self.assertEq", names, Settings(max_tokens=2))
>>> guided.method, guided.chosen in names[:2], guided.completion.text.startswith("ual")
('bytesampler+symbols', True, True)
>>> complete_guided(completer, b"self.assertEq", ["assertIn"]).reason
"no candidate extends 'assertEq'"
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .candidate_draws import draw_continuation
from .candidates import (
    ENDING_BYTES,
    CandidateScore,
    likeliest_continuation,
    typed_identifier,
)
from .generate import Completer, Completion, Cut, Settings, StopCheck, _Output, _pick
from .sampling import ByteSampler
from .transform import NEG_INF, Transform, logsumexp

__all__ = ["GUIDED_METHOD", "MIN_MASS", "Guided", "complete_guided", "would_guide"]

GUIDED_METHOD = "bytesampler+symbols"
# below this share of the probability the candidates are not what the model wants here.
# 0: guide whenever a candidate extends what was typed; a name the editor's language
# server does not offer is almost always wrong (`midword bench symbols --sweep`)
MIN_MASS = 0.0
_EOS = -1  # the end of text, among the bytes that may follow a name


@dataclass
class Guided:
    """A guided completion, or why there is none (``reason``, empty when guided).

    ``chosen`` is the candidate name; ``logprob`` its exact log-probability given the
    prefix (under the end condition); ``mass`` a lower bound on the candidates' total
    probability (at least ``min_mass``): the choice scores only the names it needs
    (`likeliest_continuation`, `draw_continuation`), not all of them. ``method`` is `GUIDED_METHOD` when guided, else the settings' method
    (the unguided completion when ``fallback`` asked for it)."""

    completion: Completion | None
    method: str
    reason: str = ""
    chosen: str | None = None
    logprob: float | None = None
    mass: float = 0.0

    @property
    def guided(self) -> bool:
        return not self.reason

    def to_json(self) -> dict:
        """`Completion.to_json` and what guided it."""
        out = self.completion.to_json() if self.completion is not None else {"completion": None}
        out.update(method=self.method, guided=self.guided, reason=self.reason)
        out.update(chosen=self.chosen, logprob=self.logprob, mass=self.mass)
        return out


def complete_guided(
    completer: Completer,
    prefix: bytes,
    names: Sequence[str],
    settings: Settings | None = None,
    *,
    end: str = "identifier",
    min_mass: float = MIN_MASS,
    fallback: bool = False,
    should_stop: StopCheck | None = None,
    cut: Cut | None = None,
    deadline: float | None = None,
    typed: bytes | None = None,
) -> Guided:
    """Complete ``prefix`` with its next name taken from ``names`` (see the module docstring).

    ``typed`` is what was typed of the name (default: the identifier at the end of
    ``prefix``); a fill-in-the-middle prompt that does not cover its prefix passes the one
    at the end of that prefix. The hooks are `Completer.complete`'s; stop strings and
    ``cut`` see the name too; ``should_stop`` is polled while the names are scored, and
    ``deadline`` bounds the text after the name. Raises ValueError unless
    ``settings.method`` is "bytesampler" (the only exact one).
    """
    settings = settings or Settings()
    if settings.method != "bytesampler":
        raise ValueError(f"guided completion is exact only with bytesampler, not {settings.method}")
    started = time.perf_counter()
    typed = typed_identifier(prefix) if typed is None else typed
    rests = _rests(names, typed)
    if not rests:
        reason = f"no candidate extends {typed.decode('utf-8', 'replace')!r}"
        return _unguided(completer, prefix, settings, reason, fallback, should_stop, cut, deadline)
    rng = np.random.default_rng(settings.seed)
    args = (completer.sampler, prefix, list(rests), end)
    if settings.transform.is_greedy:
        pick = _likeliest(*args, min_mass, should_stop)
    else:
        pick = _drawn(*args, min_mass, should_stop, settings.transform, rng)
    if isinstance(pick, str):
        return _unguided(completer, prefix, settings, pick, fallback, should_stop, cut, deadline)
    head, ended = _after_name(pick.chosen, end, settings, rng)
    hooks = (cut, should_stop, deadline)
    completion = None
    if end == "identifier" and not ended:
        completion = _go_on_ended(completer, prefix, head, settings, *hooks, rng)
    if completion is None:
        completion = _go_on(completer, prefix, head, ended, settings, *hooks)
    completion.seconds = time.perf_counter() - started  # the scoring counts too
    chosen = pick.chosen
    name = rests[chosen.continuation]
    return Guided(completion, GUIDED_METHOD, "", name, chosen.logprob, pick.mass)


def would_guide(
    completer: Completer,
    prefix: bytes,
    names: Sequence[str],
    min_mass: float,
    *,
    end: str = "identifier",
    typed: bytes | None = None,
) -> bool:
    """Whether greedy `complete_guided` guides at ``prefix`` with this ``min_mass``: a
    candidate extends what was typed and the candidates are not found to hold less than
    ``min_mass`` (the same search and rule; nothing is generated). For a caller that
    weighs thresholds against each other, as ``midword bench symbols --sweep`` does."""
    typed = typed_identifier(prefix) if typed is None else typed
    rests = _rests(names, typed)
    if not rests:
        return False
    pick = _likeliest(completer.sampler, prefix, list(rests), end, min_mass, None)
    return not isinstance(pick, str)


@dataclass(frozen=True)
class _Pick:
    chosen: CandidateScore
    mass: float  # a lower bound on the candidates' total probability, at least min_mass


def _too_little(mass: float, min_mass: float, at_most: bool = False) -> str:
    """The reason a guidance stands aside for lack of mass."""
    held = f"at most {mass:.3g}" if at_most else f"{mass:.3g}"
    return f"the candidates hold {held} of the probability, under {min_mass:g}"


def _likeliest(
    sampler: ByteSampler,
    prefix: bytes,
    rests: list[bytes],
    end: str,
    min_mass: float,
    should_stop: StopCheck | None,
) -> _Pick | str:
    """Greedy: the likeliest candidate by best-first search (only the trie nodes that may
    hold it are scored); the mass is a lower bound."""
    found = likeliest_continuation(
        sampler, prefix, rests, end, min_mass=min_mass, should_stop=should_stop
    )
    if found.best is None or found.mass_high < min_mass or not found.mass_high:
        return _too_little(found.mass_high, min_mass, at_most=True)
    return _Pick(found.best, found.mass_low)


def _drawn(
    sampler: ByteSampler,
    prefix: bytes,
    rests: list[bytes],
    end: str,
    min_mass: float,
    should_stop: StopCheck | None,
    transform: Transform,
    rng: np.random.Generator,
) -> _Pick | str:
    """A candidate drawn exactly under ``transform`` (`draw_continuation`: only what the
    draw needs is scored); the mass is a lower bound."""
    found = draw_continuation(
        sampler,
        prefix,
        rests,
        end,
        rng=rng,
        temperature=transform.temperature,
        top_k=transform.top_k,
        top_p=transform.top_p,
        min_mass=min_mass,
        should_stop=should_stop,
    )
    if found.best is None or not found.mass_high:
        return _too_little(found.mass_high, min_mass, at_most=True)
    return _Pick(found.best, found.mass_low)


def _after_name(
    chosen: CandidateScore, end: str, settings: Settings, rng: np.random.Generator
) -> tuple[bytes, bool]:
    """(the bytes the chosen candidate puts after the prefix, whether the text ends there):
    with ``end="identifier"`` the name and the byte drawn after it (or the end of text)."""
    if end != "identifier":
        return chosen.continuation, False
    after = _draw_ending(chosen, settings, rng)
    if after == _EOS:
        return chosen.continuation, True
    return chosen.continuation + bytes([after]), False


def _rests(names: Sequence[str], typed: bytes) -> dict[bytes, str]:
    """What each name that extends ``typed`` adds to it -> the name (the first of equals).

    >>> _rests(["assertEqual", "assertIn", "assertEqual"], b"assertEq")
    {b'ual': 'assertEqual'}
    """
    rests: dict[bytes, str] = {}
    for name in names:
        data = name.encode()
        if data.startswith(typed):
            rests.setdefault(data[len(typed) :], name)
    return rests


def _draw(logp: np.ndarray, transform: Transform, rng: np.random.Generator) -> int:
    """An index drawn from normalized log-probs after ``transform`` (greedy: the argmax,
    the first of ties).

    >>> rng = np.random.default_rng(0)
    >>> _draw(np.log([0.2, 0.5, 0.3]), Transform(temperature=0), rng)
    1
    >>> _draw(np.log([0.2, 0.5, 0.3]), Transform(top_p=0.4), rng)
    1
    """
    if transform.is_greedy:
        return int(np.argmax(logp))
    weights = np.exp(transform.apply(logp))
    return int(rng.choice(weights.size, p=weights / weights.sum()))


def _draw_ending(score: CandidateScore, settings: Settings, rng: np.random.Generator) -> int:
    """The byte that ends the chosen name (or `_EOS`), drawn from the exact distribution
    after it restricted to the bytes that end a name and the end of text."""
    after = score.after
    assert after is not None  # scored under end="identifier" and reachable (it was chosen)
    eos = NEG_INF if settings.ignore_eos else after.eos
    logp = np.append(after.next[ENDING_BYTES], eos)
    k = _draw(logp - logsumexp(logp), settings.transform, rng)
    return _EOS if k == ENDING_BYTES.size else int(ENDING_BYTES[k])


class _Joined:
    """Stop strings and the caller's cut over the name and the text after it together
    (the completer sees only what comes after the name); remembers where, and why, the
    whole text was cut."""

    def __init__(self, head: str, stops: Sequence[str], cut: Cut | None) -> None:
        self.head, self.stops, self.cut = head, stops, cut
        self.end: int | None = None  # in the whole text
        self.reason = ""

    def __call__(self, text: str) -> int | None:
        whole = self.head + text
        ends = [(whole.find(s), "stop") for s in self.stops if s and s in whole]
        if self.cut is not None and (at := self.cut(whole)) is not None:
            ends.append((at, "cut"))
        if not ends:
            return None
        self.end, self.reason = min(ends)
        return max(0, self.end - len(self.head))


def _go_on(
    completer: Completer,
    prefix: bytes,
    head: bytes,
    ended: bool,
    settings: Settings,
    cut: Cut | None,
    should_stop: StopCheck | None,
    deadline: float | None,
) -> Completion:
    """The completion of ``prefix + head`` (none when the text ``ended`` there), with
    ``head`` in front of its text."""
    stopped = _stopped_by(head, settings, cut)
    if stopped is not None:
        return stopped
    if ended:
        return Completion(head.decode("utf-8", "replace"), head, None, 0, 0.0, "eos")
    done = _after_head(
        head,
        settings,
        cut,
        lambda plain, joined: completer.complete(
            prefix + head, plain, should_stop=should_stop, cut=joined, deadline=deadline
        ),
    )
    assert done is not None  # complete() always answers
    return done


def _go_on_ended(
    completer: Completer,
    prefix: bytes,
    head: bytes,
    settings: Settings,
    cut: Cut | None,
    should_stop: StopCheck | None,
    deadline: float | None,
    rng: np.random.Generator,
) -> Completion | None:
    """`_go_on` for a name and the byte that ends it (``head``), from the covering tree at
    prefix + name, which the search scored for the chosen name (`_leaf_after`); None where
    no leaf of that tree starts with the byte under the transform (then `_go_on`)."""
    stopped = _stopped_by(head, settings, cut)
    if stopped is not None:
        return stopped
    name = head[:-1]
    return _after_head(
        name,
        settings,
        cut,
        lambda plain, joined: _leaf_after(
            completer, prefix + name, head[-1], plain, joined, should_stop, deadline, rng
        ),
    )


def _stopped_by(head: bytes, settings: Settings, cut: Cut | None) -> Completion | None:
    """``head`` cut, when a stop string or the caller's cut ends the text inside it."""
    text = head.decode("utf-8", "replace")
    joined = _Joined(text, settings.stop, cut)
    if joined("") is None:
        return None
    return _cut(text, 0, joined, 0.0)


def _after_head(
    head: bytes,
    settings: Settings,
    cut: Cut | None,
    rest_of: Callable[[Settings, _Joined], Completion | None],
) -> Completion | None:
    """``head`` followed by ``rest_of(settings without stop strings, joined cut)``: the
    stop strings and the caller's cut apply across the join (None when ``rest_of`` gives
    none)."""
    text = head.decode("utf-8", "replace")
    joined = _Joined(text, settings.stop, cut)
    rest = rest_of(dataclasses.replace(settings, stop=()), joined)
    if rest is None:
        return None
    if joined.end is not None:
        return _cut(text + rest.text, rest.tokens, joined, rest.seconds)
    return dataclasses.replace(rest, text=text + rest.text, data=head + rest.data)


def _leaf_after(
    completer: Completer,
    at: bytes,
    byte: int,
    s: Settings,
    cut: Cut,
    should_stop: StopCheck | None,
    deadline: float | None,
    rng: np.random.Generator,
) -> Completion | None:
    """The completion of ``at`` whose first byte is ``byte``: PBP's leaf step (greedy the
    likeliest leaf, else drawn under the transform) over the leaves of the covering tree
    at ``at`` that put ``byte`` next, then ordinary tokens, as `Completer.complete` goes on.

    Why not complete ``at + byte`` as a new prefix: those leaves are the covering tree of
    ``at + byte`` but for the ones that end exactly there, which that tree splits by their
    next token; their weights are the same probabilities, so drawn at temperature 1 both
    give the model's text after ``at + byte`` (but for the mass on token pairs no text
    encodes to, which generation after any PBP leaf allows too; greedy may pick a shorter
    leaf). But the tree at ``at`` is already scored, by the candidate search's last model
    call when it ended on the chosen name, and a new prefix would score a tree again (one
    to two tokens a completion on the default model). None when no leaf agrees with
    ``byte`` (a top-k or top-p transform dropped them all).
    """
    started = time.perf_counter()
    out = _Output(s, should_stop, cut, deadline)
    sampler = completer.sampler
    sampler.reset(at)
    out.before_step()  # honour a cancel before the tree is scored (when it is not yet)
    greedy = s.transform.is_greedy
    leaves = completer.leaf_set(Transform() if greedy else s.transform)
    agree = sampler.leaf_next_bytes(leaves) == byte
    weights = np.where(agree, leaves.weights, NEG_INF)
    if not agree.any() or not np.isfinite(weights).any():
        return None
    k = _pick(weights, greedy, rng)
    seq = leaves.sequence(k)
    leaf_lp = float(weights[k] - logsumexp(weights))
    if out.add(completer.tok.decode(seq)[leaves.tree.rest :], leaf_lp):
        return out.result(leaf_lp, 1, started)
    context = list(leaves.tree.trunk) + list(seq)
    made = completer._generate(context, s, rng, out, budget=s.max_tokens - 1)
    return out.result(leaf_lp, 1 + made, started)


def _cut(whole: str, tokens: int, joined: _Joined, seconds: float) -> Completion:
    """The whole text cut where a stop string or the caller's cut said."""
    text = whole[: joined.end]
    return Completion(text, text.encode(), None, tokens, seconds, joined.reason)


def _unguided(
    completer: Completer,
    prefix: bytes,
    settings: Settings,
    reason: str,
    fallback: bool,
    should_stop: StopCheck | None,
    cut: Cut | None,
    deadline: float | None,
) -> Guided:
    """No guidance: the reason, and the plain completion when ``fallback`` asked for it."""
    completion = None
    if fallback:
        hooks = {"should_stop": should_stop, "cut": cut, "deadline": deadline}
        completion = completer.complete(prefix, settings, **hooks)  # type: ignore[arg-type]
    return Guided(completion, settings.method, reason)
