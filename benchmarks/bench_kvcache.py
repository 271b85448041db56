"""Decode steps on the KV cache that grows in place against transformers' plain one.

transformers' `DynamicLayer` appends by ``torch.cat`` of the whole layer: each decode
step copies every layer's K and V. engine/model/kvcache.py's layers write the new rows into a
buffer with spare capacity. This times decode steps (one new token, ``logits_to_keep=1``,
inference mode) on top of 256 / 1,000 / 2,000 cached rows, both caches side by side,
rounds interleaved (the machine is shared and noisy), on two models:

* a random model of Qwen2.5-Coder-0.5B's shape (24 layers, hidden 896, 2 KV heads of
  64, vocabulary 151,936; ``--layers`` shrinks the depth, ``--skip-qwen`` drops it);
* the shipped test model, models/default (4 layers, hidden 192, 3 KV heads of 64).

The cached rows are random (their values do not change the work). Each round gives
every (model, length, cache) a fresh cache filled to the length and `--steps` decode
steps on it; the tables show the median over rounds of the mean step time, of the
decode steps and of the same appends alone (one row into every layer, no model: the part
the cache changes, less noisy). Memory: child processes, `--memory-tries` per cache, each
run one round and report their resident memory above the loaded models: the peak (VmHWM,
reset once the models are built), after the caches are dropped, and after that once the
heap is trimmed (glibc's malloc_trim).

Run: python benchmarks/bench_kvcache.py [--rounds 3] [--steps 16] [--threads 1]
                                       [--layers 24] [--device cpu] [--dtype float32]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (256, 1000, 2000)
CACHES = ("plain", "growing")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of timing")
    parser.add_argument("--steps", type=int, default=16, help="decode steps per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--layers", type=int, default=24, help="depth of the Qwen-shaped model")
    parser.add_argument("--skip-qwen", action="store_true", help="only models/default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--memory-tries", type=int, default=2, help="child processes per cache")
    parser.add_argument("--memory-child", choices=CACHES, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.memory_child:
        print(json.dumps(memory_of(args, args.memory_child)))
        return
    print(
        f"torch {torch.__version__}, {args.device}, {args.dtype}, {args.threads} thread(s), "
        f"{args.steps} decode steps per measurement, median of {args.rounds} rounds"
    )
    for name, model in models(args):
        print_table(f"{name}: decode steps", time_rounds(model, args, decode_ms))
        print_table(f"{name}: the appends alone", time_rounds(model, args, append_ms))
        del model
        gc.collect()
    print("\nresident memory above the loaded models, MiB (one child process per cache and try)")
    print(f"{'cache':>8}{'peak':>8}{'after':>8}{'trimmed':>9}")
    for cache in CACHES * args.memory_tries:
        got = memory_in_child(cache)
        print(f"{cache:>8}{got['peak']:>8.1f}{got['after']:>8.1f}{got['trimmed']:>9.1f}")


def print_table(title: str, times: dict[tuple[int, str], list[float]]) -> None:
    """Median ms per step of each cache at each length, the difference and the ratio."""
    print(f"\n{title}")
    print(
        f"{'cached rows':>12}{'plain ms/step':>15}{'growing ms/step':>17}{'saved':>8}{'ratio':>7}"
    )
    for length in LENGTHS:
        plain, growing = (statistics.median(times[length, c]) for c in CACHES)
        row = f"{plain:>15.2f}{growing:>17.2f}{plain - growing:>8.2f}{growing / plain:>7.2f}"
        print(f"{length:>12}{row}")


def models(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(description, torch model) of each model benchmarked."""
    import torch
    from midword.engine import load_hf_model

    found = []
    if not args.skip_qwen:
        from transformers import AutoModelForCausalLM, Qwen2Config

        from midword.testing.shapes import QWEN25_CODER_05B

        shape = {**QWEN25_CODER_05B, "num_hidden_layers": args.layers}
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(
            Qwen2Config(**shape), dtype=getattr(torch, args.dtype)
        )
        name = f"random Qwen2.5-Coder-0.5B shape, {args.layers} layers"
        found.append((name, model.to(args.device).eval()))
    default = load_hf_model(ROOT / "models" / "default", device=args.device, dtype=args.dtype)
    found.append(("models/default (4 layers, hidden 192)", default.model))
    return found


