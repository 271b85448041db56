"""The shapes of real code models, as config values, for random-weight models built
without downloading anything (benchmarks/bench_real_size.py, benchmarks/bench_cuda.py).

>>> QWEN25_CODER_15B["num_hidden_layers"], QWEN25_CODER_05B["num_hidden_layers"]
(28, 24)
>>> sorted(set(QWEN25_CODER_05B) - set(QUICK))[:2]
['bos_token_id', 'eos_token_id']
"""

from __future__ import annotations

__all__ = ["QUICK", "QWEN25_CODER_05B", "QWEN25_CODER_15B", "TINY_SHIPPED"]

# Qwen2.5-Coder-0.5B (Qwen2Config): about 494M parameters with its 151,936-token vocabulary
QWEN25_CODER_05B = dict(
    vocab_size=151_936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32_768,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    use_sliding_window=False,
    bos_token_id=151_643,
    eos_token_id=151_643,
)
# Qwen2.5-Coder-1.5B: the same family, wider and deeper (1,544M parameters)
QWEN25_CODER_15B = dict(
    QWEN25_CODER_05B,
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
)
# a smoke-test shrink of either (the vocabulary stays real-sized)
QUICK = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
# a one-layer toy on the shipped model's 4,096-token vocabulary (GGUF files written by tests)
TINY_SHIPPED = dict(
    QWEN25_CODER_05B,
    vocab_size=4096,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rope_theta=10000.0,
    bos_token_id=0,
    eos_token_id=0,
)
