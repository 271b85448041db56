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
    parser.add_argument(
        "--backend",
        choices=("auto", "llamacpp", "torch"),
        default="auto",
        help="what computes the model: auto (default: llama.cpp for a GGUF file when "
        "llama-cpp-python is installed, else torch), llamacpp (GGUF files as they are), "
        "torch (transformers; a GGUF file is converted to a cached float32 copy)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="torch's device: auto (cuda > mps > cpu), cuda, cpu ... (llama.cpp: its build's)",
    )
    parser.add_argument(
        "--dtype", default="auto", help="auto, float32, float16, bfloat16 or float64 (CPU)"
    )


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine/--url/--engine-model: score on a vLLM server (the tokenizer stays local)."""
    parser.add_argument(
        "--engine",
        choices=("local", "vllm"),
        default="local",
        help="where the model runs: local (default, in process) or vllm (a vLLM server at "
        "--url; --model then only gives the tokenizer; API key from MIDWORD_ENGINE_API_KEY)",
    )
    parser.add_argument("--url", metavar="URL", help="the vLLM server, e.g. http://gpu-box:8000")
    parser.add_argument(
        "--engine-model",
        metavar="NAME",
        help="the served model's name (default: the one model the server serves)",
    )


def load_model_and_engine(args: argparse.Namespace) -> tuple[Any, Any]:
    """(model, Engine) from --model/--tokenizer/--backend/--device/--dtype (or a remote
    engine); CommandError on failure."""
    from midword.engine import (
        BackendError,
        TokenizerError,
        load_engine,
        resolve_device,
    )

    if args.model is None:  # no --model, and the default model is missing
        try:
            args.model = str(default_model())
        except ModelNotFoundError as exc:
            raise CommandError(str(exc)) from exc
    try:  # a device that is not there fails before any loading (a remote engine has its own)
        if getattr(args, "engine", "local") == "local":
            resolve_device(args.device)
    except BackendError as exc:
        raise CommandError(str(exc)) from exc
    if args.model == default_model_arg():
        note_default_model()
    if getattr(args, "engine", "local") != "local":
        return connect_remote(args)
    loaded = load_local_model(args)
    try:
        engine = load_engine(args.tokenizer or loaded.tokenizer_source)
    except (TokenizerError, OSError) as exc:
        raise CommandError(f"cannot load the tokenizer: {exc}") from exc
    model = loaded.model
    if model.vocab_size < engine.tok.size:
        raise CommandError(
            f"the model's vocabulary ({model.vocab_size}) is smaller than the tokenizer's "
            f"({engine.tok.size}): they do not belong together"
        )
    return model, engine


def load_local_model(args: argparse.Namespace) -> Any:
    """The model of --model on --backend (a `LoadedModel`); CommandError on failure.

    On torch a GGUF file is converted first (once: later runs load the cached folder),
    with a progress bar on stderr. A fallback from llama.cpp to torch is said on stderr.
    """
    from midword.engine import (
        BackendError,
        GGUFError,
        ModelNotFoundError,
        load_scoring_model,
        stderr_progress,
    )

    try:
        loaded = load_scoring_model(
            args.model,
            backend=getattr(args, "backend", "auto"),
            device=args.device,
            dtype=args.dtype,
            progress=stderr_progress(),
        )
    except (ModelNotFoundError, BackendError) as exc:
        raise CommandError(str(exc)) from exc
    except (GGUFError, ValueError, OSError) as exc:
        raise CommandError(f"cannot use {args.model}: {exc}") from exc
    if loaded.choice.note:
        print(f"midword: {loaded.choice.note}", file=sys.stderr)
    return loaded


def connect_remote(args: argparse.Namespace) -> tuple[Any, Any]:
    """(VLLMModel, Engine): the local tokenizer of --model, checked against --url's."""
    from midword.engine import BackendError, TokenizerError, connect_vllm, load_engine

    if not args.url:
        raise CommandError("--engine vllm needs --url (e.g. http://127.0.0.1:8000)")
    source = prepare_model_source(args.model, "cpu", args.dtype)
    try:
        engine = load_engine(args.tokenizer or source)
    except (TokenizerError, OSError) as exc:
        raise CommandError(f"cannot load the tokenizer: {exc}") from exc
    try:
        model = connect_vllm(args.url, engine, model_name=args.engine_model, model_dir=source)
    except BackendError as exc:
        raise CommandError(str(exc)) from exc
    return model, engine


def prepare_model_source(model: str, device: str, dtype: str) -> str:
    """The folder to load for --model (a GGUF file's cached conversion); CommandError when
    a GGUF file cannot be converted exactly."""
    from midword.engine import GGUFError, ModelNotFoundError, prepare_model, stderr_progress

    try:
        return prepare_model(model, device=device, dtype=dtype, progress=stderr_progress())
    except ModelNotFoundError as exc:
        raise CommandError(str(exc)) from exc
    except (GGUFError, ValueError, OSError) as exc:
        raise CommandError(f"cannot use {model}: {exc}") from exc


def note_default_model() -> None:
    """On stderr: how to install the default model (SmolLM2-135M) when it is missing."""
    note = default_model_note()
    if note is not None:
        print(f"midword: {note}", file=sys.stderr)


def add_fim_arguments(parser: argparse.ArgumentParser) -> None:
    """--fim, --suffix and --suffix-file (fill-in-the-middle, docs/fim.md)."""
    parser.add_argument(
        "--fim",
        default="auto",
        metavar="auto|off|TEMPLATE",
        help="fill-in-the-middle template: auto (default: the model's own, if it has FIM "
        "tokens, when a suffix is given), off, or a name (qwen, qwen-spm, deepseek, "
        "starcoder, starcoder-spm, codellama, codestral)",
    )
    suffix = parser.add_mutually_exclusive_group()
    suffix.add_argument(
        "--suffix", metavar="TEXT", help="text after the cursor (fill-in-the-middle)"
    )
    suffix.add_argument(
        "--suffix-file", metavar="PATH", help="file whose bytes come after the cursor"
    )


def read_suffix(args: argparse.Namespace) -> bytes | None:
    """The --suffix / --suffix-file bytes, or None when neither is given."""
    if args.suffix is not None:
        return args.suffix.encode("utf-8", errors="surrogateescape")
    if args.suffix_file is not None:
        try:
            with open(args.suffix_file, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise CommandError(f"cannot read --suffix-file: {exc}") from exc
    return None


def fim_template(args: argparse.Namespace, model: Any, engine: Any) -> Any:
    """The FIM template to use (None: prefix-only). ``auto`` uses one only when a suffix
    is given and says on stderr when the model has none; a named template the tokenizer
    cannot spell is a CommandError."""
    from midword.engine import FimError, loaded_model_config, resolve_fim

    suffix = read_suffix(args)
    if args.fim == "off" or (args.fim == "auto" and suffix is None):
        return None
    if getattr(args, "engine", "local") != "local":
        raise CommandError("fill-in-the-middle (--suffix, --fim) runs on a local model")
    try:
        template = resolve_fim(args.fim, engine.tok, loaded_model_config(model))
    except FimError as exc:
        raise CommandError(str(exc)) from exc
    if template is None:
        note = "FIM off (the model has no FIM tokens): the suffix is ignored"
        print(f"midword: {note}", file=sys.stderr)
    return template
