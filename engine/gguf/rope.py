"""Rope scaling of a GGUF file as transformers' ``rope_parameters``: what llama.cpp reads
from the ``<arch>.rope.*`` metadata and the ``rope_freqs.weight`` tensor, mapped onto a
transformers rope type only when that type gives the same inverse frequencies.

llama.cpp's reading (``llama-model.cpp``, ``llama-context.cpp``): ``rope.scaling.type``
defaults to ``linear``; the factor is ``rope.scaling.factor``, else the older
``rope.scale_linear``, and 0 or absent means 1; type ``none`` never scales. Linear
scaling divides every inverse frequency by the factor: transformers' ``linear`` rope.

Llama 3.1 / 3.2 files carry no scaling metadata: llama.cpp's converter writes the
per-frequency factors of Llama 3's rope (``rope_type: llama3``) as a tensor,
``rope_freqs.weight``, and llama.cpp divides each inverse frequency by its factor. The
parameters behind them (factor, low and high frequency factors, original context) are
recovered by :func:`llama3_parameters` and kept only if transformers' own ``llama3``
inverse frequencies with them equal the file's (float32, within one unit in the last
place); otherwise the file is refused.

Example (Llama 3.1's factors for a head of 128, rope base 500,000)::

    >>> plain = inverse_frequencies(500000.0, 128, NO_SCALING)
    >>> llama31 = {"rope_type": "llama3", "factor": 8.0} | LLAMA3_SHIPPED
    >>> factors = plain / inverse_frequencies(500000.0, 128, llama31)
    >>> p = llama3_parameters(factors, 500000.0, 128, "x.gguf")
    >>> p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    (8.0, 1.0, 4.0)
    >>> p["original_max_position_embeddings"]
    8192
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import GGUFError
from .reader import GGUFFile, shortest_float

ROPE_FREQS = "rope_freqs.weight"  # llama.cpp's tensor of per-frequency factors
LONGROPE_FACTORS = frozenset({"rope_factors_long.weight", "rope_factors_short.weight"})
# the values Llama 3.1 (factor 8) and Llama 3.2 (factor 32) ship with, besides the factor
LLAMA3_SHIPPED: dict[str, Any] = {
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
NO_SCALING: dict[str, Any] = {"rope_type": "linear", "factor": 1.0}  # (dividing by 1: exact)
MAX_ULPS = 1  # float32 units in the last place allowed between the file's and transformers'


def rope_parameters(gf: GGUFFile, base: float, head_dim: int) -> dict[str, Any] | None:
    """The scaling part of transformers' ``rope_parameters`` (None: no scaling); GGUFError
    for a scaling transformers cannot reproduce exactly."""
    where = gf.path.name
    _refuse_other_scalings(gf)
    factor = _scaling_factor(gf)
    linear = _scaling_type(gf) == "linear" and factor not in (0.0, 1.0)
    if ROPE_FREQS not in gf.tensor_names():
        return {"rope_type": "linear", "factor": shortest_float(factor)} if linear else None
    if gf.arch != "llama":
        raise GGUFError(f"{where}: rope frequency factors ({ROPE_FREQS}) in a {gf.arch} file")
    if linear:
        raise GGUFError(
            f"{where}: both rope frequency factors and linear rope scaling (factor {factor}); "
            "midword models one or the other"
        )
    return llama3_parameters(read_factors(gf), base, head_dim, where)


def _refuse_other_scalings(gf: GGUFFile) -> None:
    """LongRoPE factor tensors, scaling types other than none and linear, an attention
    factor: refused by name."""
    where = gf.path.name
    if gf.tensor_names() & LONGROPE_FACTORS:
        raise GGUFError(
            f"{where}: LongRoPE factors ({', '.join(sorted(LONGROPE_FACTORS))}: Phi-3 128k, "
            "Phi-3.5) are not modelled"
        )
    kind = _scaling_type(gf)
    if kind not in ("none", "linear"):
        raise GGUFError(
            f"{where}: rope scaling {kind!r} is not supported (midword maps 'linear' "
            "scaling and Llama 3's rope frequency factors)"
        )
    if float(gf.arch_value("rope.scaling.attn_factor", 1.0)) != 1.0:
        raise GGUFError(f"{where}: {gf.arch}.rope.scaling.attn_factor is set; not modelled")


def _scaling_type(gf: GGUFFile) -> str:
    return str(gf.arch_value("rope.scaling.type", "linear"))


def _scaling_factor(gf: GGUFFile) -> float:
    value = gf.arch_value("rope.scaling.factor", None)
    if value is None:
        value = gf.arch_value("rope.scale_linear", 0.0)  # the older key llama.cpp still reads
    return float(value)


def read_factors(gf: GGUFFile) -> np.ndarray:
    """The ``rope_freqs.weight`` tensor as float32 (llama.cpp's converter writes it F32)."""
    from gguf.quants import dequantize

    tensor = next(t for t in gf.tensors if t.name == ROPE_FREQS)
    return np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).ravel()


