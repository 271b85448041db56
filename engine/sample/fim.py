"""Fill-in-the-middle (FIM): prompt templates as data, their detection, and completion of
the middle that stays exact at the cursor (docs/fim.md says which distribution and why).

A template lays out sentinel tokens and two slots, ``{prefix}`` and ``{suffix}``; the
middle follows the layout. Each slot is encoded on its own, as in training. When
``shared`` is true the middle continues the prefix's token segment (the model saw
``enc(prefix + middle)``), so the Valid Covering Tree covers the prefix's bytes; otherwise
the prefix is encoded into the context and the tree covers the middle from its start.

>>> TEMPLATES["qwen"].order, TEMPLATES["qwen"].shared
('psm', False)
>>> TEMPLATES["codestral"].order, TEMPLATES["codestral"].shared
('spm', True)
>>> TEMPLATES["qwen"].tokens
('<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>')

Completing with a model (``FimCompleter`` keeps one KV session across calls)::

    engine = load_engine("models/default")
    template = resolve_fim("auto", engine.tok, model_config("models/default"))
    completer = FimCompleter(load_hf_model("models/default"), engine, template)
    completer.complete(b"def add(a, b):\\n    return a", b"\\n\\nprint(add(1, 2))\\n").text

Training data in the same layout (what ``models/train_default.py`` writes)::

    ids = TEMPLATES["qwen-spm"].training_tokens(tok, "def f(x):\\n    ret", "urn x", "\\n", eos)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FimError, PrefixError
from ..tree.utf8 import split_utf8

if TYPE_CHECKING:
    import numpy as np

    from ..model.backend import ScoringModel, ScoringSession
    from ..tokenize.tokenizer import BPETokenizer
    from ..tree.tables import Engine
    from .generate import Completer, Completion, Settings
    from .sampling import ByteSampler

__all__ = [
    "FIM_CHOICES",
    "TEMPLATES",
    "FimCompleter",
    "FimError",
    "FimPrompt",
    "FimTemplate",
    "PromptedModel",
    "PromptedSession",
    "SegmentEncoder",
    "detect_template",
    "fim_sampler",
    "loaded_model_config",
    "model_config",
    "move_sampler",
    "resolve_fim",
]

PREFIX_SLOT = "{prefix}"
SUFFIX_SLOT = "{suffix}"
Encoder = Callable[[str], list[int]]  # a segment's text -> its canonical token ids


@dataclass(frozen=True)
class FimTemplate:
    """One FIM prompt format.

    ``layout``: sentinel token texts and the slots ``{prefix}`` / ``{suffix}`` in prompt
    order; the middle comes after the last item. ``shared``: the middle continues the
    prefix's token segment (only possible when ``{prefix}`` is last). ``detect``: chosen by
    ``auto`` when the tokenizer has its tokens (otherwise only by name). ``families``:
    ``model_type`` values that prefer it when several detectable templates fit.

    >>> TEMPLATES["qwen-spm"].layout
    ('<|fim_prefix|>', '<|fim_suffix|>', '{suffix}', '<|fim_middle|>', '{prefix}')
    """

    name: str
    layout: tuple[str, ...]
    shared: bool = False
    detect: bool = True
    families: tuple[str, ...] = ()
    models: str = ""  # who uses it, for docs and status

    def __post_init__(self) -> None:
        if self.layout.count(PREFIX_SLOT) != 1 or self.layout.count(SUFFIX_SLOT) != 1:
            raise ValueError(f"template {self.name!r}: each slot must appear exactly once")
        if self.shared and self.layout[-1] != PREFIX_SLOT:
            raise ValueError(f"template {self.name!r}: a shared segment needs {{prefix}} last")

    @property
    def order(self) -> str:
        """The order: "psm" when the prefix comes before the suffix, else "spm"."""
        return "psm" if self.layout.index(PREFIX_SLOT) < self.layout.index(SUFFIX_SLOT) else "spm"

    @property
    def tokens(self) -> tuple[str, ...]:
        """The sentinel token texts, each once, in layout order."""
        return tuple(dict.fromkeys(p for p in self.layout if p not in (PREFIX_SLOT, SUFFIX_SLOT)))

    def token_ids(self, tok: BPETokenizer) -> dict[str, int]:
        """Sentinel text -> id in ``tok``; FimError naming the ones it lacks."""
        known = added_token_ids(tok)
        lacking = [t for t in self.tokens if t not in known]
        if lacking:
            raise FimError(
                f"FIM template {self.name!r} needs tokens the tokenizer lacks: {', '.join(lacking)}"
            )
        return {t: known[t] for t in self.tokens}

    def prompt(
        self,
        tok: BPETokenizer,
        prefix: bytes,
        suffix: bytes,
        encode_prefix: Encoder | None = None,
        encode_suffix: Encoder | None = None,
    ) -> FimPrompt:
        """The context tokens and the bytes the covering tree covers, for ``prefix`` before
        the cursor and ``suffix`` after it. ``encode_prefix`` / ``encode_suffix`` give a
        segment's canonical tokens faster than ``tok.encode`` (`FimCompleter` keeps them
        between keystrokes); they must give the same tokens.

        A prefix that ends inside a UTF-8 character keeps its whole characters in a
        separate prefix segment (training cuts at characters) and its partial character
        starts the middle.
        """
        ids = self.token_ids(tok)
        if self.shared:
            head, covered = "", prefix
        else:
            head, covered = split_utf8(prefix)
        suffix_text = suffix.decode("utf-8", errors="replace")
        context: list[int] = []
        for piece in self.layout:
            if piece == PREFIX_SLOT and head:
                context.extend(encode_prefix(head) if encode_prefix else _encode(tok, head))
            elif piece == SUFFIX_SLOT and suffix_text:
                encoded = encode_suffix(suffix_text) if encode_suffix else None
                context.extend(encoded if encoded is not None else _encode(tok, suffix_text))
            elif piece in (PREFIX_SLOT, SUFFIX_SLOT):
                continue
            else:
                context.append(ids[piece])
        return FimPrompt(context, covered)

    def training_tokens(
        self, tok: BPETokenizer, prefix: str, middle: str, suffix: str, end_id: int
    ) -> list[int]:
        """One training example in this layout: the context, the middle's tokens (encoded
        with the prefix when ``shared``), then ``end_id``. Inference's `prompt` lays out the
        same context, so a model trained on these samples what `FimCompleter` asks.
        """
        prompt = self.prompt(tok, prefix.encode(), suffix.encode())
        body = prompt.covered.decode("utf-8") + middle
        return [*prompt.context, *_encode(tok, body), int(end_id)]


def _encode(tok: BPETokenizer, text: str) -> list[int]:
    """One segment's canonical tokens, as Python ints ([] for no text)."""
    return [int(t) for t in tok.encode(text)] if text else []


