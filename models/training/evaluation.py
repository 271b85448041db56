"""Evaluation: bits per byte on held-out files, with sliding windows.

Every held-out token is scored once, with at least half a window of left context
(`doc_windows`); bits per byte = total cross-entropy in nats / ln 2 / UTF-8 bytes. During
training a small fixed slice of the windows is scored (`eval_slice`), or the validation
files' windows with ``--keep-best`` (`selection_windows`).

Example:
    >>> [(len(inp), first) for inp, _, first in doc_windows(list(range(10)), seq_len=4)]
    [(4, 0), (4, 2), (4, 2), (3, 2)]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .corpus import Corpus
from .recipe import Recipe
from .tokenizer import EOT, encode_documents

__all__ = [
    "EvalWindows",
    "build_eval_windows",
    "doc_windows",
    "eval_batch",
    "eval_slice",
    "evaluate",
    "selection_windows",
]


LN2 = math.log(2.0)


@dataclass
class EvalWindows:
    """Held-out scoring windows: inputs, targets and which targets count (not yet scored)."""

    inputs: torch.Tensor  # (n, seq_len)
    targets: torch.Tensor  # (n, seq_len)
    mask: torch.Tensor  # (n, seq_len) bool
    n_bytes: int

    def subset(self, idx: torch.Tensor, n_bytes: int) -> EvalWindows:
        return EvalWindows(self.inputs[idx], self.targets[idx], self.mask[idx], n_bytes)


def doc_windows(ids: Sequence[int], seq_len: int) -> Iterator[tuple[list[int], list[int], int]]:
    """Sliding windows over one document: (inputs, targets, first target index to score).

    Windows advance by half a window; each token is scored once, in the first window where it
    has at least half a window of left context (or in the document's first window).
    """
    n_targets = len(ids) - 1
    stride = max(1, seq_len // 2)
    scored = 0
    start = 0
    while scored < n_targets:
        tgt = list(ids[start + 1 : start + seq_len + 1])
        inp = list(ids[start : start + len(tgt)])
        yield inp, tgt, scored - start
        scored = start + len(tgt)
        start += stride


def build_eval_windows(docs: Sequence[Sequence[int]], texts: Sequence[str], seq_len: int, pad: int):
    """All scoring windows of the held-out documents, right-padded to `seq_len`."""
    inputs, targets, masks = [], [], []
    for ids in docs:
        for inp, tgt, first in doc_windows(ids, seq_len):
            m = [i >= first for i in range(len(tgt))]
            fill = seq_len - len(inp)
            inputs.append(inp + [pad] * fill)
            targets.append(tgt + [pad] * (seq_len - len(tgt)))
            masks.append(m + [False] * (seq_len - len(m)))
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return EvalWindows(
        torch.tensor(inputs, dtype=torch.long),
        torch.tensor(targets, dtype=torch.long),
        torch.tensor(masks, dtype=torch.bool),
        n_bytes,
    )


def eval_slice(windows: EvalWindows, max_windows: int) -> EvalWindows:
    """A small, fixed sample of windows (spread over the documents) for periodic evaluation.

    Its byte count is estimated from the held-out bytes per scored token.
    """
    n = len(windows.inputs)
    idx = torch.linspace(0, n - 1, steps=min(n, max_windows)).round().long().unique()
    total_tokens = int(windows.mask.sum())
    slice_tokens = int(windows.mask[idx].sum())
    n_bytes = max(1, round(windows.n_bytes * slice_tokens / max(1, total_tokens)))
    return windows.subset(idx, n_bytes)


def eval_batch(recipe: Recipe) -> int:
    """Windows per evaluation forward pass (about 8k tokens)."""
    return max(1, 8192 // recipe.seq_len)


@torch.no_grad()
def evaluate(model, windows: EvalWindows, batch: int) -> tuple[float, float, int]:
    """(bits per byte, mean nats per scored token, scored tokens) over `windows`."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total_nats, total_tokens = 0.0, 0
    for i in range(0, len(windows.inputs), batch):
        x = windows.inputs[i : i + batch].to(device)
        logits = model(input_ids=x, use_cache=False).logits
        nll = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            windows.targets[i : i + batch].reshape(-1).to(device),
            reduction="none",
        )
        m = windows.mask[i : i + batch].reshape(-1).to(device)
        total_nats += float(nll[m].double().sum())
        total_tokens += int(m.sum())
    model.train(was_training)
    bpb = total_nats / LN2 / max(1, windows.n_bytes)
    return bpb, total_nats / max(1, total_tokens), total_tokens


def selection_windows(
    tok, corpus: Corpus, heldout: EvalWindows, recipe: Recipe, keep_best: bool
) -> EvalWindows:
    """Windows scored during training: validation files with --keep-best (they choose the
    kept weights, so they must not be the test files), else a slice of the held-out files."""
    if not keep_best or not corpus.validation_texts:
        return eval_slice(heldout, 16)
    docs = encode_documents(tok, corpus.validation_texts)
    val = build_eval_windows(docs, corpus.validation_texts, recipe.seq_len, tok.token_to_id(EOT))
    return eval_slice(val, 64)
