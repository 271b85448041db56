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

Growing in place: transformers' `DynamicLayer` appends by ``torch.cat`` of the whole
layer, so every decode step copies every layer's K and V (74 MB a step for a 0.5B
model and a 1,500-token prompt) and churns the allocator with blocks of ever-growing
sizes. Where the installed transformers has the expected layer API (checked once by a
probe against the plain layer), each layer here keeps a buffer with spare rows
(capacity a multiple of `ROW_BLOCK`, grown x`GROWTH`) and writes new rows into it;
its ``keys`` / ``values`` are views of the used rows. Otherwise the plain layer is
kept: the old copies, never other numbers.

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

from ..errors import UnsupportedCacheError

if TYPE_CHECKING:
    import torch

__all__ = [
    "GROWTH",
    "ROW_BLOCK",
    "KVCache",
    "UnsupportedCacheError",
    "cache_argument",
    "prefix_run",
]

ROW_BLOCK = 256  # capacities are multiples of this many rows: few distinct block sizes
GROWTH = 1.5  # a full buffer is replaced by one this much larger: rare reallocations
SHRINK_FACTOR = 4  # a buffer this many times larger than the rows it must hold ...
SHRINK_MIN_ROWS = 4 * ROW_BLOCK  # ... and above this size is replaced by a fitting one


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


class KVCache:
    """An append-only transformers DynamicCache plus row selection.

    The cache is created without a model config, so every layer is a full-attention
    `DynamicLayer` (sliding-window layers would drop rows on their own, which breaks
    row bookkeeping): one that grows in place where the probe passes (see the module
    docstring), unless ``grow_in_place=False`` asks for the plain one.

    Example:
        >>> KVCache().grows_in_place, KVCache(grow_in_place=False).grows_in_place
        (True, False)
    """

    def __init__(self, grow_in_place: bool = True, max_rows: int | None = None) -> None:
        """``max_rows``: the positions the model takes; no buffer is made larger unless
        more rows must be held (spare rows beyond what the model can attend to are waste:
        the shipped test model takes 512, and x1.5 growth would make 768)."""
        from transformers import DynamicCache

        self._cache = DynamicCache()
        self._grows = grow_in_place and _install_growing_layers(self._cache, max_rows)

    @property
    def grows_in_place(self) -> bool:
        """True when new rows are written into buffers with spare capacity."""
        return self._grows

    def capacity(self) -> int:
        """Rows the first layer holds without reallocating (its length when not growing).

        Example:
            >>> KVCache().capacity()
            0
        """
        layers = getattr(self._cache, "layers", [])
        buffer = getattr(layers[0], "_key_buffer", None) if layers else None
        return max(len(self), 0 if buffer is None else int(buffer.shape[-2]))

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
        of the tree, not of the context. With no such prefix, a growing cache still
        writes the gathered rows back into its buffers (which keep their capacity); a
        plain one takes the index_select as it is. A tensor that cannot be written in
        place (it needs grad, or it is an inference tensor outside inference mode) gets
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
        head = prefix_run(idx)
        if head == len(idx) == n:
            return
        index: dict[tuple[Any, int], torch.Tensor] = {}  # rows to gather, once per device
        for i, (keys, values) in enumerate(layers):
            if head == len(idx):
                new_k, new_v = keys[..., :head, :], values[..., :head, :]
            elif (head or self._grows) and _writable(keys) and _writable(values):
                moved = _index(index, idx, head, keys.device)
                new_k, new_v = _compact(keys, moved, head), _compact(values, moved, head)
            else:
                every = _index(index, idx, 0, keys.device)  # no shared head: a full gather
                new_k, new_v = keys.index_select(-2, every), values.index_select(-2, every)
            _set_layer(self._cache, i, new_k, new_v)


