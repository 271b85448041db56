"""What the worker keeps per open document: a live VCT and KV cache for one model,
or one per member of a byte-level ensemble.

A `Backend` is what a load produces (one model, or an ensemble's members); its
`document()` makes the per-document state. The worker only talks to these two
small interfaces, so a single model and an ensemble are served the same way.

Example (a fake model, no torch needed)::

    backend = SingleModel(FakeModel(engine.tok.size), engine)
    doc = backend.document()
    doc.prepare(b"def pri", "bytesampler")
    doc.complete(b"def pri", Settings(), should_stop=None, cut=None, deadline=None).text
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the engine (numpy, torch) is imported on first use, not at startup
    from midword.engine import (
        Completer,
        Completion,
        Engine,
        Ensemble,
        FimCompleter,
        FimTemplate,
        Settings,
    )

__all__ = ["Backend", "EnsembleModels", "FimDocument", "LiveDocument", "SingleModel"]

StopFn = Callable[[], bool] | None
CutFn = Callable[[str], int | None] | None
PREFILL_CHUNK = 256  # trunk tokens evaluated between two checks for a newer request
log = logging.getLogger("midword.server")


def coverable_tail(prefix: bytes, missing: frozenset[int]) -> bytes:
    """The part of ``prefix`` after its last byte that no token can hold.

    A vocabulary without a single-byte token for some bytes (SmolLM2 lacks 21) cannot
    cover a prefix that holds one. The prompt window is already a cut of the file, so the
    server cuts it once more, just after that byte, rather than give up on the buffer.

    >>> coverable_tail(b"a\x04bc", frozenset({4}))
    b'bc'
    >>> coverable_tail(b"abc", frozenset({4}))
    b'abc'
    """
    if not missing:
        return prefix
    last = max(prefix.rfind(bytes((byte,))) for byte in missing)
    return prefix[last + 1 :]


class _Coverage:
    """Cuts a document's windows after uncoverable bytes, and says so once per document."""

    def __init__(self, missing: frozenset[int]) -> None:
        self.missing = missing
        self.logged = False

    def __call__(self, prefix: bytes) -> bytes:
        tail = coverable_tail(prefix, self.missing)
        if len(tail) != len(prefix) and not self.logged:
            self.logged = True
            byte = prefix[len(prefix) - len(tail) - 1]
            log.info(
                "the window holds byte 0x%02x, which no token of the vocabulary covers: "
                "the prompt starts after it (%d bytes dropped)",
                byte,
                len(prefix) - len(tail),
            )
        return tail


class LiveDocument(Protocol):
    """One document's live state on the worker thread."""

    @property
    def inference_tokens(self) -> int: ...

    def sync(self, prefix: bytes, should_stop: StopFn = None) -> None:
        """Move the live VCT to ``prefix`` and prefill the KV cache with its settled tokens
        (in chunks: `Interrupted` between two once ``should_stop()`` says so)."""

    def prepare(self, prefix: bytes, method: str, should_stop: StopFn = None) -> None:
        """Move to ``prefix`` and score what every item of a request shares (PrefixError;
        `Interrupted` between prefill chunks once ``should_stop()`` says so)."""

    def complete(
        self, prefix: bytes, settings: Settings, should_stop: StopFn, cut: CutFn, deadline: float
    ) -> Completion: ...

    def state(self) -> dict[str, Any]:
        """The live prefix and covering tree(s), JSON-ready (tests and debugging)."""


class Backend(Protocol):
    """A loaded model (or ensemble): makes the per-document state."""

    def document(self) -> LiveDocument: ...

    def special_texts(self) -> tuple[str, ...]:
        """Text of special and added tokens: never to be inserted into a document."""


