"""Run the language server (LSP over stdio by default, or TCP with --tcp HOST:PORT).

Editors start it as `python -m midword serve`. Options (model, device, dtype,
method, mode, temperature, topP, maxTokens, timeBudgetMs, multiline,
windowBytes, logLevel, maxItems) come from the client's initializationOptions
and workspace/didChangeConfiguration; see docs/editors.md for the reference. Logs go
to stderr, to --log-file, and to the client's log (window/logMessage), never
to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import BinaryIO

from midword.cli import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio (e.g. 127.0.0.1:2087)"
    )
    parser.add_argument("--log-file", help="also write the log to this file")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["error", "warning", "info", "debug"],
        help="initial log level (the client's logLevel option overrides it)",
    )


def _tcp_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"--tcp expects HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def _protocol_stdout() -> BinaryIO:
    """The real stdout for the protocol; fd 1 and sys.stdout then point at stderr, so a
    stray print or a native library's output cannot corrupt the message stream."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "wb", buffering=0)


def run(args: argparse.Namespace) -> int:
    address = _tcp_address(args.tcp) if args.tcp else None
    from midword.server.logs import setup_logging
    from midword.server.memory import fix_mmap_threshold
    from midword.server.server import build_server

    setup_logging(args.log_level, args.log_file)
    fix_mmap_threshold()  # closed documents' memory goes back to the OS (server/memory.py)
    server = build_server()
    if address is not None:
        server.start_tcp(*address)
    else:
        server.start_io(sys.stdin.buffer, _protocol_stdout())
    return 0