@dataclass
class FimPrompt:
    """``context``: token ids after the start token and before the covered segment;
    ``covered``: the bytes the Valid Covering Tree covers at the cursor (the prefix when
    the template shares its segment with the middle, else the empty middle)."""

    context: list[int]
    covered: bytes


def _template(name: str, layout: Sequence[str], **fields: Any) -> FimTemplate:
    return FimTemplate(name, tuple(layout), **fields)


P, S = PREFIX_SLOT, SUFFIX_SLOT
QWEN = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
STAR = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")

# name -> template. Order matters for detection: the first detectable one whose tokens fit
# wins unless the model family picks another.
TEMPLATES: dict[str, FimTemplate] = {
    t.name: t
    for t in (
        _template("qwen", [QWEN[0], P, QWEN[1], S, QWEN[2]], models="Qwen2.5-Coder"),
        _template(
            "qwen-spm",
            [QWEN[0], QWEN[1], S, QWEN[2], P],
            shared=True,
            detect=False,
            models="midword's small model",
        ),
        _template(
            "deepseek",
            ["<｜fim▁begin｜>", P, "<｜fim▁hole｜>", S, "<｜fim▁end｜>"],
            models="DeepSeek-Coder",
        ),
        _template("starcoder", [STAR[0], P, STAR[1], S, STAR[2]], models="StarCoder, StarCoder2"),
        _template(
            "starcoder-spm", [STAR[0], STAR[1], S, STAR[2], P], detect=False, models="StarCoder"
        ),
        _template("codellama", ["▁<PRE>", P, "▁<SUF>", S, "▁<MID>"], models="CodeLlama"),
        _template(
            "codestral",
            ["[SUFFIX]", S, "[PREFIX]", P],
            shared=True,
            families=("mistral",),
            models="Codestral",
        ),
    )
}
FIM_CHOICES = ("auto", "off", *TEMPLATES)


def added_token_ids(tok: BPETokenizer) -> dict[str, int]:
    """Text -> id of the tokenizer's added tokens (special or not)."""
    return {a.content: a.id for a in tok.added}


