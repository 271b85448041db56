"""The simulated user, the suggestion-length policies and their metrics for
``midword bench acceptance`` (midword/bench/acceptance.py).

Each cut's completion is generated once, at the longest length, with its per-step spans
(`Completion.spans`: the end byte of each step's text and its log-probability). A policy
is a cut of that text, so every policy and every threshold of a sweep costs no model
call:

* **fixed N**: the text of the first N steps (``maxTokens`` N: the leaf, then tokens);
* **scoped**: (optionally first cut to N steps) the language server's rule for what a completion may span
  (``server/scope.py``'s `scope_for`, applied after every step as the server's cut hook
  does, then ``server/cleanup.py``'s `clean_completion`): ``multiline`` auto (today's
  default), always, and ``maxLines`` 1 (one line);
* **confident**: a scoped text cut where its probability falls below a threshold
  (``engine/sample/confidence.py``'s `confidence_cut`, applied after the scope as the
  server does), and silent when the first word is below a second threshold.

The bench imports the server's scope and clean-up modules (standard library only); the
engine never imports the server. The simulated document is written top to bottom: the
text after the cursor on its line is empty, so nothing of the server's suffix handling
applies, and special-token texts are not listed (greedy generation ends at them).

>>> accepted_prefix("foo(bar, baz)", "foo(bar, qux)")
'foo(bar, '
>>> accepted_chars("x = computer()", "x = computed")   # "computer" is not kept
4
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from midword.server.cleanup import clean_completion
from midword.server.scope import Scope, scope_for

SPLITS = ("dev", "held-out")  # halves of the cuts: thresholds tuned on one, checked on the other
KINDS = ("mid-word", "line start", "after space", "other")  # where a cut falls

Span = tuple[int, "float | None"]  # (end byte of a step's text, its log-probability)
SPACE = " \t\r\n"
# the cost of one wasted character (read and rejected) against one accepted (not typed)
WASTE_COST = 0.5


# ---------------------------------------------------------------------- the user
def word_char(ch: str) -> bool:
    """A character that belongs to a word: ASCII letters and digits, ``_`` and every
    non-ASCII character (the engine's rule for bytes, engine/sample/confidence.py).

    >>> [word_char(c) for c in "a_9 (é"]
    [True, True, True, False, False, True]
    """
    return ch == "_" or not ch.isascii() or ch.isalnum()


def splits_word(text: str, i: int) -> bool:
    """Cutting ``text`` at ``i`` leaves a word character on both sides."""
    return 0 < i < len(text) and word_char(text[i - 1]) and word_char(text[i])


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``.

    >>> common_prefix("abc", "abd"), common_prefix("", "x")
    (2, 0)
    """
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def accepted_prefix(shown: str, truth: str) -> str:
    """What the simulated user accepts of ``shown`` when ``truth`` is what they go on to
    write: all of it when it is a prefix of ``truth``, else the longest matching prefix
    rounded down to a whole word of the suggestion (an editor's accept-next-word)."""
    n = common_prefix(shown, truth)
    if n == len(shown):
        return shown
    while splits_word(shown, n):
        n -= 1
    return shown[:n]


def accepted_chars(shown: str, truth: str) -> int:
    """Characters accepted: those of `accepted_prefix`, 0 when it is blank (taking only a
    line break or indentation is not accepting the suggestion: editors indent anyway)."""
    kept = accepted_prefix(shown, truth)
    return len(kept) if kept.strip() else 0


# ---------------------------------------------------------------------- completions
@dataclass(frozen=True)
class Generated:
    """A completion as generated once: its bytes and per-step spans."""

    data: bytes
    spans: tuple[Span, ...]

    @classmethod
    def from_record(cls, method: dict) -> Generated:
        """From a samples.jsonl method entry (``text`` and ``spans``)."""
        spans = tuple((int(end), lp) for end, lp in method.get("spans", ()))
        return cls(method.get("text", "").encode("utf-8"), spans)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="ignore")


def clip_spans(spans: Sequence[Span], size: int) -> tuple[Span, ...]:
    """The spans of the first ``size`` bytes (the engine's rule when a cut ends the text
    inside a step: that step is kept, ending at the cut).

    >>> clip_spans([(2, -1.0), (5, -1.0), (9, -1.0)], 4)
    ((2, -1.0), (4, -1.0))
    """
    kept: list[Span] = []
    start = 0
    for end, logprob in spans:
        if start >= size and kept:
            break
        kept.append((min(end, size), logprob))
        start = end
    return tuple(kept)


