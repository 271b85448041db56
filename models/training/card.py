"""The model card (README.md of the model directory), written from training_summary.json's dict.

Example:
    >>> summary = {"recipe": {"steps": 40}, "training": {"steps": 40, "planned_steps": None,
    ...     "replanned": False, "stopped_by_time": False}}
    >>> schedule_note(summary)
    "40 steps, given by `--steps`. `--steps 40` repeats this run's step count without time planning."
"""

from __future__ import annotations

from .corpus import EXCLUDED_DIRS, EXCLUDED_TOP, HELDOUT_RULE
from .progress import fmt_duration

__all__ = ["fim_card_section", "model_card", "schedule_note"]


def schedule_note(summary: dict) -> str:
    """How the number of steps was chosen, for the model card."""
    r, t = summary["recipe"], summary["training"]
    if r["steps"]:
        note = f"{r['steps']:,} steps, given by `--steps`"
    elif t["planned_steps"] is None:
        note = "the time budget ran out before the schedule length was planned"
    else:
        note = f"{t['planned_steps']:,} steps, planned from the measured speed to fit the budget"
        if t["replanned"]:
            note += " (re-planned during the run as the machine's speed changed)"
    if t["stopped_by_time"]:
        note += f"; stopped by the time budget after {t['steps']:,} steps"
    return note + f". `--steps {t['steps']}` repeats this run's step count without time planning."


def hardware_note(summary: dict) -> str:
    """Where the run trained, e.g. ``1 CPU threads of `x86_64 Linux` `` or ``cuda (bf16)``."""
    r, env = summary["recipe"], summary["environment"]
    device = r.get("device", "cpu")
    if device == "cpu":
        return f"{r['threads']} CPU threads of `{env['machine']}`"
    return f"`{device}`{' (bfloat16 autocast)' if r.get('bf16') else ''}, {env.get('gpu', 'GPU')}"


def data_source_note(data: dict) -> str:
    source = data.get("source", "stdlib")
    if source == "stdlib":
        return "the running interpreter's standard library"
    return (
        f"a tarball of those files (`{source}`, written by `--make-data-tar` on the machine "
        "with that Python), so that a machine with another Python trains on the same files"
    )


def slice_title(summary: dict) -> str:
    if summary["recipe"].get("keep_best") and summary["data"].get("validation_files"):
        return "Validation slice (windows of the validation files, which chose the kept weights)"
    return "Held-out slice (a fixed sample of held-out windows)"


def validation_note(summary: dict) -> str:
    d, t = summary["data"], summary["training"]
    files = d.get("validation_files") or []
    if not files:
        return ""
    return (
        f"\n- Validation (`--keep-best`): the {len(files)} training files with "
        "`sha1(relpath) mod 50 == 1` were not trained on; they were scored during training and the "
        f"weights of step {t.get('kept_step')} (the best score) were kept. The held-out files "
        "played no part in that choice."
    )


def fim_card_section(summary: dict) -> str:
    """The model card's fill-in-the-middle section (formats, rates, how the split is drawn)."""
    fim = summary.get("fim") or {"enabled": False}
    if not fim["enabled"]:
        return "## Fill-in-the-middle\n\nNot trained for FIM (`--fim-rate 0`): prefix-only.\n"
    tokens = ", ".join(f"`{name}` = {i}" for name, i in fim["tokens"].items())
    lo, hi = fim["chunk_chars"]
    fresh = summary["training"].get("fresh_epochs", 1)
    return f"""## Fill-in-the-middle

- Special tokens: {tokens}.
- Each file is cut after newlines into chunks of a random length in [{lo}, {hi}] characters;
  a chunk becomes a FIM example with probability {fim["fim_rate"]} (else it stays plain text,
  and runs of plain chunks of a file stay one document). A FIM example is cut at two uniformly
  random *character* positions into prefix, middle and suffix (character-level FIM, as in the
  SantaCoder / StarCoder recipe) and each part is tokenized on its own. Of the FIM examples,
  {fim["spm_rate"]} are in SPM order, the rest in PSM order:

  - PSM: `{fim["formats"]["psm"]}`
  - SPM: `{fim["formats"]["spm"]}`
  - plain: `{fim["formats"]["plain"]}`

  In SPM, `prefix+middle` is ONE tokenized text: at inference the prompt is
  `<|endoftext|><|fim_prefix|><|fim_suffix|>` + suffix + `<|fim_middle|>` followed by the
  prefix exactly as in prefix-only completion, so midword's covering tree applies at the
  cursor unchanged. In PSM the prefix is a segment of its own and the middle starts a fresh
  one after `<|fim_middle|>`. The middle ends with `<|endoftext|>`.
- FIM examples were drawn afresh for {fresh} of the training epochs (the others revisited
  the previous draw in a new order).
"""


