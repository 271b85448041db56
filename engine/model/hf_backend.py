"""Hugging Face transformers backend: tree attention over a garbage-collected KV cache.

`HFModel` wraps a transformers causal LM (see engine/model/hf_loading.py for
`load_hf_model`, which loads one from a local checkpoint); `HFModel.session()` opens an
`HFSession`, the transformers implementation of `ScoringSession` (see
engine/model/backend.py for the semantics and the shared bookkeeping). Which
architectures take the tree mask is engine/model/tree_mask.py; devices are
engine/model/devices.py.

One `logprobs` call is one forward pass: the new tokens go in with a float 4D
attention mask [1, 1, Q, K+Q] (0 where a token may attend, the dtype's minimum
elsewhere) and explicit position ids on top of the cached rows; both the eager
and the sdpa attention of transformers 5 take such a mask as is (checked: a
boolean mask is silently wrong with eager, so we always pass a float one).

Example:
    >>> model = load_hf_model("models/tiny", dtype="float32")      # doctest: +SKIP
    >>> session = model.session(bos_id=model.bos_token_id)        # doctest: +SKIP
    >>> session.logprobs([15, 16], [(), (17,), (17, 18)]).shape   # doctest: +SKIP
    (3, 8192)

torch and transformers are imported lazily (inside functions).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendError, ForwardStopped, UnsupportedCacheError
from .backend import TreeScoringSession
from .context_fit import context_length
from .cpu_head import speed_up_output_head
from .forward_plan import ForwardStep
from .kvcache import KVCache, cache_argument
from .tree_mask import TreeMaskPlan, tree_mask_plan

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["HFModel", "HFSession"]

_MASKABLE_ATTENTION = (None, "eager", "sdpa")  # implementations that accept a float 4D mask


def _brief(exc: BaseException) -> str:
    """First line of an exception's message, with its type.

    Example:
        >>> _brief(OSError("no file\\nmore detail"))
        'OSError: no file'
    """
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


class HFModel:
    """A loaded transformers causal LM, ready to open scoring sessions.

    Wrap an in-memory model directly (tests do), or get one from `load_hf_model`.

    Example:
        >>> from transformers import AutoModelForCausalLM          # doctest: +SKIP
        >>> hf = HFModel(AutoModelForCausalLM.from_config(cfg))    # doctest: +SKIP
        >>> hf.sequence_logprobs([1, 2, 3]).shape                  # doctest: +SKIP
        (3, 300)
    """

    backend = "torch"  # what computes it (the server's status names it)

    def __init__(self, model: PreTrainedModel, name: str = "") -> None:
        impl = getattr(model.config, "_attn_implementation", None)
        if impl not in _MASKABLE_ATTENTION:
            raise BackendError(
                f"attention implementation {impl!r} cannot take a tree mask; use sdpa or eager"
            )
        if getattr(model.config, "attn_logit_softcapping", None) and impl != "eager":
            raise BackendError(
                f"attention logit soft-capping needs eager attention (the model has {impl!r})"
            )
        self.mask_plan = tree_mask_plan(model.config)
        self.model = model.eval()
        self.name = name or getattr(model.config, "name_or_path", "")
        self.vocab_size = _output_size(model)
        self.input_vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.context_length = context_length(model.config)  # positions it takes, if declared
        self.bos_token_id: int | None = getattr(model.config, "bos_token_id", None)
        self.eos_token_id: Any = getattr(model.config, "eos_token_id", None)
        params = inspect.signature(model.forward).parameters
        self.keeps_logits = "logits_to_keep" in params
        self.cache_argument = cache_argument(model)  # "cache" since transformers 5.2x
        # Read per forward call: one parameter's attributes are cheaper than the model's
        # properties, and .to() moves parameters in place, so they stay current.
        self._weight = _first_float_parameter(model)
        # few-row output heads on a CPU: see cpu_head (a no-op elsewhere)
        self.head_plan = speed_up_output_head(model)
        self.layers = decoder_layers(model)  # where a pass may stop (stop_inside_forward)

    @property
    def device(self) -> torch.device:
        """Device of the model's weights (inputs go there)."""
        return self._weight.device if self._weight is not None else self.model.device

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the model's weights (the attention mask uses it)."""
        return self._weight.dtype if self._weight is not None else self.model.dtype

    def session(self, bos_id: int | None = None, trunk_logits_window: int = 8) -> HFSession:
        """A new `HFSession` with an empty cache."""
        return HFSession(self, bos_id=bos_id, trunk_logits_window=trunk_logits_window)

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), vocab]: plain forward pass, no cache; row i follows tokens[:i+1].

        This is the reference the sessions are tested against.
        """
        import torch

        ids = torch.as_tensor(list(tokens), dtype=torch.long, device=self.device)[None]  # [1, n]
        with torch.inference_mode():
            try:
                logits = self.model(input_ids=ids, use_cache=False).logits[0]  # [n, V]
            except RuntimeError as exc:
                raise BackendError(f"model forward failed: {_brief(exc)}") from exc
        return _to_logprobs(logits)


def decoder_layers(model: PreTrainedModel) -> list[Any]:
    """The model's stack of decoder layers, in order: the module list as long as the
    config's layer count (``model.layers``, GPT-2's ``transformer.h``, ...); [] if there
    is no single such list."""
    import torch

    count = getattr(model.config, "num_hidden_layers", None)
    stacks = [
        module
        for module in model.modules()
        if isinstance(module, torch.nn.ModuleList) and len(module) == count
    ]
    return list(stacks[0]) if len(stacks) == 1 else []


def _first_float_parameter(model: PreTrainedModel) -> torch.nn.Parameter | None:
    """The first floating-point parameter (what transformers reads for ``model.dtype``)."""
    return next((p for p in model.parameters() if p.is_floating_point()), None)


def _output_size(model: PreTrainedModel) -> int:
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def _to_logprobs(logits: torch.Tensor) -> np.ndarray:
    """[L, V] logits on any device -> float64 numpy log-softmax on CPU.

    A float64 model keeps float64 throughout (the exactness tests run on one). Lower
    precisions are normalized in float32 on the model's device, which is exact to the
    logits' own rounding: float64 there costs 3x the time on a CPU, is slow on most
    GPUs, and doubles the bytes copied back.
    """
    import torch

    if logits.dtype != torch.float64:
        logits = logits.float()
    return logits.log_softmax(dim=-1).cpu().numpy().astype(np.float64, copy=False)


class HFSession(TreeScoringSession):
    """`ScoringSession` over an `HFModel`, with tree attention and a copying GC.

    Example:
        >>> session = hf_model.session(bos_id=1)                  # doctest: +SKIP
        >>> session.logprobs([5, 6], [(), (7,), (7, 8)]).shape     # doctest: +SKIP
        (3, 300)
        >>> session.cache_len()                                    # doctest: +SKIP
        5
    """

    def __init__(
        self, model: HFModel, bos_id: int | None = None, trunk_logits_window: int = 8
    ) -> None:
        super().__init__(model.vocab_size, bos_id, model.input_vocab_size, trunk_logits_window)
        self.model = model
        self._kv = KVCache(max_rows=model.context_length)
        self._checked_layers = -1  # layer count at the last full check_layers()

    def cache_len(self) -> int:
        """Rows physically held by the transformers cache."""
        return len(self._kv)

    def _clear(self) -> None:
        self._kv = KVCache(max_rows=self.model.context_length)
        self._checked_layers = -1

    @contextlib.contextmanager
    def stop_inside_forward(self, should_stop: Callable[[], bool]) -> Iterator[None]:
        """`TreeScoringSession.stop_inside_forward`: ``should_stop()`` is asked before each
        decoder layer (a hook on the model's layers while the block runs). A model whose
        layers are not found runs its passes to their end."""

        def check(module: Any, args: Any) -> None:
            if should_stop():
                raise ForwardStopped("stopped between two layers of a forward pass")

        hooks = [layer.register_forward_pre_hook(check) for layer in self.model.layers]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def _keep_rows(self, rows: int) -> int:
        """Every layer cut back to ``rows`` rows: the layers a stopped pass reached hold
        its new rows too, the others do not; a pass that created the layers is undone."""
        if self._checked_layers < 0:
            return 0  # the stopped pass was the first: its layers may be half made
        import torch

        with torch.inference_mode():
            self._kv.select_rows(np.arange(rows))
        return rows if len(self._kv) == rows else 0

    def _apply(self, step: ForwardStep) -> np.ndarray:
        import torch

        try:
            with torch.inference_mode():
                self._kv.select_rows(step.keep)
                logprobs = self._run(step)
                if len(self._kv) != len(step.order):
                    raise UnsupportedCacheError(
                        f"cache holds {len(self._kv)} rows after the forward, "
                        f"expected {len(step.order)}"
                    )
                self._kv.select_rows(step.order)
        except UnsupportedCacheError as exc:
            raise BackendError(f"unsupported model for tree scoring: {exc}") from exc
        except RuntimeError as exc:  # includes torch.cuda.OutOfMemoryError
            raise BackendError(f"model forward failed: {_brief(exc)}") from exc
        return logprobs

    def _run(self, step: ForwardStep) -> np.ndarray:
        """`_forward`, with a long run of new trunk tokens (a prefill) first on its own,
        under the model's own causal mask: the same rows attend to the same rows, but
        attention kernels for causal masks (flash) are many times faster than ones that
        read an explicit [Q, K+Q] mask, which alone is 1 GB for a 22k-token prompt."""
        n_trunk = _causal_trunk_run(step)
        if n_trunk < CAUSAL_PREFILL_MIN:
            return self._forward(step)
        trunk_part, tree_part = _split_at_trunk_end(step, n_trunk)
        trunk_lp = self._forward(trunk_part, causal=True)
        if tree_part is None:
            return trunk_lp
        return np.concatenate([trunk_lp, self._forward(tree_part)])

    def _forward(self, step: ForwardStep, causal: bool = False) -> np.ndarray:
        """Evaluate step.tokens on top of the kept rows; log-probs of step.logit_queries.

        causal: the step is a run of trunk tokens right after the kept trunk rows, so the
        model may build its own causal (and sliding-window) mask from the cache's length.
        """
        import torch

        n_new = len(step.tokens)
        if n_new == 0:
            return np.zeros((0, self.vocab_size), dtype=np.float64)
        dev, dtype = self.model.device, self.model.dtype
        ids = torch.as_tensor(step.tokens, device=dev)[None]  # [1, Q]
        positions = torch.as_tensor(step.positions, device=dev)[None]  # [1, Q]
        queries = torch.as_tensor(step.logit_queries, device=dev)  # [L]
        kwargs: dict[str, Any] = {}
        if self.model.keeps_logits:
            kwargs["logits_to_keep"] = queries if len(queries) else 1
        kwargs[self.model.cache_argument] = self._kv.hf
        out = self.model.model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=None
            if causal
            else _attention_masks(step, self.model.mask_plan, dtype, dev),
            use_cache=True,
            **kwargs,
        )
        layers = len(self._kv.layer_tensors())
        if layers != self._checked_layers:  # layers appear on the first forward only
            self._kv.check_layers()
            self._checked_layers = layers
        logits = out.logits[0] if self.model.keeps_logits else out.logits[0, queries]  # [L, V]
        if len(queries) == 0:
            return np.zeros((0, self.vocab_size), dtype=np.float64)
        return _to_logprobs(logits)


CAUSAL_PREFILL_MIN = 32  # new trunk tokens from which they go through the causal path


def _causal_trunk_run(step: ForwardStep) -> int:
    """How many new trunk tokens follow the kept rows in a plain causal chain (0: none).

    True when the kept rows are the trunk's first rows in order (no kept tree nodes), so
    row i holds position i and a causal mask over the rows is the tree mask of the run.

    Example (3 trunk rows kept, 2 new trunk tokens, then a tree node):
        >>> s = ForwardStep(keep=np.arange(3), tokens=np.array([7, 8, 9]),
        ...                 positions=np.array([3, 4, 5]), row_parent=np.arange(-1, 5),
        ...                 trunk_rows=np.arange(5), logit_queries=np.array([1, 2]),
        ...                 order=np.arange(6))
        >>> _causal_trunk_run(s)
        2
    """
    n_keep, n_trunk = len(step.keep), len(step.trunk_rows)
    run = n_trunk - n_keep
    if run <= 0 or step.trunk_rows[-1] != n_trunk - 1:  # rows ascend: the last says it all
        return 0
    return run if np.array_equal(step.positions[:run], np.arange(n_keep, n_trunk)) else 0


def _split_at_trunk_end(step: ForwardStep, run: int) -> tuple[ForwardStep, ForwardStep | None]:
    """`step` as two: the first `run` new (trunk) tokens, then the rest on top of them.

    Run one after the other, they leave the same rows and give the same log-probs, in
    the same order (logit queries ascend), as `step` alone.
    """
    n_rows = len(step.keep) + run
    queries = step.logit_queries
    first = ForwardStep(
        keep=step.keep,
        tokens=step.tokens[:run],
        positions=step.positions[:run],
        row_parent=step.row_parent[:n_rows],
        trunk_rows=step.trunk_rows,
        logit_queries=queries[queries < run],
        order=np.arange(n_rows),
    )
    if run == len(step.tokens):
        return first, None
    rest = ForwardStep(
        keep=np.arange(n_rows),
        tokens=step.tokens[run:],
        positions=step.positions[run:],
        row_parent=step.row_parent,
        trunk_rows=step.trunk_rows,
        logit_queries=queries[queries >= run] - run,
        order=step.order,
    )
    return first, rest


def _attention_masks(
    step: ForwardStep, plan: TreeMaskPlan, dtype: torch.dtype, dev: torch.device
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The [1, 1, Q, K+Q] float mask(s) the decoder's layers read, as `plan` says."""
    full = _float_mask(step, dtype, dev)[None, None]
    windowed = full
    if plan.window is not None and int(step.positions.max()) >= plan.window:
        windowed = _float_mask(step, dtype, dev, plan.window)[None, None]
    if plan.by_layer_type:
        return {"full_attention": full, "sliding_attention": windowed}
    return windowed


def _float_mask(
    step: ForwardStep, dtype: torch.dtype, dev: torch.device, window: int | None = None
) -> torch.Tensor:
    """[Q, K+Q] additive mask: 0 where a new token may attend, the dtype's minimum elsewhere.

    With a `window`, a token sees only the ancestors less than `window` positions back
    (itself included), as a sliding-window layer of transformers does. One new token
    on a cache of trunk rows only (plain decoding, PBP mode) sees every row, or the last
    `window` of them: no boolean mask is built.
    """
    import torch

    n_rows = len(step.keep) + len(step.tokens)
    low = torch.finfo(dtype).min
    if len(step.tokens) == 1 and len(step.trunk_rows) == n_rows:
        mask = torch.zeros((1, n_rows), dtype=dtype, device=dev)
        if window is not None and n_rows > window:
            mask[:, : n_rows - window] = low
        return mask
    allowed = step.attention_mask()  # [Q, K+Q]
    if window is not None:
        distance = step.positions[:, None] - step.row_positions()[None, :]  # [Q, K+Q]
        allowed &= distance < window
    allowed_t = torch.as_tensor(allowed, device=dev)
    mask = torch.zeros(allowed_t.shape, dtype=dtype, device=dev)
    return mask.masked_fill_(~allowed_t, low)
