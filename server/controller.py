"""Server state and behaviour, free of LSP types: documents, options, completions.

The pygls handlers in ``server.py`` only convert types and delegate here, so
this module is tested without a transport, and the transport tests cover the
protocol. Everything that touches the model goes through `ModelHost` (worker
thread); coroutines here await it without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from midword.engine import Settings

from .cleanup import cut_repeats, following_lines
from .context_files import ContextFiles
from .debounce import DocumentTyping
from .document import Cursor, Document, Range
from .options import ServerOptions, needs_reload, parse_options
from .positions import from_index
from .reuse import TypedThrough
from .scope import IndentCounts, Scope, identifier_split, scope_for, suffix_window
from .where import blocked_reason
from .worker import Answer, ModelHost, Request, Status, Superseded

__all__ = ["Controller", "EditItem", "InlineItem"]

log = logging.getLogger("midword.server")

INVOKED_TEMPERATURE = 0.8  # extra items of an Invoked request are samples at least this warm
INDENT_SAMPLE_LINES = 200


@dataclass(frozen=True)
class InlineItem:
    """Text to insert at the cursor (line, character in the negotiated encoding)."""

    text: str
    line: int
    character: int
    # the acceptance log's tags (server/acceptance.py): what made it, where the cursor was
    method: str = ""
    context: str = ""  # "inside_word" or "boundary"


@dataclass(frozen=True)
class EditItem:
    """A completion-list item: replace [start, cursor) on ``line`` with ``new_text``."""

    label: str
    new_text: str
    line: int
    start: int
    end: int
    detail: str
    # the acceptance log's tags, as InlineItem's
    method: str = ""
    context: str = ""
    typed: str = ""  # the name typed before the cursor: [start, end) holds it

    def added(self) -> tuple[str, int]:
        """What accepting the item adds to the line, and the column where that starts:
        ``new_text`` less the typed name it begins with, at the cursor (``end``). So the
        acceptance log counts and follows the same text an inline item at the cursor
        would insert, not the characters the user had typed. (Should ``new_text`` not
        begin with them, all of it, at ``start``.)

        >>> EditItem("parser", "parser", 0, 4, 7, "", typed="par").added()
        ('ser', 7)
        """
        if self.new_text.startswith(self.typed):
            return self.new_text[len(self.typed) :], self.end
        return self.new_text, self.start


class Controller:
    """Documents, options and the model host of one server."""

    def __init__(
        self,
        on_status: Callable[[Status], None] = lambda s: None,
        on_progress: Callable[[str, int], None] = lambda m, p: None,
        on_problem: Callable[[str], None] = lambda m: None,
    ) -> None:
        self.documents: dict[str, Document] = {}
        self.options = ServerOptions()
        self.encoding = "utf-16"
        self.on_problem = on_problem
        self.host = ModelHost(on_status=on_status, on_progress=on_progress)
        self._ids = itertools.count(1)
        self._indents: dict[str, _IndentMemo] = {}  # uri -> tallies of the lines above
        self._jobs: dict[str, _Job] = {}  # uri -> its latest request on the worker
        # Set by the transport: returns once the client's messages received so far are
        # applied. A request waits for it before it goes to the worker: when the server
        # falls behind, edits that already arrived would make it stale, and the worker's
        # time is better left to the event loop catching up.
        self.settle: Callable[[], Awaitable[None]] = _settled
        self._settings: tuple[ServerOptions, int, list[Settings]] | None = None
        self._typing = DocumentTyping()  # the debounce of automatic requests (debounce.py)
        self._typed = TypedThrough()  # completions being typed through (reuse.py)
        self._context = ContextFiles()  # other files' snippets in the prompt (context_files.py)
        self._asks: dict[str, int] = {}  # uri -> number of its latest inline request
        # what became of inline requests (midword/stats): sent to the model, answered from
        # a completion typed through, dropped while they waited for typing to pause
        self.counts = {"modelRequests": 0, "reusedAnswers": 0, "debounceDropped": 0}

    # ------------------------------------------------------------------ options
    def configure(self, raw: object, *, initial: bool = False) -> list[str]:
        """Apply options; reloads the model when a reload option changed (or at start)."""
        new, problems = parse_options(raw, None if initial else self.options)
        for problem in problems:
            log.warning("%s", problem)
            self.on_problem(problem)
        old, self.options = self.options, new
        if old != new:
            self._typed.forget()  # shown under other options (or another model)
        if (old.languages, old.exclude_files) != (new.languages, new.exclude_files):
            self._drop_blocked()
        if isinstance(raw, dict) and "logLevel" in raw.get("midword", raw):
            _set_log_level(new.log_level)  # else the command line's --log-level stays
        if initial or needs_reload(old, new):
            self.host.load(new)
        return problems

    def blocked(self, doc: Document) -> str | None:
        """Why ``doc`` gets no completions under the options (server/where.py); None when
        it gets them."""
        o = self.options
        return blocked_reason(doc.uri, doc.language_id, o.languages, o.exclude_files)

    def _drop_blocked(self) -> None:
        """Free the live VCTs of documents the options now leave out (nothing of theirs
        stays in the model's memory)."""
        for uri, doc in self.documents.items():
            if self.host.is_live(uri) and self.blocked(doc) is not None:
                self.host.close(uri)

    # ------------------------------------------------------------------ documents
    def open(self, uri: str, text: str, version: int, language_id: str = "") -> None:
        self.documents[uri] = Document(uri, text, version, language_id)
        self._context.touched(uri)

    def change(self, uri: str, version: int, changes: list[tuple[Range | None, str]]) -> None:
        doc = self.documents.get(uri)
        if doc is None:
            log.warning("didChange for a document that is not open: %s", uri)
            return
        for rng, text in changes:
            if rng is None:
                doc.replace_all(text, version)
                self._typed.forget(uri)
                continue
            at = _insertion_point(doc, rng, self.encoding)
            doc.apply_change(rng, text, self.encoding)
            assert doc.last_edit is not None  # apply_change sets it
            self._typed.edited(uri, doc.edits, at, text, doc.last_edit)
        doc.version = version
        self._typing.keystroke(uri, time.monotonic())
        self._context.touched(uri)
        if doc.last_edit is not None and self.host.ready and self.host.is_live(uri):
            edit = doc.last_edit
            self.host.sync(uri, self._prompt(doc, edit), version, self._suffix(doc, edit))

    def close(self, uri: str) -> None:
        self.documents.pop(uri, None)
        self._indents.pop(uri, None)
        self._jobs.pop(uri, None)
        self._asks.pop(uri, None)
        self._typed.forget(uri)
        self._typing.forget(uri)
        self._context.closed(uri)
        self.host.close(uri)

    # ------------------------------------------------------------------ completions
    async def inline(
        self, uri: str, line: int, character: int, invoked: bool, candidates: Sequence[str] = ()
    ) -> list[InlineItem]:
        """Inline completions at a position: one item (Automatic) or up to maxItems (Invoked);
        ``candidates`` are names the editor knows there (the next name is one of them when
        the model gives them enough probability: engine/sample/guided.py).

        Empty when the document changed before the answer was ready: the answer and its
        position belong to the version the request was made against (see `_Asked`).
        """
        doc = self.documents.get(uri)
        if doc is None:
            log.warning("inline completion for a document that is not open: %s", uri)
            return []
        if (why := self.blocked(doc)) is not None:
            log.debug("no completion for %s: %s", uri, why)
            return []
        asked = _Asked.at(doc, doc.cursor(line, character, self.encoding))
        ask = self._asks[uri] = self._asks.get(uri, 0) + 1
        if not invoked and (rest := self._typed.rest(uri, asked.edits, asked.cursor)):
            self.counts["reusedAnswers"] += 1  # typed through the shown completion
            return self._items(asked, [rest])
        if not invoked and not await self._debounced(asked, ask):
            return []
        scope = self._scope(asked, self.options.multiline)
        items = self.options.max_items if invoked else 1
        answer = await self._run(asked, scope, items, tuple(candidates))
        if not self._still(asked):
            return []
        found = self._items(asked, _without_repeats(asked, answer.texts), answer.guided)
        self._typed.shown(uri, asked.edits, asked.cursor, found[0].text if found else "")
        return found

    def _items(self, asked: _Asked, texts: list[str], guided: bool = False) -> list[InlineItem]:
        column = from_index(asked.body, asked.cursor.index, self.encoding)
        method, context = item_tags(self.options, asked.line_prefix)
        methods = [method] * len(texts)
        if guided and texts:  # only the first text is guided (the rest: invoked extra samples)
            from midword.engine import GUIDED_METHOD  # loaded with the model by now

            methods[0] = GUIDED_METHOD
        return [
            InlineItem(t, asked.cursor.line, column, m, context)
            for t, m in zip(texts, methods, strict=True)
        ]

    async def _debounced(self, asked: _Asked, ask: int) -> bool:
        """Wait for typing to pause (server/debounce.py); False when the request was
        superseded meanwhile (a newer request for the buffer, or an edit of it)."""
        wait = self._typing.wait_s(asked.doc.uri, time.monotonic(), self.options.debounce_ms)
        if wait <= 0.0:
            return True
        await asyncio.sleep(wait)
        if self._asks.get(asked.doc.uri) == ask and asked.current_in(self.documents):
            return True
        self.counts["debounceDropped"] += 1
        log.debug("superseded while it waited %.0f ms for typing to pause", wait * 1e3)
        return False

    async def completion_list(
        self, uri: str, line: int, character: int, candidates: Sequence[str] = ()
    ) -> list[EditItem]:
        """Completion-list fallback: the completed identifier, then the rest of the line
        (empty when the document changed meanwhile, as for `inline`; ``candidates`` as
        there)."""
        doc = self.documents.get(uri)
        if doc is None:
            return []
        if (why := self.blocked(doc)) is not None:
            log.debug("no completion for %s: %s", uri, why)
            return []
        asked = _Asked.at(doc, doc.cursor(line, character, self.encoding))
        scope = self._scope(asked, "never")
        answer = await self._run(asked, scope, 1, tuple(candidates))
        if not answer.texts or not self._still(asked):
            return []
        method, context = item_tags(self.options, asked.line_prefix)
        if answer.guided:  # both items come from the one (guided) text
            from midword.engine import GUIDED_METHOD  # loaded with the model by now

            method = GUIDED_METHOD
        return _edit_items(asked, answer.texts[0], self.encoding, (method, context))

    def _still(self, asked: _Asked) -> bool:
        """The document is open and unchanged since ``asked`` was taken."""
        current = asked.current_in(self.documents)
        if not current:
            log.debug("%s changed before the answer: dropped", asked.doc.uri)
        return current

    async def answer_at_last_edit(self, uri: str, multiline: str = "auto") -> Answer:
        """The model's answer at the cursor of ``uri``'s last edit, with no debounce and
        no typing-through reuse: one request as the editor path runs it (benchmarks time
        the server's own share of a keystroke with it)."""
        doc = self.documents[uri]
        asked = _Asked.at(doc, doc.last_edit)
        return await self._run(asked, self._scope(asked, multiline), 1)

    def _scope(self, asked: _Asked, policy: str) -> Scope:
        # Special and added tokens' text must never be inserted, even spelled out in bytes.
        specials = self.host.special_texts()
        return scope_for(
            asked.line_prefix, asked.line_suffix, policy, specials, self.options.max_lines
        )

    async def _run(
        self, asked: _Asked, scope: Scope, items: int, candidates: tuple[str, ...] = ()
    ) -> Answer:
        request_id = f"c{next(self._ids)}"
        if not self.host.ready:
            log.debug("%s: no completion (%s)", request_id, self.host.status.message)
            return Answer(reason=self.host.status.message)
        started = time.perf_counter()
        await self.settle()  # edits already received may make this request stale
        if not asked.current_in(self.documents):
            log.debug("%s: stale before it reached the model", request_id)
            return Answer(reason="superseded")
        job = self._job_for(asked, scope, items, request_id, candidates)
        from midword.engine import Interrupted  # loaded with the model by now

        job.waiters += 1
        try:
            answer = await asyncio.shield(job.answer)  # one waiter's cancel is not the job's
        except asyncio.CancelledError:
            job.leave()  # the last one to leave stops the worker at its next check
            log.debug("%s: cancelled by the client", request_id)
            raise
        except (Interrupted, Superseded) as exc:
            log.debug("%s: dropped (%s)", request_id, exc)
            return Answer(reason="superseded")
        if log.isEnabledFor(logging.DEBUG):  # not formatted for nothing on every keystroke
            _log_answer(request_id, answer, time.perf_counter() - started)
        self.host.status = replace(
            self.host.status, latency_ms=(time.perf_counter() - started) * 1e3
        )
        self.host.on_status(self.host.status)
        return answer

    def _job_for(
        self,
        asked: _Asked,
        scope: Scope,
        items: int,
        request_id: str,
        candidates: tuple[str, ...] = (),
    ) -> _Job:
        """The worker job answering this question: the one already asked for the same
        cursor of the same version with the same scope and items (running, or answered),
        else a new one. Editors ask again at the same place (a timer, a second trigger):
        a new job would supersede the running one and start over, and never finish."""
        question = (asked, scope, items, self.options, candidates)
        job = self._jobs.get(asked.doc.uri)
        if job is not None and job.question == question and job.usable():
            return job
        doc, cursor, cancelled = asked.doc, asked.cursor, threading.Event()
        documents = self.documents
        self.counts["modelRequests"] += 1
        request = Request(
            uri=doc.uri,
            prefix=self._prompt(doc, cursor),
            scope=scope,
            indent_unit=self._indent_unit(doc, cursor),
            settings=self._item_settings(items),
            max_items=items,
            budget=self.options.time_budget_ms / 1000.0,
            is_current=lambda: not cancelled.is_set() and asked.current_in(documents),
            request_id=request_id,
            version=doc.version,
            suffix=self._suffix(doc, cursor),
            candidates=candidates,
            min_mass=self.options.symbols_min_mass,
        )
        future = self.host.submit(request)
        job = self._jobs[doc.uri] = _Job(question, future, asyncio.wrap_future(future), cancelled)
        return job

    def _prompt(self, doc: Document, cursor: Cursor) -> bytes:
        """The model's prompt for a cursor: other files' snippets (kept while the user types
        in one place, server/context_files.py), then the buffer's window up to the cursor."""
        window = doc.prefix_window(cursor, self.options.window_bytes)
        o = self.options
        if o.context_files == "off":
            return window
        return self._context.block(doc, self.documents, o.context_bytes, o.exclude_files) + window

    def _suffix(self, doc: Document, cursor: Cursor) -> bytes:
        """The text after the cursor for a fill-in-the-middle model's prompt (b"" when the
        model has no FIM template): whole lines, up to suffixBytes (docs/fim.md)."""
        if self.host.status.fim in ("", "off"):
            return b""
        return suffix_window(doc.lines, cursor.line, cursor.index, self.options.suffix_bytes)

    def _indent_unit(self, doc: Document, cursor: Cursor) -> str:
        """`indent_unit` of the lines up to the cursor's; the tallies of the lines above it
        are kept while they stay the same (typing changes the cursor's line only)."""
        first = max(0, cursor.line - INDENT_SAMPLE_LINES)
        above = doc.lines[first : cursor.line]
        memo = self._indents.get(doc.uri)
        if memo is None or memo.first != first or memo.lines != above:
            counts = IndentCounts()
            for i in range(first, cursor.line):
                counts.add(doc.body(i))
            memo = self._indents[doc.uri] = _IndentMemo(first, above, counts)
        counts = memo.counts.copy()
        counts.add(doc.body(cursor.line))
        return counts.unit()

    def _item_settings(self, items: int) -> list[Settings]:
        """One Settings per item tried; the same (frozen) ones while the options stay."""
        kept = self._settings
        if kept is None or kept[0] is not self.options or kept[1] != items:
            kept = self._settings = (self.options, items, self._make_settings(items))
        return kept[2]

    def _make_settings(self, items: int) -> list[Settings]:
        from midword.engine import Settings, min_logprob

        o = self.options
        threshold = min_logprob(o.min_confidence)
        first = Settings(
            method=o.method,
            mode=o.mode,
            max_tokens=o.max_tokens,
            temperature=o.temperature,
            top_p=o.top_p,
            seed=0,
            min_logprob=threshold,
            # a confidence needs the leaf's share, which the lazy solve does not sum
            solve="tree" if threshold > -math.inf else "lazy",
        )
        if items == 1:
            return [first]
        warm = max(o.temperature, INVOKED_TEMPERATURE)
        return [first] + [
            replace(first, temperature=warm, seed=seed) for seed in range(1, 2 * items + 1)
        ]

    async def live_state(self, uri: str) -> dict | None:
        """The document's live VCT brought to its text now (None if it has none), with the
        version it belongs to."""
        doc = self.documents.get(uri)
        latest = None
        if doc is not None and doc.last_edit is not None:
            edit = doc.last_edit
            latest = (self._prompt(doc, edit), doc.version, self._suffix(doc, edit))
        state = await asyncio.wrap_future(self.host.live_state(uri, latest))
        if state is not None and self.host.status.backend:
            state["backend"] = self.host.status.backend  # what computes the scores
        return state

    async def score(
        self, uri: str, line: int, character: int, candidates: list[str], end: str
    ) -> dict[str, Any]:
        """`midword/score`: the exact log-probability of each candidate text right after the
        cursor (``end="identifier"``: and the name ending there), given the prompt a
        completion there would have; ``logprobs`` in the order given, ``null`` for -inf."""
        doc = self.documents.get(uri)
        if doc is None:
            raise ValueError(f"the document is not open: {uri}")
        cursor = doc.cursor(line, character, self.encoding)
        prompt = self._prompt(doc, cursor)
        texts = [c.encode("utf-8") for c in candidates]
        future = self.host.score(uri, prompt, texts, end)
        logprobs = await asyncio.wrap_future(future)
        return {
            "logprobs": [lp if math.isfinite(lp) else None for lp in logprobs],
            "version": doc.version,
            "end": end,
        }

    async def stats(self) -> dict[str, Any]:
        """Open documents, live VCTs and the process's memory (for tests and debugging)."""
        live = await asyncio.wrap_future(self.host.live_documents())
        return {
            "documents": len(self.documents),
            "documentBytes": sum(doc.size_bytes() for doc in self.documents.values()),
            "liveDocuments": live,
            "rssBytes": _rss_bytes(),
            "state": self.host.status.state,
            "backend": self.host.status.backend,
            **self.counts,
        }

    def shutdown(self) -> None:
        self.host.shutdown()


async def _settled() -> None:
    """No transport backlog to wait for (in-process use, TCP)."""


def _rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class _Job:
    """A request on the worker and the LSP requests waiting for its answer."""

    question: tuple[Any, ...]  # (asked, scope, items, options): what it answers
    future: Future[Answer]
    answer: asyncio.Future[Answer]  # the future on the event loop
    cancelled: threading.Event  # set when every waiter was cancelled
    waiters: int = 0

    def usable(self) -> bool:
        """Still running for someone, or answered (not cancelled, superseded or failed)."""
        if self.cancelled.is_set() or self.answer.cancelled():
            return False
        if not self.future.done():
            return True
        return not self.future.cancelled() and self.future.exception() is None

    def leave(self) -> None:
        self.waiters -= 1
        if self.waiters == 0:
            self.cancelled.set()
            self.future.cancel()
            self.answer.cancel()  # else the running job's end is kept here, unread


@dataclass
class _IndentMemo:
    first: int  # the first line sampled
    lines: list[str]  # the lines from there to the cursor's line (excluded), as they were
    counts: IndentCounts  # their tallies


@dataclass(frozen=True)
class _Asked:
    """What a request was made against: the document, its edit count then, the cursor,
    and the cursor's line as it was (`Document.lines` changes in place on every edit).

    Everything sent back is computed from this: a position converted against newer
    text could be past its end (an IndexError) or point at other text than the one
    completed. If the document changed at all, the answer is dropped.
    """

    doc: Document
    edits: int
    cursor: Cursor
    body: str  # the cursor's line without its ending, in the version asked about

    @classmethod
    def at(cls, doc: Document, cursor: Cursor) -> _Asked:
        return cls(doc, doc.edits, cursor, doc.body(cursor.line))

    @property
    def line_prefix(self) -> str:
        return self.body[: self.cursor.index]

    @property
    def line_suffix(self) -> str:
        return self.body[self.cursor.index :]

    def current_in(self, documents: dict[str, Document]) -> bool:
        """Still the open document (not closed, nor reopened) with no edit since.

        Called from the worker thread as well: two reads, each atomic.
        """
        return documents.get(self.doc.uri) is self.doc and self.doc.edits == self.edits


def _insertion_point(doc: Document, rng: Range, encoding: str) -> Cursor | None:
    """Where a change inserts text, when it deletes none (else None)."""
    if (rng.start_line, rng.start_char) != (rng.end_line, rng.end_char):
        return None
    return doc.cursor(rng.start_line, rng.start_char, encoding)


def item_tags(options: ServerOptions, line_prefix: str) -> tuple[str, str]:
    """(method, cursor context) of a completion, for the acceptance log.

    >>> item_tags(ServerOptions(), "x = foo.ba")
    ('bytesampler', 'inside_word')
    >>> item_tags(ServerOptions(method="naive"), "x = ")
    ('naive', 'boundary')
    """
    method = "ensemble" if len(options.ensemble) > 1 else options.method
    partial, _ = identifier_split(line_prefix, "")
    return method, "inside_word" if partial else "boundary"


def _without_repeats(asked: _Asked, texts: list[str]) -> list[str]:
    """The texts cut where they repeat the document below the cursor (server/cleanup.py);
    empty and duplicate results dropped. Runs only while ``asked`` is current."""
    doc = asked.doc
    below = following_lines(doc.body(i) for i in range(asked.cursor.line + 1, len(doc.lines)))
    kept: list[str] = []
    for text in texts:
        trimmed = cut_repeats(text, asked.line_prefix, below, asked.line_suffix)
        if trimmed != text:
            log.debug("trimmed a repeat of the lines below: %r -> %r", text, trimmed)
        if trimmed.strip() and trimmed not in kept:
            kept.append(trimmed)
    return kept


def _edit_items(
    asked: _Asked, text: str, encoding: str, tags: tuple[str, str] = ("", "")
) -> list[EditItem]:
    line, body = asked.cursor.line, asked.body
    partial, continuation = identifier_split(asked.line_prefix, text)
    start = from_index(body, asked.cursor.index - len(partial), encoding)
    end = from_index(body, asked.cursor.index, encoding)
    items: list[EditItem] = []
    if continuation:
        word = partial + continuation
        items.append(EditItem(word, word, line, start, end, "midword: identifier", *tags, partial))
    line_text = partial + text
    if line_text.strip() and all(item.new_text != line_text for item in items):
        items.append(
            EditItem(line_text, line_text, line, start, end, "midword: line", *tags, partial)
        )
    return items


def _log_answer(request_id: str, answer: Answer, seconds: float) -> None:
    leaf = f"{answer.leaf_prob:.4g}" if answer.leaf_prob is not None else "n/a"
    log.debug(
        "%s: %d item(s) in %.1f ms (vct sync %.1f, model %.1f, post %.2f); leaf p=%s; "
        "tokens %d (tree %d)%s",
        request_id,
        len(answer.texts),
        seconds * 1000,
        answer.sync_ms,
        answer.model_ms,
        answer.post_ms,
        leaf,
        answer.tokens,
        answer.tree_tokens,
        f"; {answer.reason}" if answer.reason and not answer.texts else "",
    )


def _set_log_level(level: str) -> None:
    logging.getLogger("midword").setLevel(
        {"error": logging.ERROR, "warning": logging.WARNING, "debug": logging.DEBUG}.get(
            level, logging.INFO
        )
    )
