"""What every tiny GGUF file the tests write holds first: the shape hyperparameters that
llama.cpp's converter (TextModel.set_gguf_parameters) writes for any architecture."""

from __future__ import annotations

from typing import Any


def norms_away_from_one(model: Any) -> Any:
    """``model`` with every 1-D weight (norms, biases) drawn around 1 instead of its init
    (norms of exactly 1, biases of 0): a misplaced or dropped one then changes the logits."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return model


def write_shape(writer: Any, config: Any) -> None:
    """Layers, context, widths and head counts of a transformers ``config``."""
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
