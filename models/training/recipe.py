"""The recipe: every setting that determines the trained model (all of it goes into the card).

Example:
    >>> Recipe(layers=1).seq_len
    512
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Recipe"]


@dataclass
class Recipe:
    """Everything that determines the trained model (all of it goes into the model card)."""

    vocab_size: int = 4096
    width: int = 192
    layers: int = 4
    heads: int = 3
    ffn: int = 512
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    steps: int | None = None  # planned from the time budget when None
    fim_rate: float = 0.5  # fraction of chunks turned into fill-in-the-middle examples
    spm_rate: float = 0.5  # fraction of those in SPM order (the rest PSM)
    fim_chunk_min: int = 256  # FIM chunks: lines adding up to a random length in this range
    fim_chunk_max: int = 2048
