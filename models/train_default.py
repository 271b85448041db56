"""Train midword's default code model on the Python standard library, on CPU, in a time budget.

The result is a normal Hugging Face model directory (``LlamaForCausalLM`` + a byte-level BPE
``tokenizer.json``) that midword ships so that it works out of the box:

    python models/train_default.py --out models/default --minutes 70

Steps, all deterministic for a given Python version and ``--seed``:

1. Data: the ``*.py`` files of the running interpreter's standard library
   (``sysconfig.get_paths()["stdlib"]``), without test directories, ``site-packages``,
   machine-specific build files and generated data tables (see ``list_source_files``).
   A file is held out (never trained on) when ``sha1(relpath) mod 50 == 0``; the held-out
   relpaths are written to ``heldout_files.json``.
2. Tokenizer: byte-level BPE (``tokenizers``) with the cl100k pre-tokenization regex and one
   special token ``<|endoftext|>`` (BOS = EOS). Documents are ``<|endoftext|>`` + file text.
3. Model: a small ``LlamaForCausalLM`` with tied embeddings, trained with AdamW, linear
   warmup and cosine decay, gradient clipping, in float32 on ``--threads`` CPU threads.
   The schedule length is planned from the measured throughput so that training ends
   (and the final evaluation and saving still fit) within ``--minutes`` of wall time;
   ``--steps N`` fixes it instead, for an exactly repeatable schedule.
4. Evaluation: bits per byte on the held-out files (total cross-entropy in nats / ln 2 /
   UTF-8 bytes), with a sliding window so every token sees at least half a window of context.
5. Output: config.json, model.safetensors, generation_config.json, tokenizer.json,
   tokenizer_config.json, heldout_files.json, training_summary.json and a model card README.md.

Progress goes to stderr every ``--log-every`` seconds (tokens/s, loss, elapsed, ETA).

This file is the command line; each step lives in a module of the ``training`` package beside
it (``models/training/``): corpus, tokenizer, fim, batches, model, loop, evaluation, output
and card.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

# `python models/train_default.py` puts this folder on sys.path; an import of this file by
# its path (tests, benchmarks) does not, and the steps are in the training/ package here.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from training.batches import BatchStream
from training.corpus import (
    Corpus,
    load_corpus,
    load_corpus_from_tar,
    make_data_tar,
    split_validation,
    stdlib_root,
)
from training.evaluation import build_eval_windows, eval_batch, evaluate, selection_windows
from training.fim import EpochDocs, FimIds, fim_summary, make_epoch_docs
from training.loop import Clock, LoopOptions, plan_deadline, train
from training.model import build_model, count_params
from training.output import write_outputs
from training.progress import fmt_duration, log
from training.recipe import Recipe
from training.tokenizer import EOT, encode_documents, train_tokenizer

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    d = Recipe()
    p = argparse.ArgumentParser(
        prog="train_default.py",
        description="Train midword's default code model (tiny Llama + byte-level BPE) on the "
        "Python standard library, on CPU, within a wall-clock budget.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("models/default"),
        help="output model directory (default: models/default)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=60.0,
        help="wall-clock budget of the whole run: data, tokenizer, training, "
        "evaluation and saving (default: 60)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed (default: 0)")
    p.add_argument("--vocab", type=int, default=d.vocab_size, help="BPE vocabulary size")
    p.add_argument("--width", type=int, default=d.width, help="hidden size")
    p.add_argument("--layers", type=int, default=d.layers, help="transformer layers")
    p.add_argument("--heads", type=int, default=d.heads, help="attention heads")
    p.add_argument("--ffn", type=int, default=d.ffn, help="MLP intermediate size")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="training context in tokens")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="sequences per step")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    p.add_argument(
        "--min-lr-ratio",
        type=float,
        default=d.min_lr_ratio,
        help="final learning rate as a fraction of the peak",
    )
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="linear warmup")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW decay")
    p.add_argument("--grad-clip", type=float, default=d.grad_clip, help="gradient norm clip")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="fixed schedule length (default: planned from the time budget)",
    )
    p.add_argument(
        "--max-files",
        type=int,
        default=None,
        help="use only this many training files (and a tenth as many held-out "
        "files): a fast subset for tests",
    )
    p.add_argument("--log-every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument(
        "--eval-every", type=float, default=300.0, help="seconds between held-out slice evaluations"
    )
    p.add_argument(
        "--calibrate",
        type=float,
        default=90.0,
        help="seconds of training measured before planning the schedule length",
    )
    p.add_argument(
        "--fim-rate",
        type=float,
        default=d.fim_rate,
        help="fraction of chunks turned into fill-in-the-middle examples; 0 trains the "
        "prefix-only model without FIM tokens (default: %(default)s)",
    )
    p.add_argument(
        "--spm-rate",
        type=float,
        default=d.spm_rate,
        help="fraction of FIM examples in SPM order, the rest PSM (default: %(default)s)",
    )
    p.add_argument(
        "--fim-chunk-chars",
        type=int,
        nargs=2,
        metavar=("MIN", "MAX"),
        default=(d.fim_chunk_min, d.fim_chunk_max),
        help="FIM chunks are whole lines adding up to a random length in [MIN, MAX] characters "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--device", default="cpu", help="torch device to train on: cpu, cuda, cuda:1 (default: cpu)"
    )
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 autocast for the forward pass (float32 weights; for GPUs)",
    )
    p.add_argument(
        "--keep-best",
        action="store_true",
        help="take the files with sha1(relpath) mod 50 == 1 out of training as a validation set, "
        "score them every --eval-every seconds and keep the best weights",
    )
    p.add_argument(
        "--data-tar",
        type=Path,
        default=None,
        help="read the corpus from a tarball written by --make-data-tar instead of this "
        "interpreter's stdlib (so another machine trains on the same files)",
    )
    p.add_argument(
        "--make-data-tar",
        type=Path,
        default=None,
        metavar="PATH",
        help="only write this interpreter's filtered stdlib files to PATH (.tar.gz) and exit",
    )
    p.add_argument(
        "--save-dtype",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="weight dtype on disk (auto: float32 unless the directory would exceed 25 MB)",
    )
    return p


def recipe_from_args(args: argparse.Namespace) -> Recipe:
    return Recipe(
        vocab_size=args.vocab,
        width=args.width,
        layers=args.layers,
        heads=args.heads,
        ffn=args.ffn,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        lr=args.lr,
        min_lr_ratio=args.min_lr_ratio,
        warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay,
        grad_clip=args.grad_clip,
        seed=args.seed,
        steps=args.steps,
        fim_rate=args.fim_rate,
        spm_rate=args.spm_rate,
        fim_chunk_min=args.fim_chunk_chars[0],
        fim_chunk_max=args.fim_chunk_chars[1],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run everything; returns 0. See the module docstring."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.make_data_tar is not None:
        meta = make_data_tar(stdlib_root(), args.make_data_tar)
        size = args.make_data_tar.stat().st_size
        log(f"wrote {args.make_data_tar}: {meta['files']} files, {size / 1e6:.1f} MB")
        return 0
    clock = Clock(args.minutes)
    recipe = recipe_from_args(args)
    device = prepare_device(args.device, args.threads)

    corpus = read_corpus(args)
    tok = train_tokenizer(corpus.train_texts, recipe.vocab_size, fim=recipe.fim_rate > 0)
    eot = tok.token_to_id(EOT)
    fim_ids = FimIds.of(tok) if recipe.fim_rate > 0 else None
    epoch_docs = make_epoch_docs(tok, corpus.train_texts, recipe, eot, fim_ids)
    docs: Sequence[Sequence[int]] | EpochDocs = epoch_docs if fim_ids else epoch_docs(0)
    stream = BatchStream(docs, recipe.seq_len, recipe.batch_size, recipe.seed, device)
    n_train_tokens = stream.tokens_per_epoch
    log(
        f"tokenizer: {tok.get_vocab_size()} tokens, {n_train_tokens:,} training tokens in epoch 0 "
        f"({corpus.train_bytes / n_train_tokens:.2f} bytes/token, FIM rate {recipe.fim_rate}) "
        f"after {fmt_duration(clock.elapsed())}"
    )

    model = build_model(recipe, tok.get_vocab_size(), eot).to(device)
    n_params = count_params(model)
    log(f"model: LlamaForCausalLM, {n_params:,} parameters on {device}")
    windows = build_eval_windows(
        encode_documents(tok, corpus.heldout_texts), corpus.heldout_texts, recipe.seq_len, eot
    )
    slice_windows = selection_windows(tok, corpus, windows, recipe, args.keep_best)
    train_deadline = plan_deadline(model, windows, slice_windows, recipe, clock, args.minutes)
    loop = LoopOptions(
        log_every=args.log_every,
        eval_every=args.eval_every,
        calibrate_s=min(args.calibrate, 0.1 * max(1.0, train_deadline - time.monotonic())),
        bf16=args.bf16,
        # Without validation files (a --max-files subset), nothing may choose the weights.
        keep_best=args.keep_best and bool(corpus.validation_files),
    )
    result = train(model, recipe, stream, train_deadline, slice_windows, loop)

    log(
        f"trained {result.steps} steps, {result.tokens:,} tokens in "
        f"{fmt_duration(result.seconds)}; evaluating {len(windows.inputs)} held-out windows"
    )
    bpb, nats, n_tokens = evaluate(model, windows, eval_batch(recipe))
    log(
        f"held-out: {bpb:.4f} bits/byte ({nats:.4f} nats/token over {n_tokens:,} tokens, "
        f"{windows.n_bytes:,} bytes)"
    )
    summary = {
        "command": command_line(argv),
        "recipe": {
            **asdict(recipe),
            "threads": args.threads,
            "minutes": args.minutes,
            "device": str(device),
            "bf16": args.bf16,
            "keep_best": args.keep_best,
        },
        "fim": fim_summary(tok, recipe),
        "data": {
            "python_version": corpus.python_version,
            "source": "stdlib" if args.data_tar is None else f"--data-tar {args.data_tar.name}",
            "validation_files": corpus.validation_files,
            "train_file_count": len(corpus.train_files),
            "heldout_file_count": len(corpus.heldout_files),
            "skipped_files": corpus.skipped,
            "train_bytes": corpus.train_bytes,
            "heldout_bytes": corpus.heldout_bytes,
            "train_tokens": n_train_tokens,
            "max_files": args.max_files,
            "fingerprint": corpus.fingerprint(),
            "train_files": corpus.train_files,
        },
        "training": {
            **asdict(result),
            "tokens_per_second": result.tokens / max(1e-9, result.seconds),
        },
        "results": {
            "params": n_params,
            "vocab_size": tok.get_vocab_size(),
            "eot_id": eot,
            "heldout_bpb": bpb,
            "heldout_nats_per_token": nats,
            "heldout_tokens": n_tokens,
            "final_train_loss": result.final_loss,
            "wall_seconds": clock.elapsed(),
        },
        "environment": environment(device),
    }
    write_outputs(args.out, tok, model.cpu(), corpus, summary, args.save_dtype, clock)
    log(
        f"wrote {args.out} ({summary['results']['dir_bytes'] / 1e6:.1f} MB) "
        f"in {fmt_duration(clock.elapsed())}; held-out {bpb:.4f} bits/byte"
    )
    return 0


def read_corpus(args: argparse.Namespace) -> Corpus:
    """The stdlib (or --data-tar), split; validation files taken out with --keep-best."""
    if args.data_tar is not None:
        corpus = load_corpus_from_tar(args.data_tar, args.max_files)
    else:
        corpus = load_corpus(stdlib_root(), args.max_files)
    if args.keep_best:
        split_validation(corpus)
    log(
        f"data: {len(corpus.train_files)} training files ({corpus.train_bytes:,} bytes), "
        f"{len(corpus.validation_files)} validation files, "
        f"{len(corpus.heldout_files)} held-out files ({corpus.heldout_bytes:,} bytes) "
        f"from {corpus.root} (Python {corpus.python_version})"
    )
    return corpus


def prepare_device(name: str, threads: int) -> torch.device:
    """The training device; CPU thread count, and TF32 matmuls on CUDA (why: ~2x, harmless)."""
    torch.set_num_threads(threads)
    device = torch.device(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def environment(device: torch.device) -> dict[str, str]:
    import tokenizers
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}",
        **({"gpu": torch.cuda.get_device_name(device)} if device.type == "cuda" else {}),
    }


def command_line(argv: Sequence[str]) -> str:
    """The command that reproduces this run."""
    return shlex.join(["python", "models/train_default.py", *argv])


if __name__ == "__main__":
    raise SystemExit(main())
