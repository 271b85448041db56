"""Our thin adapter over transformers' KV cache classes.

This is the ONLY module that touches cache internals, so that a transformers
upgrade breaks (at most) this one small file. What the engine needs from a
cache is small: create an empty one, pass it to the model's forward (which
appends K/V rows), ask its length, and keep a chosen list of rows (truncation
and copying garbage collection are both "select rows").

Layouts handled:
* transformers >= 4.56 (including 5.x): ``cache.layers[i].keys / .values``,
  tensors of shape [batch, kv_heads, seq, head_dim];
* older DynamicCache: ``cache.key_cache[i] / cache.value_cache[i]`` lists.

Example:
    >>> kv = KVCache()
    >>> len(kv)
    0
    >>> # model(input_ids, **kv.forward_kwargs(model), use_cache=True) appends rows;
    >>> # kv.select_rows([0, 1, 5]) then keeps rows 0, 1 and 5, in that order.

torch and transformers are imported when a cache is created, not on import.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["KVCache", "UnsupportedCacheError", "cache_argument"]


def cache_argument(model: Any) -> str:
    """Name of the forward argument that takes the KV cache: ``cache`` in the transformers
    versions that renamed it (``past_key_values`` warns there, and goes in 5.40), else
    ``past_key_values``. Read from the signature once per model class.

    Example:
        >>> class New:
        ...     def forward(self, input_ids=None, cache=None): ...
        >>> class Old:
        ...     def forward(self, input_ids=None, past_key_values=None): ...
        >>> cache_argument(New()), cache_argument(Old())
        ('cache', 'past_key_values')
    """
    return _cache_argument_of(type(model))


@functools.lru_cache(maxsize=64)
def _cache_argument_of(model_class: type) -> str:
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class UnsupportedCacheError(RuntimeError):
    """The model built a cache layer we cannot select rows of (sliding window, linear, ...)."""


class KVCache:
    """An append-only transformers DynamicCache plus row selection.

    The cache is created without a model config, so every layer is a plain
    full-attention `DynamicLayer` (sliding-window layers would drop rows on
    their own, which breaks row bookkeeping).
    """

    def __init__(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache()

    @property
    def hf(self) -> Any:
        """The transformers cache object (the model's `cache_argument`)."""
        return self._cache

    def forward_kwargs(self, model: Any) -> dict[str, Any]:
        """``{name: cache}`` for ``model(...)``, under the name this transformers uses."""
        return {cache_argument(model): self._cache}

    def __len__(self) -> int:
        """Number of token positions (rows) held; 0 before the first forward call."""
        return _rows(_layer_tensors(self._cache))

    def layer_tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(keys, values) of every layer, each [batch, kv_heads, seq, head_dim] (for tests)."""
        return _layer_tensors(self._cache)

    def check_layers(self) -> None:
        """Raise UnsupportedCacheError unless every layer holds full K/V rows of equal length.

        Example:
            >>> KVCache().check_layers()   # an empty cache is fine
        """
        lengths = set()
        for layer in getattr(self._cache, "layers", []):
            kind = type(layer).__name__
            if getattr(layer, "is_sliding", False) or not hasattr(layer, "keys"):
                raise UnsupportedCacheError(f"cache layer type {kind} is not supported")
        for keys, values in _layer_tensors(self._cache):
            if keys is None or values is None:
                raise UnsupportedCacheError("a cache layer holds no keys (shared or linear layer)")
            lengths.add((keys.shape[-2], values.shape[-2]))
        if len(lengths) > 1:
            raise UnsupportedCacheError(f"cache layers differ in length: {sorted(lengths)}")

    def select_rows(self, rows: Sequence[int] | np.ndarray) -> None:
        """Keep only `rows` (in the given order) of every layer's keys and values.

        Rows ``0..m-1`` kept in place at the front are never copied: a pure prefix
        is a crop (a view), and otherwise only the rows after the prefix are
        gathered and written back behind it, so garbage collection costs the size
        of the tree, not of the context. A tensor that cannot be written in place
        (it needs grad, or it is an inference tensor outside inference mode) gets
        an index_select instead, one layer at a time.

        Example:
            >>> kv = KVCache()
            >>> kv.select_rows([])   # nothing cached, nothing to do
        """
        idx = np.asarray(rows, dtype=np.int64)  # [R]
        layers = _layer_tensors(self._cache)
        n = _rows(layers)
        if n == 0:
            if len(idx):
                raise IndexError(f"cannot select rows {idx[:4].tolist()}... of an empty cache")
            return
        if len(idx) and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"row index out of range for a cache of {n} rows")
        head = _prefix_run(idx)
        if head == len(idx) == n:
            return
        index: dict[tuple[Any, int], torch.Tensor] = {}  # rows to gather, once per device
        for i, (keys, values) in enumerate(layers):
            if head == len(idx):
                new_k, new_v = keys[..., :head, :], values[..., :head, :]
            elif head and _writable(keys) and _writable(values):
                moved = _index(index, idx, head, keys.device)
                new_k, new_v = _compact(keys, moved, head), _compact(values, moved, head)
            else:
                every = _index(index, idx, 0, keys.device)  # no shared head: a full gather
                new_k, new_v = keys.index_select(-2, every), values.index_select(-2, every)
            _set_layer(self._cache, i, new_k, new_v)


def _prefix_run(idx: np.ndarray) -> int:
    """Length of the leading run ``0, 1, 2, ...`` of idx.

    Example:
        >>> _prefix_run(np.array([0, 1, 5, 3])), _prefix_run(np.array([0, 1]))
        (2, 2)
    """
    diff = np.flatnonzero(idx != np.arange(len(idx)))
    return int(diff[0]) if len(diff) else len(idx)


def _writable(t: torch.Tensor) -> bool:
    """May `t` be changed in place here (no autograd history, no inference-mode rule)?"""
    import torch

    return not t.requires_grad and (not t.is_inference() or torch.is_inference_mode_enabled())


def _compact(t: torch.Tensor, moved: torch.Tensor, head: int) -> torch.Tensor:
    """``t`` with rows ``0..head-1`` and then the rows `moved` (all at or after `head`):
    gathers them (a copy, so overlapping sources are safe), writes them behind the head,
    returns a view of the first ``head + len(moved)`` rows."""
    end = head + len(moved)
    t[..., head:end, :] = t.index_select(-2, moved)  # [B, H, R-head, D]
    return t[..., :end, :]


def _index(
    cache: dict[tuple[Any, int], torch.Tensor], idx: np.ndarray, start: int, device: Any
) -> torch.Tensor:
    """``idx[start:]`` as a long tensor on `device`, made once per device per call."""
    key = (device, start)
    if key not in cache:
        cache[key] = _as_index(idx[start:], device)
    return cache[key]


def _rows(layers: list[tuple[Any, Any]]) -> int:
    """Rows held by the first layer (0 when nothing is cached yet)."""
    if not layers or layers[0][0] is None or layers[0][0].numel() == 0:
        return 0
    return int(layers[0][0].shape[-2])


def _as_index(idx: np.ndarray, device: torch.device) -> torch.Tensor:
    import torch

    return torch.as_tensor(idx, dtype=torch.long, device=device)


def _layer_tensors(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) of each layer, whatever the transformers version."""
    if hasattr(cache, "layers"):
        return [
            (getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers
        ]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    raise UnsupportedCacheError(f"unknown cache class {type(cache).__name__}")


def _set_layer(cache: Any, i: int, keys: Any, values: Any) -> None:
    """Replace layer i's keys and values (both [batch, kv_heads, seq, head_dim])."""
    if hasattr(cache, "layers"):
        cache.layers[i].keys, cache.layers[i].values = keys, values
        return
    cache.key_cache[i], cache.value_cache[i] = keys, values
    if hasattr(cache, "_seen_tokens"):
        cache._seen_tokens = keys.shape[-2]