def valid_utf8(data: bytes) -> bytes:
    """The longest prefix of ``data`` that is valid UTF-8 (a budget may end inside a
    character; what follows an invalid byte cannot be accepted either).

    >>> valid_utf8("aé".encode()[:2])
    b'a'
    """
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError as exc:
        return data[: exc.start]


def first_steps(gen: Generated, steps: int) -> str:
    """The text of the first ``steps`` steps (the completion at ``maxTokens`` = steps)."""
    if len(gen.spans) <= steps:
        return gen.text()
    return gen.data[: gen.spans[steps - 1][0]].decode("utf-8", errors="ignore")


def truncated(gen: Generated, steps: int) -> Generated:
    """The completion of the first ``steps`` steps, with their spans."""
    if len(gen.spans) <= steps:
        return gen
    return Generated(gen.data[: gen.spans[steps - 1][0]], gen.spans[:steps])


def scope_cut(gen: Generated, scope: Scope) -> Generated:
    """The completion as the server's generation leaves it: the scope's cut is asked
    after every step, and the first answer ends the text (engine/sample/generate.py)."""
    for k, (end, _) in enumerate(gen.spans):
        text = gen.data[:end].decode("utf-8", errors="ignore")
        at = scope.cut(text)
        if at is not None:
            data = text[:at].encode("utf-8")
            return Generated(data, clip_spans(gen.spans[: k + 1], len(data)))
    return gen


# ---------------------------------------------------------------------- confidence
def first_word_end(data: bytes) -> int:
    """The end of the first word: the smallest cut that holds more than whitespace and
    splits no word (0 when the text is only whitespace).

    >>> first_word_end(b"  foo bar"), first_word_end(b"(x"), first_word_end(b"\\n ")
    (5, 1, 0)
    """
    text = data.decode("latin-1")  # one character per byte: the engine cuts bytes
    for p in range(1, len(text) + 1):
        if text[p - 1] not in SPACE and not splits_word(text, p):
            return p
    return 0


def prefix_logprob(spans: Sequence[Span], size: int) -> float | None:
    """The log-probability of the steps needed to spell the first ``size`` bytes (None:
    one of them is unknown).

    >>> prefix_logprob([(2, -0.5), (5, -1.0), (9, -2.0)], 3)
    -1.5
    """
    total = 0.0
    for end, logprob in spans:
        if logprob is None:
            return None
        total += logprob
        if end >= size:
            break
    return total


def log_threshold(value: float) -> float:
    """A probability threshold as a log-probability (0: -inf, never cuts)."""
    return math.log(value) if value > 0 else -math.inf


def confident_end(data: bytes, spans: Sequence[Span], cut: float, silence: float) -> int:
    """Where the confidence policy ends the text (a byte offset): silent (0) when the first
    word's probability is below ``silence``; else `confidence_cut` at ``cut``, but never
    before the end of the first word. With ``silence == cut`` it is the engine's rule
    alone (one threshold: a first word below it leaves nothing)."""
    from midword.engine import confidence_cut

    first = first_word_end(data)
    if first == 0:
        return 0
    logprob = prefix_logprob(spans, first)
    if logprob is not None and logprob < log_threshold(silence):
        return 0
    return max(confidence_cut(data, spans, log_threshold(cut)), first)


# ---------------------------------------------------------------------- policies
@dataclass(frozen=True)
class Cursor:
    """What the server's rules read at a cut: the text before it on its line, and the
    document's indentation unit."""

    line_prefix: str
    indent_unit: str = "    "

    def scope(self, multiline: str, max_lines: int = 0) -> Scope:
        return scope_for(self.line_prefix, "", multiline, (), max_lines)


@dataclass(frozen=True)
class Policy:
    """One way to decide what is shown: ``kind`` fixed | scoped | confident."""

    name: str
    kind: str
    steps: int = 0  # fixed; scoped and confident: 0 = all generated
    multiline: str = "auto"  # scoped, confident
    max_lines: int = 0
    cut: float = 0.0  # confident: probability thresholds
    silence: float = 0.0

    def shown(self, gen: Generated, cursor: Cursor) -> str:
        """The text shown at ``cursor`` ("" for nothing)."""
        if self.kind == "fixed":
            text = first_steps(gen, self.steps)
            return text if text.strip() else ""
        if self.steps:
            gen = truncated(gen, self.steps)
        scope = cursor.scope(self.multiline, self.max_lines)
        scoped = scope_cut(gen, scope)
        return self.shown_scoped(scoped, scope, cursor)

    def shown_scoped(self, scoped: Generated, scope: Scope, cursor: Cursor) -> str:
        """`shown` from the text already cut to ``scope`` (sweeps cut it once)."""
        data = scoped.data
        if self.kind == "confident":
            data = data[: confident_end(data, scoped.spans, self.cut, self.silence)]
        text = data.decode("utf-8", errors="ignore")
        if not text.strip():
            return ""
        text = clean_completion(text, scope, cursor.indent_unit)
        return text if text.strip() else ""


