"""Loading the configured model(s) for the server: tokenizer, covering-tree tables, weights.

Everything here runs on the loader thread, never on the model worker or the event
loop; `load_backend` returns the `Backend` that the worker then switches to.
Another source of models (GGUF files, a remote engine) joins here: it returns a
`Backend` like the ones below, and the worker serves it unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine (numpy, torch) is imported on first use, not at startup
    from midword.engine import Engine

from .live import Backend, EnsembleModels, SingleModel
from .options import ServerOptions

__all__ = ["WARMUP_PREFIX", "default_model_dir", "load_backend", "short_name", "usable_device"]

log = logging.getLogger("midword.server")
WARMUP_PREFIX = b'def main():\n    print("hello")\n'
ProgressFn = Callable[[str, int], None]  # (message, percentage)


def default_model_dir() -> Path:
    """The model used when none is named (:func:`midword.models.default_model`, found in
    a wheel as in a checkout); when it is missing, where the shipped model belongs, so
    that loading reports that folder as missing."""
    from midword.models import (
        CHECKOUT_TEST_MODEL,
        ModelNotFoundError,
        default_model,
        default_model_note,
    )

    if (missing := default_model_note()) is not None:
        log.warning("%s", missing)
    try:
        return default_model()
    except ModelNotFoundError:
        return CHECKOUT_TEST_MODEL


def model_names(options: ServerOptions) -> list[str]:
    """The model folders or names the options ask for (the ensemble's, or one)."""
    return list(options.ensemble) or [options.model or str(default_model_dir())]


def usable_device(options: ServerOptions) -> tuple[ServerOptions, str]:
    """The options with a device this torch has, and a note for the status when it changed.

    A missing device is a `BackendError` (what was asked, what there is, how to get it),
    unless ``device_fallback`` allows serving on the best device there is instead.
    """
    from midword.engine import BackendError

    if options.engine != "local" or _all_on_llamacpp(options):
        return options, ""  # the engine or llama.cpp runs the model: no torch device here
    from midword.engine import resolve_device

    try:
        resolve_device(options.device)
    except BackendError as exc:
        if not options.device_fallback:
            raise
        fallback = resolve_device("auto").type
        log.warning("%s; serving on %s instead (deviceFallback)", exc, fallback)
        return replace(options, device=fallback), f"{options.device} missing: on {fallback}"
    return options, ""


def _all_on_llamacpp(options: ServerOptions) -> bool:
    """Every configured model runs on llama.cpp (torch is then never imported)."""
    from midword.engine import BackendError, choose_backend

    try:
        return all(
            choose_backend(n, options.backend).backend == "llamacpp" for n in model_names(options)
        )
    except BackendError:  # loading says why, with the model's name
        return False


def load_backend(options: ServerOptions, names: list[str], on_progress: ProgressFn) -> Backend:
    """One model, or the members of the configured ensemble (weights checked first), or a
    remote engine (server/engine_remote.py) with the local tokenizer of ``names[0]``."""
    if options.engine != "local":
        from .engine_remote import load_remote

        return load_remote(options, names[0], on_progress)
    if not options.ensemble:
        model, engine = _load_parts(options, names[0], 0, 1, on_progress)
        template = fim_template(options.fim, model, engine)
        return SingleModel(model, engine, template)
    from midword.engine import check_weights

    weights = options.ensemble_weights or (1.0,) * len(names)
    check_weights(weights, len(names), options.ensemble_combine)  # before anything loads
    members = [
        _load_parts(options, name, k, len(names), on_progress) for k, name in enumerate(names)
    ]
    return EnsembleModels(members, weights, options.ensemble_combine)


def fim_template(setting: str, model: Any, engine: Engine) -> Any:
    """The FIM template for the ``fim`` option (None: prefix-only). A template the
    tokenizer cannot spell is logged, and completions stay prefix-only."""
    from midword.engine import FimError, loaded_model_config, resolve_fim

    try:
        template = resolve_fim(setting, engine.tok, loaded_model_config(model))
    except FimError as exc:
        log.warning("fill-in-the-middle off: %s", exc)
        return None
    log.info("fill-in-the-middle: %s", template.name if template is not None else "off")
    return template


def _load_parts(
    options: ServerOptions, name: str, k: int, n: int, on_progress: ProgressFn
) -> tuple[Any, Engine]:
    """Model ``k`` of ``n``: its tokenizer, covering-tree tables and weights."""
    from midword.engine import (
        BackendError,
        Completer,
        Settings,
        choose_backend,
        load_scoring_model,
    )

    def progress(message: str, percent: int) -> None:
        which = f" ({k + 1}/{n}: {short_name(name)})" if n > 1 else ""
        on_progress(message + which, (100 * k + percent) // n)

    progress("loading the model", 0)
    choice = choose_backend(name, options.backend)
    if choice.note:
        log.warning("%s", choice.note)
    if choice.backend == "torch":
        _quiet_transformers()  # (imports torch: not for a model llama.cpp runs)
    engine = None
    if choice.backend == "llamacpp":
        # its tokenizer is the file's own: read it before llama.cpp maps the weights, so
        # that the reading's passing memory (the metadata as JSON: 200 MiB at a 151,936-token
        # vocabulary) is not added to theirs (1.5 GiB at 1.5B parameters) at the peak
        engine = _load_engine(name, progress, 10)
        progress("loading the model", 50)
    loaded = load_scoring_model(  # torch + a GGUF file: its cached conversion (made once)
        name,
        backend=choice.backend,
        device=options.device,
        dtype=options.dtype,
        progress=lambda message, pct: progress(f"{message} {pct}%", pct * 50 // 100),
        context_tokens=context_tokens(options.window_bytes),
    )
    model = loaded.model
    if engine is None:
        engine = _load_engine(loaded.tokenizer_source, progress, 50)
    if model.vocab_size < engine.tok.size:
        raise BackendError(
            f"the model's vocabulary ({model.vocab_size}) is smaller than the "
            f"tokenizer's ({engine.tok.size})"
        )
    if loaded.choice.backend == "torch" and model.device.type == "cpu":
        _limit_cpu_threads()
    progress("warming up", 90)
    Completer(model, engine).complete(WARMUP_PREFIX, Settings(max_tokens=2))
    _return_freed_memory()
    return model, engine


def context_tokens(window_bytes: int) -> int:
    """The KV cells a llama.cpp context is given for a prompt window of ``window_bytes``
    (they are allocated up front: 4,096 take 112 MiB at Qwen2.5-Coder-1.5B's shape). Code
    runs 3 to 4 bytes a token, so a third of the window and 512 for the tree and the
    completion, in steps of 256, 1,024 to 16,384; a window of denser text that does not
    fit is cut to fit, in whole lines (`ContextFit`), and stays exact.

    >>> context_tokens(4096), context_tokens(64), context_tokens(1 << 20)
    (2048, 1024, 16384)
    """
    wanted = window_bytes // 3 + 512
    return min(16384, max(1024, -(-wanted // 256) * 256))


def _load_engine(source: str, progress: ProgressFn, percent: int) -> Engine:
    """The tokenizer of ``source`` and its covering-tree tables, built now (``percent``:
    where the progress stands); the memory that building freed goes back to the system
    before the model's context and warmup add theirs (the load's peak)."""
    from midword.engine import engine_for, load_tokenizer

    progress("reading the tokenizer", percent)
    engine = engine_for(load_tokenizer(source))  # (SentencePiece: own kind)
    progress("building the covering-tree tables", percent + 10)
    _warm_engine(engine)
    _return_freed_memory()
    return engine


def _warm_engine(engine: Engine) -> None:
    """Build the engine's per-token tables now (cached on disk) rather than on first use."""
    from midword.engine import build_tree

    build_tree(engine, WARMUP_PREFIX)


def _return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). Reading a tokenizer's metadata frees most of what it allocated, but the
    allocator keeps the pages: 58 MiB of the server's resident memory for a
    151,936-token vocabulary, until it exits."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)


def _limit_cpu_threads() -> None:
    """torch's threads on the CPU: `cpu_threads` (half the cores, or MIDWORD_THREADS): the
    editor and the rest of the machine keep the others, and an oversubscribed OpenMP pool
    is many times slower (measured here: a 1-token step took 16 ms on 1 thread, 194 ms on
    2 under load). llama.cpp takes the same count when it loads."""
    import torch
    from midword.engine import cpu_threads

    torch.set_num_threads(cpu_threads())


def _quiet_transformers() -> None:
    """No progress bars or advisory warnings from transformers (stderr noise in the log)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def short_name(name: str) -> str:
    """A model folder's last part (the name shown in the status), else the name itself."""
    path = Path(name)
    return path.name if path.name and path.exists() else name
