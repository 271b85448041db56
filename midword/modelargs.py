"""Model options shared by the commands that run a model (next-bytes, complete, bench)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from midword.cli import CommandError
from midword.models import ModelNotFoundError, default_model, default_model_note


def default_model_arg() -> str | None:
    """``--model``'s default: the model :func:`midword.models.default_model` finds (None
    when it finds none; loading then says what is missing)."""
    try:
        return str(default_model())
    except ModelNotFoundError:
        return None


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=default_model_arg(),
        help="model directory, GGUF file (converted once, cached) or hub id from the local "
        "cache (default: SmolLM2-135M if installed, else the shipped model)",
    )
    parser.add_argument("--tokenizer", help="tokenizer.json (default: the model's own)")
    parser.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cuda, cpu ...")
    parser.add_argument(
        "--dtype", default="auto", help="auto, float32, float16, bfloat16 or float64 (CPU)"
    )


def load_model_and_engine(args: argparse.Namespace) -> tuple[Any, Any]:
    """(HFModel, Engine) from --model/--tokenizer/--device/--dtype; CommandError on failure.

    A GGUF file is converted first (once: later runs load the cached folder), with a
    progress bar on stderr.
    """
    from midword.engine import load_engine
    from midword.engine.backend import BackendError
    from midword.engine.hf_backend import load_hf_model, resolve_device
    from midword.engine.tokenizer import TokenizerError

    if args.model is None:  # no --model, and the default model is missing
        try:
            args.model = str(default_model())
        except ModelNotFoundError as exc:
            raise CommandError(str(exc)) from exc
    try:
        resolve_device(args.device)  # a device that is not there fails before any loading
    except BackendError as exc:
        raise CommandError(str(exc)) from exc
    if args.model == default_model_arg():
        note_default_model()
    source = prepare_model_source(args.model, args.device, args.dtype)
    try:
        engine = load_engine(args.tokenizer or source)
    except (TokenizerError, OSError) as exc:
        raise CommandError(f"cannot load the tokenizer: {exc}") from exc
    try:
        model = load_hf_model(source, device=args.device, dtype=args.dtype)
    except (BackendError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
    if model.vocab_size < engine.tok.size:
        raise CommandError(
            f"the model's vocabulary ({model.vocab_size}) is smaller than the tokenizer's "
            f"({engine.tok.size}): they do not belong together"
        )
    return model, engine


def prepare_model_source(model: str, device: str, dtype: str) -> str:
    """The folder to load for --model (a GGUF file's cached conversion); CommandError when
    a GGUF file cannot be converted exactly."""
    from midword.engine.gguf import GGUFError
    from midword.engine.model_files import prepare_model, stderr_progress

    try:
        return prepare_model(model, device=device, dtype=dtype, progress=stderr_progress())
    except (GGUFError, ValueError, OSError) as exc:
        raise CommandError(f"cannot use {model}: {exc}") from exc


def note_default_model() -> None:
    """On stderr: how to install the default model (SmolLM2-135M) when it is missing."""
    note = default_model_note()
    if note is not None:
        print(f"midword: {note}", file=sys.stderr)
