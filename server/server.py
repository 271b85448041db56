"""The pygls language server: thin handlers that convert LSP types and delegate.

Features: ``textDocument/inlineCompletion`` (LSP 3.18), ``textDocument/completion``
(for clients without inline completion), incremental text sync, configuration
through ``initializationOptions`` and ``workspace/didChangeConfiguration``,
model-load progress through ``$/progress`` and a ``midword/status``
notification ``{state, model, message, latencyMs}``, and a ``midword/inspect``
request that returns a document's live VCT (for tests and debugging).

All behaviour lives in `Controller` (controller.py); the model runs on the
worker thread of `ModelHost` (worker.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
import threading
import time
import uuid
from collections.abc import Generator
from typing import Any, BinaryIO

import attrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from midword import __version__

from .acceptance import AcceptanceLog, item_command, register_acceptance_events, wants_events
from .controller import Controller, EditItem, InlineItem
from .document import Range
from .logs import ClientLogHandler
from .worker import Status

__all__ = ["STATUS_NOTIFICATION", "MidwordServer", "build_server"]

STATUS_NOTIFICATION = "midword/status"
SETTLE_LIMIT_S = 1.0  # the longest a request waits for received messages to be applied
INSPECT_REQUEST = "midword/inspect"
STATS_REQUEST = "midword/stats"
SCORE_REQUEST = "midword/score"
CANDIDATES_FIELD = "midwordCandidates"  # the extension field of completion requests (issue 39)
MAX_CANDIDATES = 5000  # names past this many are ignored (an editor sends a few hundred)
_ENCODINGS = {
    types.PositionEncodingKind.Utf8: "utf-8",
    types.PositionEncodingKind.Utf16: "utf-16",
    types.PositionEncodingKind.Utf32: "utf-32",
}
log = logging.getLogger("midword.server")
_ANSWERED = object()  # a malformed request that was already answered with an error


class MidwordProtocol(LanguageServerProtocol):
    """pygls' protocol, with four changes.

    * UTF-8 positions whenever the client offers them (they match the engine's bytes).
    * Documents are kept only by the controller: pygls' own copy would re-split a
      whole document on every keystroke and double the memory of large files.
    * A request whose params do not match its type gets an error response (pygls
      only logs it, and the client would wait for an answer forever).
    * didOpen/didChange/didClose call the features directly: as generators, pygls
      would keep a future for every one of these notifications, forever.
    """

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            names = _candidates_field(data)
            message = super().structure_message(data)
        except JsonRpcException as exc:
            if "method" not in data or "id" not in data:
                raise  # a malformed notification: logged and dropped
            self._send_response(data["id"], error=exc.to_response_error())
            return _ANSWERED
        if names:  # lsprotocol's types drop unknown fields: carry the names beside them
            message.params = _with_candidates(message.params, names)
        return message

    def handle_message(self, message: Any) -> None:
        if message is not _ANSWERED:
            super().handle_message(message)

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, Any]:
        general = params.capabilities.general
        offered = general.position_encodings if general is not None else None
        if offered and types.PositionEncodingKind.Utf8 in offered:
            general.position_encodings = [types.PositionEncodingKind.Utf8]
        return (yield from super().lsp_initialize(params))

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: Any) -> None:
        self._user_handler(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: Any) -> None:
        self._user_handler(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: Any) -> None:
        self._user_handler(types.TEXT_DOCUMENT_DID_CLOSE, params)

    def _user_handler(self, method: str, params: Any) -> None:
        if (handler := self.fm.features.get(method)) is not None:
            handler(params)


class MidwordServer(LanguageServer):
    """A LanguageServer that owns a `Controller` and relays its events to the client."""

    def __init__(self) -> None:
        super().__init__("midword", __version__, protocol_cls=MidwordProtocol)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending_options: Any = None
        self.progress = _LoadProgress(self)
        self.client_log = ClientLogHandler(self._log_to_client)
        self.acceptance = AcceptanceLog()  # server/acceptance.py
        self.completion_events = False  # the client asked for tagged inline items
        self.controller = Controller(
            on_status=self._status_from_any_thread,
            on_progress=self._progress_from_any_thread,
            on_problem=self._show_warning,
        )

    def _start_io_async(
        self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
    ) -> None:
        """pygls' stdio loop, with stdin read by `PipeReader` where it is a pipe."""
        stdin = stdin or sys.stdin.buffer
        if not _is_pipe(stdin):
            super()._start_io_async(stdin, stdout)
            return
        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        reader = PipeReader(stdin)
        self.controller.settle = reader.settle
        self.controller.host.backlog = reader.pending
        try:
            asyncio.run(
                run_async(
                    stop_event=self._stop_event,
                    reader=reader,
                    protocol=self.protocol,
                    logger=log,
                    error_handler=self.report_server_error,
                )
            )
        except BrokenPipeError:
            log.error("Connection to the client is lost! Shutting down the server.")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def _call_soon(self, fn: Any, *args: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    def _status_from_any_thread(self, status: Status) -> None:
        self._call_soon(self.protocol.notify, STATUS_NOTIFICATION, status.to_json())

    def _progress_from_any_thread(self, message: str, percentage: int) -> None:
        self._call_soon(self.progress.update, message, percentage)

    def _log_to_client(self, level: int, message: str) -> None:
        kind = (
            types.MessageType.Error
            if level >= logging.ERROR
            else types.MessageType.Warning
            if level >= logging.WARNING
            else types.MessageType.Info
            if level >= logging.INFO
            else types.MessageType.Log
        )
        params = types.LogMessageParams(type=kind, message=message)
        self._call_soon(self.window_log_message, params)

    def _show_warning(self, message: str) -> None:
        params = types.ShowMessageParams(type=types.MessageType.Warning, message=message)
        self._call_soon(self.window_show_message, params)


class PipeReader:
    """The client's messages read on the event loop itself (an asyncio pipe transport).

    pygls reads stdin on a thread pool: every header line and every body is a hop to a
    pool thread and back, four GIL hand-overs per message. With the model worker
    running Python code, each waits up to a switch interval, and at a thousand edits
    a second messages queued up for seconds. Here one read takes all that has come,
    and `pending` tells whether received messages wait to be applied (see `settle`).
    """

    def __init__(self, stdin: BinaryIO) -> None:
        self.stdin = stdin
        self._stream: asyncio.StreamReader | None = None
        self.received = 0  # bytes the transport has handed over
        self.consumed = 0  # bytes read out of them as messages

    def pending(self) -> bool:
        """Bytes of the client's that are received but not yet read as a message."""
        return self.received > self.consumed

    async def settle(self, limit: float = SETTLE_LIMIT_S) -> None:
        """Return once every message received so far has been applied (or after ``limit``
        seconds, should the client send faster than they are applied)."""
        deadline = time.monotonic() + limit
        while self.pending() and time.monotonic() < deadline:
            before = self.consumed
            await asyncio.sleep(0)  # the reader applies a message per turn
            if self.consumed == before:  # the rest of a message is still coming
                await asyncio.sleep(0.001)

    async def _reader(self) -> asyncio.StreamReader:
        if self._stream is None:
            loop = asyncio.get_running_loop()
            stream = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: _Counted(stream, self), self.stdin)
            self._stream = stream
        return self._stream

    async def readline(self) -> bytes:
        # Let the tasks of the message just handled take their first step before the next
        # one is applied: a request's handler reads the document (cursor, version, text)
        # before its first await, so it sees the document as the client saw it when it
        # sent the request. Data already buffered would otherwise be read without a pause.
        await asyncio.sleep(0)
        line = await (await self._reader()).readline()  # b"" at the end of the input
        self.consumed += len(line)
        return line

    async def readexactly(self, n: int) -> bytes:
        try:
            body = await (await self._reader()).readexactly(n)
        except asyncio.IncompleteReadError as exc:
            body = exc.partial  # the client went away mid-message
        self.consumed += len(body)
        return body


class _Counted(asyncio.StreamReaderProtocol):
    """A stream protocol that counts the bytes it receives (for `PipeReader.pending`)."""

    def __init__(self, stream: asyncio.StreamReader, reader: PipeReader) -> None:
        super().__init__(stream)
        self._counts = reader

    def data_received(self, data: bytes) -> None:
        self._counts.received += len(data)
        super().data_received(data)


def _is_pipe(stream: BinaryIO) -> bool:
    """A pipe, socket or terminal (what an asyncio pipe transport reads), not a file."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


class _LoadProgress:
    """``$/progress`` for model loads (only when the client supports server-created tokens)."""

    def __init__(self, server: MidwordServer) -> None:
        self.server = server
        self.token: str | None = None
        self.begun = False
        self.last = ("", 0)

    def update(self, message: str, percentage: int) -> None:
        caps = self.server.client_capabilities.window
        if caps is None or not caps.work_done_progress:
            return
        self.last = (message, percentage)
        if percentage >= 100:
            self._end()
        elif self.token is None:
            self.token = f"midword-load-{uuid.uuid4().hex[:8]}"
            self.server.work_done_progress.create(self.token, callback=lambda *a: self._begin())
        elif self.begun:
            value = types.WorkDoneProgressReport(message=message, percentage=percentage)
            self.server.work_done_progress.report(self.token, value)

    def _begin(self) -> None:
        if self.token is None or self.begun:
            return
        self.begun = True
        message, percentage = self.last
        value = types.WorkDoneProgressBegin(
            title="midword: loading the model", message=message, percentage=percentage
        )
        self.server.work_done_progress.begin(self.token, value)
        if percentage >= 100:
            self._end()

    def _end(self) -> None:
        if self.token is not None and self.begun:
            self.server.work_done_progress.end(self.token, types.WorkDoneProgressEnd())
            self.token, self.begun = None, False


def build_server() -> MidwordServer:
    """A fresh server with every feature registered."""
    server = MidwordServer()
    _register_lifecycle(server)
    _register_sync(server)
    _register_completion(server)
    register_acceptance_events(server)
    return server


def _register_lifecycle(server: MidwordServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: MidwordServer, params: types.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        midword_log = logging.getLogger("midword")
        if ls.client_log not in midword_log.handlers:
            midword_log.addHandler(ls.client_log)
        ls.controller.encoding = _ENCODINGS.get(ls.workspace.position_encoding, "utf-16")
        ls.pending_options = params.initialization_options
        ls.completion_events = wants_events(params.capabilities)

    @server.feature(types.INITIALIZED)
    def initialized(ls: MidwordServer, params: types.InitializedParams) -> None:
        ls.controller.configure(ls.pending_options, initial=True)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(
        ls: MidwordServer, params: types.DidChangeConfigurationParams
    ) -> None:
        if params.settings is not None:
            ls.controller.configure(params.settings)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: MidwordServer, params: Any) -> None:
        ls.controller.shutdown()
        ls.acceptance.close()
        logging.getLogger("midword").removeHandler(ls.client_log)

    @server.feature(INSPECT_REQUEST)
    async def inspect(ls: MidwordServer, params: Any) -> dict | None:
        uri = _uri_of(params)
        # the state carries the version it belongs to: the document may change meanwhile
        return await ls.controller.live_state(uri) if uri else None

    @server.feature(SCORE_REQUEST)
    async def score(ls: MidwordServer, params: Any) -> dict:
        uri, position = _uri_of(params), getattr(params, "position", None)
        candidates = list(getattr(params, "candidates", None) or [])
        end = getattr(params, "end", None) or "identifier"
        if uri is None or position is None or not all(isinstance(c, str) for c in candidates):
            raise ValueError("midword/score needs textDocument, position and candidates (strings)")
        if end not in ("identifier", "none"):
            raise ValueError(f"midword/score: end must be identifier or none, not {end!r}")
        return await ls.controller.score(uri, position.line, position.character, candidates, end)

    @server.feature(STATS_REQUEST)
    async def stats(ls: MidwordServer, params: Any) -> dict:
        return await ls.controller.stats()


def _register_sync(server: MidwordServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MidwordServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        ls.controller.open(doc.uri, doc.text, doc.version, doc.language_id)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MidwordServer, params: types.DidChangeTextDocumentParams) -> None:
        changes: list[tuple[Range | None, str]] = []
        for change in params.content_changes:
            rng = getattr(change, "range", None)
            changes.append((_range(rng) if rng is not None else None, change.text))
        ls.controller.change(params.text_document.uri, params.text_document.version, changes)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MidwordServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.controller.close(params.text_document.uri)


def _register_completion(server: MidwordServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: MidwordServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList:
        invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        pos, uri = params.position, params.text_document.uri
        names = getattr(params, "midword_candidates", ())
        items = await ls.controller.inline(uri, pos.line, pos.character, invoked, names)
        return types.InlineCompletionList(items=[_inline_item(ls, uri, i) for i in items])

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
    async def completion(ls: MidwordServer, params: types.CompletionParams) -> types.CompletionList:
        pos = params.position
        names = getattr(params, "midword_candidates", ())
        uri = params.text_document.uri
        items = await ls.controller.completion_list(uri, pos.line, pos.character, names)
        return types.CompletionList(
            is_incomplete=True, items=[_edit_item(ls, uri, i, n) for n, i in enumerate(items)]
        )


def _range(rng: types.Range) -> Range:
    return Range(rng.start.line, rng.start.character, rng.end.line, rng.end.character)


def _inline_item(ls: MidwordServer, uri: str, item: InlineItem) -> types.InlineCompletionItem:
    at = types.Position(line=item.line, character=item.character)
    command = None
    if ls.completion_events:  # tags for the acceptance log (server/acceptance.py)
        where = (uri, item.line, item.character)
        tags = ls.acceptance.issue(item.method, item.context, _language(ls, uri), item.text, *where)
        command = types.Command(**item_command(tags))
    return types.InlineCompletionItem(
        insert_text=item.text, range=types.Range(start=at, end=at), command=command
    )


def _language(ls: MidwordServer, uri: str) -> str:
    doc = ls.controller.documents.get(uri)
    return doc.language_id if doc is not None else ""


def _edit_tags(ls: MidwordServer, uri: str, item: EditItem) -> dict[str, Any] | None:
    """The acceptance log's tags of a completion-list item, carried as its ``data`` (a
    client reads them back from the item it inserted; a command would be run by VS Code's
    suggest widget as well). The log follows what the item adds at the cursor, not the
    typed name its edit replaces (`EditItem.added`)."""
    if not ls.completion_events:
        return None
    text, character = item.added()
    where = (uri, item.line, character)
    return ls.acceptance.issue(item.method, item.context, _language(ls, uri), text, *where)


def _edit_item(ls: MidwordServer, uri: str, item: EditItem, rank: int) -> types.CompletionItem:
    edit = types.TextEdit(
        range=types.Range(
            start=types.Position(line=item.line, character=item.start),
            end=types.Position(line=item.line, character=item.end),
        ),
        new_text=item.new_text,
    )
    return types.CompletionItem(
        label=item.label,
        kind=types.CompletionItemKind.Text,
        detail=item.detail,
        text_edit=edit,
        filter_text=item.label,
        sort_text=f"{rank:04d}",
        preselect=rank == 0,
        data=_edit_tags(ls, uri, item),
    )


@attrs.define
class GuidedInlineParams(types.InlineCompletionParams):
    """Inline completion params with the names the editor knows at the cursor."""

    midword_candidates: tuple[str, ...] = ()


@attrs.define
class GuidedCompletionParams(types.CompletionParams):
    """Completion params with the names the editor knows at the cursor."""

    midword_candidates: tuple[str, ...] = ()


_GUIDED_PARAMS: dict[type, type] = {
    types.InlineCompletionParams: GuidedInlineParams,
    types.CompletionParams: GuidedCompletionParams,
}


def _candidates_field(data: dict[str, Any]) -> tuple[str, ...]:
    """The ``midwordCandidates`` of a completion request: up to `MAX_CANDIDATES` names,
    duplicates dropped; empty for other messages. A value that is not a list of strings
    is an invalid-params error, as any other malformed field would be.

    >>> _candidates_field({"method": "textDocument/completion", "params": {
    ...     "midwordCandidates": ["assertEqual", "assertIn", "assertEqual"]}})
    ('assertEqual', 'assertIn')
    """
    if data.get("method") not in (
        types.TEXT_DOCUMENT_INLINE_COMPLETION,
        types.TEXT_DOCUMENT_COMPLETION,
    ):
        return ()
    params = data.get("params")
    names = params.get(CANDIDATES_FIELD) if isinstance(params, dict) else None
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise JsonRpcInvalidParams(f"{CANDIDATES_FIELD} must be a list of strings")
    if len(names) > MAX_CANDIDATES:
        log.debug("%d candidates: the first %d kept", len(names), MAX_CANDIDATES)
    return tuple(dict.fromkeys(n for n in names[:MAX_CANDIDATES] if n))


def _with_candidates(params: Any, names: tuple[str, ...]) -> Any:
    """``params`` as its guided subclass, carrying ``names``."""
    guided = _GUIDED_PARAMS.get(type(params))
    if guided is None:
        return params
    fields = {f.name: getattr(params, f.name) for f in attrs.fields(type(params))}
    return guided(**fields, midword_candidates=names)


def _uri_of(params: Any) -> str | None:
    """``params.textDocument.uri`` of a custom request (an object or a dict)."""
    doc = getattr(params, "textDocument", None) or getattr(params, "text_document", None)
    if doc is None and isinstance(params, dict):
        doc = params.get("textDocument")
    uri = getattr(doc, "uri", None) if not isinstance(doc, dict) else doc.get("uri")
    return uri if isinstance(uri, str) else None
