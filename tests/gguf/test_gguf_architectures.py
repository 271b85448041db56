"""The starcoder2 and gemma (CodeGemma) GGUF architectures (engine/gguf/architectures.py):
tiny random transformers models written with ``gguf.GGUFWriter`` as llama.cpp's
convert_hf_to_gguf.py writes them (its metadata keys, the ``gguf`` package's own
TensorNameMap for the tensor names, 1 added to Gemma's norm weights, no output matrix
for Gemma, norms kept F32), converted back by midword and compared logit by logit with
the models they came from. Variants that are not modelled are refused by name."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from midword.engine import load_tokenizer
from midword.engine.gguf import convert as mg

from ..gguf_support import write_shape
from .test_gguf import DEFAULT_TOKENIZER, as_read_back, load_folder, logits, stored
from .test_gguf import write_tokenizer_metadata as write_bpe_vocab
from .test_gguf_sentencepiece import SPECIALS, Vocab, small_vocab, write_vocab

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BPE_IDS = [17, 400, 3000, 5, 99, 4095, 1, 250, 1234, 77, 8, 2048]
GEMMA_TEXTS = ["def f(x):\n    return x", "abc de\n\nxy  z", "<b>yx</b>"]
FIM = {"prefix": 5, "middle": 6, "suffix": 7}  # CodeGemma's FIM tokens (67-69 there)


# ------------------------------------------------------------------ tiny source models
def _randomise_vectors(model: transformers.PreTrainedModel, centre: float) -> None:
    """Norms and biases away from their initial values, so a misplaced one shows."""
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(centre + 0.3 * torch.randn_like(p))


def tiny_starcoder2(seed: int, tie: bool, use_bias: bool = True) -> transformers.PreTrainedModel:
    """A random StarCoder2 on the shipped model's 4,096-token vocabulary."""
    torch.manual_seed(seed)
    config = transformers.Starcoder2Config(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        norm_epsilon=1e-5, rope_theta=100000.0, use_bias=use_bias, sliding_window=None,
        tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _randomise_vectors(model, 1.0)
    return model


@functools.cache
def gemma_vocab() -> Vocab:
    """A CodeGemma-like SentencePiece vocabulary: <pad> <eos> <bos> <unk> first, FIM
    tokens, no dummy prefix, USER_DEFINED runs of newlines and spaces and an HTML tag."""
    users = ("\n\n", "\n\n\n", "  ", "    ", "<b>")
    base = small_vocab(6, lead=False, users=users)
    rows = list(zip(base.tokens, base.types, base.scores, strict=True))[len(SPECIALS) :]
    head = [("<pad>", mg.CONTROL), ("<eos>", mg.CONTROL), ("<bos>", mg.CONTROL)]
    head += [("<unk>", mg.UNKNOWN), ("<mask>", mg.CONTROL)]
    head += [(f"<|fim_{k}|>", mg.CONTROL) for k in FIM]
    return Vocab([(t, k, 0.0) for t, k in head] + rows, lead=False)


def tiny_gemma(seed: int, vocab_size: int) -> transformers.PreTrainedModel:
    """A random Gemma with one KV head and heads of 32 (not hidden / heads = 16), as Gemma
    7B's 256 is not 3072 / 16."""
    torch.manual_seed(seed)
    config = transformers.GemmaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
        rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _randomise_vectors(model, 0.0)  # Gemma's norms multiply by 1 + w
    return model


BITING_CAPS = (2.0, 1.0)  # soft-capping low enough to bite on a tiny model's logits


def tiny_gemma2(seed: int, vocab_size: int, caps: tuple[float, float] = (50.0, 30.0)):  # noqa: ANN201
    """A random Gemma 2 (three layers: sliding, full, sliding) with a window of 4 tokens
    and Gemma 2's soft-capping (or ``caps``)."""
    torch.manual_seed(seed)
    attn_cap, final_cap = caps
    config = transformers.Gemma2Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
        max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=4,
        attn_logit_softcapping=attn_cap, final_logit_softcapping=final_cap,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _randomise_vectors(model, 0.0)  # Gemma's norms multiply by 1 + w
    return model


GEMMA3_ROPE = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}