def prefix_run(idx: np.ndarray) -> int:
    """Length of the leading run ``0, 1, 2, ...`` of idx.

    Example:
        >>> prefix_run(np.array([0, 1, 5, 3])), prefix_run(np.array([0, 1]))
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


# --------------------------------------------------------------------------------------
# cache layers that grow in place
# --------------------------------------------------------------------------------------


class _GrowInPlace:
    """Mixed in before transformers' `DynamicLayer`: ``update`` writes the new rows into
    a buffer with spare capacity instead of concatenating the whole layer.

    ``keys`` / ``values`` stay what the plain layer would hold (the same rows, shape and
    dtype) but are views of the first rows of ``_key_buffer`` / ``_value_buffer``. Any
    method of the plain layer that replaces them (crop, select, reorder, offload) leaves
    tensors that are not such views, or views it may shorten: `update` checks, and moves
    the rows into a new buffer when the old one cannot take them.
    """

    keys: Any
    values: Any
    is_initialized: bool
    max_rows: int | None = None  # the positions the model takes (see KVCache)
    _key_buffer: torch.Tensor | None = None  # [batch, kv_heads, capacity, head_dim]
    _value_buffer: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new [batch, kv_heads, new, head_dim] rows; return all rows (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)  # type: ignore[attr-defined]
        held = self.get_seq_length()  # type: ignore[attr-defined]
        if _needs_plain_path(key_states, value_states, self.keys, self.values, held):
            self._key_buffer = self._value_buffer = None
            return super().update(key_states, value_states, *args, **kwargs)  # type: ignore[misc]
        total = held + key_states.shape[-2]
        if not (
            _has_room(self._key_buffer, self.keys, key_states, held, total)
            and _has_room(self._value_buffer, self.values, value_states, held, total)
        ):
            self._key_buffer = _moved_to_new_buffer(
                self._key_buffer, self.keys, key_states, held, total, self.max_rows
            )
            self._value_buffer = _moved_to_new_buffer(
                self._value_buffer, self.values, value_states, held, total, self.max_rows
            )
        self.keys = _write_rows(self._key_buffer, key_states, held)
        self.values = _write_rows(self._value_buffer, value_states, held)
        return self.keys, self.values

    def reset(self) -> None:
        """Drop the rows and the buffers, as the plain layer drops its tensors."""
        self._key_buffer = self._value_buffer = None
        super().reset()  # type: ignore[misc]


def _needs_plain_path(
    key_states: torch.Tensor, value_states: torch.Tensor, keys: Any, values: Any, held: int
) -> bool:
    """True where an in-place write could differ from the plain concatenation: inputs with
    autograd history, or held rows of another dtype, device or row shape (cat promotes or
    raises there, as it always did)."""
    import torch

    if torch.is_grad_enabled() and (key_states.requires_grad or value_states.requires_grad):
        return True
    if key_states.shape[:-2] != value_states.shape[:-2]:
        return True
    if held == 0:
        return False
    return not (_same_layout(keys, key_states) and _same_layout(values, value_states))


def _same_layout(held: torch.Tensor, new: torch.Tensor) -> bool:
    """Same dtype, device, and shape but for the row axis (-2)."""
    return (
        held.dim() == new.dim()
        and held.dtype == new.dtype
        and held.device == new.device
        and held.shape[:-2] == new.shape[:-2]
        and held.shape[-1] == new.shape[-1]
    )


def _has_room(
    buffer: torch.Tensor | None, held_rows: Any, new: torch.Tensor, held: int, total: int
) -> bool:
    """May the new rows go into `buffer` behind `held_rows`, without moving them?

    True when `held_rows` are the buffer's first `held` rows (a view of it: same start
    and strides), `total` rows fit, the buffer is not far too large (then a fitting one
    is made, so a long context's memory goes once it is cropped), and it may be written.
    """
    if buffer is None or not _same_layout(buffer, new):
        return False
    capacity = buffer.shape[-2]
    if total > capacity or (capacity > SHRINK_MIN_ROWS and total * SHRINK_FACTOR < capacity):
        return False
    if held and (
        held_rows.data_ptr() != buffer.data_ptr() or held_rows.stride() != buffer.stride()
    ):
        return False
    return _writable(buffer)


def _grown_capacity(total: int, current: int, max_rows: int | None = None) -> int:
    """Rows of a new buffer for `total` rows, replacing one of `current` rows (0: none):
    x`GROWTH` when a full buffer grows, just enough for the first one or when the old one
    is far too large, else the same size; rounded up to a multiple of `ROW_BLOCK`; never
    above ``max_rows`` unless `total` is.

    Example:
        >>> _grown_capacity(1500, 0), _grown_capacity(1537, 1536), _grown_capacity(10, 4096)
        (1536, 2304, 256)
        >>> _grown_capacity(300, 512)   # rows moved out of a buffer that still fits them
        512
        >>> _grown_capacity(520, 512, max_rows=600), _grown_capacity(700, 512, max_rows=600)
        (600, 700)
    """
    rounded = _rounded_capacity(total, current)
    return rounded if max_rows is None else max(total, min(rounded, max_rows))


def _rounded_capacity(total: int, current: int) -> int:
    if total > current > 0:
        target = max(total, int(current * GROWTH))
    elif current == 0 or total * SHRINK_FACTOR < current:
        target = total
    else:
        target = current
    return max(ROW_BLOCK, -(-target // ROW_BLOCK) * ROW_BLOCK)


def _moved_to_new_buffer(
    old: torch.Tensor | None,
    held_rows: Any,
    new: torch.Tensor,
    held: int,
    total: int,
    max_rows: int | None = None,
) -> torch.Tensor:
    """A buffer (`new`'s dtype and device) for `total` rows, replacing `old` (if any),
    with the `held` rows copied in."""
    current = 0 if old is None else int(old.shape[-2])
    shape = (*new.shape[:-2], _grown_capacity(total, current, max_rows), new.shape[-1])
    buffer = new.new_empty(shape)  # [batch, kv_heads, capacity, head_dim]
    if held:
        buffer[..., :held, :].copy_(held_rows)
    return buffer


def _write_rows(buffer: Any, new: torch.Tensor, held: int) -> torch.Tensor:
    """Write `new` behind the first `held` rows of `buffer`; a view of all used rows."""
    count = new.shape[-2]
    buffer.narrow(-2, held, count).copy_(new)  # narrow: a third cheaper than [..., a:b, :]
    return buffer.narrow(-2, 0, held + count)


@functools.lru_cache(maxsize=1)
def _growing_layer_class() -> type | None:
    """`_GrowInPlace` over this transformers' `DynamicLayer`, or None where the probe
    finds that the plain layer does something the subclass would not (another API)."""
    try:
        from transformers.cache_utils import DynamicLayer

        namespace = {"__module__": __name__, "_layer_type": None}  # None: not registered
        growing = type("GrowingDynamicLayer", (_GrowInPlace, DynamicLayer), namespace)
        return growing if _behaves_like(growing, DynamicLayer) else None
    except Exception:  # any API drift: keep the plain layer
        return None


def _behaves_like(growing: type, plain: type) -> bool:
    """Feed both layer classes appends, a crop and a reset; True if they hold the same
    rows (bitwise), report the same lengths and the plain one keeps no extra state."""
    import torch

    a, b = plain(), growing()
    steps = [("update", 3), ("update", 1), ("crop", -2), ("update", 2), ("reset", 0), ("update", 1)]
    for i, (op, n) in enumerate(steps):
        if op == "update":
            k = torch.arange(2 * n * 4, dtype=torch.float32).reshape(1, 2, n, 4) + i  # [1,2,n,4]
            out_a, out_b = a.update(k, -k), b.update(k, -k)
            if not all(torch.equal(x, y) for x, y in zip(out_a, out_b, strict=True)):
                return False
        else:
            getattr(a, op)(*([n] if op == "crop" else []))
            getattr(b, op)(*([n] if op == "crop" else []))
        if a.get_seq_length() != b.get_seq_length() or a.get_mask_sizes(2) != b.get_mask_sizes(2):
            return False
    return set(vars(a)) <= set(vars(b)) and torch.equal(a.keys, b.keys)


def _install_growing_layers(cache: Any, max_rows: int | None = None) -> bool:
    """Make an empty, lazily filled DynamicCache build growing layers (buffers of at most
    ``max_rows`` rows when they can); False (the cache left as it is) where it is not the
    layout this was written for."""
    growing = _growing_layer_class()
    if growing is None or getattr(cache, "layers", None) != []:
        return False
    if growing.__bases__[-1] is not getattr(cache, "layer_class_to_replicate", None):
        return False
    cache.layer_class_to_replicate = _capped(growing, max_rows)
    return True


@functools.lru_cache(maxsize=16)
def _capped(growing: type, max_rows: int | None) -> type:
    """``growing`` whose buffers stop at ``max_rows`` rows (one class per cap: the cache
    makes its layers from a class, with no arguments)."""
    if max_rows is None:
        return growing
    return type(growing.__name__, (growing,), {"__module__": __name__, "max_rows": max_rows})
