"""Fill-in-the-middle cost per keystroke: the language server's live documents (what the
worker runs for each request: move the covering tree and KV cache to the new prefix,
then a greedy completion) while typing in the middle of a file, with FIM off, with an
SPM template whose prefix and middle share a segment (qwen-spm: the suffix comes first
in the prompt, so typing keeps all of it cached) and with a PSM template (qwen: every
keystroke changes the prefix's end, and the suffix after it is evaluated again).

Prints, per setting: wall time per keystroke (p50 / p95), the part spent outside the
model's forward passes, and the tokens the model evaluated per keystroke.

The model is random weights in the shape of the shipped small model, with its tokenizer
plus FIM sentinels (timing needs no training); ``--model DIR`` uses a folder whose
tokenizer has the Qwen-style FIM tokens instead.

    python benchmarks/bench_fim.py [--keys 80] [--suffix-bytes 1024] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

from midword.engine import (
    TEMPLATES,
    ForwardDone,
    Settings,
    load_engine,
    load_hf_model,
    observe_forwards,
)
from midword.server.document import split_lines
from midword.server.live import SingleModel
from midword.server.scope import suffix_window

from midword.models import shipped_test_model
from midword.testing.tiny_models import build_tiny_llama
from midword.testing.vocab import with_special_tokens

SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "contextlib.py"
WINDOW_BYTES = 4096  # the server's default prompt window
SETTINGS = Settings(max_tokens=8)  # greedy, as an automatic inline request


class ForwardClock:
    """Seconds spent in the model's forward passes (`observe_forwards`)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        observe_forwards(self._add)

    def _add(self, done: ForwardDone) -> None:
        self.seconds += done.seconds


def random_fim_model(folder: Path) -> Path:
    """The shipped model's shape and tokenizer with Qwen-style FIM sentinels, random weights."""
    import json

    shipped = shipped_test_model()
    config = json.loads((shipped / "config.json").read_text())
    tokenizer = with_special_tokens(
        shipped / "tokenizer.json", TEMPLATES["qwen"].tokens, folder / "tokenizer.json"
    )
    size = load_engine(str(tokenizer)).tok.size
    build_tiny_llama(
        size,
        folder,
        hidden=config["hidden_size"],
        layers=config["num_hidden_layers"],
        heads=config["num_attention_heads"],
        kv_heads=config.get("num_key_value_heads"),
    )
    return folder


def typing_session(text: str, keys: int, suffix_bytes: int) -> list[tuple[bytes, bytes]]:
    """(prefix window, suffix window) after each key typed into a hole in the middle of
    ``text``: the text after the hole stays as it is (its window is taken once)."""
    start = text.index("\n", len(text) // 2) + 1
    typed, after = text[start : start + keys], text[start + keys :]
    lines = split_lines(after)
    suffix = suffix_window(lines, 0, 0, suffix_bytes)
    steps = []
    for k in range(1, keys + 1):
        before = (text[:start] + typed[:k]).encode()
        window = before[-WINDOW_BYTES:]
        steps.append((window[window.find(b"\n") + 1 :], suffix))
    return steps


def replay(backend: SingleModel, steps: list[tuple[bytes, bytes]], clock: ForwardClock) -> dict:
    document = backend.document()
    set_suffix = getattr(document, "set_suffix", None)
    walls, outside, tokens = [], [], []
    for prefix, suffix in steps:
        if set_suffix is not None:
            set_suffix(suffix)
        before_tokens, before_forward = document.inference_tokens, clock.seconds
        started = time.perf_counter()
        document.prepare(prefix, "bytesampler")
        document.complete(prefix, SETTINGS, should_stop=None, cut=None, deadline=started + 5)
        wall = time.perf_counter() - started
        walls.append(wall * 1e3)
        outside.append((wall - (clock.seconds - before_forward)) * 1e3)
        tokens.append(document.inference_tokens - before_tokens)
    return {"wall": walls[1:], "outside": outside[1:], "tokens": tokens[1:]}  # key 1: prefill


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a folder whose tokenizer has the Qwen-style FIM tokens")
    parser.add_argument("--keys", type=int, default=80)
    parser.add_argument("--suffix-bytes", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    clock = ForwardClock()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.model) if args.model else random_fim_model(Path(scratch))
        engine = load_engine(str(folder))
        model = load_hf_model(folder, device=args.device, dtype=args.dtype)
    steps = typing_session(SOURCE.read_text(), args.keys, args.suffix_bytes)
    print(f"model: {args.model or 'random, shipped shape'} on {model.device} ({args.dtype}); "
          f"{args.keys} keys typed into {SOURCE.name}, suffix window {len(steps[0][1])} bytes")  # fmt: skip
    print(f"{'FIM':10} {'p50 ms':>8} {'p95 ms':>8} {'outside fwd p50':>16} {'tokens/key':>11}")
    for name in ("off", "qwen-spm", "qwen"):
        backend = SingleModel(model, engine, None if name == "off" else TEMPLATES[name])
        result = replay(backend, steps, clock)
        print(
            f"{name:10} {_p(result['wall'], 50):8.2f} {_p(result['wall'], 95):8.2f} "
            f"{_p(result['outside'], 50):16.2f} {statistics.mean(result['tokens']):11.1f}"
        )


if __name__ == "__main__":
    main()