def tiny_gemma3(seed: int, vocab_size: int, **changes: object):  # noqa: ANN201
    """A random Gemma 3 with seven layers (five sliding, one global, one sliding: Gemma 3's
    pattern), a window of 4 tokens, Q/K norms, and the 4B-27B rope: base 10,000 on the
    sliding layers, 1,000,000 with linear scaling 8 on the global one."""
    torch.manual_seed(seed)
    settings = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=7,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
        max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=4,
        rope_parameters={
            "full_attention": dict(GEMMA3_ROPE),
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    config = transformers.Gemma3TextConfig(**{**settings, **changes})
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _randomise_vectors(model, 0.0)  # Gemma's norms multiply by 1 + w
    return model


@functools.cache
def phi3_vocab() -> Vocab:
    """A small SentencePiece vocabulary, as Phi-3 mini / medium have (Llama 2's kind)."""
    return small_vocab(7)


def tiny_phi3(seed: int, vocab_size: int) -> transformers.PreTrainedModel:
    """A random Phi-3 (fused QKV and gate-up matrices, untied output) with Phi-3 mini's
    sliding window of 2,047 in its config, which llama.cpp does not apply."""
    torch.manual_seed(seed)
    config = transformers.Phi3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        original_max_position_embeddings=256, rms_norm_eps=1e-5, sliding_window=2047,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _randomise_vectors(model, 1.0)
    return model


# ------------------------------------------------------------------ written as llama.cpp does
def _metadata_starcoder2(w: gguf.GGUFWriter, cfg: transformers.PretrainedConfig) -> None:
    """TextModel.set_gguf_parameters (StarCoder2Model overrides nothing), then the
    byte-level BPE vocabulary its hash names 'starcoder'."""
    write_shape(w, cfg)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_eps(cfg.norm_epsilon)  # from norm_epsilon: a LayerNorm epsilon
    write_bpe_vocab(w, json.loads(DEFAULT_TOKENIZER.read_text()), "starcoder")


def _metadata_gemma(w: gguf.GGUFWriter, cfg: transformers.PretrainedConfig) -> None:
    """GemmaModel.set_gguf_parameters (no rope base: llama.cpp's 10,000) and set_vocab."""
    write_shape(w, cfg)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    write_vocab(w, gemma_vocab())  # (add_space_prefix False: the vocabulary's lead)
    for name, i in {"bos": 2, "eos": 1, "unk": 3, "pad": 0}.items():
        getattr(w, f"add_{name}_token_id")(i)
    for kind, i in FIM.items():
        w.add_uint32(f"tokenizer.ggml.{kind}_token_id", i)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def _metadata_gemma2(w: gguf.GGUFWriter, cfg: transformers.PretrainedConfig) -> None:
    """Gemma2Model.set_gguf_parameters (no rope base, no query scale: llama.cpp derives
    them) and GemmaModel's vocabulary."""
    _metadata_gemma(w, cfg)
    w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
    w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    w.add_sliding_window(cfg.sliding_window)


def _metadata_gemma3(w: gguf.GGUFWriter, cfg: transformers.PretrainedConfig) -> None:
    """Gemma3Model.set_gguf_parameters: the global layers' rope base and their linear
    scaling, the sliding window (no soft-capping: its converter asserts there is none, and
    no pattern: llama.cpp's is fixed), and GemmaModel's vocabulary."""
    _metadata_gemma(w, cfg)
    full = cfg.rope_parameters["full_attention"]
    w.add_rope_freq_base(full["rope_theta"])
    w.add_sliding_window(cfg.sliding_window)
    if full.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(full["factor"])


def _metadata_phi3(w: gguf.GGUFWriter, cfg: transformers.PretrainedConfig) -> None:
    """Phi3MiniModel.set_gguf_parameters (which does not call TextModel's: no key length,
    the sliding window written, 0 when the config has none) and its SentencePiece
    set_vocab (tokenizer.ggml.pre 'default')."""
    rope = cfg.rope_parameters
    w.add_context_length(cfg.max_position_embeddings)
    w.add_rope_scaling_orig_ctx_len(cfg.original_max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rotary = int(rope.get("partial_rotary_factor", 1.0) * cfg.hidden_size)
    w.add_rope_dimension_count(rotary // cfg.num_attention_heads)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_sliding_window(cfg.sliding_window or 0)
    write_vocab(w, phi3_vocab())
    w.add_tokenizer_pre("default")
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


METADATA = {
    "starcoder2": _metadata_starcoder2, "gemma": _metadata_gemma, "gemma2": _metadata_gemma2,
    "phi3": _metadata_phi3, "gemma3": _metadata_gemma3,
}  # fmt: skip
GEMMAS = ("gemma", "gemma2", "gemma3")  # norms stored + 1, no output matrix
GGUF_ARCH = {"gemma3_text": "gemma3"}  # transformers' model_type -> llama.cpp's name


def write_like_llama_cpp(
    path: Path,
    model: transformers.PreTrainedModel,
    qtype: str,
    skip: tuple[str, ...] = (),
    extra: dict[str, np.ndarray] | None = None,
) -> Path:
    """``model`` as convert_hf_to_gguf.py writes it: names from the gguf package's
    TensorNameMap, Gemma's norm weights + 1 and its lm_head left out, a tied output
    matrix left out, 1-D tensors F32; ``skip``: GGUF tensors to leave out, ``extra``:
    tensors to add."""
    cfg = model.config
    arch = GGUF_ARCH.get(cfg.model_type, cfg.model_type)
    w = gguf.GGUFWriter(str(path), arch)
    METADATA[arch](w, cfg)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and (arch in GEMMAS or cfg.tie_word_embeddings):
            continue
        data = tensor.numpy()
        if arch in GEMMAS and name.endswith("norm.weight"):
            data = data + np.float32(1)
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name in skip:
            continue
        array, kind = stored(data, qtype)
        w.add_tensor(gguf_name, array, raw_dtype=kind)
    for gguf_name, data in (extra or {}).items():
        w.add_tensor(gguf_name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def as_llama_cpp_holds(model: transformers.PreTrainedModel, qtype: str) -> None:
    """``model``'s weights replaced, in place, by what a reader of the file gets back:
    rounded or quantized, and Gemma's norms through the + 1 and - 1 in float32."""
    gemma = GGUF_ARCH.get(model.config.model_type, model.config.model_type) in GEMMAS
    with torch.no_grad():
        for name, p in model.named_parameters():
            w = as_read_back(p.numpy(), qtype)
            if gemma and name.endswith("norm.weight"):
                w = (w + np.float32(1)) - np.float32(1)
            p.copy_(torch.from_numpy(w))


def gemma_ids() -> list[list[int]]:
    oracle = gemma_vocab().oracle()
    return [[2, *oracle.ids(text)] for text in GEMMA_TEXTS]


def phi3_ids() -> list[list[int]]:
    oracle = phi3_vocab().oracle()
    return [[1, *oracle.ids(text)] for text in ["abc de\nxy", "ed cab", "x"]]


def build(arch: str, seed: int, tie: bool = True, use_bias: bool = True):  # noqa: ANN201
    if arch == "gemma":
        return tiny_gemma(seed, len(gemma_vocab().tokens))
    if arch == "gemma2":
        return tiny_gemma2(seed, len(gemma_vocab().tokens))
    if arch == "gemma3":
        return tiny_gemma3(seed, len(gemma_vocab().tokens))
    if arch == "phi3":
        return tiny_phi3(seed, len(phi3_vocab().tokens))
    return tiny_starcoder2(seed, tie, use_bias)


def prompts(arch: str) -> list[list[int]]:
    special = {"gemma": gemma_ids, "gemma2": gemma_ids, "gemma3": gemma_ids, "phi3": phi3_ids}
    return special[arch]() if arch in special else [BPE_IDS, BPE_IDS[::-1][:5], [3, 3, 3]]


# ------------------------------------------------------------------ weights
CASES = [
    ("starcoder2", "F32", True, True), ("starcoder2", "F32", False, True),
    ("starcoder2", "F32", True, False), ("starcoder2", "Q8_0", False, True),
    ("gemma", "F32", True, True), ("gemma", "Q8_0", True, True),
    ("phi3", "F32", False, False), ("phi3", "Q8_0", False, False),
    ("gemma2", "F32", True, True), ("gemma2", "Q8_0", True, True),
    ("gemma3", "F32", True, True), ("gemma3", "Q8_0", True, True),
]  # fmt: skip


# Q8_0's rounding against the source's logits (a bound on the quantizer, not on the
# conversion, which is exact): Gemma 2's tiny model has small logits (at most 0.7) and
# norms after attention and feed-forward too (measured 1.7-2.1 %); Gemma 3's seven
# layers with Q/K norms on top (measured 3.5 % at most)
Q8_BOUND = {"gemma2": 0.03, "gemma3": 0.05}


@pytest.mark.parametrize(("arch", "qtype", "tie", "use_bias"), CASES)
def test_converted_model_gives_the_source_logits(
    tmp_path: Path, arch: str, qtype: str, tie: bool, use_bias: bool
) -> None:
    """Logits equal those of the model holding what the file holds (exactly), and the
    source's: within 1e-5 for float32 files (Gemma's norms can lose a bit to the + 1),
    within 2 % (relative L2) for Q8_0."""
    source = build(arch, 1, tie, use_bias)
    file = write_like_llama_cpp(tmp_path / f"{arch}.gguf", source, qtype)
    folder = mg.convert_gguf(file, "float32", cache_dir=tmp_path / "cache")
    converted = load_folder(folder)
    expected = build(arch, 1, tie, use_bias)
    as_llama_cpp_holds(expected, qtype)
    for ids in prompts(arch):
        got, want, src = logits(converted, ids), logits(expected, ids), logits(source, ids)
        assert torch.equal(got, want), ids
        if qtype == "F32":
            assert (got - src).abs().max() <= 1e-5, ids
        else:
            assert not torch.equal(got, src)  # the quantization shows
            assert (got - src).norm() / src.norm() < Q8_BOUND.get(arch, 0.02), ids


def test_starcoder2_config_round_trips(tmp_path: Path) -> None:
    source = tiny_starcoder2(2, tie=False)
    file = write_like_llama_cpp(tmp_path / "s.gguf", source, "F32")
    config = json.loads(
        (mg.convert_gguf(file, cache_dir=tmp_path / "c") / "config.json").read_text()
    )
    theirs = source.config.to_dict()
    for key in (
        "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
        "norm_epsilon", "use_bias", "hidden_act", "tie_word_embeddings", "rope_parameters",
        "sliding_window",
    ):  # fmt: skip
        assert config[key] == theirs[key], key
    assert config["architectures"] == ["Starcoder2ForCausalLM"]


def test_gemma_config_tokenizer_and_norms(tmp_path: Path) -> None:
    """Config fields, the special tokens, the tokenizer (llama.cpp's encoding: no dummy
    prefix, USER_DEFINED text first), and the norms: stored + 1, converted back."""
    vocab = gemma_vocab()
    source = tiny_gemma(3, len(vocab.tokens))
    file = write_like_llama_cpp(tmp_path / "g.gguf", source, "F32")
    folder = mg.convert_gguf(file, cache_dir=tmp_path / "c")
    config = json.loads((folder / "config.json").read_text())
    theirs = source.config.to_dict()
    for key in (
        "model_type", "hidden_size", "head_dim", "num_attention_heads", "num_key_value_heads",
        "rms_norm_eps", "hidden_act", "tie_word_embeddings", "rope_parameters",
        "bos_token_id", "eos_token_id", "pad_token_id", "vocab_size",
    ):  # fmt: skip
        assert config[key] == theirs[key], key
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert (tok_config["bos_token"], tok_config["eos_token"]) == ("<bos>", "<eos>")
    tok = load_tokenizer(folder / "tokenizer.json", use_cache=False)
    assert tok.lead == b""
    for text in [*GEMMA_TEXTS, " x", "\n\n\n\n  a"]:
        assert tok.encode(text) == vocab.oracle().ids(text), text
    in_file = next(t for t in gguf.GGUFReader(str(file)).tensors if t.name == "output_norm.weight")
    norm = source.model.norm.weight.detach().numpy()
    assert np.array_equal(np.asarray(in_file.data), norm + np.float32(1))
    restored = mg.dequantized_tensors(mg.GGUFFile(file))["model.norm.weight"]
    assert np.abs(restored - norm).max() < 1e-6 and not np.allclose(restored, norm + 1)


def _gemma2_variant(source: transformers.PreTrainedModel, **changes: object):  # noqa: ANN202
    """``source``'s weights under a changed config."""
    config = transformers.Gemma2Config(**{**source.config.to_dict(), **changes})
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.load_state_dict(source.state_dict())
    return model


def _gemma_config_as_source(folder: Path, source: Any) -> dict[str, Any]:
    """The converted config.json, checked against the source's on every field llama.cpp's
    Gemma 2 / 3 files carry (caps, window, layer types, rope, query scale, norms)."""
    config = json.loads((folder / "config.json").read_text())
    theirs = source.config.to_dict()
    for key in (
        "model_type", "head_dim", "num_key_value_heads", "rms_norm_eps", "hidden_activation",
        "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
        "sliding_window", "layer_types", "rope_parameters", "tie_word_embeddings",
    ):  # fmt: skip
        assert config[key] == theirs[key], key
    return config


def test_gemma2_config_and_what_it_changes(tmp_path: Path) -> None:
    """Soft-capping, the window and its layers, the query scale and the four norms come
    through, and with soft-capping that bites the logits are still the source's exactly;
    without the soft-capping or the window they differ (both matter on this prompt)."""
    source = tiny_gemma2(5, len(gemma_vocab().tokens), BITING_CAPS)
    file = write_like_llama_cpp(tmp_path / "g2.gguf", source, "F32")
    folder = mg.convert_gguf(file, cache_dir=tmp_path / "c")
    _gemma_config_as_source(folder, source)
    restored = mg.dequantized_tensors(mg.GGUFFile(file))
    norm = source.model.layers[2].post_feedforward_layernorm.weight.detach().numpy()
    assert np.abs(restored["model.layers.2.post_feedforward_layernorm.weight"] - norm).max() < 1e-6
    ids = gemma_ids()[0]
    assert len(ids) > 2 * source.config.sliding_window
    want = logits(source, ids)
    assert torch.equal(logits(load_folder(folder), ids), want)
    uncapped = _gemma2_variant(source, attn_logit_softcapping=None, final_logit_softcapping=None)
    unwindowed = _gemma2_variant(source, layer_types=["full_attention"] * 3)
    for changed in (uncapped, unwindowed):
        assert (logits(changed, ids) - want).abs().max() > 1e-3


def test_gemma2_query_scale_follows_llama_cpp(tmp_path: Path) -> None:
    """llama.cpp scales Gemma 2's queries by 1/sqrt(head size), 27B's (46 layers) by
    1/sqrt(hidden / heads): 144 for 27B's 4,608 / 32, not its heads of 128 (metadata only:
    the config is read before any tensor)."""
    from midword.engine.gguf.architectures import hf_config

    for layers, hidden, heads, head, scalar in ((42, 3584, 16, 256, 256), (46, 4608, 32, 128, 144)):
        w = gguf.GGUFWriter(str(tmp_path / f"{layers}.gguf"), "gemma2")
        w.add_block_count(layers)
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(64)
        w.add_head_count(heads)
        w.add_head_count_kv(16)
        w.add_key_length(head)
        w.add_value_length(head)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
        w.add_sliding_window(4096)
        write_vocab(w, gemma_vocab())
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        config = hf_config(mg.GGUFFile(tmp_path / f"{layers}.gguf"), {})
        assert config.query_pre_attn_scalar == scalar and config.head_dim == head, layers
        assert config.layer_types[:3] == [
            "sliding_attention",
            "full_attention",
            "sliding_attention",
        ]
        assert (config.attn_logit_softcapping, config.final_logit_softcapping) == (50.0, 30.0)


def _gemma3_variant(source: transformers.PreTrainedModel, **changes: object):  # noqa: ANN202
    """``source``'s weights under a changed config."""
    settings = {**source.config.to_dict(), **changes}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma3TextConfig(**settings)
    ).eval()
    model.load_state_dict(source.state_dict())
    return model


def test_gemma3_config_and_what_it_changes(tmp_path: Path) -> None:
    """The window and its layers (five sliding, one global), both rope bases and the global
    layers' linear scaling, the query scale, the Q/K norms (+ 1 undone) come through, and
    the logits are the source's exactly; with any one of window, local base or scaling
    changed they differ on this prompt (each matters here)."""
    source = tiny_gemma3(5, len(gemma_vocab().tokens))
    file = write_like_llama_cpp(tmp_path / "g3.gguf", source, "F32")
    folder = mg.convert_gguf(file, cache_dir=tmp_path / "c")
    config = _gemma_config_as_source(folder, source)
    assert config["layer_types"][4:] == ["sliding_attention", "full_attention", "sliding_attention"]
    restored = mg.dequantized_tensors(mg.GGUFFile(file))
    k_norm = source.model.layers[5].self_attn.k_norm.weight.detach().numpy()
    assert np.abs(restored["model.layers.5.self_attn.k_norm.weight"] - k_norm).max() < 1e-6
    ids = gemma_ids()[0]
    assert len(ids) > 2 * source.config.sliding_window
    want = logits(source, ids)
    assert torch.equal(logits(load_folder(folder), ids), want)
    rope = source.config.rope_parameters
    changes = {
        "window": {"layer_types": ["full_attention"] * 7},
        "local base": {"rope_parameters": {**rope, "sliding_attention": dict(GEMMA3_ROPE)}},
        "scaling": {
            "rope_parameters": {**rope, "full_attention": {"rope_type": "default",
                                                            "rope_theta": 1000000.0}},
        },
    }  # fmt: skip
    for label, change in changes.items():
        assert (logits(_gemma3_variant(source, **change), ids) - want).abs().max() > 1e-4, label


def _gemma3_metadata_only(path: Path, layers: int, hidden: int, heads: int, head: int,
                          **extra: float) -> Path:  # fmt: skip
    """A gemma3 file with metadata and vocabulary only (``extra``: <arch>.<key> floats)."""
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(64)
    w.add_head_count(heads)
    w.add_head_count_kv(16)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    for key, value in extra.items():
        w.add_float32(f"gemma3.{key}", value)
    write_vocab(w, gemma_vocab())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gemma3_query_scale_and_refusals(tmp_path: Path) -> None:
    """llama.cpp scales Gemma 3's queries by 1/sqrt(head size), 27B's (62 layers) by
    1/sqrt(hidden / heads): 168 for 27B's 5,376 / 32, not its heads of 128 (metadata only).
    Files without a sliding window (which llama.cpp's versions run differently) and files
    with soft-capping (which Gemma 3's converter never writes) are refused by name."""
    from midword.engine.gguf.architectures import hf_config

    for layers, hidden, heads, head, scalar in ((26, 1152, 4, 256, 256), (62, 5376, 32, 128, 168)):
        file = _gemma3_metadata_only(
            tmp_path / f"{layers}.gguf", layers, hidden, heads, head,
            **{"attention.sliding_window": 1024},
        )  # fmt: skip
        config = hf_config(mg.GGUFFile(file), {})
        assert config.query_pre_attn_scalar == scalar and config.head_dim == head, layers
        assert config.layer_types[4:7] == [
            "sliding_attention",
            "full_attention",
            "sliding_attention",
        ]
        assert config.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
        assert config.rope_parameters["full_attention"]["rope_theta"] == 1000000.0
    cases = {
        "no window": ({}, "gemma3 file without a sliding window"),
        "capped": (
            {"attention.sliding_window": 512, "final_logit_softcapping": 30.0},
            "gemma3.final_logit_softcapping is set",
        ),
    }
    for label, (extra, message) in cases.items():
        file = _gemma3_metadata_only(tmp_path / f"{label}.gguf", 26, 1152, 4, 256, **extra)
        with pytest.raises(mg.GGUFError, match=message):
            hf_config(mg.GGUFFile(file), {})


def test_phi3_config_and_fused_matrices(tmp_path: Path) -> None:
    """Config fields round-trip; the sliding window the file carries (2,047, as Phi-3
    mini's) is dropped, as llama.cpp drops it; the fused QKV and gate-up matrices are
    stored as the file holds them (transformers' Phi3 holds them fused too)."""
    source = tiny_phi3(3, len(phi3_vocab().tokens))
    file = write_like_llama_cpp(tmp_path / "p.gguf", source, "F32")
    assert mg.GGUFFile(file).arch_value("attention.sliding_window") == 2047
    config = json.loads(
        (mg.convert_gguf(file, cache_dir=tmp_path / "c") / "config.json").read_text()
    )
    theirs = source.config.to_dict()
    for key in (
        "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "hidden_act", "tie_word_embeddings",
        "rope_parameters", "max_position_embeddings", "original_max_position_embeddings",
        "bos_token_id", "eos_token_id", "vocab_size",
    ):  # fmt: skip
        assert config[key] == theirs[key], key
    assert config["architectures"] == ["Phi3ForCausalLM"] and config["sliding_window"] is None
    tensors = mg.dequantized_tensors(mg.GGUFFile(file))
    qkv = tensors["model.layers.1.self_attn.qkv_proj.weight"]
    assert qkv.shape == (64 + 2 * 32, 64)
    assert np.array_equal(qkv, source.model.layers[1].self_attn.qkv_proj.weight.detach().numpy())


def test_phi3_long_context_and_partial_rotary_files_are_refused(tmp_path: Path) -> None:
    """Phi-3 128k / Phi-3.5 (LongRoPE factor tensors) and Phi-4-mini's partial rotary
    embeddings (three quarters of each head) are not modelled."""
    source = tiny_phi3(4, len(phi3_vocab().tokens))
    factors = {f"rope_factors_{k}.weight": np.ones(8, np.float32) for k in ("long", "short")}
    file = write_like_llama_cpp(tmp_path / "long.gguf", source, "F32", extra=factors)
    with pytest.raises(mg.GGUFError, match="LongRoPE factors"):
        mg.convert_gguf(file, cache_dir=tmp_path / "c")
    source.config.rope_parameters["partial_rotary_factor"] = 0.75
    file = write_like_llama_cpp(tmp_path / "partial.gguf", source, "F32")
    with pytest.raises(mg.GGUFError, match=r"partial rotary embeddings \(12 of 16\)"):
        mg.convert_gguf(file, cache_dir=tmp_path / "c")


# ------------------------------------------------------------------ refusals
def _vocab_only(path: Path, arch: str) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    write_bpe_vocab(w, json.loads(DEFAULT_TOKENIZER.read_text()), "starcoder")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize(
    ("arch", "why"),
    [("gemma3n", "Gemma 3n .*per-layer embeddings"), ("starcoder", "StarCoder 1")],
)  # fmt: skip
def test_near_families_are_refused_by_name(tmp_path: Path, arch: str, why: str) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(mg.GGUFError, match=f"general.architecture = '{arch}'.*{why}"):
        mg.convert_gguf(_vocab_only(tmp_path / "m.gguf", arch), cache_dir=cache)
    assert not cache.exists() or not any(cache.iterdir())


def test_unmodelled_variants_are_refused(tmp_path: Path) -> None:
    """A starcoder2 file with some biases but not all (transformers' use_bias is all or
    none), one with an RMS epsilon instead of a LayerNorm one, a sliding window, a Gemma
    file with its own output matrix, and a Gemma 2 file without soft-capping values."""
    source = tiny_starcoder2(5, tie=True)
    partial = write_like_llama_cpp(tmp_path / "p.gguf", source, "F32", skip=("blk.1.attn_q.bias",))
    with pytest.raises(mg.GGUFError, match="no tensor for model.layers.1.self_attn.q_proj.bias"):
        mg.convert_gguf(partial, cache_dir=tmp_path / "c")
    cases = {
        "rms": ("starcoder2.attention.layer_norm_epsilon is missing", "layer_norm_epsilon"),
        "swa": ("starcoder2.attention.sliding_window is set", None),
    }
    for label, (message, drop) in cases.items():
        file = tmp_path / f"{label}.gguf"
        w = gguf.GGUFWriter(str(file), "starcoder2")
        _metadata_starcoder2(w, source.config)
        if drop:
            del w.kv_data[0][f"starcoder2.attention.{drop}"]
            w.add_layer_norm_rms_eps(1e-5)
        else:
            w.add_sliding_window(4096)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with pytest.raises(mg.GGUFError, match=message):
            mg.model_config(mg.GGUFFile(file), "float32")
    gemma = tiny_gemma(4, len(gemma_vocab().tokens))
    output = {"output.weight": gemma.model.embed_tokens.weight.detach().numpy()}
    file = write_like_llama_cpp(tmp_path / "g.gguf", gemma, "F32", extra=output)
    with pytest.raises(mg.GGUFError, match="output.weight in a gemma file"):
        mg.convert_gguf(file, cache_dir=tmp_path / "c")
    w = gguf.GGUFWriter(str(tmp_path / "g2.gguf"), "gemma2")
    _metadata_gemma(w, tiny_gemma2(4, len(gemma_vocab().tokens)).config)  # no window, no caps
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(mg.GGUFError, match="gemma2 file without gemma2.attn_logit_softcapping"):
        mg.model_config(mg.GGUFFile(tmp_path / "g2.gguf"), "float32")


# ------------------------------------------------------------------ the CLI
def test_complete_accepts_a_gemma3_file(tmp_path: Path) -> None:
    """`midword complete --model x.gguf` end to end, on the architecture with the most
    particular conversion (norms + 1 with Q/K norms, head size, SentencePiece vocabulary
    without a dummy prefix, sliding windows on five layers of six with their own rope
    base, linear scaling on the global ones): the HF loader takes the converted folder
    and its tree masks (Gemma 2's, through the same per-layer-type masks, was checked
    this way when it came); a Q8_0 file, as people download them."""
    arch = "gemma3"
    file = write_like_llama_cpp(tmp_path / f"{arch}.gguf", build(arch, 6), "Q8_0")
    env = {**os.environ, "MIDWORD_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "midword", "complete", "--model", str(file), "--device", "cpu"]
    cmd += ["--backend", "torch"]  # the conversion is what this checks (auto: llama.cpp)
    cmd += ["--max-tokens", "3", "--json", "def ma"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1])["completion"] is not None
    assert f"dequantizing {arch}.gguf" in run.stderr
