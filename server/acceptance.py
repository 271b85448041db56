"""A local acceptance log: which completions were shown, accepted or partly accepted.

The server tags every item it returns with an id, the method that made it and the
cursor's context (``inside_word`` or ``boundary``). An editor that asks for them (the
client capability ``experimental.midword.completionEvents``) gets the tags
``{id, method, context}``:

* on an inline item, as its command, ``midword.completionAccepted`` (run by the editor
  when the item is accepted), the tags its one argument;
* on a completion-list item (``textDocument/completion``, what Neovim's omnifunc shows),
  as its ``data``: the client reads them back from the item it inserted. Not a command:
  VS Code's suggest widget would run it too, for items it never reports as shown.

A completion-list item's edit replaces the name typed before the cursor; the log counts
(``length``) and follows the text it adds at the cursor, as an inline item's there.

The editor reports back with three notifications:

* ``midword/completionShown`` ``{id}``: the item is on screen;
* ``midword/completionAccepted`` ``{id}``: all of it was inserted;
* ``midword/completionPartiallyAccepted`` ``{id, acceptedLength}``: a part (a word, a line).

Each event becomes one JSON line in ``acceptance.jsonl`` under midword's cache folder
(``$MIDWORD_ACCEPTANCE_LOG`` names another file). The log keeps the tags and lengths,
never the code, and nothing leaves the machine; ``midword stats`` reads it. Lines are
written by a thread of their own, so the event loop never waits for the disk.

After an acceptance the server follows the inserted text through later edits and logs,
at 30 s, 2 min and 10 min, how much of it is still there (``retained`` events,
server/retention.py).

>>> import tempfile, json
>>> path = Path(tempfile.mkdtemp()) / "a.jsonl"
>>> log = AcceptanceLog(path)
>>> tag = log.issue("bytesampler", "inside_word", "python", "ser()")
>>> log.record("accepted", {"id": tag["id"]})["event"]
'accepted'
>>> log.flush()
>>> entry = json.loads(path.read_text())
>>> entry["method"], entry["context"], entry["length"]
('bytesampler', 'inside_word', 5)
>>> log.close()
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .retention import Retention, Where

if TYPE_CHECKING:
    from .document import Document

__all__ = [
    "ACCEPT_COMMAND",
    "CAPABILITY",
    "EVENTS",
    "AcceptanceLog",
    "default_log_path",
    "item_command",
    "register_acceptance_events",
    "wants_events",
]

log = logging.getLogger("midword.server")

LOG_ENV = "MIDWORD_ACCEPTANCE_LOG"
LOG_NAME = "acceptance.jsonl"
ACCEPT_COMMAND = "midword.completionAccepted"
# the client capability experimental.midword.completionEvents asks for tagged items
CAPABILITY = "completionEvents"
# notification -> event name in the log
EVENTS = {
    "midword/completionShown": "shown",
    "midword/completionAccepted": "accepted",
    "midword/completionPartiallyAccepted": "partial",
}
KEEP_ISSUED = 1024  # tags of the latest items, looked up when their events come
TAG_KEYS = ("method", "context", "language")


def default_log_path() -> Path:
    """``$MIDWORD_ACCEPTANCE_LOG``, else ``acceptance.jsonl`` in midword's cache folder."""
    named = os.environ.get(LOG_ENV)
    if named:
        return Path(named).expanduser()
    from midword.engine import cache_root

    return cache_root() / LOG_NAME


