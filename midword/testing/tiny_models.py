"""Tiny random-weight causal language models for tests and benchmarks.

Nothing can be downloaded here, so tests build small models from a config whose
vocabulary matches whatever tokenizer they need. The weights are random but
seeded, so a model is the same on every run; they are enough to test exactness
(the session must reproduce a plain forward pass, whatever the weights are).

Example:
    >>> model = build_tiny_llama(300, seed=0)                   # in memory
    >>> model.config.vocab_size
    300
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as folder:           # also saved: config + safetensors
    ...     _ = build_tiny_qwen3(300, folder, seed=1)
    ...     sorted(p.name for p in pathlib.Path(folder).iterdir())
    ['config.json', 'generation_config.json', 'model.safetensors']

torch and transformers are imported inside the functions so that collecting the
test modules stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

ARCHITECTURES = ("llama", "qwen2", "qwen3")


def tiny_config(
    arch: str,
    vocab_size: int,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int | None = None,
    **overrides: Any,
) -> PretrainedConfig:
    """Config of a tiny decoder-only model of family `arch` ("llama", "qwen2" or "qwen3").

    `kv_heads` defaults to half of `heads` (grouped-query attention, as in real
    checkpoints). The initializer range is large (0.2) so that next-token
    distributions are far from uniform and numeric mistakes show up.

    Example:
        >>> tiny_config("qwen2", 500).num_key_value_heads
        2
    """
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    classes = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
    if arch not in classes:
        raise ValueError(f"unknown architecture {arch!r}; expected one of {ARCHITECTURES}")
    kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or max(1, heads // 2),
        head_dim=hidden // heads,
        max_position_embeddings=2048,
        initializer_range=0.2,
        tie_word_embeddings=False,
        bos_token_id=min(1, vocab_size - 1),
        eos_token_id=min(2, vocab_size - 1),
        pad_token_id=None,
    )
    kwargs.update(overrides)
    return classes[arch](**kwargs)


def build_tiny_causal_lm(
    arch: str,
    vocab_size: int,
    dir: str | Path | None = None,
    seed: int = 0,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    dtype: torch.dtype | str = "float32",
    **overrides: Any,
) -> PreTrainedModel:
    """Random-weight model in eval mode; if `dir` is given, also save it there (safetensors).

    The global torch RNG is left untouched (weights are drawn inside
    `torch.random.fork_rng`), so building a model does not perturb other tests.

    Example:
        >>> m = build_tiny_causal_lm("llama", 400, dtype="float64")
        >>> m.dtype
        torch.float64
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    config = tiny_config(arch, vocab_size, hidden, layers, heads, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.eval()
    if dir is not None:
        Path(dir).mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(dir), safe_serialization=True)
    return model


def _family(arch: str, what: str) -> Callable[..., PreTrainedModel]:
    """`build_tiny_causal_lm` with ``arch`` fixed (the same keywords and defaults)."""

    def build(vocab_size: int, dir: str | Path | None = None, **options: Any) -> PreTrainedModel:
        return build_tiny_causal_lm(arch, vocab_size, dir, **options)

    build.__name__ = build.__qualname__ = f"build_tiny_{arch}"
    build.__doc__ = f"Tiny random {what}; see `build_tiny_causal_lm`."
    return build


build_tiny_llama = _family("llama", "Llama")
build_tiny_qwen2 = _family("qwen2", "Qwen2 (attention biases on q/k/v)")
build_tiny_qwen3 = _family("qwen3", "Qwen3 (RMS-normed queries and keys)")