def confident(cut: float, silence: float | None = None, multiline: str = "auto") -> Policy:
    """The confidence policy at thresholds (``silence`` defaults to ``cut``: the engine's
    single-threshold rule)."""
    silence = cut if silence is None else silence
    name = f"confidence {cut:g}" + (f", silence {silence:g}" if silence != cut else "")
    if multiline != "auto":
        name += f", multiline {multiline}"
    return Policy(name, "confident", multiline=multiline, cut=cut, silence=silence)


BASELINES = (
    Policy("fixed, maxTokens 16", "fixed", steps=16),
    Policy("fixed, maxTokens 48", "fixed", steps=48),
    Policy("one line (maxLines 1)", "scoped", max_lines=1),
    Policy("multiline auto, maxTokens 16", "scoped", steps=16),
    Policy("multiline auto (today)", "scoped"),
)
TODAY = BASELINES[-1].name


# ---------------------------------------------------------------------- metrics
@dataclass(frozen=True)
class Outcome:
    """What happened at one cut under one policy."""

    shown: bool
    accepted: bool
    accepted_chars: int
    wasted_chars: int


def outcome(shown: str, truth: str) -> Outcome:
    """The simulated user's reaction to ``shown`` ("" = nothing shown)."""
    if not shown:
        return Outcome(False, False, 0, 0)
    chars = accepted_chars(shown, truth)
    return Outcome(True, chars > 0, chars, len(shown) - chars)


def metrics(outcomes: Iterable[Outcome], waste_cost: float = WASTE_COST) -> dict[str, float]:
    """The per-policy figures over a set of cuts (nan where undefined).

    ``objective`` is accepted characters per cut minus ``waste_cost`` times wasted
    characters per cut (see `WASTE_COST`)."""
    items = list(outcomes)
    n, shown = len(items), sum(o.shown for o in items)
    accepted = sum(o.accepted for o in items)
    chars = sum(o.accepted_chars for o in items)
    wasted = sum(o.wasted_chars for o in items)
    per_cut = (lambda x: x / n) if n else (lambda x: math.nan)
    return {
        "n": n,
        "shown_per_cut": per_cut(shown),
        "acceptance_rate": accepted / shown if shown else math.nan,
        "accepted_chars_per_cut": per_cut(chars),
        "accepted_chars_per_shown": chars / shown if shown else math.nan,
        "wasted_chars_per_cut": per_cut(wasted),
        "objective": per_cut(chars - waste_cost * wasted),
    }


# ---------------------------------------------------------------------- cuts
@dataclass(frozen=True)
class Case:
    """One cut with one method's completion, ready for the policies."""

    cursor: Cursor
    gen: Generated
    truth: str
    kind: str
    split: str
    source: str


Select = Callable[[Case], bool]


def evaluate(policy: Policy, cases: Sequence[Case], waste_cost: float = WASTE_COST) -> dict:
    """`metrics` of ``policy`` over ``cases``."""
    return metrics((outcome(policy.shown(c.gen, c.cursor), c.truth) for c in cases), waste_cost)


class ScopedCache:
    """Each case's text cut to a scope, made once: a sweep then only applies thresholds."""

    def __init__(self, cases: Sequence[Case], multiline: str = "auto") -> None:
        self.cases = list(cases)
        self.multiline = multiline
        self.scopes = [c.cursor.scope(multiline) for c in self.cases]
        self.texts = [scope_cut(c.gen, s) for c, s in zip(self.cases, self.scopes, strict=True)]

    def outcomes(self, policy: Policy) -> list[Outcome]:
        """Each case's `outcome` under a policy whose scope is this cache's."""
        if policy.steps or policy.multiline != self.multiline or policy.max_lines:
            raise ValueError(f"{policy.name}: not a policy of this cache's scope")
        return [
            outcome(policy.shown_scoped(text, scope, case.cursor), case.truth)
            for case, scope, text in zip(self.cases, self.scopes, self.texts, strict=True)
        ]

    def evaluate(self, policy: Policy, waste_cost: float = WASTE_COST) -> dict:
        """`evaluate` for a policy whose scope is this cache's."""
        return metrics(self.outcomes(policy), waste_cost)
