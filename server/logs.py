"""Logging for the server: stderr, an optional file, and ``window/logMessage``.

Never stdout: in stdio mode it is the protocol channel. Only midword's own
records go to the client (pygls logs every message it sends, which would loop).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["ClientLogHandler", "setup_logging"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ClientLogHandler(logging.Handler):
    """Forwards records to a callable (the server sends them as window/logMessage)."""

    def __init__(self, send: Callable[[int, str], None]) -> None:
        super().__init__()
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.send(record.levelno, self.format(record))
        except Exception:  # a closed connection must not break logging
            self.handleError(record)


def setup_logging(level: str = "info", log_file: str | None = None) -> None:
    """Root logging to stderr (warnings only from libraries), midword at ``level``."""
    root = logging.getLogger()
    root.handlers.clear()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(stderr)
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("midword").setLevel(level.upper())
    logging.captureWarnings(True)  # warnings.warn goes to stderr through logging, not stdout
