"""The model side of the server: one model, one worker thread, a live VCT per document.

The event loop never touches the model. `ModelHost` runs every model call on a
single worker thread (requests are serialized, so one model serves every
document), loads models on a separate loader thread (so ``initialize`` is
answered at once and completions answer empty while loading), and keeps one
live document per open buffer (server/live.py): for one model a `Completer`,
whose ByteSampler holds the document's live VCT and whose session holds the KV
cache of the document's prompt window; for a byte-level ensemble one of each per
member.

Example (a fake model, no torch needed)::

    host = ModelHost(on_status=print)
    host.use(SingleModel(FakeModel(engine.tok.size), engine), "fake")
    answer = host.submit(Request(...)).result()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine (numpy, torch) is imported on first use, not at startup
    from midword.engine.generate import Settings
    from midword.engine.vct import Engine

from .live import Backend, EnsembleModels, LiveDocument, SingleModel
from .memory import freeze_heap, release_memory, thaw_heap
from .options import ServerOptions
from .scope import Scope, finalize

__all__ = ["Answer", "ModelHost", "Request", "Status", "default_model_dir"]

log = logging.getLogger("midword.server")

MAX_LIVE_DOCUMENTS = 8  # documents that keep a live VCT and KV cache (least recent dropped)
WARMUP_PREFIX = b'def main():\n    print("hello")\n'
SYNC_DELAY_S = 0.05  # a change's sync waits this long for a completion request (see sync)


def default_model_dir() -> Path:
    """The model shipped with midword (``models/default`` in the repository)."""
    return Path(__file__).resolve().parent.parent / "models" / "default"


@dataclass
class Status:
    """What the client shows: ``state`` is "loading", "ready" or "error"."""

    state: str
    model: str
    message: str = ""
    latency_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "model": self.model, "message": self.message}
        if self.latency_ms is not None:
            out["latencyMs"] = round(self.latency_ms, 1)
        return out


@dataclass
class Request:
    """One completion job: the window prefix, its scope, and one Settings per item tried."""

    uri: str
    prefix: bytes
    scope: Scope
    indent_unit: str
    settings: list[Settings]
    max_items: int
    budget: float  # seconds for generating items, counted once the covering tree is scored
    is_current: Callable[[], bool] = lambda: True  # False: cancelled or superseded
    request_id: str = ""


@dataclass
class Answer:
    """Distinct completion texts, and where the time went."""

    texts: list[str] = field(default_factory=list)
    reason: str = ""  # why there is no text, when there is none
    sync_ms: float = 0.0  # VCT update and tree build
    model_ms: float = 0.0
    post_ms: float = 0.0
    leaf_prob: float | None = None
    tree_tokens: int = 0  # tokens the model evaluated to score the tree (new trunk + tail)
    tokens: int = 0  # all tokens the model evaluated for this request


ProgressFn = Callable[[str, int], None]  # (message, percentage)


class ModelHost:
    """Owns the model: loading, the worker thread, per-document completers."""

    def __init__(
        self,
        on_status: Callable[[Status], None] = lambda s: None,
        on_progress: ProgressFn = lambda m, p: None,
    ) -> None:
        self.on_status = on_status
        self.on_progress = on_progress
        self.status = Status("loading", "", "no model loaded yet")
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="midword-model")
        self._backend: Backend | None = None
        self._documents: OrderedDict[str, LiveDocument] = OrderedDict()
        self._pending_sync: dict[str, bytes] = {}
        self._submitted: dict[int, Request] = {}  # by id: unfinished requests (_request_coming)
        self._lock = threading.Lock()  # guards _pending_sync, _submitted, the load generation
        self._generation = 0
        self._watchers: list[ModelWatcher] = []

    # ------------------------------------------------------------------ status
    @property
    def ready(self) -> bool:
        return self.status.state == "ready"

    def special_texts(self) -> tuple[str, ...]:
        """Text of the loaded tokenizers' special and added tokens (never inserted)."""
        return self._backend.special_texts() if self._backend is not None else ()

    def _set_status(self, status: Status) -> None:
        self.status = status
        self.on_status(status)

    # ------------------------------------------------------------------ loading
    def load(self, options: ServerOptions) -> threading.Thread:
        """Load the configured model on a background thread; the server stays responsive.

        A local model directory is watched: when its files change, the model is loaded again.
        """
        with self._lock:
            self._generation += 1
            generation = self._generation
        names = list(options.ensemble) or [options.model or str(default_model_dir())]
        name = " + ".join(_short(n) for n in names)
        self._watch(names, options)
        self._set_status(Status("loading", name, "loading the model"))
        thread = threading.Thread(
            target=self._load, args=(options, names, generation), name="midword-load", daemon=True
        )
        thread.start()
        return thread

    def _load(self, options: ServerOptions, names: list[str], generation: int) -> None:
        started = time.perf_counter()
        name = " + ".join(_short(n) for n in names)
        try:
            backend = self._load_backend(options, names)
        except Exception as exc:  # any failure leaves the server up, answering empty
            log.error("model load failed: %s", exc)
            if generation == self._generation:
                self._set_status(Status("error", name, f"model load failed: {exc}"))
            self.on_progress("", 100)
            return
        if generation != self._generation:
            return  # a newer load was asked for meanwhile
        self._worker.submit(self.use, backend, name).result()
        log.info("model %s ready in %.1f s", name, time.perf_counter() - started)
        self.on_progress("", 100)

    def _load_backend(self, options: ServerOptions, names: list[str]) -> Backend:
        """One model, or the members of the configured ensemble (weights checked first)."""
        if not options.ensemble:
            return SingleModel(*self._load_parts(options, names[0], 0, 1))
        from midword.engine.ensemble import check_weights

        weights = options.ensemble_weights or (1.0,) * len(names)
        check_weights(weights, len(names), options.ensemble_combine)  # before anything loads
        members = [self._load_parts(options, n, k, len(names)) for k, n in enumerate(names)]
        return EnsembleModels(members, weights, options.ensemble_combine)

    def _load_parts(self, options: ServerOptions, name: str, k: int, n: int) -> tuple[Any, Engine]:
        """Model ``k`` of ``n``: its tokenizer, covering-tree tables and weights."""
        from midword.engine.backend import BackendError
        from midword.engine.generate import Completer, Settings
        from midword.engine.hf_backend import load_hf_model
        from midword.engine.tokenizer import load_tokenizer
        from midword.engine.vct import Engine

        def progress(message: str, percent: int) -> None:
            which = f" ({k + 1}/{n}: {_short(name)})" if n > 1 else ""
            self.on_progress(message + which, (100 * k + percent) // n)

        progress("reading the tokenizer", 5)
        engine = Engine(load_tokenizer(name))
        progress("building the covering-tree tables", 20)
        _warm_engine(engine)
        progress("loading the model weights", 50)
        _quiet_transformers()
        model = load_hf_model(name, device=options.device, dtype=options.dtype)
        if model.vocab_size < engine.tok.size:
            raise BackendError(
                f"the model's vocabulary ({model.vocab_size}) is smaller than the "
                f"tokenizer's ({engine.tok.size})"
            )
        if model.device.type == "cpu":
            _limit_cpu_threads()
        progress("warming up", 90)
        Completer(model, engine).complete(WARMUP_PREFIX, Settings(max_tokens=2))
        return model, engine

    def _watch(self, names: list[str], options: ServerOptions) -> None:
        for watcher in self._watchers:
            watcher.stop()
        self._watchers = [
            ModelWatcher(Path(n), lambda: self._reload_changed(options))
            for n in names
            if Path(n).is_dir()
        ]
        for watcher in self._watchers:
            watcher.start()

    def _reload_changed(self, options: ServerOptions) -> None:
        log.info("the model's files changed: loading it again")
        self.load(options)

    def use(self, backend: Backend, name: str) -> None:
        """Switch to a loaded model (runs on the worker thread, between requests)."""
        self._backend = backend
        self._documents.clear()
        freeze_heap()  # before "ready": the collection pause belongs to the load
        self._set_status(Status("ready", name, "ready"))

    # ------------------------------------------------------------------ documents
    def sync(self, uri: str, prefix: bytes) -> None:
        """Bring the document's live VCT to ``prefix`` soon (coalesced: the latest wins).

        Called from an event loop, the sync waits `SYNC_DELAY_S` first: editors ask for a
        completion right after each change, and that request syncs the VCT itself, so a
        sync queued at once would only wake the worker to find it has nothing to do (and
        contend with the event loop for the GIL on every keystroke). It runs when typing
        pauses without a request (a paste, a client that does not ask), to prefill the KV
        cache. Called from anywhere else, it is queued at once.
        """
        with self._lock:
            scheduled = uri in self._pending_sync
            self._pending_sync[uri] = prefix
        if scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._worker.submit(self._sync_pending, uri)
        else:
            loop.call_later(SYNC_DELAY_S, self._sync_if_pending, uri)

    def _sync_if_pending(self, uri: str) -> None:
        """Queue the delayed sync unless a request took it over meanwhile."""
        with self._lock:
            pending = uri in self._pending_sync
        if pending:
            with contextlib.suppress(RuntimeError):  # the host shut down meanwhile
                self._worker.submit(self._sync_pending, uri)

    def _sync_pending(self, uri: str) -> None:
        from midword.engine.vct import PrefixError

        with self._lock:
            prefix = self._pending_sync.pop(uri, None)
        if prefix is None or not self.ready or self._request_coming(uri):
            return
        try:
            self._document(uri).sync(prefix)
        except PrefixError as exc:
            log.debug("sync of %s skipped: %s", uri, exc)
        except Exception as exc:  # a model error here resurfaces on the next request
            log.warning("sync of %s failed: %s", uri, exc)

    def close(self, uri: str) -> Future[None]:
        """Free the document's VCT and KV cache, and give the freed memory back to the OS."""
        return self._worker.submit(self._drop, uri)

    def _drop(self, uri: str) -> None:
        self._documents.pop(uri, None)
        release_memory()

    def _document(self, uri: str) -> LiveDocument:
        document = self._documents.get(uri)
        if document is None:
            assert self._backend is not None  # callers check `ready`
            document = self._backend.document()
            self._documents[uri] = document
            while len(self._documents) > MAX_LIVE_DOCUMENTS:
                self._documents.popitem(last=False)
        self._documents.move_to_end(uri)
        return document

    def live_documents(self) -> Future[int]:
        """How many documents hold a live VCT and KV cache."""
        return self._worker.submit(len, self._documents)

    def live_state(self, uri: str) -> Future[dict[str, Any] | None]:
        """The document's live VCT: prefix and tree (for tests and debugging)."""

        def read() -> dict[str, Any] | None:
            self._sync_pending(uri)  # a delayed sync still waiting: the state after it
            document = self._documents.get(uri)
            return document.state() if document is not None else None

        return self._worker.submit(read)

    # ------------------------------------------------------------------ completions
    def submit(self, request: Request) -> Future[Answer]:
        with self._lock:
            self._submitted[id(request)] = request
        future = self._worker.submit(self._complete, request)
        future.add_done_callback(lambda _: self._forget_request(request))  # cancelled too
        return future

    def _forget_request(self, request: Request) -> None:
        with self._lock:
            self._submitted.pop(id(request), None)

    def _request_coming(self, uri: str) -> bool:
        """A current request for ``uri`` waits behind this task (one worker thread: an
        unfinished request is a queued one). It moves the live VCT to its own prefix and
        scores it in one forward pass, so a sync now would only add a pass of its own:
        editors ask for a completion right after each change."""
        with self._lock:
            return any(r.uri == uri and r.is_current() for r in self._submitted.values())

    def _complete(self, req: Request) -> Answer:
        from midword.engine.generate import Interrupted
        from midword.engine.vct import PrefixError

        if not self.ready:
            return Answer(reason=self.status.message)
        if not req.is_current():
            raise Interrupted("superseded before it started")
        started = time.perf_counter()
        document = self._document(req.uri)
        with self._lock:
            self._pending_sync.pop(req.uri, None)  # this request syncs the VCT itself
        tokens_before = document.inference_tokens
        try:
            document.prepare(req.prefix, req.settings[0].method)
        except PrefixError as exc:
            return Answer(reason=f"cannot complete here: {exc}")
        answer = Answer(sync_ms=_ms(started))
        answer.tree_tokens = document.inference_tokens - tokens_before
        # The budget bounds generation, not the prompt's first prefill: a cold buffer must
        # still get an answer (later keystrokes reuse the cache and are fast).
        deadline = time.perf_counter() + req.budget
        self._sample_items(document, req, answer, deadline)
        answer.tokens = document.inference_tokens - tokens_before
        answer.model_ms = _ms(started) - answer.sync_ms - answer.post_ms
        return answer

    def _sample_items(
        self, document: LiveDocument, req: Request, answer: Answer, deadline: float
    ) -> None:
        from midword.engine.backend import BackendError

        for settings in req.settings:
            if len(answer.texts) >= req.max_items or time.perf_counter() >= deadline:
                break
            try:
                result = document.complete(
                    req.prefix,
                    settings,
                    should_stop=lambda: not req.is_current(),
                    cut=req.scope.cut,
                    deadline=deadline,
                )
            except BackendError as exc:
                log.warning("completion failed: %s", exc)
                answer.reason = str(exc)
                return
            post = time.perf_counter()
            text = finalize(result.text, req.scope, req.indent_unit)
            answer.post_ms += _ms(post)
            if answer.leaf_prob is None and result.leaf_logprob is not None:
                answer.leaf_prob = float(_exp(result.leaf_logprob))
            if text and text not in answer.texts:
                answer.texts.append(text)
        if not answer.texts and not answer.reason:
            answer.reason = "the model suggests nothing here"

    def shutdown(self) -> None:
        for watcher in self._watchers:
            watcher.stop()
        self._worker.shutdown(wait=False, cancel_futures=True)
        thaw_heap()


class ModelWatcher:
    """Calls ``on_change`` when files in a model directory change (watchfiles, debounced)."""

    def __init__(self, path: Path, on_change: Callable[[], None]) -> None:
        self.path = path
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="midword-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            from watchfiles import watch
        except ImportError:
            log.info("watchfiles is not installed: model changes are not watched")
            return
        try:
            for _changes in watch(self.path, stop_event=self._stop, debounce=1500):
                if self._stop.is_set():
                    return
                self.on_change()
                return  # the reload starts a new watcher
        except Exception as exc:  # e.g. the folder was removed: keep serving
            log.warning("stopped watching %s: %s", self.path, exc)


def _warm_engine(engine: Engine) -> None:
    """Build the engine's per-token tables now (cached on disk) rather than on first use."""
    from midword.engine.vct import build_tree

    build_tree(engine, WARMUP_PREFIX)


def _limit_cpu_threads() -> None:
    """Half the cores for torch (MIDWORD_THREADS overrides): the editor and the rest of the
    machine keep the others, and an oversubscribed OpenMP pool is many times slower
    (measured here: a 1-token step took 16 ms on 1 thread, 194 ms on 2 under load)."""
    import torch

    wanted = os.environ.get("MIDWORD_THREADS", "")
    threads = int(wanted) if wanted.isdigit() and int(wanted) > 0 else (os.cpu_count() or 2) // 2
    torch.set_num_threads(max(1, threads))


def _quiet_transformers() -> None:
    """No progress bars or advisory warnings from transformers (stderr noise in the log)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def _short(name: str) -> str:
    path = Path(name)
    return path.name if path.name and path.exists() else name


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def _exp(logprob: float) -> float:
    import math

    return math.exp(logprob)
