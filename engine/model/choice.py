"""Which backend runs a model: llama.cpp for a GGUF file, transformers (torch) for a
Hugging Face folder, unless the user says otherwise (``--backend``, the ``backend``
server option, the ``midword.backend`` VS Code setting).

llama.cpp runs a GGUF file as it is (its own quantized kernels: a fraction of the memory
and time of the float32 copy torch needs), so ``auto`` picks it whenever llama-cpp-python
is installed. Without it a GGUF file still runs, converted for torch, and the choice
carries one line saying how to install llama-cpp-python.

Example:
    >>> choose_backend("models/default").backend
    'torch'
    >>> choose_backend("models/default", "llamacpp")
    Traceback (most recent call last):
    ...
    midword.engine.errors.BackendError: --backend llamacpp runs GGUF files; models/default is not one (use --backend torch or auto)
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..gguf.convert import Progress
from .files import is_gguf_file, prepare_model
from .llamacpp import INSTALL_HINT

BACKENDS = ("auto", "llamacpp", "torch")


@dataclass(frozen=True)
class BackendChoice:
    """The backend that runs a model, and why it is not the one asked for (else "")."""

    backend: str  # "llamacpp" or "torch"
    note: str = ""


def llamacpp_available() -> bool:
    """llama-cpp-python can be imported here (checked without importing it)."""
    return importlib.util.find_spec("llama_cpp") is not None


def choose_backend(name: str | Path, backend: str = "auto") -> BackendChoice:
    """The backend for model ``name`` (a folder, hub id or GGUF file) when ``backend``
    is asked for; `BackendError` when the request cannot be met (llama.cpp for a model
    folder, or llama.cpp asked for by name but not installed)."""
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "torch":
        return BackendChoice("torch")
    gguf = is_gguf_file(name)
    if backend == "llamacpp":
        if not gguf:
            raise BackendError(
                f"--backend llamacpp runs GGUF files; {name} is not one "
                "(use --backend torch or auto)"
            )
        if not llamacpp_available():
            raise BackendError(INSTALL_HINT)
        return BackendChoice("llamacpp")
    if not gguf:
        return BackendChoice("torch")
    if llamacpp_available():
        return BackendChoice("llamacpp")
    return BackendChoice(
        "torch",
        f"{Path(name).name} runs on torch from a float32 copy (slower, more memory): {INSTALL_HINT}",
    )


def cpu_threads() -> int:
    """Threads for a model on the CPU: ``MIDWORD_THREADS``, else half the cores (the
    editor and the rest of the machine keep the others; an oversubscribed pool is many
    times slower on a busy machine)."""
    wanted = os.environ.get("MIDWORD_THREADS", "")
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass
class LoadedModel:
    """A model ready to score, where its tokenizer is read from, and which backend runs it."""

    model: Any  # a ScoringModel: HFModel or LlamaCppModel
    tokenizer_source: str  # a model folder or tokenizer file for `load_tokenizer`
    choice: BackendChoice


def load_scoring_model(
    name: str,
    backend: str = "auto",
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
    context_tokens: int | None = None,
) -> LoadedModel:
    """Load model ``name`` on the backend `choose_backend` picks. On llama.cpp the GGUF
    file is used as it is (the tokenizer rebuilt from its metadata, no weights copied);
    on torch a GGUF file is converted once into a cached float32 folder first.

    ``device`` and ``dtype`` apply to torch only: llama.cpp computes in the file's own
    types, on the CPU with the build `make install` makes. ``context_tokens`` applies to
    llama.cpp only: at most this many KV cells in each of its contexts (they are allocated
    up front; default 4,096), and never more than the model's training context.
    """
    choice = choose_backend(name, backend)
    if choice.backend == "llamacpp":
        from .llamacpp import load_llamacpp_model

        cap = {"max_ctx": context_tokens} if context_tokens else {}
        model = load_llamacpp_model(name, n_threads=cpu_threads(), **cap)
        return LoadedModel(model, str(name), choice)
    from .hf_loading import load_hf_model

    if Path(name).expanduser().is_file() and not is_gguf_file(name):  # a wheel, an archive
        raise BackendError(
            f"{name} is a file but not a GGUF model file (it does not start with GGUF's "
            "header): give a .gguf file or a model folder"
        )
    source = prepare_model(name, device=device, dtype=dtype, progress=progress)
    return LoadedModel(load_hf_model(source, device=device, dtype=dtype), source, choice)