def prefill(session: Any, trunk: Sequence[int], should_stop: StopFn) -> None:
    """Evaluate the uncached part of ``trunk`` but its last chunk, `PREFILL_CHUNK` tokens
    at a time, and raise `Interrupted` once ``should_stop()`` is true: between chunks, or
    between two layers of a chunk's pass where the session can stop there (its earlier
    chunks stay cached).

    A newly opened buffer or a paste means a prefill of the whole window (about a
    thousand tokens): in one call, a request for another cursor, or a newer one for
    this buffer, would wait for all of it. The caller's next call on ``trunk``
    evaluates the rest (the KV cache keeps every chunk: the trunk only grows here).
    """
    if should_stop is None or not hasattr(session, "cached_trunk_len"):
        return
    from midword.engine import ForwardStopped, Interrupted

    chunks = range(session.cached_trunk_len(trunk) + PREFILL_CHUNK, len(trunk), PREFILL_CHUNK)
    try:
        with _stopping_inside(session, should_stop):
            for end in chunks:
                if should_stop():
                    raise Interrupted("stopped between prefill chunks")
                session.logprobs(trunk[:end], [()])
    except ForwardStopped as exc:
        raise Interrupted("stopped inside a prefill chunk") from exc
    if should_stop():
        raise Interrupted("stopped after the prefill")


def _stopping_inside(session: Any, should_stop: Callable[[], bool]) -> Any:
    """The session's stop between the layers of a pass, where it has one: a newer
    request then waits for a layer, not for a whole chunk (2.3 s at 0.5B on a CPU)."""
    stop_inside = getattr(session, "stop_inside_forward", None)
    return stop_inside(should_stop) if stop_inside is not None else contextlib.nullcontext()


def _tree_json(engine_vct: Any) -> dict[str, Any]:
    tree = json.loads(json.dumps(engine_vct.tree().to_json(), default=int))  # numpy ints
    return {"prefix": engine_vct.prefix.hex(), "tree": tree}


class SingleDocument:
    """A document served by one model: its `Completer` (ByteSampler + KV session), with
    its prompt kept within the model's positions (`ContextFit`)."""

    def __init__(self, completer: Completer, max_context: int | None = None) -> None:
        from midword.engine import ContextFit

        self.completer = completer
        self.cover = _Coverage(completer.sampler.vct.engine.missing_bytes)
        self.fit = ContextFit(max_context)

    @property
    def inference_tokens(self) -> int:
        return self.completer.session.inference_tokens

    def _move(self, prefix: bytes) -> bytes:
        """Move the live VCT to ``prefix``, cut to fit the model; returns the prompt."""
        from midword.engine import fitted

        def build(prompt: bytes) -> int:
            self.completer.sampler.reset(prompt)
            return self.completer.positions_used()

        return fitted(self.fit, self.cover(prefix), build)

    def sync(self, prefix: bytes, should_stop: StopFn = None) -> None:
        self._move(prefix)
        # Prefill the KV cache with the settled tokens while the user types, so the next
        # request only scores the tail (after a paste or a newly opened buffer this is
        # the expensive part).
        trunk = self.completer.sampler.vct.tree().trunk
        prefill(self.completer.session, trunk, should_stop)
        self.completer.session.logprobs(trunk, [()])

    def prepare(self, prefix: bytes, method: str, should_stop: StopFn = None) -> None:
        self._move(prefix)
        prefill(self.completer.session, self.completer.sampler.vct.tree().trunk, should_stop)
        if method == "bytesampler":
            self.completer.leaf_set()  # scores the tree once; every item reuses the rows

    def complete(
        self, prefix: bytes, settings: Settings, should_stop: StopFn, cut: CutFn, deadline: float
    ) -> Completion:
        prompt = self._move(prefix)  # as prepared: the same cut, nothing rebuilt
        room = self.fit.new_tokens(self.completer.positions_used())
        return self.completer.complete(
            prompt,
            _within(settings, room),
            should_stop=should_stop,
            cut=cut,
            deadline=deadline,
        )

    def complete_guided(
        self,
        prefix: bytes,
        names: Sequence[str],
        settings: Settings,
        min_mass: float,
        should_stop: StopFn,
        cut: CutFn,
        deadline: float,
    ) -> Any:
        """`complete_guided` at ``prefix`` (issue 39): the next name from ``names``, then an
        ordinary completion; the unguided one, with the reason, when guidance stands aside."""
        prompt = self._move(prefix)
        room = self.fit.new_tokens(self.completer.positions_used())
        settings = _within(settings, room)
        return _guided(
            self.completer, prompt, names, settings, min_mass, should_stop, cut, deadline
        )

    def state(self) -> dict[str, Any]:
        return {**_tree_json(self.completer.sampler.vct), "cutBytes": len(self.fit.dropped)}

    def score(
        self, prefix: bytes, continuations: list[bytes], end: str, should_stop: StopFn = None
    ) -> list[float]:
        """Exact log-probabilities of each continuation after ``prefix`` (cut to fit the
        model as a completion's prompt is), with ``end`` as `score_continuations` reads it;
        the live tree and KV cache serve it, and stay at the prompt."""
        from midword.engine import score_continuations

        prompt = self._move(prefix)
        sampler = self.completer.sampler
        scores = score_continuations(sampler, prompt, continuations, end, should_stop=should_stop)
        return [s.logprob for s in scores]


