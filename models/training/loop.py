"""The training loop, within a wall-clock budget.

`plan_deadline` reserves the time the final evaluation and saving need; `train` runs
optimizer steps until the schedule is done or that deadline passes, planning the schedule's
length from the measured speed unless ``--steps`` fixes it; `SliceTracker` scores a slice
now and then (and keeps the best weights with ``--keep-best``).

Example:
    >>> steps_that_fit(step=100, per_step=0.5, seconds_left=60.0)
    216
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .batches import BatchStream
from .evaluation import EvalWindows, eval_batch, evaluate
from .model import lr_at, make_optimizer
from .progress import fmt_duration, log
from .recipe import Recipe

__all__ = [
    "Clock",
    "LoopOptions",
    "SliceTracker",
    "TrainResult",
    "plan_deadline",
    "steps_that_fit",
    "train",
    "train_step",
]


@dataclass
class TrainResult:
    """What the training loop did."""

    steps: int
    planned_steps: int | None  # None: the budget ran out before the schedule was planned
    replanned: bool
    stopped_by_time: bool
    tokens: int
    seconds: float
    final_loss: float
    epochs: float
    slice_history: list[dict[str, float]]
    kept_step: int | None = None  # with keep_best: the step whose weights were kept
    fresh_epochs: int = 1  # epochs whose (FIM) documents were drawn afresh; see BatchStream


@dataclass
class LoopOptions:
    """How the loop runs (not what it learns): logging, evaluation, planning, precision."""

    log_every: float = 30.0
    eval_every: float = 300.0
    calibrate_s: float = 90.0
    bf16: bool = False
    # Keep the weights with the lowest slice score, evaluated every `eval_every` s and at the
    # end. Only meaningful when the slice is a validation set, not the held-out test files.
    keep_best: bool = False


class Clock:
    """Wall-clock budget of the whole run."""

    def __init__(self, minutes: float):
        self.start = time.monotonic()
        self.deadline = self.start + minutes * 60.0

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.deadline - time.monotonic()


def train_step(
    model, opt, batch: torch.Tensor, lr: float, grad_clip: float, bf16: bool = False
) -> float:
    """One optimizer step on a (B, T + 1) batch; returns the mean loss in nats per token.

    With `bf16` the forward pass runs under bfloat16 autocast (weights and optimizer state
    stay float32); the loss is computed in float32 either way.
    """
    for group in opt.param_groups:
        group["lr"] = lr
    x, y = batch[:, :-1], batch[:, 1:]
    with torch.autocast(device_type=batch.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=x, use_cache=False).logits
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach().item()


def steps_that_fit(step: int, per_step: float, seconds_left: float) -> int:
    """Steps done plus those that fit in 97% of the time left at `per_step` seconds each."""
    return max(step + 1, int(step + 0.97 * max(0.0, seconds_left) / per_step))


def train(
    model,
    recipe: Recipe,
    stream: BatchStream,
    train_deadline: float,
    slice_windows: EvalWindows,
    loop: LoopOptions,
) -> TrainResult:
    """Train until the planned number of steps is done or `train_deadline` (monotonic) passes.

    Without ``recipe.steps`` the schedule length is planned after ``loop.calibrate_s`` seconds
    from the average step time, and re-planned every 25 steps if the speed changes: in either
    direction during the first half of the schedule, afterwards only to avoid overrunning.
    """
    opt = make_optimizer(model, recipe)
    model.train()
    tokens_per_step = recipe.batch_size * recipe.seq_len
    fixed = recipe.steps is not None
    # Until calibrated, assume a generous total so warmup is unaffected.
    total = recipe.steps if fixed else max(10 * recipe.warmup_steps, 10_000)
    planned_once, replanned = fixed, False
    t0 = time.monotonic()
    last_log = last_eval = t0
    loss_sum, loss_n, last_loss = 0.0, 0, float("nan")
    tracker = SliceTracker(slice_windows, eval_batch(recipe), loop.keep_best)
    step = 0
    stopped = False
    while step < total:
        now = time.monotonic()
        if now >= train_deadline and step > 0:
            log(f"time budget reached at step {step}/{total}: stopping training")
            stopped = True
            break
        last_loss = train_step(
            model, opt, stream.next(), lr_at(step, total, recipe), recipe.grad_clip, loop.bf16
        )
        loss_sum, loss_n, step = loss_sum + last_loss, loss_n + 1, step + 1
        now = time.monotonic()
        per_step = (now - t0) / step
        if not fixed and now - t0 >= loop.calibrate_s and (not planned_once or step % 25 == 0):
            fit = steps_that_fit(step, per_step, train_deadline - now)
            if not planned_once:
                total, planned_once = fit, True
                log(f"planned {total} steps ({per_step * 1000:.0f} ms/step over {step} steps)")
            elif (step < total // 2 and abs(fit - total) > 0.03 * total) or fit < 0.98 * total:
                log(f"speed changed ({per_step * 1000:.0f} ms/step): schedule {total} -> {fit}")
                total, replanned = fit, True
        if now - last_eval >= loop.eval_every:
            tracker.record(model, step, step * tokens_per_step, now - t0)
            last_eval = time.monotonic()
        if now - last_log >= loop.log_every:
            elapsed = now - t0
            eta = min((total - step) * per_step, max(0.0, train_deadline - now))
            log(
                f"step {step}/{total} | {step * tokens_per_step / elapsed:,.0f} tokens/s | "
                f"loss {loss_sum / loss_n:.3f} | lr {lr_at(step, total, recipe):.2e} | "
                f"epoch {step * tokens_per_step / stream.tokens_per_epoch:.2f} | "
                f"elapsed {fmt_duration(elapsed)} | ETA {fmt_duration(eta)}"
            )
            loss_sum, loss_n, last_log = 0.0, 0, now
    seconds = time.monotonic() - t0
    stream.close()
    kept = tracker.finish(model, step, step * tokens_per_step, seconds)
    return TrainResult(
        steps=step,
        planned_steps=total if planned_once else None,
        replanned=replanned,
        stopped_by_time=stopped,
        tokens=step * tokens_per_step,
        seconds=seconds,
        final_loss=last_loss,
        epochs=step * tokens_per_step / max(1, stream.tokens_per_epoch),
        slice_history=tracker.history,
        kept_step=kept,
        fresh_epochs=stream.fresh_epochs,
    )


class SliceTracker:
    """Periodic slice evaluations; with `keep_best`, a copy of the best weights so far."""

    def __init__(self, windows: EvalWindows, batch: int, keep_best: bool):
        self.windows, self.batch, self.keep_best = windows, batch, keep_best
        self.history: list[dict[str, float]] = []
        self.best_bpb, self.best_step = math.inf, 0
        self.best_state: dict[str, torch.Tensor] | None = None

    def record(self, model, step: int, tokens: int, seconds: float) -> float:
        bpb, nats, _ = evaluate(model, self.windows, self.batch)
        self.history.append(
            {
                "step": step,
                "tokens": tokens,
                "seconds": round(seconds, 1),
                "slice_bpb": round(bpb, 4),
            }
        )
        log(f"eval step {step}: slice {bpb:.3f} bits/byte ({nats:.3f} nats/token)")
        if self.keep_best and bpb < self.best_bpb:
            self.best_bpb, self.best_step = bpb, step
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return bpb

    def finish(self, model, step: int, tokens: int, seconds: float) -> int | None:
        """With keep_best: score the final weights, load the best ones; returns their step."""
        if not self.keep_best:
            return None
        self.record(model, step, tokens, seconds)
        if self.best_state is not None and self.best_step != step:
            model.load_state_dict(self.best_state)
            log(f"kept the weights of step {self.best_step} (slice {self.best_bpb:.4f} bits/byte)")
        return self.best_step


def plan_deadline(
    model,
    windows: EvalWindows,
    slice_windows: EvalWindows,
    recipe: Recipe,
    clock: Clock,
    minutes: float,
) -> float:
    """Monotonic time when training must stop so the final evaluation and saving still fit
    (the evaluation's cost is timed on the slice)."""
    evaluate(model, slice_windows, eval_batch(recipe))  # warm-up; the second call is timed
    t = time.monotonic()
    evaluate(model, slice_windows, eval_batch(recipe))
    per_window = (time.monotonic() - t) / max(1, len(slice_windows.inputs))
    reserve = 1.5 * per_window * (len(windows.inputs) + len(slice_windows.inputs))
    reserve += 2.0 + 0.02 * minutes * 60
    deadline = time.monotonic() + max(0.0, clock.left() - reserve)
    log(
        f"training for up to {fmt_duration(deadline - time.monotonic())} "
        f"(reserved {fmt_duration(reserve)} for evaluation and saving)"
    )
    return deadline
