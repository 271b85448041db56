"""What ``--model`` names, made into a folder the loaders read: the one place the CLI
and the language server turn a model name into files.

A model folder (Hugging Face layout) is used as it is; a hub id (``org/model``) becomes its
snapshot folder in the local Hugging Face cache (midword never downloads). A ``.gguf`` file
(llama.cpp, Ollama, LM Studio) is converted once into a cached folder by
:mod:`midword.engine.gguf.convert`, in the precision the run asks for, and that folder is used.
Anything else is a :class:`ModelNotFoundError` that says what was looked for.

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

from ..errors import ModelNotFoundError
from ..gguf.convert import Progress, convert_gguf

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
    from .devices import resolve_device

    return "bfloat16" if resolve_device(device).type == "cuda" else "float32"


def prepare_model(
    name: str, device: str = "auto", dtype: str = "auto", progress: Progress | None = None
) -> str:
    """The folder to load for ``name``: a GGUF file's cached conversion (made now if
    missing; ``progress(message, percent)`` follows it), a hub id's cached snapshot, else
    ``name`` itself (a folder)."""
    if is_gguf_file(name):
        return str(convert_gguf(name, storage_dtype(dtype, device), progress))
    return local_model(name)


def local_model(name: str, hub_cache: str | Path | None = None) -> str:
    """``name`` when it is a file or folder here, else the snapshot folder of the hub id
    ``name`` in the Hugging Face cache (``hub_cache``, default ``$HF_HUB_CACHE``, which
    ``huggingface-cli download`` fills); :class:`ModelNotFoundError` when neither exists.

    >>> local_model("models/default")
    'models/default'
    """
    if Path(name).expanduser().exists():
        return name
    if not _could_be_hub_id(name):
        raise ModelNotFoundError(f"model not found: no file or folder {name}")
    snapshot = _cached_snapshot(name, hub_cache)
    if snapshot is None:
        where = hub_cache or _default_hub_cache()
        raise ModelNotFoundError(
            f"model not found: {name} is no file or folder here, nor a model in the local "
            f"Hugging Face cache ({where}); midword never downloads: fetch it first "
            f"(`huggingface-cli download {name}`) or pass a model folder or .gguf file"
        )
    return snapshot


def _could_be_hub_id(name: str) -> bool:
    """``org/model`` or a bare legacy name such as ``gpt2``: not a path people type."""
    return (
        name.count("/") <= 1
        and not name.startswith(("/", ".", "~"))
        and not name.endswith(("/", ".gguf"))
        and "\\" not in name
    )


def _cached_snapshot(repo_id: str, hub_cache: str | Path | None) -> str | None:
    """The cached snapshot of ``repo_id`` (its ``main`` revision), None when absent."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
    except ImportError:  # a tokenizer-only install (no transformers): no hub cache
        return None
    try:
        return snapshot_download(repo_id, cache_dir=hub_cache, local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError):
        return None


def _default_hub_cache() -> str:
    try:
        from huggingface_hub import constants
    except ImportError:
        return "~/.cache/huggingface/hub"
    return str(constants.HF_HUB_CACHE)


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
