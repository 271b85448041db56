"""What ``--model`` names, made into a folder the loaders read: the one place the CLI
and the language server turn a model name into files.

A model folder (Hugging Face layout) or a hub id from the local cache is used as it is.
A ``.gguf`` file (llama.cpp, Ollama, LM Studio) is converted once into a cached folder
by :mod:`midword.engine.gguf`, in the precision the run asks for, and that folder is used.

Example:
    >>> prepare_model("models/default")
    'models/default'
    >>> storage_dtype("float16", "cpu"), storage_dtype("auto", "cpu"), storage_dtype("float64", "cpu")
    ('float16', 'float32', 'float32')
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from .gguf import Progress, convert_gguf

GGUF_MAGIC = b"GGUF"
DTYPES = ("auto", "float32", "float16", "bfloat16", "float64")


def is_gguf_file(name: str | Path) -> bool:
    """A file that starts with GGUF's magic bytes (a folder or a hub id is not)."""
    path = Path(name).expanduser()
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def storage_dtype(dtype: str, device: str = "auto") -> str:
    """The precision a GGUF file's weights are stored in for a run's --dtype and --device.

    The dequantized values are exact in float32, so float64 runs load the float32 copy
    (the loader widens it); "auto" is float32 on the CPU and bfloat16 on a GPU.
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    if dtype == "float64":
        return "float32"
    if dtype != "auto":
        return dtype
    if device == "cpu":
        return "float32"
    from .hf_backend import resolve_device

    return "bfloat16" if resolve_device(device).type == "cuda" else "float32"


def prepare_model(
    name: str, device: str = "auto", dtype: str = "auto", progress: Progress | None = None
) -> str:
    """The folder (or hub id) to load for ``name``: a GGUF file's cached conversion
    (made now if missing; ``progress(message, percent)`` follows it), else ``name``."""
    if not is_gguf_file(name):
        return name
    return str(convert_gguf(name, storage_dtype(dtype, device), progress))


def stderr_progress(stream: TextIO | None = None, width: int = 30) -> Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a line per quarter
    otherwise (logs, pipes)."""
    out = stream if stream is not None else sys.stderr
    live = out.isatty()
    state = {"shown": -1, "started": time.perf_counter()}

    def show(message: str, percent: int) -> None:
        step = percent if live else percent // 25 * 25
        if step == state["shown"]:
            return
        state["shown"] = step
        filled = width * percent // 100
        seconds = time.perf_counter() - state["started"]
        line = f"{message}: [{'#' * filled}{' ' * (width - filled)}] {percent:3d}% {seconds:.0f} s"
        end = "\n" if not live or percent >= 100 else ""
        out.write(("\r" if live else "") + line + end)
        out.flush()

    return show