def model_config(model_dir: str | Path | None) -> dict[str, Any]:
    """``config.json`` of a model folder as a dict ({} when there is none)."""
    if model_dir is None:
        return {}
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def detect_template(
    tok: BPETokenizer, config: Mapping[str, Any] | None = None
) -> FimTemplate | None:
    """The template this model was trained with, or None.

    ``config["fim_template"]`` names one outright; else the detectable templates whose
    tokens the tokenizer has, the one whose ``families`` hold ``config["model_type"]``
    first, then table order.
    """
    config = config or {}
    named = config.get("fim_template")
    if isinstance(named, str) and named in TEMPLATES:
        return TEMPLATES[named]
    known = added_token_ids(tok)
    fits = [t for t in TEMPLATES.values() if t.detect and all(x in known for x in t.tokens)]
    family = str(config.get("model_type", ""))
    fits.sort(key=lambda t: family not in t.families)  # stable: table order otherwise
    return fits[0] if fits else None


def resolve_fim(
    setting: str, tok: BPETokenizer, config: Mapping[str, Any] | None = None
) -> FimTemplate | None:
    """``fim: auto | off | <name>`` -> the template to use (None: prefix-only).

    >>> resolve_fim("off", None) is None
    True
    """
    if setting == "off":
        return None
    if setting == "auto":
        return detect_template(tok, config)
    template = TEMPLATES.get(setting)
    if template is None:
        raise FimError(f"unknown FIM setting {setting!r}; expected one of {', '.join(FIM_CHOICES)}")
    template.token_ids(tok)  # FimError when the tokenizer lacks its tokens
    return template


class PromptedSession:
    """A scoring session whose every context starts with fixed ``context`` tokens (after
    the start token): ``logprobs(trunk, paths)`` is the inner session's
    ``logprobs(context + trunk, paths)``. The inner KV cache keeps whatever leading part
    of ``context + trunk`` stays the same, so a context that changes only at its end (an
    SPM suffix, or a PSM prefix being typed) reuses the rest."""

    def __init__(self, inner: ScoringSession, context: Sequence[int] = ()) -> None:
        self.inner = inner
        self.context: list[int] = list(context)

    @property
    def inference_tokens(self) -> int:
        return int(getattr(self.inner, "inference_tokens", 0))

    def logprob_rows(self, trunk: Sequence[int], paths: Sequence[tuple[int, ...]]) -> Any:
        from .sampling import session_rows

        return session_rows(self.inner, [*self.context, *trunk], paths)

    def logprobs(self, trunk: Sequence[int], paths: Sequence[tuple[int, ...]]) -> np.ndarray:
        return self.inner.logprobs([*self.context, *trunk], paths)

    def cached_trunk_len(self, trunk: Sequence[int]) -> int:
        """How many leading tokens of ``trunk`` (after the context) the cache holds."""
        cached = self.inner.cached_trunk_len([*self.context, *trunk])  # type: ignore[attr-defined]
        return max(0, cached - len(self.context))

    def cache_len(self) -> int:
        return self.inner.cache_len()

    def reset(self) -> None:
        self.inner.reset()


class PromptedModel:
    """A `ScoringModel` whose sessions are `PromptedSession` objects (context set later by
    whoever holds the session); everything else is the inner model's."""

    def __init__(self, inner: ScoringModel) -> None:
        self.inner = inner

    def session(self, bos_id: int | None = None) -> PromptedSession:
        return PromptedSession(self.inner.session(bos_id=bos_id))

    def __getattr__(self, name: str) -> Any:  # vocab_size, bos/eos ids, device, ...
        return getattr(self.inner, name)


def fim_sampler(
    model: ScoringModel,
    engine: Engine,
    template: FimTemplate,
    prefix: bytes,
    suffix: bytes,
    *,
    track_prefix: bool = True,
    start_id: int | None = None,
) -> ByteSampler:
    """A `ByteSampler` at the cursor of a FIM prompt: its next-byte distribution is the
    middle's, and pushing bytes extends the middle (``prefix_logprob`` is log P(covered
    bytes | start + context))."""
    from .sampling import ByteSampler

    sampler = ByteSampler(
        PromptedModel(model), engine, track_prefix=track_prefix, start_id=start_id
    )
    move_sampler(sampler, template, prefix, suffix)
    return sampler


def move_sampler(sampler: ByteSampler, template: FimTemplate, prefix: bytes, suffix: bytes) -> None:
    """Put a `ByteSampler` over a `PromptedModel` at the cursor between ``prefix`` and
    ``suffix`` (its KV cache keeps what the new prompt shares with the old)."""
    prompt = template.prompt(sampler.tok, prefix, suffix)
    session: PromptedSession = sampler.session  # type: ignore[assignment]
    if prompt.context != session.context:
        session.context = prompt.context
        sampler.forget_scores()
    sampler.reset(prompt.covered)


