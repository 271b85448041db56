"""The model and its optimizer: a small seeded Llama, AdamW, the learning-rate schedule.

``transformers`` is imported when a model is built.

Example:
    >>> [round(lr_at(step, 100, Recipe(lr=1.0, warmup_steps=10)), 2) for step in (0, 9, 100)]
    [0.1, 1.0, 0.1]
"""

from __future__ import annotations

import math

import torch

from .fim import FIM_TEMPLATE_NAME
from .recipe import Recipe

__all__ = ["build_model", "count_params", "lr_at", "make_optimizer"]


def build_model(recipe: Recipe, vocab_size: int, eot_id: int):  # -> LlamaForCausalLM
    """A fresh, seeded LlamaForCausalLM with tied embeddings."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if recipe.width % recipe.heads:
        raise ValueError(f"width {recipe.width} is not divisible by heads {recipe.heads}")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.width,
        intermediate_size=recipe.ffn,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        head_dim=recipe.width // recipe.heads,
        max_position_embeddings=recipe.seq_len,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=True,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
        pad_token_id=eot_id,
        use_cache=True,
    )
    if recipe.fim_rate > 0:
        config.fim_template = FIM_TEMPLATE_NAME
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=eot_id, eos_token_id=eot_id, pad_token_id=eot_id
    )
    return model.float()


def count_params(model) -> int:
    """Unique parameters (tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters())


def make_optimizer(model, recipe: Recipe) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices except the (tied) embedding, none on norms."""
    decay, no_decay = [], []
    emb = model.get_input_embeddings().weight
    for p in model.parameters():
        (decay if p.ndim >= 2 and p is not emb else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=recipe.lr, betas=(recipe.beta1, recipe.beta2), eps=1e-8, foreach=True
    )


def lr_at(step: int, total: int, recipe: Recipe) -> float:
    """Linear warmup for `warmup_steps`, then cosine from `lr` to ``lr * min_lr_ratio``."""
    warm = min(recipe.warmup_steps, max(1, total // 10))
    if step < warm:
        return recipe.lr * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    floor = recipe.lr * recipe.min_lr_ratio
    return floor + (recipe.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
