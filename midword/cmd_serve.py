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
    parser.add_argument(
        "--engine",
        choices=("local", "vllm"),
        help="where the model runs: local (in process) or vllm (the server at --url); the "
        "client's engine setting overrides it",
    )
    parser.add_argument("--url", metavar="URL", help="the vLLM server (engineUrl)")
    parser.add_argument("--engine-model", metavar="NAME", help="the served model (engineModel)")
    parser.add_argument(
        "--backend",
        choices=("auto", "llamacpp", "torch"),
        help="what computes a local model: auto (llama.cpp for a GGUF file when installed, "
        "else torch), llamacpp or torch; the client's backend setting overrides it",
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


def _engine_defaults(args: argparse.Namespace) -> None:
    """--engine/--url/--engine-model/--backend as the options' start-up defaults."""
    changes = {
        name: value
        for name, value in (
            ("engine", args.engine),
            ("engine_url", args.url),
            ("engine_model", args.engine_model),
            ("backend", args.backend),
        )
        if value is not None
    }
    if changes.get("engine_url") and not changes["engine_url"].startswith(("http://", "https://")):
        raise CommandError(f"--url must start with http:// or https://, got {args.url!r}")
    if changes:
        from midword.server.options import set_defaults

        set_defaults(**changes)


def run(args: argparse.Namespace) -> int:
    address = _tcp_address(args.tcp) if args.tcp else None
    from midword.server.logs import setup_logging
    from midword.server.memory import fix_mmap_threshold
    from midword.server.server import build_server

    setup_logging(args.log_level, args.log_file)
    _engine_defaults(args)
    fix_mmap_threshold()  # closed documents' memory goes back to the OS (server/memory.py)
    server = build_server()
    if address is not None:
        server.start_tcp(*address)
    else:
        server.start_io(sys.stdin.buffer, _protocol_stdout())
    return 0
