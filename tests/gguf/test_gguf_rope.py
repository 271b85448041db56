"""Rope scaling in GGUF files (engine/gguf/rope.py): Llama 3.1 / 3.2's rope frequency
factors (``rope_freqs.weight``, written here as llama.cpp's converter writes them) and
linear scaling (DeepSeek-Coder's ``rope.scaling.type = linear``, factor 4), converted to
transformers' ``llama3`` and ``linear`` rope and compared logit by logit with the tiny
models they came from, on prompts longer than the original context. Scalings that
transformers cannot reproduce are refused by name."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from midword.engine.gguf import convert as mg
from midword.engine.gguf.rope import NO_SCALING, inverse_frequencies, llama3_parameters

from ..gguf_support import norms_away_from_one, write_shape
from .test_gguf import (
    CONFIGS,
    DEFAULT_TOKENIZER,
    gguf_name,
    load_folder,
    logits,
    permute_rows,
    write_tokenizer_metadata,
)

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
# not Llama 3's shipped values: found by solving from the factors (two are blended)
SOLVED = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
          "high_freq_factor": 3.0, "original_max_position_embeddings": 100}  # fmt: skip
DEEPSEEK_LINEAR = {"rope_type": "linear", "factor": 4.0}


def tiny_model(
    rope: dict[str, Any] | None,
    head_dim: int = 16,
    theta: float = 10000.0,
    max_positions: int = 256,
    arch: str = "llama",
    seed: int = 1,
) -> transformers.PreTrainedModel:
    """A random model (2 layers, GQA) on the shipped model's 4,096-token vocabulary."""
    torch.manual_seed(seed)
    heads = 4
    config = getattr(transformers, CONFIGS[arch])(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=2, head_dim=head_dim,
        max_position_embeddings=max_positions, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={**(rope or {"rope_type": "default"}), "rope_theta": theta},
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return norms_away_from_one(model)


# ------------------------------------------------------------------ written as llama.cpp does
def converter_rope_factors(params: dict[str, Any], theta: float, dim: int) -> torch.Tensor:
    """llama.cpp's LlamaModel.generate_extra_tensors for a ``llama3`` rope, step by step
    as it computes them (torch float32 scalars; ``original_max_position_embeddings``
    read from the top of the config, 8192 when absent there)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low = params["factor"], params["low_freq_factor"]
    high, old = params["high_freq_factor"], params["original_max_position_embeddings"]
    out: list[Any] = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


def write_file(
    path: Path,
    model: transformers.PreTrainedModel,
    metadata: dict[str, Any] | None = None,
    factors: np.ndarray | None = None,
    pre: str = "smollm",
) -> Path:
    """``model`` as convert_hf_to_gguf.py writes it, F32: its rope scaling as metadata
    (``linear``: type and factor) or as ``rope_freqs.weight`` (``llama3``); ``metadata``
    and ``factors`` override what is written, for the near misses."""
    cfg = model.config
    arch, rope = cfg.model_type, cfg.rope_parameters
    w = gguf.GGUFWriter(str(path), arch)
    write_shape(w, cfg)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_key_length(cfg.head_dim)
    w.add_vocab_size(cfg.vocab_size)
    if rope["rope_type"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    if rope["rope_type"] == "llama3" and factors is None:
        factors = converter_rope_factors(rope, rope["rope_theta"], cfg.head_dim).numpy()
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            w.add_string(f"{arch}.{key}", value)
        else:
            w.add_float32(f"{arch}.{key}", value)
    write_tokenizer_metadata(w, json.loads(DEFAULT_TOKENIZER.read_text()), pre)
    if factors is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(factors, dtype=np.float32))
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied
        data = tensor.numpy()
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
            data = permute_rows(data, heads)
        w.add_tensor(gguf_name(name), data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def prompts(length: int) -> list[list[int]]:
    rng = random.Random(length)
    return [[rng.randrange(4096) for _ in range(length)], [17, 400, 3000, 5, 99, 4095, 1]]


def config_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


# ------------------------------------------------------------------ the logits
ROPE_CASES = {
    # (rope, head size, rope base, context, prompt length)
    "llama3.1": (LLAMA31, 16, 500000.0, 131072, 100),
    "llama3.2": (LLAMA31 | {"factor": 32.0}, 32, 500000.0, 131072, 100),
    "llama3-solved": (SOLVED, 32, 10000.0, 400, 130),
    "deepseek-linear": (DEEPSEEK_LINEAR, 16, 100000.0, 64, 40),
}


@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_scaled_rope_gives_the_source_logits(tmp_path: Path, case: str) -> None:
    """The converted model's logits equal the source's (float32) on a long prompt (longer
    than the original context where a tiny model can have one) and a short one; its rope
    parameters are the source's; the same model without the scaling is further off than
    the tolerance (so the scaling matters here)."""
    rope, dim, theta, context, length = ROPE_CASES[case]
    source = tiny_model(rope, dim, theta, context)
    file = write_file(tmp_path / f"{case}.gguf", source)
    folder = mg.convert_gguf(file, "float32", cache_dir=tmp_path / "cache")
    converted = load_folder(folder)
    unscaled = tiny_model(None, dim, theta, context)
    for ids in prompts(length):
        got, want = logits(converted, ids), logits(source, ids)
        assert (got - want).abs().max() <= 1e-5, (case, len(ids))
        if len(ids) == length:
            assert torch.equal(got, want), case
            assert (logits(unscaled, ids) - want).abs().max() > 1e-4, case  # > the tolerance
    config = config_of(folder)
    assert config["rope_parameters"] == source.config.rope_parameters
    assert config["max_position_embeddings"] == context


def test_factors_agree_with_transformers_within_one_ulp() -> None:
    """What llama.cpp rotates by (the plain inverse frequencies over the file's factors)
    against transformers' llama3 rope, for Llama 3.1 8B's and Llama 3.2 1B / 3B's heads
    and the test cases: never more than one unit in the last place apart."""
    for params, theta, dim in [
        (LLAMA31, 500000.0, 128), (LLAMA31 | {"factor": 32.0}, 500000.0, 64),
        (SOLVED, 10000.0, 32), (LLAMA31, 500000.0, 16),
    ]:  # fmt: skip
        factors = converter_rope_factors(params, theta, dim).numpy()
        assert factors.max() == params["factor"] and factors.min() == 1
        in_file = inverse_frequencies(theta, dim, NO_SCALING) / factors
        theirs = inverse_frequencies(theta, dim, params)
        ulps = np.abs(in_file.view(np.int32).astype(int) - theirs.view(np.int32).astype(int))
        assert ulps.max() <= 1, (params, ulps)
        assert llama3_parameters(factors, theta, dim, "x.gguf") == params


@pytest.mark.parametrize(
    ("label", "metadata", "factor"),
    [("older key, no type", {"rope.scale_linear": 4.0}, 4.0),
     ("type none", {"rope.scaling.type": "none", "rope.scaling.factor": 4.0}, None),
     ("factor 1", {"rope.scaling.type": "linear", "rope.scaling.factor": 1.0}, None)],
)  # fmt: skip
def test_linear_scaling_read_as_llama_cpp_reads_it(
    tmp_path: Path, label: str, metadata: dict, factor: float | None
) -> None:
    """llama.cpp's reading: no type means linear, the older ``rope.scale_linear`` key
    still counts, type ``none`` never scales, factor 1 is no scaling."""
    file = write_file(tmp_path / "m.gguf", tiny_model(None), metadata)
    rope = mg.model_config(mg.GGUFFile(file), "float32")["rope_parameters"]
    if factor is None:
        assert rope == {"rope_type": "default", "rope_theta": 10000.0}, label
    else:
        assert rope == {"rope_type": "linear", "factor": factor, "rope_theta": 10000.0}, label


# ------------------------------------------------------------------ refusals
def _near_miss_factors() -> np.ndarray:
    """Factors with three blended values, one of them 1 % off: no llama3 parameters
    give them (two would always fit a line)."""
    params = SOLVED | {"original_max_position_embeddings": 200, "high_freq_factor": 4.0}
    factors = converter_rope_factors(params, 10000.0, 32).numpy()
    blended = np.flatnonzero((factors != 1) & (factors != 4))
    assert blended.size == 3
    assert llama3_parameters(factors, 10000.0, 32, "x.gguf") == params  # before the change
    factors[blended[1]] *= np.float32(1.01)
    return factors


REFUSALS = {
    "factors off": ({}, "near_miss", "match no Llama 3 rope parameters"),
    "factors not rising": ({}, np.float32([1, 3, 2, 4] * 2), "match no Llama 3 rope"),
    "factors too few": ({}, np.float32([1, 2, 4]), "holds 3 factors, not one positive finite"),
    "a factor 0": ({}, np.float32([1, 1, 0, 4] * 2), "not one positive finite factor"),
    "yarn": ({"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0}, None, "'yarn' is not"),
    "longrope": ({"rope.scaling.type": "longrope"}, None, "rope scaling 'longrope'"),
    "factors and linear": (
        {"rope.scaling.type": "linear", "rope.scaling.factor": 2.0},
        np.float32([1, 1, 2, 4] * 2),
        "both rope frequency factors and linear",
    ),
    "attn factor": ({"rope.scaling.attn_factor": 0.5}, None, "attn_factor is set"),
}


@pytest.mark.parametrize("label", list(REFUSALS))
def test_unreproducible_scaling_is_refused(tmp_path: Path, label: str) -> None:
    metadata, factors, message = REFUSALS[label]
    if isinstance(factors, str):
        factors = _near_miss_factors()
    dim = 32 if label == "factors off" else 16
    file = write_file(tmp_path / "m.gguf", tiny_model(None, dim), metadata, factors)
    cache = tmp_path / "cache"
    with pytest.raises(mg.GGUFError, match=message):
        mg.convert_gguf(file, cache_dir=cache)
    assert not cache.exists() or not any(cache.iterdir())


def test_factors_outside_llama_files_are_refused(tmp_path: Path) -> None:
    """llama.cpp reads rope_freqs.weight in llama files only."""
    file = write_file(
        tmp_path / "q.gguf", tiny_model(None, arch="qwen2"), factors=np.ones(8, np.float32)
    )
    with pytest.raises(mg.GGUFError, match=r"rope frequency factors .* in a qwen2 file"):
        mg.model_config(mg.GGUFFile(file), "float32")


def test_factors_are_not_a_weight(tmp_path: Path) -> None:
    """rope_freqs.weight goes into config.json, not into model.safetensors."""
    file = write_file(tmp_path / "m.gguf", tiny_model(LLAMA31, max_positions=131072))
    names = mg.dequantized_tensors(mg.GGUFFile(file))
    assert "model.embed_tokens.weight" in names
    assert not any("rope" in n for n in names)