class FimDocument:
    """A document served by one model trained for fill-in-the-middle (docs/fim.md): the
    prompt holds the window's suffix, set by each request and each background sync (an
    edit elsewhere in the buffer moves the cursor, and the text after it, with it).
    The KV cache holds ``start + context + trunk``: an SPM template's context is the suffix
    alone, so typing reuses it all; a PSM template's context ends with the suffix after the
    prefix, which every keystroke evaluates again."""

    def __init__(self, completer: FimCompleter, max_context: int | None = None) -> None:
        from midword.engine import ContextFit

        self.fim = completer
        self.suffix = b""
        self.cover = _Coverage(completer.engine.missing_bytes)
        self.fit = ContextFit(max_context)
        self._kept: tuple[bytes, bytes] = (b"", b"")  # (suffix, its lines that fit)
        self._covered = b""  # the bytes the tree covers after the latest move
        # the latest move: (prefix asked, suffix, prefix used); a request moves to its
        # prefix, then each of its items asks for the same one again
        self._moved: tuple[bytes, bytes, bytes] | None = None

    @property
    def inference_tokens(self) -> int:
        return self.fim.session.inference_tokens

    def set_suffix(self, suffix: bytes) -> None:
        self.suffix = suffix

    def _prompt(self, prefix: bytes) -> bytes:
        """Move the live VCT to ``prefix`` cut to fit the model; returns the prefix used."""
        from midword.engine import fitted

        moved = self._moved
        if (
            moved is not None
            and moved[0] == prefix
            and moved[1] == self.suffix
            and self.fim.completer.sampler.prefix == self._covered
        ):
            return moved[2]  # already there: the same cut, the same context
        self._moved = None  # until this move is done (it may raise)
        suffix = self.kept_suffix()

        def build(prompt: bytes) -> int:
            self._covered = self.fim.move_to(prompt, suffix)
            self.fim.completer.sampler.reset(self._covered)
            return self.fim.positions_used()

        used = fitted(self.fit, self.cover(prefix), build)
        if self.fim.positions_used() <= self.fit.room or len(used) < 2:
            self._moved = (prefix, self.suffix, used)  # it fits: moving again changes nothing
        return used

    def kept_suffix(self) -> bytes:
        """The suffix's first lines that fit a third of the room (`suffix_lines`), counted
        once per suffix: typing leaves the suffix, and so this, unchanged."""
        from midword.engine import suffix_lines

        if self._kept[0] != self.suffix:
            kept = suffix_lines(self.fit, self.suffix, self.fim.token_count)
            self._kept = (self.suffix, kept)
        return self._kept[1]

    def _move(self, prefix: bytes, should_stop: StopFn) -> list[int]:
        """The prompt at this cursor with its settled part prefilled; returns that part."""
        self._prompt(prefix)
        settled = [*self.fim.session.context, *self.fim.completer.sampler.vct.tree().trunk]
        prefill(self.fim.session.inner, settled, should_stop)
        return settled

    def sync(self, prefix: bytes, should_stop: StopFn = None) -> None:
        self.fim.session.inner.logprobs(self._move(prefix, should_stop), [()])

    def prepare(self, prefix: bytes, method: str, should_stop: StopFn = None) -> None:
        self._move(prefix, should_stop)
        if method == "bytesampler":
            self.fim.completer.leaf_set()  # scores the tree once; every item reuses the rows

    def complete(
        self, prefix: bytes, settings: Settings, should_stop: StopFn, cut: CutFn, deadline: float
    ) -> Completion:
        self._prompt(prefix)  # as prepared: the same cut, nothing rebuilt
        room = self.fit.new_tokens(self.fim.positions_used())
        # what FimCompleter.complete does after moving to the prompt, which _prompt just did
        return self.fim.completer.complete(
            self._covered,
            _within(settings, room),
            should_stop=should_stop,
            cut=cut,
            deadline=deadline,
        )

    def complete_guided(
        self,
        prefix: bytes,
        names: Sequence[str],
        settings: Settings,
        min_mass: float,
        should_stop: StopFn,
        cut: CutFn,
        deadline: float,
    ) -> Any:
        """`SingleDocument.complete_guided` in the middle: the tree covers ``_covered``
        (the prefix, or nothing where the middle is a segment of its own), and the name
        typed so far is the one at the end of the prefix used."""
        from midword.engine import typed_identifier

        used = self._prompt(prefix)
        room = self.fit.new_tokens(self.fim.positions_used())
        settings = _within(settings, room)
        covered, typed = self._covered, typed_identifier(used)
        completer = self.fim.completer
        return _guided(
            completer, covered, names, settings, min_mass, should_stop, cut, deadline, typed
        )

    def state(self) -> dict[str, Any]:
        tree = _tree_json(self.fim.completer.sampler.vct)
        context = len(self.fim.session.context)
        fim = {"fim": self.fim.template.name, "contextTokens": context, "suffix": self.suffix.hex()}
        return {**tree, **fim, "cutBytes": len(self.fit.dropped)}


