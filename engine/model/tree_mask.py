"""Which architectures take the tree mask exactly, and how their decoders read it.

A covering tree is scored in one forward pass with a 4D tree mask; that is exact only
for decoders whose every layer reads the mask it is given (checked per architecture in
tests/engine/test_architectures.py) and whose rotary embedding does not depend on the
whole context's length. `tree_mask_plan` reads a model config and says how to hand the
mask over (`TreeMaskPlan`), or refuses with a `BackendError`.

Example:
    >>> from types import SimpleNamespace
    >>> tree_mask_plan(SimpleNamespace(model_type="llama"))
    TreeMaskPlan(window=None, by_layer_type=False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BackendError

__all__ = ["VERIFIED_ARCHITECTURES", "TreeMaskPlan", "tree_mask_plan"]

# How a decoder reads the 4D mask it is given (transformers 5; tests/engine/test_architectures.py
# checks each against plain forward passes, sliding windows included):
_ONE_MASK = "one mask"  # every layer reads the mask as is; no sliding window in its code
_ONE_WINDOW = "one mask, config.sliding_window"  # ... and every layer slides when it is set
_BY_LAYER_TYPE = "a mask per config.layer_types"  # {"full_attention": m, "sliding_attention": m}

VERIFIED_ARCHITECTURES: dict[str, str] = {
    "deepseek_v3": _ONE_MASK,
    "gemma": _ONE_MASK,
    "gemma2": _BY_LAYER_TYPE,
    "gemma3_text": _BY_LAYER_TYPE,
    "gpt2": _ONE_MASK,
    "gpt_bigcode": _ONE_MASK,
    "gpt_neox": _ONE_MASK,
    "granite": _ONE_MASK,
    "llama": _ONE_MASK,
    "mistral": _ONE_WINDOW,
    "mixtral": _ONE_WINDOW,
    "olmo": _ONE_MASK,
    "olmo2": _ONE_MASK,
    "phi": _ONE_MASK,
    "phi3": _ONE_WINDOW,
    "qwen2": _BY_LAYER_TYPE,
    "qwen2_moe": _BY_LAYER_TYPE,
    "qwen3": _BY_LAYER_TYPE,
    "qwen3_moe": _ONE_WINDOW,  # Qwen3-Coder-30B-A3B; every layer slides when use_sliding_window
    "starcoder2": _ONE_WINDOW,
}
_LAYER_TYPES = ("full_attention", "sliding_attention")
# rotations that depend on the longest position in the batch: rows cached earlier were
# rotated for a shorter context than the one a plain forward pass would see
_CONTEXT_DEPENDENT_ROPE = ("dynamic", "longrope")


@dataclass(frozen=True)
class TreeMaskPlan:
    """How the tree mask is handed to a model's decoder.

    window: tokens a query of a sliding-window layer sees, itself included (None: no
    sliding layers); by_layer_type: the decoder takes a dict of masks by layer type.
    """

    window: int | None = None
    by_layer_type: bool = False


def tree_mask_plan(config: Any) -> TreeMaskPlan:
    """The `TreeMaskPlan` for a model config, or BackendError if its attention cannot take
    the tree mask exactly (an architecture nobody checked, a layer type other than full or
    sliding attention, a rotary embedding that depends on the context length).

    Example:
        >>> from types import SimpleNamespace
        >>> tree_mask_plan(SimpleNamespace(model_type="mistral", sliding_window=4096))
        TreeMaskPlan(window=4096, by_layer_type=False)
        >>> try:
        ...     tree_mask_plan(SimpleNamespace(model_type="mamba"))
        ... except BackendError as exc:
        ...     print(str(exc)[:59])
        architecture 'mamba' has not been verified to take the tree
    """
    kind = getattr(config, "model_type", None)
    how = VERIFIED_ARCHITECTURES.get(kind or "")
    if how is None:
        raise BackendError(
            f"architecture {kind!r} has not been verified to take the tree mask exactly "
            f"(midword scores a covering tree in one forward pass); verified: "
            f"{', '.join(sorted(VERIFIED_ARCHITECTURES))}"
        )
    _check_rope(kind, config)
    window = getattr(config, "sliding_window", None)
    layer_types = list(getattr(config, "layer_types", None) or [])
    odd = sorted(set(layer_types) - set(_LAYER_TYPES))
    if odd:
        raise BackendError(f"architecture {kind!r}: layer types {odd} cannot take a tree mask")
    sliding = "sliding_attention" in layer_types
    if how == _BY_LAYER_TYPE:
        if sliding and not window:
            raise BackendError(f"architecture {kind!r}: sliding layers without a sliding_window")
        return TreeMaskPlan(window=int(window) if sliding else None, by_layer_type=True)
    if sliding and how == _ONE_MASK:
        raise BackendError(f"architecture {kind!r} is not verified with sliding-window layers")
    if how == _ONE_WINDOW and window:
        return TreeMaskPlan(window=int(window))
    return TreeMaskPlan()


def _check_rope(kind: str | None, config: Any) -> None:
    """BackendError for rotary embeddings whose frequencies follow the context length."""
    found: list[str] = []
    for params in (getattr(config, "rope_parameters", None), getattr(config, "rope_scaling", None)):
        if not isinstance(params, dict):
            continue
        nested = [v for v in params.values() if isinstance(v, dict)]  # per layer type
        for entry in nested or [params]:
            found.append(str(entry.get("rope_type") or entry.get("type") or "default"))
    bad = sorted(set(found) & set(_CONTEXT_DEPENDENT_ROPE))
    if bad:
        raise BackendError(
            f"architecture {kind!r} uses rope type {bad[0]!r}, whose rotation depends on the "
            "whole context's length: cached rows cannot be reused exactly"
        )
