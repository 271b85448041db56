"""Loading a Hugging Face causal LM for tree scoring: `load_hf_model` finds a local
checkpoint (a directory or the local Hugging Face cache; never downloads), checks it is a
causal LM whose architecture takes the tree mask (`tree_mask_plan`), loads its weights in
the asked dtype onto the asked device, and wraps it in an `HFModel`. Every failure is a
one-line `BackendError` (`load_hf_model`'s docstring has the example).

torch and transformers are imported lazily (inside functions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendError
from .devices import resolve_device
from .hf_backend import HFModel, _brief
from .tree_mask import tree_mask_plan

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["DTYPES", "load_hf_model"]

DTYPES = ("auto", "float32", "float64", "bfloat16", "float16")


def _resolve_dtype(dtype: str, device: torch.device) -> Any:
    """torch dtype for a name in DTYPES; "auto" is the checkpoint's dtype on cuda, else float32."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    if dtype == "auto":
        return "auto" if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def load_hf_model(
    name_or_dir: str | Path,
    device: str = "auto",
    dtype: str = "auto",
    attn_implementation: str = "sdpa",
) -> HFModel:
    """Load a causal LM from a local directory or the local Hugging Face cache.

    Never downloads (``local_files_only=True``). Every failure to load is raised
    as `BackendError` with a one-line message; a bad `dtype` is a ValueError.

    Example:
        >>> try:
        ...     load_hf_model("/no/such/model")
        ... except BackendError as exc:
        ...     print(exc)
        model directory not found: /no/such/model
    """
    name = str(name_or_dir)
    torch_device = resolve_device(device)  # a device that is not there: say so first
    source = _local_source(name)
    torch_dtype = _resolve_dtype(dtype, torch_device)
    config = _load_config(name, source)
    _check_causal_architecture(name, config)
    _check_causal_model_type(name, config)
    try:  # refuse an architecture the tree mask would be wrong for, before loading weights
        tree_mask_plan(config)
    except BackendError as exc:
        raise BackendError(f"model {name}: {exc}") from exc
    if getattr(config, "attn_logit_softcapping", None):
        attn_implementation = "eager"  # sdpa has no soft-capping (transformers refuses it)
    with _quiet_loading():
        model = _load_weights(name, source, config, torch_dtype, attn_implementation)
    try:
        model.to(torch_device)
    except RuntimeError as exc:
        raise BackendError(f"could not move model {name} to {torch_device}: {_brief(exc)}") from exc
    return HFModel(model, name=name)


def _local_source(name: str) -> str:
    """The directory (or hub id, for the local cache) to load from; BackendError if missing."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise BackendError(f"not a model directory (it is a file): {name}")
        if not (path / "config.json").is_file():
            raise BackendError(f"not a Hugging Face model directory (no config.json): {name}")
        return str(path)
    looks_like_path = path.is_absolute() or name.startswith((".", "~")) or name.count("/") != 1
    if looks_like_path:
        raise BackendError(f"model directory not found: {name}")
    return name  # "org/model": a hub id, resolved from the local cache only


def _load_config(name: str, source: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise BackendError(
            f"model {name} is not a local directory nor in the local Hugging Face cache "
            f"(downloads are disabled): {_brief(exc)}"
        ) from exc


def _load_weights(
    name: str, source: str, config: Any, torch_dtype: Any, attn_implementation: str
) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    _check_causal_architecture(name, config)
    kwargs = {"config": config, "local_files_only": True, _dtype_kwarg(): torch_dtype}
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            source, attn_implementation=attn_implementation, output_loading_info=True, **kwargs
        )
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            kind = getattr(config, "model_type", "?")
            raise BackendError(
                f"model {name} is not a causal language model (model_type={kind})"
            ) from exc
        if attn_implementation != "eager" and "attention" in str(exc).lower():
            return _load_weights(name, source, config, torch_dtype, "eager")
        raise BackendError(f"could not load model {name}: {_brief(exc)}") from exc
    except (OSError, RuntimeError, ImportError, KeyError, TypeError) as exc:
        raise BackendError(f"could not load model {name}: {_brief(exc)}") from exc
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # transformers would fill them with random weights and carry on
        raise BackendError(
            f"model {name}: {len(missing)} weights of the causal LM are missing from the "
            f"checkpoint (first: {missing[0]}); it was not saved as a causal language model"
        )
    return model


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No progress bar or load report from transformers while loading: failures come back
    as one-line BackendErrors (missing weights included), the rest is noise on stderr."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _check_causal_architecture(name: str, config: Any) -> None:
    """BackendError when config.json names only architectures that are not causal LMs.

    AutoModelForCausalLM accepts a BERT folder (as BertLMHeadModel with a random head),
    so the saved architecture is what tells an encoder or classifier apart.

    Example:
        >>> from types import SimpleNamespace
        >>> _check_causal_architecture("m", SimpleNamespace(architectures=["LlamaForCausalLM"]))
        >>> try:
        ...     _check_causal_architecture("m", SimpleNamespace(architectures=["BertModel"]))
        ... except BackendError as exc:
        ...     print(exc)
        model m is not a causal language model (architectures: BertModel)
    """
    names = list(getattr(config, "architectures", None) or [])
    causal = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
    if names and not any(n.endswith(causal) for n in names):
        raise BackendError(
            f"model {name} is not a causal language model (architectures: {', '.join(names)})"
        )


def _check_causal_model_type(name: str, config: Any) -> None:
    """BackendError when transformers has no causal LM class for the config's model_type."""
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:  # moved in some version: from_pretrained's own error says it later
        return
    kind = getattr(config, "model_type", None)
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise BackendError(f"model {name} is not a causal language model (model_type={kind})")


def _dtype_kwarg() -> str:
    """Name of from_pretrained's dtype argument: "dtype" since transformers 4.56."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