def _guided(
    completer: Completer,
    prompt: bytes,
    names: Sequence[str],
    settings: Settings,
    min_mass: float,
    should_stop: StopFn,
    cut: CutFn,
    deadline: float,
    typed: bytes | None = None,
) -> Any:
    """`complete_guided` with the unguided completion as its fallback."""
    from midword.engine import complete_guided

    return complete_guided(
        completer,
        prompt,
        names,
        settings,
        min_mass=min_mass,
        fallback=True,
        should_stop=should_stop,
        cut=cut,
        deadline=deadline,
        typed=typed,
    )


def _within(settings: Settings, room: int) -> Settings:
    """``settings`` with at most ``room`` new tokens (the same object when they fit: a
    dataclass copy per keystroke costs more than the check)."""
    if settings.max_tokens <= room:
        return settings
    return replace(settings, max_tokens=room)


def backend_name(model: Any) -> str:
    """What computes ``model``, as the status and ``midword/inspect`` name it: the model's
    own ``backend`` ("torch", "llamacpp", "vllm"; "" for a test double)."""
    return str(getattr(model, "backend", ""))


class SingleModel:
    """One model and its engine; ``fim``: its fill-in-the-middle template (None: off)."""

    def __init__(
        self,
        model: Any,
        engine: Engine,
        fim: FimTemplate | None = None,
    ) -> None:
        self.model, self.engine, self.fim = model, engine, fim
        self.backend_name = backend_name(model)  # what computes it: "torch", "llamacpp" ...
        self._specials = tuple(a.content for a in engine.tok.added)  # asked every request
        # positions the model takes (an in-process model's config; a remote engine keeps
        # its prompts within its own context itself)
        self.max_context: int | None = getattr(model, "context_length", None)

    @property
    def fim_name(self) -> str:
        """What the status says: the template's name, or "off"."""
        return self.fim.name if self.fim is not None else "off"

    def document(self) -> SingleDocument | FimDocument:
        from midword.engine import Completer

        if self.fim is not None:
            from midword.engine import FimCompleter

            completer = FimCompleter(self.model, self.engine, self.fim)
            return FimDocument(completer, self.max_context)
        return SingleDocument(Completer(self.model, self.engine), self.max_context)

    def special_texts(self) -> tuple[str, ...]:
        return self._specials