def model_card(summary: dict) -> str:
    """The README.md of the model directory."""
    r, d, res = summary["recipe"], summary["data"], summary["results"]
    hist = (
        "\n".join(
            f"| {h['step']} | {h['tokens']:,} | {fmt_duration(h['seconds'])} | {h['slice_bpb']:.3f} |"
            for h in summary["training"]["slice_history"]
        )
        or "| - | - | - | - |"
    )
    t = summary["training"]
    return f"""# midword default model: a tiny Llama for Python, trained on the standard library

A {res["params"]:,}-parameter `LlamaForCausalLM` with a {res["vocab_size"]}-token byte-level BPE
tokenizer, trained from scratch by `models/train_default.py` so that midword works out of
the box without downloading anything. It is small and fast, not smart: expect plausible
Python-looking completions of names and idioms that are common in the standard library.

## Result

- **Held-out bits per byte: {res["heldout_bpb"]:.4f}** ({res["heldout_nats_per_token"]:.4f} nats
  per token, {res["heldout_tokens"]:,} tokens, {d["heldout_bytes"]:,} bytes in
  {d["heldout_file_count"]} held-out files; total cross-entropy / ln 2 / UTF-8 bytes, every token
  scored once with at least half a window of left context).
- Final training loss: {res["final_train_loss"]:.4f} nats/token.
- Wall time: {fmt_duration(res["wall_seconds"])} in all, of which training
  {fmt_duration(t["seconds"])} ({t["steps"]:,} steps, {t["tokens"]:,} tokens,
  {t["epochs"]:.2f} epochs, {t["tokens_per_second"]:,.0f} tokens/s on {hardware_note(summary)}).
- Size: {res["dir_bytes"] / 1e6:.1f} MB on disk (weights saved in {res["save_dtype"]}).

## Data

- The `*.py` files of the standard library of **Python {d["python_version"]}**
  (`sysconfig.get_paths()["stdlib"]`), in relpath order, read as UTF-8 with `\\r\\n` -> `\\n`.
  Read from {data_source_note(d)}.
- Excluded: directories named {", ".join(f"`{x}`" for x in sorted(EXCLUDED_DIRS))} anywhere in
  the path; top-level entries starting with {", ".join(f"`{x}`" for x in EXCLUDED_TOP)}
  (build files, machine-specific `_sysconfigdata*`, the pydoc topic prose); character tables
  generated by `gencodec.py` in `encodings/`; files that are not valid UTF-8 or are empty.
- Held out (never trained on): `{HELDOUT_RULE}`, relpath relative to the stdlib root.
  The list is in `heldout_files.json`.
- Training: {d["train_file_count"]} files, {d["train_bytes"]:,} bytes, {d["train_tokens"]:,}
  tokens. Held out: {d["heldout_file_count"]} files, {d["heldout_bytes"]:,} bytes.
- Data fingerprint (sha256 over relpaths and texts): `{d["fingerprint"]}`.
- Documents are `<|endoftext|>` + file text, concatenated; `<|endoftext|>` (id {res["eot_id"]})
  is both BOS and EOS.{validation_note(summary)}

{fim_card_section(summary)}
## Recipe

- Tokenizer: `tokenizers` byte-level BPE, vocabulary {r["vocab_size"]} (min frequency 2), the
  cl100k pre-tokenization regex (`Split`, behavior `Isolated`) followed by
  `ByteLevel(add_prefix_space=False, use_regex=False)`, ByteLevel decoder, no normalizer, all
  256 byte symbols in the initial alphabet, trained on the training files only.
- Model: `LlamaForCausalLM`, hidden size {r["width"]}, {r["layers"]} layers, {r["heads"]} heads
  (head dim {r["width"] // r["heads"]}, no GQA), MLP {r["ffn"]}, RoPE, RMSNorm, tied input and
  output embeddings, context {r["seq_len"]} tokens, float32 weights{
        " with bfloat16 autocast" if r.get("bf16") else ""
    }.
- Optimizer: AdamW (betas {r["beta1"]}, {r["beta2"]}; weight decay {r["weight_decay"]} on
  matrices except the embedding), peak learning rate {r["lr"]}, linear warmup
  {r["warmup_steps"]} steps, cosine decay to {r["min_lr_ratio"]} x peak, gradient clipping
  {r["grad_clip"]}, batches of {r["batch_size"]} x {r["seq_len"]} tokens (random chunks of the
  concatenated stream, reshuffled every epoch), seed {r["seed"]}.
- Schedule: {schedule_note(summary)}

{slice_title(summary)} during training:

| step | tokens | time | bits/byte |
|---:|---:|---:|---:|
{hist}

## Reproduce

```
{summary["command"]}
```

Python {summary["environment"]["python"]}, torch {summary["environment"]["torch"]},
transformers {summary["environment"]["transformers"]}, tokenizers
{summary["environment"]["tokenizers"]}. Data, tokenizer and batch order are deterministic for a
given Python version and seed; the number of training steps depends on the machine's speed unless
`--steps` is given. All figures are also in `training_summary.json`.

## Next-character accuracy at mid-identifier cuts

(filled in by benchmarks/bench_default_model.py)
"""
