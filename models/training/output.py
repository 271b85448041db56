"""The model directory: weights, tokenizer, held-out list, training_summary.json, model card.

Example:
    >>> write_outputs(Path("models/default"), tok, model, corpus, summary, "auto", clock)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .card import model_card
from .corpus import HELDOUT_RULE, Corpus
from .loop import Clock
from .model import count_params
from .tokenizer import write_tokenizer

__all__ = ["MAX_MODEL_DIR_BYTES", "dir_size", "save_model", "write_outputs"]


MAX_MODEL_DIR_BYTES = 25_000_000


def save_model(model, out: Path, save_dtype: str) -> str:
    """Write config.json, generation_config.json and model.safetensors; returns the dtype used."""
    if save_dtype == "auto":
        fp32_bytes = 4 * count_params(model)
        save_dtype = "float32" if fp32_bytes <= MAX_MODEL_DIR_BYTES - 2_000_000 else "bfloat16"
    model = model.to(getattr(torch, save_dtype))
    model.config.use_cache = True
    model.save_pretrained(str(out), safe_serialization=True)
    model.float()
    return save_dtype


def dir_size(path: Path) -> int:
    """Total bytes of the files directly in `path`."""
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def write_outputs(
    out: Path, tok, model, corpus: Corpus, summary: dict, save_dtype: str, clock: Clock
) -> None:
    """Everything in the model directory, the model card last (it needs the final size)."""
    out.mkdir(parents=True, exist_ok=True)
    summary["results"]["save_dtype"] = save_model(model, out, save_dtype)
    write_tokenizer(tok, out, summary["recipe"]["seq_len"])
    heldout = {
        "python_version": summary["data"]["python_version"],
        "rule": HELDOUT_RULE,
        "relative_to": 'sysconfig.get_paths()["stdlib"]',
        "files": corpus.heldout_files,
    }
    (out / "heldout_files.json").write_text(json.dumps(heldout, indent=1) + "\n")
    summary["results"]["dir_bytes"] = 0
    (out / "training_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "README.md").write_text(model_card(summary))
    # The card quotes the directory size, which includes the card itself: write it twice.
    summary["results"]["dir_bytes"] = dir_size(out)
    summary["results"]["wall_seconds"] = clock.elapsed()
    (out / "training_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "README.md").write_text(model_card(summary))
    summary["results"]["dir_bytes"] = dir_size(out)