class EnsembleDocument:
    """A document served by an ensemble: one live VCT and KV cache per member.

    An ensemble samples byte by byte from the combined distribution, so every
    request runs in byte mode with byte-level transforms, whatever the method and
    mode options say (they choose how one model handles the prompt boundary).
    """

    def __init__(self, ensemble: Ensemble, max_context: int | None = None) -> None:
        from midword.engine import ContextFit

        self.ensemble = ensemble
        missing = [m.sampler.vct.engine.missing_bytes for m in ensemble.members]
        self.cover = _Coverage(frozenset().union(*missing))
        self.fit = ContextFit(max_context)  # the shortest member context

    def _move(self, prefix: bytes) -> bytes:
        """Move every member's VCT to ``prefix``, cut to fit them all; returns the prompt."""
        from midword.engine import fitted

        def build(prompt: bytes) -> int:
            self.ensemble.reset(prompt)
            return self.ensemble.positions_used()

        return fitted(self.fit, self.cover(prefix), build)

    @property
    def inference_tokens(self) -> int:
        return sum(m.sampler.session.inference_tokens for m in self.ensemble.members)

    def sync(self, prefix: bytes, should_stop: StopFn = None) -> None:
        self._move(prefix)
        for member in self.ensemble.members:
            trunk = member.sampler.vct.tree().trunk
            prefill(member.sampler.session, trunk, should_stop)
            member.sampler.session.logprobs(trunk, [()])

    def prepare(self, prefix: bytes, method: str, should_stop: StopFn = None) -> None:
        self._move(prefix)
        for member in self.ensemble.members:
            prefill(member.sampler.session, member.sampler.vct.tree().trunk, should_stop)
        self.ensemble.distribution()  # every member's tree scored once

    def complete(
        self, prefix: bytes, settings: Settings, should_stop: StopFn, cut: CutFn, deadline: float
    ) -> Completion:
        prefix = self._move(prefix)
        # a generated byte is at most one more token for any member
        room = self.fit.new_tokens(self.ensemble.positions_used())
        budget = min(settings.byte_budget, room)
        as_bytes = replace(
            settings, mode="bytes", level="byte", method="bytesampler", max_bytes=budget
        )
        try:
            return self.ensemble.complete(
                prefix, as_bytes, should_stop=should_stop, cut=cut, deadline=deadline
            )
        finally:
            # sampling pushed the generated bytes: back to the document's prefix (cheap,
            # the trees keep snapshots), so the live trees follow the document
            self.ensemble.reset(prefix)

    def state(self) -> dict[str, Any]:
        members = [_tree_json(m.sampler.vct) for m in self.ensemble.members]
        return {**members[0], "members": members}


class EnsembleModels:
    """The members of a byte-level ensemble (models with their own tokenizers)."""

    def __init__(
        self, members: Sequence[tuple[Any, Engine]], weights: Sequence[float], combine: str
    ) -> None:
        from midword.engine import check_weights

        self.members, self.combine = list(members), combine
        self.weights = check_weights(weights, len(self.members), combine)

    @property
    def backend_name(self) -> str:
        """The members' backends ("torch", or "llamacpp + torch" for a mixed ensemble)."""
        return " + ".join(sorted({backend_name(model) for model, _ in self.members}))

    def document(self) -> EnsembleDocument:
        from midword.engine import Ensemble

        ensemble = Ensemble(self.members, self.weights, self.combine)
        return EnsembleDocument(ensemble, ensemble.context_length)

    def special_texts(self) -> tuple[str, ...]:
        texts = {a.content for _, engine in self.members for a in engine.tok.added}
        return tuple(sorted(texts))