# ------------------------------------------------------------------ Llama 3's factors
def inverse_frequencies(base: float, head_dim: int, params: dict[str, Any]) -> np.ndarray:
    """transformers' own inverse frequencies for ``params`` (a rope type and its fields)."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=head_dim,
        num_attention_heads=1,
        head_dim=head_dim,
        max_position_embeddings=1 << 30,  # (above any original context: no warning)
        rope_parameters={**params, "rope_theta": base},
    )
    inv_freq, _ = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu")
    return inv_freq.numpy().astype(np.float32)


def llama3_parameters(
    factors: np.ndarray, base: float, head_dim: int, where: str
) -> dict[str, Any] | None:
    """transformers' ``llama3`` rope parameters that reproduce ``factors`` (None when every
    factor is 1: no scaling); GGUFError when none do."""
    if factors.shape != (head_dim // 2,) or not np.all(np.isfinite(factors) & (factors > 0)):
        raise GGUFError(
            f"{where}: {ROPE_FREQS} holds {factors.size} factors, not one positive finite "
            f"factor per rotary pair of a head of {head_dim}"
        )
    plain = inverse_frequencies(base, head_dim, NO_SCALING)
    if np.all(factors == 1):
        return None
    in_file = (plain / factors).astype(np.float32)  # what llama.cpp rotates by
    for params in _llama3_candidates(factors, plain):
        if _within_ulps(inverse_frequencies(base, head_dim, params), in_file):
            return params
    raise GGUFError(
        f"{where}: the rope frequency factors in {ROPE_FREQS} ({_preview(factors)}) match "
        "no Llama 3 rope parameters (transformers' llama3 rope with any factor, low/high "
        "frequency factors and original context gives other frequencies); refused rather "
        "than approximated"
    )


def _llama3_candidates(factors: np.ndarray, plain: np.ndarray) -> Iterator[dict[str, Any]]:
    """Llama 3.1 / 3.2's shipped values with the file's largest factor, then parameters
    solved from the blended factors (at least two are needed)."""
    factor = float(factors.max())
    base = {"rope_type": "llama3", "factor": shortest_float(factor)}
    yield base | LLAMA3_SHIPPED
    solved = _solve_blend(factors, plain, factor)
    if solved is not None:  # the roundest values first: trained configs hold round numbers
        old, high = solved
        for digits in (0, 1, 2, 3, 4, 6):
            yield base | {
                "low_freq_factor": 1.0,
                "high_freq_factor": round(high, digits) + 0.0,
                "original_max_position_embeddings": round(old),
            }


def _solve_blend(
    factors: np.ndarray, plain: np.ndarray, factor: float
) -> tuple[float, float] | None:
    """(original context, high frequency factor) with the low one 1, from the blended
    factors (the three enter only through their ratios, so fixing one loses nothing).

    A blended factor is ``1 / ((1 - s) / factor + s)`` with ``s = (old / wavelength - 1) /
    (high - 1)``: ``s`` is a straight line in 1 / wavelength, fitted here.
    """
    blended = (factors != 1) & (factors != np.float32(factor))
    if blended.sum() < 2 or factor <= 1:
        return None
    f = factors[blended].astype(np.float64)
    s = (1 / f - 1 / factor) / (1 - 1 / factor)
    inv_wavelen = plain[blended].astype(np.float64) / (2 * math.pi)
    slope, intercept = np.polyfit(inv_wavelen, s, 1)  # s = old/(high-1) * x - 1/(high-1)
    if intercept >= 0 or slope <= 0:
        return None
    high = 1 - 1 / intercept
    return float(slope * (high - 1)), float(high)


def _within_ulps(a: np.ndarray, b: np.ndarray) -> bool:
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    return a.shape == b.shape and bool(np.all(np.abs(ia - ib) <= MAX_ULPS))


def _preview(values: np.ndarray) -> str:
    shown = ", ".join(f"{v:.6g}" for v in values[:6])
    return f"{shown}, ..." if values.size > 6 else shown
