"""A faster output head for causal LMs on the CPU, for the few rows a covering tree asks.

Scoring a covering tree asks for next-token logits at one to a few positions per
call. On a CPU, ``F.linear(h, W)`` with ``W`` of shape [V, H] and only 1-8 rows of
``h`` can take a slow path: with torch's MKL build on this project's machines it
streams ``W`` once per row, 2-4x slower than ``W @ h.T`` (one pass over ``W`` for all
rows). A single row is often faster when padded to two. Which is faster depends on
the CPU, the BLAS and the shape, so the choice is timed when the model is wrapped (at
load time, not in the middle of an editor's first completion), and ``F.linear`` stays
unless another way is clearly faster. Only the summation order changes: the logits
agree to the dtype's rounding.

The head module is patched in place (its ``forward`` only; parameters, state dict and
weight tying are untouched), so ``generate()`` on the same model gets it too, and
benchmarks that compare with ``generate()`` stay like for like.

Example:
    >>> plan = speed_up_output_head(model)      # doctest: +SKIP
    >>> plan.choices                              # doctest: +SKIP
    {1: 'pad', 2: 'wt'}
"""

from __future__ import annotations

import time
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["HeadPlan", "speed_up_output_head"]

MAX_ROWS = 8  # more rows than this: a real matrix product, F.linear is fine
MIN_WEIGHT_BYTES = 8 << 20  # smaller heads cost well under a millisecond either way
MARGIN = 0.7  # another way must take at most 70% of F.linear's time to be chosen
TRIALS = 5


@dataclass
class HeadPlan:
    """Per row count (1, or 2..MAX_ROWS under the key 2): 'linear' (F.linear), 'wt'
    (W @ h.T) or 'pad' (one row padded to two, then W @ h.T)."""

    choices: dict[int, str]


def speed_up_output_head(model: Any) -> HeadPlan | None:
    """Time the ways to apply the model's output head for few rows and patch the head
    (a plain ``nn.Linear``) to use the faster one.

    Returns the plan, or None when the head is not a float32/float64 linear layer of at
    least MIN_WEIGHT_BYTES on the CPU. Calls on other devices (a model moved later), with
    more than MAX_ROWS rows or with autograd on go to ``F.linear`` as before.
    """
    import torch

    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.weight.dtype not in (torch.float32, torch.float64):
        return None
    weight = head.weight
    if weight.device.type != "cpu" or weight.numel() * weight.element_size() < MIN_WEIGHT_BYTES:
        return None  # nothing to gain, or not worth a timing a busy machine could get wrong
    plan = getattr(head, "_midword_plan", None)
    if plan is None:  # not patched yet (a second HFModel over the same model reuses it)
        plan = HeadPlan({rows: _timed_choice(head, rows) for rows in (1, 2)})
        head._midword_plan = plan
        head.forward = types.MethodType(_head_forward, head)
    return plan


def _head_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, W, b)``, by ``W @ h.T`` where that was timed faster."""
    import torch

    rows = x.reshape(-1, x.shape[-1])  # [M, H]
    m = rows.shape[0]
    weight = self.weight
    if (
        not 1 <= m <= MAX_ROWS
        or weight.device.type != "cpu"
        or x.dtype != weight.dtype
        or (torch.is_grad_enabled() and weight.requires_grad)
    ):
        return torch.nn.functional.linear(x, weight, self.bias)
    how = self._midword_plan.choices[min(m, 2)]
    if how == "linear":
        return torch.nn.functional.linear(x, weight, self.bias)
    out = _product(weight, rows, how)  # [M, V]
    if self.bias is not None:
        out += self.bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _product(weight: torch.Tensor, rows: torch.Tensor, how: str) -> torch.Tensor:
    """[M, V] = rows @ weight.T, as one pass over ``weight`` ([V, H])."""
    import torch

    m = rows.shape[0]
    if how == "pad" and m == 1:
        rows = torch.cat([rows, rows])  # [2, H]
    return (weight @ rows.T).T[:m].contiguous()  # [V, M'] -> [M, V]


def _timed_choice(head: torch.nn.Linear, rows: int) -> str:
    """The fastest way for ``rows`` rows on random input ('linear' unless clearly beaten)."""
    import torch

    weight = head.weight
    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
    ways = {
        "linear": lambda: torch.nn.functional.linear(x, weight),
        "pad" if rows == 1 else "wt": lambda: _product(weight, x, "pad"),
    }
    with torch.inference_mode():
        best = {name: _best_time(run) for name, run in ways.items()}
    other = next(name for name in best if name != "linear")
    return other if best[other] <= MARGIN * best["linear"] else "linear"


def _best_time(run: Any) -> float:
    run()  # warm-up: first-call allocations
    times = []
    for _ in range(TRIALS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)
