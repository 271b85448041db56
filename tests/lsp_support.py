"""Shared pieces of the language-server tests: the server command, client profiles with
inline completion, waiting for the model, and a buffer that types like an editor."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

SERVER_COMMAND = [sys.executable, "-m", "midword", "serve", "--log-level", "debug"]
CONFIG = ClientServerConfig(server_command=SERVER_COMMAND)
STATUS = "midword/status"
READY_TIMEOUT = 240.0  # model load on a busy 2-core CI machine


def capabilities(
    profile: str, *, inline: bool = True, utf8: bool = False
) -> types.ClientCapabilities:
    """A real client's capabilities, with inline completion added where the profile lacks it."""
    caps = client_capabilities(profile)
    if inline:
        doc = caps.text_document or types.TextDocumentClientCapabilities()
        doc.inline_completion = types.InlineCompletionClientCapabilities()
        caps.text_document = doc
    if utf8:
        caps.general = caps.general or types.GeneralClientCapabilities()
        caps.general.position_encodings = [
            types.PositionEncodingKind.Utf16,
            types.PositionEncodingKind.Utf8,
        ]
    return caps


@dataclass
class Session:
    """A started server: its client and the ``midword/status`` notifications seen."""

    client: LanguageClient
    statuses: list[Any] = field(default_factory=list)
    init: types.InitializeResult | None = None

    @property
    def state(self) -> str:
        return self.statuses[-1].state if self.statuses else ""

    async def wait_state(self, *states: str, timeout: float = READY_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state in states:
                return self.state
            if self.state == "error":
                raise AssertionError(f"server error: {self.statuses[-1].message}")
            await asyncio.sleep(0.05)
        raise AssertionError(f"server state {self.state!r}, expected one of {states}")

    def configure(self, options: dict[str, Any]) -> None:
        """Send changed settings (workspace/didChangeConfiguration), as an editor does."""
        params = types.DidChangeConfigurationParams(settings=options)
        self.client.workspace_did_change_configuration(params)


async def start(
    client: LanguageClient,
    profile: str,
    options: dict[str, Any] | None = None,
    *,
    inline: bool = True,
    utf8: bool = False,
    events: bool = False,
) -> Session:
    """Initialize the server with a ``profile`` client's capabilities; ``events`` asks for
    inline items tagged for the acceptance log (``experimental.midword.completionEvents``)."""
    session = Session(client)

    def on_status(params: Any) -> None:
        session.statuses.append(params)

    client.feature(STATUS)(on_status)
    caps = capabilities(profile, inline=inline, utf8=utf8)
    if events:
        caps.experimental = {"midword": {"completionEvents": True}}
    params = types.InitializeParams(
        capabilities=caps,
        initialization_options=with_test_device(options if options is not None else {}),
    )
    session.init = await client.initialize_session(params)
    client.midword_session = session  # type: ignore[attr-defined]  # pytest-lsp yields the client
    return session


async def send_json(client: LanguageClient, method: str, params: dict[str, Any]) -> Any:
    """A request of a standard method sent with ``params`` as given, extension fields and
    all (pytest-lsp would send them through the method's typed params, which drop
    fields the protocol does not define); the answer is typed as usual."""
    protocol = client.protocol
    typed = protocol.get_message_type
    protocol.get_message_type = lambda name: None if name == method else typed(name)
    try:
        return await protocol.send_request_async(method, params)
    finally:
        del protocol.get_message_type  # back to the class's own method


def with_test_device(options: dict[str, Any]) -> dict[str, Any]:
    """The options, with ``device``/``dtype`` from MIDWORD_TEST_DEVICE/MIDWORD_TEST_DTYPE
    where a test leaves them out (how benchmarks/cuda_check.sh runs this suite on a GPU)."""
    chosen = {
        "device": os.environ.get("MIDWORD_TEST_DEVICE", ""),
        "dtype": os.environ.get("MIDWORD_TEST_DTYPE", ""),
    }
    return {**{key: value for key, value in chosen.items() if value}, **options}


class Buffer:
    """An editor buffer: keeps the text and a cursor, sends incremental didChange."""

    def __init__(self, client: LanguageClient, uri: str, text: str = "", language: str = "python"):
        self.client = client
        self.uri = uri
        self.text = text
        self.version = 1
        self.cursor = len(text)
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id=language, version=1, text=text
                )
            )
        )

    def position(self, index: int | None = None) -> types.Position:
        """LSP position (UTF-16) of a string index (default: the cursor)."""
        index = self.cursor if index is None else index
        before = self.text[:index]
        line = before.count("\n")
        column = before[before.rfind("\n") + 1 :]
        return types.Position(line=line, character=len(column.encode("utf-16-le")) // 2)

    def replace(self, start: int, end: int, new: str) -> None:
        rng = types.Range(start=self.position(start), end=self.position(end))
        self.text = self.text[:start] + new + self.text[end:]
        self.cursor = start + len(new)
        self.version += 1
        change = types.TextDocumentContentChangePartial(range=rng, text=new)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=self.uri, version=self.version
                ),
                content_changes=[change],
            )
        )

    def type(self, text: str) -> None:
        """Type at the cursor one character at a time."""
        for ch in text:
            self.replace(self.cursor, self.cursor, ch)

    def backspace(self, count: int = 1) -> None:
        for _ in range(count):
            if self.cursor:
                self.replace(self.cursor - 1, self.cursor, "")

    def close(self) -> None:
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=self.uri)
            )
        )

    async def inline(self, invoked: bool = False, index: int | None = None) -> list[str]:
        kind = (
            types.InlineCompletionTriggerKind.Invoked
            if invoked
            else types.InlineCompletionTriggerKind.Automatic
        )
        pos = self.position(index)
        result = await self.client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=self.uri),
                position=pos,
                context=types.InlineCompletionContext(trigger_kind=kind),
            )
        )
        items = result.items if isinstance(result, types.InlineCompletionList) else result or []
        for item in items:
            assert item.range is None or (item.range.start == pos and item.range.end == pos)
        return [item.insert_text for item in items]

    async def complete(self, index: int | None = None) -> list[types.CompletionItem]:
        result = await self.client.text_document_completion_async(
            types.CompletionParams(
                text_document=types.TextDocumentIdentifier(uri=self.uri),
                position=self.position(index),
            )
        )
        if isinstance(result, types.CompletionList):
            return list(result.items)
        return list(result or [])

    def line_suffix(self) -> str:
        end = self.text.find("\n", self.cursor)
        return self.text[self.cursor : end if end >= 0 else len(self.text)]
