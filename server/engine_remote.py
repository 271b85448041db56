"""The server's side of a remote engine (vLLM): a `Backend` that survives the engine.

`load_remote` (called by server/loading.py when ``engine`` is "vllm") loads the tokenizer
and covering-tree tables locally and connects to ``engineUrl``. What happens when the
engine fails, and where it is seen:

* **down at start**: the load still succeeds; the status says the engine is
  unreachable and when the next try is, and completions answer empty at once;
* **dies, is slow, or answers an error** during a completion: that completion ends
  with the error as its reason (the editor is answered, never kept waiting past the
  request timeout), the status says what happened, and a monitor thread retries with
  backoff (1 s, doubling up to 30 s or MIDWORD_ENGINE_RETRY_MAX_S) until the engine
  answers and passes the connect checks again (model served, same tokenizer), then the
  status is ready again;
* **serves another model or tokenizer**: the status says so and nothing is retried
  (the settings must change).

Each document's live covering tree and its session are kept through all of it: a
document is made once and only its requests fail while the engine is away.
The worker learns the engine's state through `RemoteModels.watch_health`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .live import CutFn, SingleDocument, StopFn
from .options import ServerOptions

if TYPE_CHECKING:
    from midword.engine import Completion, Engine, Settings, VLLMModel

__all__ = ["RemoteDocument", "RemoteModels", "load_remote"]

log = logging.getLogger("midword.server")

ProgressFn = Callable[[str, int], None]
HealthFn = Callable[[str, str], None]  # (status state, message)
BACKOFF_FIRST_S = 1.0
RETRY_MAX_ENV = "MIDWORD_ENGINE_RETRY_MAX_S"  # the longest wait between tries (default 30)


def backoff_max_s() -> float:
    """The longest wait between two tries: 30 s, or MIDWORD_ENGINE_RETRY_MAX_S.

    >>> backoff_max_s() > 0
    True
    """
    try:
        value = float(os.environ.get(RETRY_MAX_ENV, "") or 30.0)
    except ValueError:
        return 30.0
    return value if value >= BACKOFF_FIRST_S else 30.0


def load_remote(options: ServerOptions, name: str, on_progress: ProgressFn) -> RemoteModels:
    """The tokenizer of ``name`` (a local model folder or GGUF file) and a connection to
    ``options.engine_url``; an engine that is down is retried in the background, a wrong
    model or tokenizer fails the load (BackendError)."""
    from midword.engine import (
        BackendError,
        EngineError,
        EngineMismatch,
        build_tree,
        engine_for,
        load_tokenizer,
        prepare_model,
    )

    if options.ensemble:
        raise BackendError("an ensemble runs in process: set engine to local")
    if not options.engine_url:
        raise BackendError("engine is vllm but engineUrl is not set")
    on_progress("reading the tokenizer", 5)
    source = prepare_model(name, device="cpu", dtype=options.dtype)
    engine = engine_for(load_tokenizer(source))  # SentencePiece files get their own kind
    on_progress("building the covering-tree tables", 20)
    build_tree(engine, b"def main():\n")
    backend = RemoteModels(options, engine, str(source))
    on_progress(f"connecting to {options.engine_url}", 80)
    try:
        backend.connect()
    except EngineMismatch:
        raise  # another model or tokenizer: the load fails, the status says why
    except EngineError as exc:  # down, or refused (a missing API key): retried
        backend.failed(exc)
    return backend


class RemoteModels:
    """A `Backend` over a remote engine: the local engine tables, the connection, and the
    engine's health (reported through `watch_health`, retried in the background)."""

    def __init__(self, options: ServerOptions, engine: Engine, source: str) -> None:
        self.options = options
        self.engine = engine
        self.source = source
        self.model: VLLMModel | None = None
        self._specials = tuple(a.content for a in engine.tok.added)
        self._report: HealthFn | None = None
        self._state = ("ready", self._ready_message())
        self._lock = threading.Lock()
        self._retrying: threading.Thread | None = None
        self._closed = threading.Event()
        self.backend_name = "vllm"  # what the status and midword/inspect name (no model yet)

    # ------------------------------------------------------------------ Backend
    def document(self) -> RemoteDocument:
        return RemoteDocument(self)

    def special_texts(self) -> tuple[str, ...]:
        return self._specials

    def watch_health(self, report: HealthFn) -> None:
        """Report the engine's state now and at each change (from any thread)."""
        self._report = report
        report(*self._state)

    # ------------------------------------------------------------------ connection
    def connect(self) -> None:
        """Connect (or connect again) and check model, tokenizer and vocabulary."""
        from midword.engine import EngineMismatch, connect_vllm

        fresh = connect_vllm(
            self.options.engine_url,
            self.engine,
            model_name=self.options.engine_model or None,
            model_dir=self.source,
        )
        if self.model is None:
            self.model = fresh
            return
        if fresh.vocab_size != self.model.vocab_size:
            fresh.close()
            raise EngineMismatch(
                f"engine at {self.options.engine_url} came back with another vocabulary "
                f"({fresh.vocab_size}, was {self.model.vocab_size}): reload midword"
            )
        old, stats = self.model.client, self.model.client.stats
        fresh.client.stats = stats  # the counters go on across reconnections
        self.model.client, self.model.name = fresh.client, fresh.name
        self.model.max_context, self.model.window = fresh.max_context, fresh.window
        old.close()

    def model_or_raise(self) -> VLLMModel:
        from midword.engine import EngineUnavailable

        if self.model is None:
            raise EngineUnavailable(self._state[1])
        return self.model

    def failed(self, exc: Exception) -> None:
        """An engine request failed: say so, and retry in the background (not for a
        mismatch, which needs new settings)."""
        from midword.engine import EngineMismatch

        log.warning("engine: %s", exc)
        if isinstance(exc, EngineMismatch):
            self._set_state("error", f"engine refused: {exc}")
            return
        with self._lock:
            if self._retrying is not None and self._retrying.is_alive():
                return
            self._set_state("error", f"{exc}; retrying in {BACKOFF_FIRST_S:g} s")
            self._retrying = threading.Thread(
                target=self._retry, args=(str(exc),), name="midword-engine-retry", daemon=True
            )
            self._retrying.start()

    def close(self) -> None:
        self._closed.set()
        if self.model is not None:
            self.model.close()

    def _retry(self, problem: str) -> None:
        from midword.engine import BackendError, EngineMismatch

        delay = BACKOFF_FIRST_S
        while not self._closed.wait(delay):
            try:
                self.connect()
            except EngineMismatch as exc:
                self._set_state("error", f"engine refused: {exc}")
                return
            except BackendError as exc:
                problem = str(exc)
                delay = min(backoff_max_s(), delay * 2)
                self._set_state("error", f"{problem}; retrying in {delay:g} s")
                continue
            log.info("engine at %s answers again", self.options.engine_url)
            self._set_state("ready", self._ready_message())
            return

    def _ready_message(self) -> str:
        return f"ready (vllm at {self.options.engine_url})"

    def _set_state(self, state: str, message: str) -> None:
        self._state = (state, message)
        if self._report is not None:
            self._report(state, message)