def loaded_model_config(model: Any) -> dict[str, Any]:
    """The ``config.json`` values of a loaded model (an `HFModel`'s transformers config,
    extra keys such as ``fim_template`` included); {} when it has none."""
    config = getattr(getattr(model, "model", None), "config", None)
    to_dict = getattr(config, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else {}


class SegmentEncoder:
    """Canonical tokens of a text that changes at its end between calls (a PSM prompt's
    prefix while the user types), from a streaming covering tree: the trunk plus the path
    of the node that encodes the whole text (`Tree.complete`), so only the tree's tail is
    encoded again. Where the tree cannot stand in for the tokenizer (SentencePiece's dummy
    prefix, a normalizer, bytes no token covers) it is ``tok.encode``.

    >>> from midword.engine import load_engine                      # doctest: +SKIP
    >>> encode = SegmentEncoder(load_engine("models/default"))       # doctest: +SKIP
    >>> text = "def f(x):\\n    ret"                               # doctest: +SKIP
    >>> encode(text) == encode.engine.tok.encode(text)              # doctest: +SKIP
    True
    """

    def __init__(self, engine: Engine) -> None:
        from ..tree.vct import VCT

        self.engine = engine
        self._new = lambda: VCT(engine)
        # a normalizer may change the text before encoding; the tree covers the bytes as typed
        usable = not getattr(engine, "is_sentencepiece", False) and engine.tok.normalize is None
        self.vct = self._new() if usable else None

    def __call__(self, text: str) -> list[int]:
        if self.vct is not None:
            try:
                tree = self._move(text.encode("utf-8"))
                if tree.complete is not None:
                    return [*map(int, tree.trunk), *map(int, tree.complete)]
            except PrefixError:  # a byte no token covers: the encoder drops it
                self.vct = self._new()
        return _encode(self.engine.tok, text)

    def _move(self, data: bytes) -> Any:
        current = self.vct.prefix
        common = len(os.path.commonprefix([current, data]))
        if common < len(current):
            self.vct.truncate(common)
        self.vct.push_bytes(data[common:])
        return self.vct.tree()


class FimCompleter:
    """Completes the middle between ``prefix`` and ``suffix`` with one model, keeping one
    KV session across calls (see `PromptedSession` for what it reuses).

    ``Completion.text`` is the middle (what goes at the cursor), in any template.
    ``Settings.method`` applies to the covered bytes: with a one-segment template ``naive``
    is FIM-naive (the prefix encoded, then generation) and ``bytesampler`` is exact; with
    separate segments nothing is covered at the cursor and the methods differ only in the
    first tokens ``bytesampler`` leaves out (those no canonical encoding starts with).
    """

    def __init__(
        self,
        model: ScoringModel,
        engine: Engine,
        template: FimTemplate,
        start_id: int | None = None,
    ) -> None:
        from .generate import Completer

        template.token_ids(engine.tok)  # fail now, not at the first keystroke
        self.template = template
        self.engine = engine
        self.completer: Completer = Completer(PromptedModel(model), engine, start_id)
        self.session: PromptedSession = self.completer.session  # type: ignore[assignment]
        self._prefix_ids = SegmentEncoder(engine)  # typing changes the prefix at its end
        self._suffix_ids: tuple[str, list[int]] = ("", [])  # and leaves the suffix alone

    def move_to(self, prefix: bytes, suffix: bytes) -> bytes:
        """Set the prompt's context for this cursor; returns the bytes the tree covers."""
        prompt = self.template.prompt(
            self.engine.tok, prefix, suffix, self._prefix_ids, self._suffix_encoding
        )
        if prompt.context != self.session.context:
            self.session.context = prompt.context
            self.completer.context_changed()
        return prompt.covered

    def positions_used(self) -> int:
        """Positions the prompt at the current cursor takes: start, context (the suffix,
        and for PSM the prefix) and the covering tree's settled tokens."""
        return len(self.session.context) + self.completer.positions_used()

    def token_count(self, text: bytes) -> int:
        """Tokens of ``text`` encoded on its own (to budget a suffix by)."""
        return len(_encode(self.engine.tok, text.decode("utf-8", "replace"))) if text else 0

    def _suffix_encoding(self, text: str) -> list[int]:
        """The suffix's tokens, encoded again only when the suffix changed."""
        if self._suffix_ids[0] != text:
            self._suffix_ids = (text, _encode(self.engine.tok, text))
        return self._suffix_ids[1]

    def complete(
        self, prefix: bytes, suffix: bytes, settings: Settings | None = None, **hooks: Any
    ) -> Completion:
        """`Completer.complete` for the middle (hooks: ``should_stop``, ``cut``, ``deadline``)."""
        from .generate import Settings

        covered = self.move_to(prefix, suffix)
        return self.completer.complete(covered, settings or Settings(), **hooks)