class AcceptanceLog:
    """Item tags given out, and the events about them appended to a JSONL file."""

    def __init__(
        self, path: Path | None = None, checkpoints: Sequence[float] | None = None
    ) -> None:
        self.path = path
        # False stops the checkpoints' entries too (the option acceptanceLog, read when due)
        self.enabled: Callable[[], bool] = lambda: True
        # accepted items followed through edits (checkpoints: $MIDWORD_RETENTION_CHECKPOINTS)
        self.retention = Retention(self._put_if_enabled, checkpoints)
        self._issued: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._session = uuid.uuid4().hex[:8]  # ids stay unique across server runs
        self._counter = itertools.count(1)
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()

    def issue(
        self,
        method: str,
        context: str,
        language: str,
        text: str,
        uri: str | None = None,
        line: int = 0,
        character: int = 0,
    ) -> dict[str, Any]:
        """Tags for a new item: ``{id, method, context}`` (sent with the item). Where the
        item starts (``uri``, LSP ``line`` and ``character``) is kept with its text, in
        memory only, to follow the text once the item is accepted."""
        item_id = f"{self._session}-{next(self._counter)}"
        self._issued[item_id] = {
            "method": method,
            "context": context,
            "language": language,
            "length": len(text),
            "text": text,
            "where": Where(uri, line, character) if uri is not None else None,
        }
        while len(self._issued) > KEEP_ISSUED:
            self._issued.popitem(last=False)
        return {"id": item_id, "method": method, "context": context}

    def record(self, event: str, params: Any) -> dict[str, Any] | None:
        """Queue one event for the file; returns the entry (None when params lack an id)."""
        item_id = _field(params, "id")
        if not isinstance(item_id, str) or not item_id:
            log.debug("acceptance event %s without an item id: ignored", event)
            return None
        entry: dict[str, Any] = {"time": round(time.time(), 3), "event": event, "id": item_id}
        issued = self._issued.get(item_id)
        for key in TAG_KEYS:  # the server's own tags; the client's where it has none
            value = issued.get(key) if issued else _field(params, key)
            if isinstance(value, str):
                entry[key] = value
        if issued is not None:
            entry["length"] = issued["length"]
        accepted = _field(params, "acceptedLength")
        if event == "partial" and isinstance(accepted, int) and not isinstance(accepted, bool):
            entry["acceptedLength"] = accepted
        self._put(entry)
        return entry

    def follow(
        self, entry: dict[str, Any], documents: Mapping[str, Document], encoding: str
    ) -> None:
        """After an acceptance ``entry`` (from `record`), follow the text the item inserted
        (server/retention.py). Items the server did not issue, or issued too long ago to
        remember, cannot be followed: their text is not known."""
        issued = self._issued.get(entry.get("id", ""))
        where = issued.get("where") if issued is not None else None
        if issued is None or where is None:
            return
        text = issued["text"]
        if entry["event"] == "partial":
            if "acceptedLength" not in entry:
                return
            text = text[: max(0, entry["acceptedLength"])]
        elif entry["event"] != "accepted":
            return
        tags = {key: issued[key] for key in TAG_KEYS}
        self.retention.accepted(entry["id"], tags, where, text, documents, encoding)

    def flush(self) -> None:
        """Wait until every queued entry is on disk."""
        self._queue.join()

    def close(self) -> None:
        """Log the checkpoints still due as unknown, write what is queued and stop the
        writer thread."""
        self.retention.stop()
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            self._queue.put(None)
            writer.join(timeout=5)

    def _put(self, entry: dict[str, Any]) -> None:
        self._start_writer()
        self._queue.put(entry)

    def _put_if_enabled(self, entry: dict[str, Any]) -> None:
        if self.enabled():
            self._put(entry)

    def _start_writer(self) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name="midword-acceptance-log", daemon=True
                )
                self._writer.start()

    def _write_loop(self) -> None:
        while True:
            entry = self._queue.get()
            try:
                if entry is None:
                    return
                self._append([entry, *self._drain()])
            finally:
                self._queue.task_done()

    def _drain(self) -> list[dict[str, Any]]:
        """Entries queued meanwhile (written with one open); a stop marker goes back."""
        more: list[dict[str, Any]] = []
        while True:
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                return more
            if entry is None:
                self._queue.task_done()
                self._queue.put(None)
                return more
            more.append(entry)
            self._queue.task_done()

    def _append(self, entries: list[dict[str, Any]]) -> None:
        path = self.path or default_log_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in entries)
        except OSError as exc:  # a full or read-only disk must not break completion
            log.warning("could not write the acceptance log %s: %s", path, exc)


def _field(params: Any, name: str) -> Any:
    """``params[name]`` of a custom notification (pygls gives an object or a dict)."""
    if isinstance(params, dict):
        return params.get(name)
    return getattr(params, name, None)


def register_acceptance_events(server: Any) -> None:
    """The three notifications on a `MidwordServer` (``server.acceptance`` is its log;
    the option ``acceptanceLog: false`` turns recording off)."""
    server.acceptance.enabled = lambda: server.controller.options.acceptance_log
    for method, event in EVENTS.items():
        server.feature(method)(_handler(event))


def _handler(event: str) -> Any:
    def on_event(ls: Any, params: Any) -> None:
        if ls.controller.options.acceptance_log:
            entry = ls.acceptance.record(event, params)
            if entry is not None:
                ls.acceptance.follow(entry, ls.controller.documents, ls.controller.encoding)

    return on_event


def wants_events(capabilities: Any) -> bool:
    """The client asked for tagged items: ``experimental.midword.completionEvents``."""
    experimental = getattr(capabilities, "experimental", None)
    midword = _field(experimental, "midword") if experimental is not None else None
    return bool(_field(midword, CAPABILITY)) if midword is not None else False


def item_command(tags: dict[str, Any]) -> dict[str, Any]:
    """The LSP command an item carries: the editor runs it when the item is accepted."""
    return {"title": "midword: completion accepted", "command": ACCEPT_COMMAND, "arguments": [tags]}