def time_rounds(
    model: Any, args: argparse.Namespace, measure: Callable[[Any, str, int, int], float]
) -> dict[tuple[int, str], list[float]]:
    """{(cached rows, cache): `measure`'s ms per step, one per round}."""
    times: dict[tuple[int, str], list[float]] = {(n, c): [] for n in LENGTHS for c in CACHES}
    for round_ in range(args.rounds):
        order = CACHES if round_ % 2 == 0 else CACHES[::-1]  # neither always goes first
        for length in LENGTHS:
            for cache in order:
                times[length, cache].append(measure(model, cache, length, args.steps))
    return times


def decode_ms(model: Any, cache: str, length: int, steps: int) -> float:
    """Mean wall time (ms) of `steps` one-token forward passes on a fresh cache holding
    `length` random rows."""
    import torch

    kv = filled_cache(model, cache, length)
    device = model.device
    spent = 0.0
    with torch.inference_mode():
        for step in range(steps):
            ids = torch.tensor([[7 + step]], device=device)  # [1, 1]
            positions = torch.tensor([[length + step]], device=device)  # [1, 1]
            start = time.perf_counter()
            model(
                input_ids=ids,
                position_ids=positions,
                logits_to_keep=1,
                use_cache=True,
                **kv.forward_kwargs(model),
            )
            synchronize(device)
            spent += time.perf_counter() - start
    assert len(kv) == length + steps
    return 1000 * spent / steps


def append_ms(model: Any, cache: str, length: int, steps: int) -> float:
    """Mean wall time (ms) of appending one random row to every layer, `steps` times, on a
    fresh cache holding `length` rows: a decode step's cache work without the model."""
    import torch

    kv = filled_cache(model, cache, length)
    keys, values = (t[..., :1, :].clone() for t in kv.layer_tensors()[0])  # [1, H, 1, D]
    layers = model.config.num_hidden_layers
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(steps):
            for layer in range(layers):
                kv.hf.update(keys, values, layer)
        synchronize(keys.device)
        spent = time.perf_counter() - start
    assert len(kv) == length + steps
    return 1000 * spent / steps


def filled_cache(model: Any, cache: str, length: int) -> Any:
    """A `KVCache` (growing or plain) holding `length` random rows in every layer, of the
    model's K/V shape, dtype and device."""
    import torch
    from midword.engine import KVCache

    config = model.config
    kv = KVCache(grow_in_place=cache == "growing")
    assert kv.grows_in_place == (cache == "growing")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    param = next(model.parameters())
    with torch.inference_mode():
        for layer in range(config.num_hidden_layers):
            shape = (1, heads, length, head_dim)  # [batch, kv_heads, rows, head_dim]
            keys = torch.randn(shape, dtype=param.dtype, device=param.device)
            kv.hf.update(keys, torch.randn_like(keys), layer)
    return kv


def synchronize(device: Any) -> None:
    """Wait for queued GPU work (timings are of the work, not of its launch)."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def memory_in_child(cache: str) -> dict[str, float]:
    """`memory_of` one cache, run in a fresh process (peaks are per process)."""
    argv = [sys.executable, __file__, "--memory-child", cache, *sys.argv[1:]]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def memory_of(args: argparse.Namespace, cache: str) -> dict[str, float]:
    """Resident MiB above the loaded models: the peak over one round of every length on
    `cache`, and what stays once those caches are dropped."""
    loaded = models(args)
    gc.collect()
    base = _status_kib("VmRSS")
    _reset_peak()
    for _, model in loaded:
        for length in LENGTHS:
            decode_ms(model, cache, length, args.steps)
    gc.collect()
    peak, after = _status_kib("VmHWM"), _status_kib("VmRSS")
    _trim_heap()
    trimmed = _status_kib("VmRSS")
    return {
        k: (v - base) / 1024 for k, v in [("peak", peak), ("after", after), ("trimmed", trimmed)]
    }


def _trim_heap() -> None:
    """glibc's malloc_trim(0): give free heap pages back (the server does it every 2 s of
    work), so "trimmed" is what the caches left in use, "after" what the heap kept free."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not glibc: "trimmed" is "after"
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (Linux), e.g. VmRSS or VmHWM."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:"))


def _reset_peak() -> None:
    """Make VmHWM start again from the current resident size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


if __name__ == "__main__":
    main()
