"""The model side of the server: one model, one worker thread, a live VCT per document.

The event loop never touches the model. `ModelHost` runs every model call on the
single thread of a `Scheduler` (server/scheduler.py: calls first, then the newest
completion request, then background syncs when nothing else waits), loads models
on a separate loader thread (server/loading.py: ``initialize`` is answered at once
and completions answer empty while loading), and keeps one live document per
recently asked-about buffer (server/live.py): for one model a `Completer`, whose
ByteSampler holds the document's live VCT and whose session holds the KV cache of
the document's prompt window; for a byte-level ensemble one of each per member.

What is dropped, and when (docs/design.md, "Scheduling"):

* a request a newer one for the same document supersedes, before it runs;
* a request whose document changed (or that was cancelled): at its next check,
  before it starts, between prefill chunks and between decode steps;
* a background sync for a document no request asked about lately (not live);
* a background sync once a request or a call waits, or a newer edit came.

Example (a fake model, no torch needed)::

    host = ModelHost(on_status=print)
    host.use(SingleModel(FakeModel(engine.tok.size), engine), "fake")
    answer = host.submit(Request(...)).result()
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine (numpy, torch) is imported on first use, not at startup
    from midword.engine import Settings

from .cleanup import clean_completion, suffix_repeat_cut
from .live import Backend, LiveDocument
from .loading import default_model_dir, load_backend, model_names, short_name, usable_device
from .memory import freeze_heap, release_memory, thaw_heap
from .options import ServerOptions
from .scheduler import Scheduler, Superseded
from .scope import Scope
from .watch import ModelWatcher

__all__ = ["Answer", "ModelHost", "Request", "Status", "Superseded", "default_model_dir"]

log = logging.getLogger("midword.server")

MAX_LIVE_DOCUMENTS = 8  # documents that keep a live VCT and KV cache (least recent dropped)
SYNC_DELAY_S = 0.05  # a change's sync waits for a pause this long (see ModelHost.sync)
TRIM_EVERY_S = 2.0  # model work's freed heap pages go back to the OS at most this often
TRIM_KEY = "midword:trim"  # the background key of that trim (not a document URI)


@dataclass
class Status:
    """What the client shows: ``state`` is "loading", "ready" or "error"."""

    state: str
    model: str
    message: str = ""
    latency_ms: float | None = None
    fim: str = ""  # the fill-in-the-middle template in use, "off", or "" (not loaded)
    backend: str = ""  # what computes the model: "llamacpp", "torch", "vllm" ("": not loaded)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "model": self.model, "message": self.message}
        if self.backend:
            out["backend"] = self.backend
        if self.latency_ms is not None:
            out["latencyMs"] = round(self.latency_ms, 1)
        if self.fim:
            out["fim"] = self.fim
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
    is_current: Callable[[], bool] = lambda: True  # False: cancelled, or the document changed
    request_id: str = ""
    version: int | None = None  # the document version the prefix was taken from
    suffix: bytes = b""  # the window after the cursor (a FIM model's prompt holds it)
    # names the editor knows at the cursor (issue 39): the completion's next name is one
    candidates: tuple[str, ...] = ()
    min_mass: float = 0.0  # the candidates' share of the probability needed to guide


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
    guided: bool = False  # the first text's next name came from the request's candidates


@dataclass
class _Held:
    """A live document and the version of the text its VCT was last moved to."""

    live: LiveDocument
    version: int | None = None


ProgressFn = Callable[[str, int], None]  # (message, percentage)


class ModelHost:
    """Owns the model: loading, the worker thread, per-document live state."""

    def __init__(
        self,
        on_status: Callable[[Status], None] = lambda s: None,
        on_progress: ProgressFn = lambda m, p: None,
    ) -> None:
        self.on_status = on_status
        self.on_progress = on_progress
        self.status = Status("loading", "", "no model loaded yet")
        self._worker = Scheduler()
        self._backend: Backend | None = None
        self._documents: OrderedDict[str, _Held] = OrderedDict()  # worker thread only
        self._lock = threading.Lock()  # guards the load generation
        self._generation = 0
        self._trimmed_at = time.monotonic()
        self._watchers: list[ModelWatcher] = []
        # Set by the transport: the client's messages wait to be read. Background syncs
        # then give way (the event loop shares the interpreter with this thread).
        self.backlog: Callable[[], bool] = lambda: False

    @property
    def worker_thread(self) -> threading.Thread:
        """The thread every model call, tree and sample runs on."""
        return self._worker.thread

    def run_on_worker(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the model's worker thread, after what is queued there; its result."""
        return self._worker.submit(fn).result()

    def forget_documents(self) -> None:
        """Drop every document's live tree and KV cache (the next request starts cold)."""
        self.run_on_worker(self._documents.clear)

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
        names = model_names(options)
        name = " + ".join(short_name(n) for n in names)
        self._watch(names, options)
        self._set_status(Status("loading", name, "loading the model"))
        thread = threading.Thread(
            target=self._load, args=(options, names, generation), name="midword-load", daemon=True
        )
        thread.start()
        return thread

    def _load(self, options: ServerOptions, names: list[str], generation: int) -> None:
        started = time.perf_counter()
        name = " + ".join(short_name(n) for n in names)
        try:
            options, note = usable_device(options)
            backend = load_backend(options, names, self.on_progress)
        except Exception as exc:  # any failure leaves the server up, answering empty
            log.error("model load failed: %s", exc)
            if generation == self._generation:
                self._set_status(Status("error", name, f"model load failed: {exc}"))
            self.on_progress("", 100)
            return
        if generation != self._generation:
            return  # a newer load was asked for meanwhile
        self._worker.submit(self.use, backend, name, note).result()
        on = getattr(backend, "backend_name", "") or "?"
        log.info("model %s ready on %s in %.1f s", name, on, time.perf_counter() - started)
        self.on_progress("", 100)

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

    def use(self, backend: Backend, name: str, note: str = "") -> None:
        """Switch to a loaded model (runs on the worker thread, between requests); ``note``
        goes into the ready status (a device fallback, say)."""
        self._backend = backend
        self._documents.clear()
        freeze_heap()  # before "ready": the collection pause belongs to the load
        fim = getattr(backend, "fim_name", "off")  # a FIM template, or "off"
        message = f"ready ({note})" if note else "ready"
        on = getattr(backend, "backend_name", "")
        self._set_status(Status("ready", name, message, fim=fim, backend=on))
        watch = getattr(backend, "watch_health", None)  # a remote engine reports its own state
        if watch is not None:
            watch(lambda state, message: self._engine_status(backend, name, state, message))

    def _engine_status(self, backend: Backend, name: str, state: str, message: str) -> None:
        """A remote engine's health (any thread): the status, while it is the one in use."""
        if self._backend is backend:
            self._set_status(Status(state, name, message))

    # ------------------------------------------------------------------ documents
    def is_live(self, uri: str) -> bool:
        """The document holds a live VCT: a request asked about it lately."""
        return uri in self._documents  # a read from any thread: a hint, checked again

    def sync(
        self, uri: str, prefix: bytes, version: int | None = None, suffix: bytes = b""
    ) -> None:
        """Bring a live document's VCT to ``prefix`` once typing pauses and nothing waits.

        Background work, coalesced per document (the latest prefix wins) and debounced by
        `SYNC_DELAY_S`: editors ask for a completion right after a change, and that
        request moves the VCT itself. The sync is for the pauses with no request (a
        paste, a client that does not ask): it prefills the KV cache. A document no
        request asked about lately is not synced at all (its first request does it).
        ``suffix``: the text after the edit, for a fill-in-the-middle model's prompt.
        """
        if self.is_live(uri):
            self._worker.background(
                uri, self._sync, uri, prefix, version, suffix, delay=SYNC_DELAY_S
            )

    def _sync(
        self,
        uri: str,
        prefix: bytes,
        version: int | None,
        suffix: bytes = b"",
        force: bool = False,
    ) -> None:
        from midword.engine import Interrupted, PrefixError

        if not self.ready:
            return
        self._trim_later()
        held = self._documents.get(uri)  # not moved up the LRU: nobody asked for it
        if held is None or (not force and self._worker.has_request(uri)):
            return  # not live any more, or a request for it moves the VCT itself

        def stale() -> bool:  # other work waits, a newer edit was posted or is coming
            worker = self._worker
            return worker.busy() or worker.has_background(uri) or self.backlog() or worker.closed

        if not force and stale():
            return

        try:
            held.version = version
            _set_suffix(held.live, suffix)
            held.live.sync(prefix, None if force else stale)
        except Interrupted:
            log.debug("sync of %s stopped: other work waits", uri)
        except PrefixError as exc:
            log.debug("sync of %s skipped: %s", uri, exc)

    def close(self, uri: str) -> Future[None]:
        """Free the document's VCT and KV cache, and give the freed memory back to the OS."""
        self._worker.take_background(uri)
        return self._worker.submit(self._drop, uri)

    def _drop(self, uri: str) -> None:
        self._documents.pop(uri, None)
        self._trim()

    def _trim_later(self) -> None:
        """Return the heap pages model work freed to the OS, once nothing waits.

        A forward pass frees blocks of many sizes (activations, score rows, a grown KV
        cache), and glibc keeps freed pages in the worker thread's own arena: in the busy
        editor soak that arena grew from 20 to 65 MB in three minutes, half of it free
        blocks, while the event loop's stayed at 18 MB, and one ``malloc_trim`` gave back
        23 MB of resident memory. So model work queues a trim as background work (it
        waits for a gap between requests) at most every `TRIM_EVERY_S`: about a millisecond.
        """
        if time.monotonic() - self._trimmed_at >= TRIM_EVERY_S and not self._worker.closed:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._worker.background(TRIM_KEY, self._trim)

    def _trim(self) -> None:
        self._trimmed_at = time.monotonic()
        release_memory()

    def _document(self, uri: str) -> _Held:
        held = self._documents.get(uri)
        if held is None:
            assert self._backend is not None  # callers check `ready`
            held = self._documents[uri] = _Held(self._backend.document())
            while len(self._documents) > MAX_LIVE_DOCUMENTS:
                self._documents.popitem(last=False)
        self._documents.move_to_end(uri)
        return held

    def live_documents(self) -> Future[int]:
        """How many documents hold a live VCT and KV cache."""
        return self._worker.submit(len, self._documents)

    def live_state(
        self, uri: str, latest: tuple[bytes, int | None, bytes] | None = None
    ) -> Future[dict[str, Any] | None]:
        """A live document's VCT: prefix, tree and the document version they belong to,
        first brought to ``latest`` (prefix, version, suffix) when given (tests, debugging).
        None for a document with no live VCT."""

        def read() -> dict[str, Any] | None:
            self._worker.take_background(uri)  # a delayed sync: done now, or superseded
            held = self._documents.get(uri)
            if held is None:
                return None
            if latest is not None and (held.version != latest[1] or latest[1] is None):
                self._sync(uri, *latest, force=True)
            return {**held.live.state(), "version": held.version}

        return self._worker.submit(read)

    def score(
        self, uri: str, prefix: bytes, continuations: list[bytes], end: str
    ) -> Future[list[float]]:
        """`midword/score` on the worker: exact log-probabilities of ``continuations`` after
        ``prefix``, by the document's live tree (ValueError where the model served cannot
        score them: an ensemble, a fill-in-the-middle prompt or a remote engine)."""

        def run() -> list[float]:
            if not self.ready:
                raise ValueError(self.status.message)
            self._worker.take_background(uri)
            live = self._document(uri).live
            score = getattr(live, "score", None)
            if score is None:
                raise ValueError("scoring candidates needs a single local model without FIM")
            return score(prefix, continuations, end)

        return self._worker.submit(run)

    # ------------------------------------------------------------------ completions
    def submit(self, request: Request) -> Future[Answer]:
        """Queue a completion; a waiting request for the same document is superseded
        (its future raises `Superseded`), a running one stops at its next check."""
        return self._worker.request(request.uri, self._complete, request)

    def _complete(self, req: Request) -> Answer:
        from midword.engine import Interrupted, PrefixError

        if not self.ready:
            return Answer(reason=self.status.message)
        self._trim_later()

        def stop() -> bool:  # cancelled, the document changed, a newer request waits, exit
            worker = self._worker
            return not req.is_current() or worker.has_request(req.uri) or worker.closed

        if stop():
            raise Interrupted("superseded before it started")
        started = time.perf_counter()
        held = self._document(req.uri)
        self._worker.take_background(req.uri)  # this request syncs the VCT itself
        tokens_before = held.live.inference_tokens
        fim = _set_suffix(held.live, req.suffix)
        try:
            held.version = req.version
            held.live.prepare(req.prefix, req.settings[0].method, stop)
        except PrefixError as exc:
            return Answer(reason=f"cannot complete here: {exc}")
        answer = Answer(sync_ms=_ms(started))
        answer.tree_tokens = held.live.inference_tokens - tokens_before
        # The budget bounds generation, not the prompt's first prefill: a cold buffer must
        # still get an answer (later keystrokes reuse the cache and are fast).
        deadline = time.perf_counter() + req.budget
        cut = suffix_repeat_cut(req.scope.cut, req.suffix) if fim else req.scope.cut
        self._sample_items(held.live, req, answer, deadline, stop, cut)
        answer.tokens = held.live.inference_tokens - tokens_before
        answer.model_ms = _ms(started) - answer.sync_ms - answer.post_ms
        return answer

    def _sample_items(
        self,
        document: LiveDocument,
        req: Request,
        answer: Answer,
        deadline: float,
        stop: Callable[[], bool],
        cut: Callable[[str], int | None],
    ) -> None:
        from midword.engine import BackendError, PrefixError

        for settings in req.settings:
            if len(answer.texts) >= req.max_items or time.perf_counter() >= deadline:
                break
            try:
                result = self._one_item(document, req, answer, settings, stop, cut, deadline)
            except BackendError as exc:
                log.warning("completion failed: %s", exc)
                answer.reason = str(exc)
                return
            except PrefixError as exc:  # an answer, not an internal error for the client
                answer.reason = f"cannot complete here: {exc}"
                return
            post = time.perf_counter()
            text = clean_completion(
                _confident(result, settings, answer), req.scope, req.indent_unit
            )
            answer.post_ms += _ms(post)
            if answer.leaf_prob is None and result.leaf_logprob is not None:
                answer.leaf_prob = float(_exp(result.leaf_logprob))
            if text and text not in answer.texts:
                answer.texts.append(text)
        if not answer.texts and not answer.reason:
            answer.reason = "the model suggests nothing here"

    def _one_item(
        self,
        document: LiveDocument,
        req: Request,
        answer: Answer,
        settings: Settings,
        stop: Callable[[], bool],
        cut: Callable[[str], int | None],
        deadline: float,
    ) -> Any:
        """One completion: guided by the request's candidates where it has some and the
        document can score them exactly (a single local model, bytesampler), else plain."""
        guide = getattr(document, "complete_guided", None)
        if req.candidates and guide is None:
            log.debug("%s: not guided: an ensemble or a remote engine", req.request_id)
        elif req.candidates and settings.method != "bytesampler":
            log.debug("%s: not guided: method %s is not exact", req.request_id, settings.method)
        if not req.candidates or guide is None or settings.method != "bytesampler":
            return document.complete(
                req.prefix, settings, should_stop=stop, cut=cut, deadline=deadline
            )
        guided = guide(req.prefix, req.candidates, settings, req.min_mass, stop, cut, deadline)
        if guided.guided:
            log.debug(
                "%s: guided: %r (p=%.3g)", req.request_id, guided.chosen, _exp(guided.logprob)
            )
        else:
            log.debug("%s: not guided: %s", req.request_id, guided.reason)
        if not answer.texts:
            answer.guided = guided.guided
        return guided.completion

    def shutdown(self) -> None:
        for watcher in self._watchers:
            watcher.stop()
        self._worker.shutdown()
        thaw_heap()


def _confident(result: Any, settings: Settings, answer: Answer) -> str:
    """The completion's text up to where its exact probability falls below the
    ``minConfidence`` threshold (engine/sample/confidence.py: at a word or line boundary).
    Nothing left, when the first word is already below it: the answer's reason says so
    (the server stays silent, logged at debug level)."""
    from midword.engine import confidence_cut

    end = confidence_cut(result.data, result.spans, settings.min_logprob)
    if end >= len(result.data):
        return result.text
    kept = result.data[:end].decode("utf-8", errors="ignore")
    if not kept.strip():
        answer.reason = (
            f"silent: the first word's probability is below minConfidence "
            f"({_exp(settings.min_logprob):.3g})"
        )
        log.debug("%s", answer.reason)
    return kept


def _set_suffix(document: LiveDocument, suffix: bytes) -> bool:
    """Give a fill-in-the-middle document the text after the cursor; False for others."""
    set_suffix = getattr(document, "set_suffix", None)
    if set_suffix is None:
        return False
    set_suffix(suffix)
    return True


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def _exp(logprob: float) -> float:
    import math

    return math.exp(logprob)