class RemoteDocument:
    """One document over a remote engine: a `SingleDocument` made when the engine is
    first there, kept through faults (its covering tree is local)."""

    def __init__(self, backend: RemoteModels) -> None:
        self.backend = backend
        self._live: SingleDocument | None = None
        self._error: Exception | None = None  # the prepare of the running request failed

    @property
    def inference_tokens(self) -> int:
        return self._live.inference_tokens if self._live is not None else 0

    def _document(self) -> SingleDocument:
        if self._live is None:
            model = self.backend.model_or_raise()
            self._live = SingleDocument(model.completer(self.backend.engine))
        return self._live

    def sync(self, prefix: bytes, should_stop: StopFn = None) -> None:
        from midword.engine import EngineError

        try:
            self._document().sync(prefix, should_stop)
        except EngineError as exc:  # background work: the next request reports it
            self.backend.failed(exc)

    def prepare(self, prefix: bytes, method: str, should_stop: StopFn = None) -> None:
        """Move the live tree to ``prefix`` (nothing is scored yet); an engine failure is
        kept for `complete` to raise (the worker reports a completion's BackendError as the
        answer's reason)."""
        from midword.engine import EngineError

        self._error = None
        try:
            live = self._document()
            # only the tree moves here: the items' own leaf searches score what they need
            # (chosen ids, a greedy search's top ids), not every row of the tree
            live.completer.sampler.reset(live.cover(prefix))
        except EngineError as exc:
            self.backend.failed(exc)
            self._error = exc

    def complete(
        self, prefix: bytes, settings: Settings, should_stop: StopFn, cut: CutFn, deadline: float
    ) -> Completion:
        from midword.engine import EngineError

        if self._error is not None:
            raise self._error
        try:
            return self._document().complete(prefix, settings, should_stop, cut, deadline)
        except EngineError as exc:
            self.backend.failed(exc)
            raise

    def state(self) -> dict[str, Any]:
        if self._live is None:
            return {"prefix": "", "tree": None}
        return self._live.state()
