"""The model side of a GGUF file: how each ``general.architecture`` maps onto a
transformers model (:data:`ARCHITECTURES`), its ``config.json`` from the ``<arch>.*``
metadata (:func:`hf_config`), the transformers name of every tensor
(:func:`hf_tensor_name`), and what llama.cpp's converter did to a tensor, undone
(:func:`restore_tensor`).

The conventions are llama.cpp's (convert_hf_to_gguf.py writes the files, src/llama-model.cpp
reads them):

- ``llama``: Q and K rows permuted (each head's two rotary halves interleaved), RMSNorm
  (``attention.layer_norm_rms_epsilon``), SwiGLU, optional ``output.weight``.
- ``qwen2`` / ``qwen3``: as ``llama`` without the permutation; Q/K/V biases (qwen2), Q/K
  RMSNorms (qwen3).
- ``starcoder2``: LayerNorm with bias (``attention.layer_norm_epsilon``), biases on every
  projection, a plain GELU (tanh form) feed-forward ``ffn_up`` → ``ffn_down`` (transformers'
  ``c_fc`` / ``c_proj``), NeoX rope, no sliding window (llama.cpp ignores StarCoder2's).
- ``phi3`` (Phi-3 mini / medium, 4k context): fused QKV (``attn_qkv``) and gate-up
  (``ffn_up``, gate rows first) matrices, which transformers' Phi3 holds fused too (kept
  as they are), RMSNorm, NeoX rope, untied output; the sliding window the converter writes
  is dropped, as llama.cpp drops it.
- ``gemma2``: as ``gemma``, with four norms per layer (before and after attention and
  the feed-forward, all + 1), attention and final logit soft-capping, a sliding window on
  every even layer, and llama.cpp's query scale (1/sqrt(head size); 27B, told by its 46
  layers: 1/sqrt(hidden / heads)).
- ``gemma3`` (Gemma 3 1B, and the text model of 4B / 12B / 27B, whose vision tower is in
  a separate mmproj file): as ``gemma2`` with Q/K RMSNorms (+ 1 too), no soft-capping, the
  sliding window on five layers of every six, and two rope bases: 10,000 on the sliding
  layers, the file's (and its linear scaling) on the global ones.
- ``gemma``: RMSNorm whose weights the converter stored with 1 added (transformers' Gemma
  multiplies by ``1 + w``, llama.cpp by ``w``), embeddings scaled by √hidden (in both),
  GELU-gated feed-forward, head size from ``attention.key_length`` (Gemma 7B's 256 is not
  hidden / heads), and always the embedding matrix as output (llama.cpp reads no
  ``output.weight``).

Example (the transformers name and the restored value of a Gemma norm weight)::

    >>> gemma = ARCHITECTURES["gemma"]
    >>> hf_tensor_name(gemma, "blk.0.attn_norm.weight")
    'model.layers.0.input_layernorm.weight'
    >>> restore_tensor(gemma, "blk.0.attn_norm.weight", np.float32([1.25]), 4, 4).tolist()
    [0.25]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GGUFError
from .reader import GGUFFile, shortest_float
from .rope import ROPE_FREQS, rope_parameters

Settings = Callable[[GGUFFile], dict[str, Any]]

_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")
# tensors whose content goes into config.json, not into the model's weights
CONFIG_TENSORS = frozenset({ROPE_FREQS})


def _rms_settings(gf: GGUFFile) -> dict[str, Any]:
    return {
        "head_dim": head_dim(gf),
        "rms_norm_eps": shortest_float(gf.arch_value("attention.layer_norm_rms_epsilon")),
    }


def _gemma_settings(gf: GGUFFile) -> dict[str, Any]:
    # llama.cpp's GELU (ggml_gelu) is the tanh approximation
    return {**_rms_settings(gf), "hidden_act": "gelu_pytorch_tanh"}


def _starcoder2_settings(gf: GGUFFile) -> dict[str, Any]:
    heads = int(gf.arch_value("attention.head_count"))
    if head_dim(gf) * heads != int(gf.arch_value("embedding_length")):
        raise GGUFError(
            f"{gf.path.name}: starcoder2 with a head size ({head_dim(gf)}) other than "
            "hidden size / heads, which neither llama.cpp nor transformers' Starcoder2 reads"
        )
    return {
        "norm_epsilon": shortest_float(gf.arch_value("attention.layer_norm_epsilon")),
        # transformers' use_bias switches every projection's bias; a file with some of
        # them is refused by check_tensors
        "use_bias": "blk.0.attn_output.bias" in gf.tensor_names(),
        "hidden_act": "gelu_pytorch_tanh",
        "sliding_window": None,  # llama.cpp attends to the whole context
    }


def _phi3_settings(gf: GGUFFile) -> dict[str, Any]:
    # the converter writes Phi-3's sliding window, and llama.cpp turns it off ("Phi SWA is
    # currently disabled", llama-model.cpp): the model llama.cpp runs attends to everything
    settings: dict[str, Any] = {**_rms_settings(gf), "sliding_window": None}
    original = gf.arch_value("rope.scaling.original_context_length", None)
    if original is not None:  # (read by transformers' LongRoPE only, refused anyway)
        settings["original_max_position_embeddings"] = int(original)
    return settings


GEMMA2_27B_LAYERS = 46  # llama.cpp tells Gemma 2 27B by its layer count


def _gemma2_settings(gf: GGUFFile) -> dict[str, Any]:
    """Gemma 2 as llama.cpp runs it (``llama-model.cpp``): soft-capping and the sliding
    window from the file, sliding attention on every even layer (its swa pattern 2), and
    queries scaled by 1/sqrt(head size), except 27B's by 1/sqrt(hidden / heads)."""
    where = f"{gf.path.name}: a gemma2 file without"
    values = {}
    for key in ("attn_logit_softcapping", "final_logit_softcapping", "attention.sliding_window"):
        value = gf.arch_value(key, None)
        if value is None:  # (the converter always writes them)
            raise GGUFError(f"{where} {gf.arch}.{key}, which midword needs written")
        values[key] = value
    layers = int(gf.arch_value("block_count"))
    scalar = _query_pre_attn_scalar(gf, GEMMA2_27B_LAYERS)
    return {
        **_rms_settings(gf),
        "hidden_activation": "gelu_pytorch_tanh",  # ggml's GELU is the tanh form
        "query_pre_attn_scalar": scalar,
        "attn_logit_softcapping": shortest_float(values["attn_logit_softcapping"]),
        "final_logit_softcapping": shortest_float(values["final_logit_softcapping"]),
        "sliding_window": int(values["attention.sliding_window"]),
        "layer_types": [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
        ],
    }


def _query_pre_attn_scalar(gf: GGUFFile, layers_of_27b: int) -> int:
    """Gemma 2 / 3's query scale as llama.cpp takes it: the head size, except for the
    27B model (told by its layer count), whose queries are scaled by hidden / heads."""
    if int(gf.arch_value("block_count")) == layers_of_27b:
        return int(gf.arch_value("embedding_length")) // int(gf.arch_value("attention.head_count"))
    return head_dim(gf)


GEMMA3_27B_LAYERS = 62  # llama.cpp tells Gemma 3 27B by its layer count
GEMMA3_SWA_PATTERN = 6  # llama.cpp's: five sliding layers, then one global
GEMMA3_LOCAL_ROPE_BASE = 10000.0  # llama.cpp's rope base of the sliding layers, fixed


def _gemma3_settings(gf: GGUFFile) -> dict[str, Any]:
    """Gemma 3 as llama.cpp runs it (``llama-model.cpp``, ``models/gemma3.cpp``): the
    sliding window from the file on five layers of every six, rope base 10,000 and no
    scaling on those, the file's base and linear scaling on the global ones, queries
    scaled as Gemma 2's (27B, told by its 62 layers: 1/sqrt(hidden / heads)), no
    soft-capping (a file with some is refused by :func:`refuse_unmodelled`)."""
    window = int(gf.arch_value("attention.sliding_window", 0) or 0)
    if window <= 0:  # (Rnj-1-like files: llama.cpp's graph then differs between versions)
        raise GGUFError(
            f"{gf.path.name}: a gemma3 file without a sliding window; midword models "
            "Gemma 3's five sliding layers to one global"
        )
    layers = int(gf.arch_value("block_count"))
    scalar = _query_pre_attn_scalar(gf, GEMMA3_27B_LAYERS)
    return {
        **_rms_settings(gf),
        "hidden_activation": "gelu_pytorch_tanh",  # ggml's GELU is the tanh form
        "query_pre_attn_scalar": scalar,
        "sliding_window": window,
        "layer_types": [
            "sliding_attention" if (i + 1) % GEMMA3_SWA_PATTERN else "full_attention"
            for i in range(layers)
        ],
        # transformers' Gemma3 puts rope_theta and rope_scaling on the global layers
        "rope_local_base_freq": GEMMA3_LOCAL_ROPE_BASE,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
    }


@dataclass(frozen=True)
class Architecture:
    """How one ``general.architecture`` maps onto a transformers model class."""

    config_class: str  # a transformers config class name
    hf_architecture: str
    layer_tensors: Mapping[str, str]  # GGUF name within a block -> transformers name
    settings: Settings = _rms_settings  # config fields of the family (norm, activation, bias)
    permuted_qk: bool = False  # llama.cpp permuted the rows of Q and K (llama files)
    norm_shift: float = 0.0  # the converter added this to every norm weight (Gemma's 1)
    output_is_embedding: bool = False  # llama.cpp always uses token_embd as the output
    global_tensors: Mapping[str, str] = field(default_factory=lambda: dict(_GLOBAL_TENSORS))
    # <arch>.* keys the settings take care of: read into the config, or dropped where
    # llama.cpp does not apply them (refused for other architectures)
    handled_metadata: tuple[str, ...] = ()


_LAYER_COMMON = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_QKV_BIAS = {f"attn_{x}.bias": f"self_attn.{x}_proj.bias" for x in "qkv"}
_QK_NORM = {
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
_PHI3_LAYER = {  # fused QKV and gate-up matrices, as transformers' Phi3 holds them too
    "attn_norm.weight": "input_layernorm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_up.weight": "mlp.gate_up_proj.weight",  # gate rows first: llama.cpp's swiglu split
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GEMMA2_LAYER = {  # Gemma 2's four norms per layer
    **{k: v for k, v in _LAYER_COMMON.items() if k != "ffn_norm.weight"},
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_GEMMA3_LAYER = _GEMMA2_LAYER | _QK_NORM  # (the Q/K norms stored + 1 as well)
_STARCODER2_LAYER = {
    **{f"attn_norm.{p}": f"input_layernorm.{p}" for p in ("weight", "bias")},
    **{f"ffn_norm.{p}": f"post_attention_layernorm.{p}" for p in ("weight", "bias")},
    **{f"attn_{x}.{p}": f"self_attn.{x}_proj.{p}" for x in "qkv" for p in ("weight", "bias")},
    **{f"attn_output.{p}": f"self_attn.o_proj.{p}" for p in ("weight", "bias")},
    **{f"ffn_up.{p}": f"mlp.c_fc.{p}" for p in ("weight", "bias")},
    **{f"ffn_down.{p}": f"mlp.c_proj.{p}" for p in ("weight", "bias")},
}
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("LlamaConfig", "LlamaForCausalLM", _LAYER_COMMON, permuted_qk=True),
    "qwen2": Architecture("Qwen2Config", "Qwen2ForCausalLM", _LAYER_COMMON | _QKV_BIAS),
    "qwen3": Architecture("Qwen3Config", "Qwen3ForCausalLM", _LAYER_COMMON | _QK_NORM),
    "starcoder2": Architecture(
        "Starcoder2Config",
        "Starcoder2ForCausalLM",
        _STARCODER2_LAYER,
        settings=_starcoder2_settings,
        global_tensors=_GLOBAL_TENSORS | {"output_norm.bias": "model.norm.bias"},
    ),
    "phi3": Architecture(
        "Phi3Config",
        "Phi3ForCausalLM",
        _PHI3_LAYER,
        settings=_phi3_settings,
        handled_metadata=("attention.sliding_window",),
    ),
    "gemma": Architecture(
        "GemmaConfig",
        "GemmaForCausalLM",
        _LAYER_COMMON,
        settings=_gemma_settings,
        norm_shift=1.0,
        output_is_embedding=True,
    ),
    "gemma2": Architecture(
        "Gemma2Config",
        "Gemma2ForCausalLM",
        _GEMMA2_LAYER,
        settings=_gemma2_settings,
        norm_shift=1.0,
        output_is_embedding=True,
        handled_metadata=(
            "attn_logit_softcapping",
            "final_logit_softcapping",
            "attention.sliding_window",
        ),  # fmt: skip
    ),
    "gemma3": Architecture(
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        _GEMMA3_LAYER,
        settings=_gemma3_settings,
        norm_shift=1.0,
        output_is_embedding=True,
        handled_metadata=("attention.sliding_window",),
    ),
}
# Families close to a supported one, refused with what is not modelled.
UNMODELLED: dict[str, str] = {
    "gemma3n": "Gemma 3n (per-layer embeddings, AltUp, LAuReL)",
    "starcoder": "StarCoder 1 / SantaCoder (GPTBigCode: learned positions, one KV head in "
    "a fused QKV)",
}


def architecture(gf: GGUFFile) -> Architecture:
    """The :class:`Architecture` of the file; GGUFError naming one not supported."""
    arch = ARCHITECTURES.get(gf.arch)
    if arch is None:
        why = f": {UNMODELLED[gf.arch]} is not modelled" if gf.arch in UNMODELLED else ""
        raise GGUFError(
            f"{gf.path.name}: general.architecture = {gf.arch!r} is not supported{why} "
            f"(supported: {', '.join(ARCHITECTURES)})"
        )
    return arch


def head_dim(gf: GGUFFile) -> int:
    """The size of a Q/K head (``attention.key_length``, else hidden / heads as llama.cpp)."""
    even_split = int(gf.arch_value("embedding_length")) // int(
        gf.arch_value("attention.head_count")
    )
    return int(gf.arch_value("attention.key_length", even_split))


# ------------------------------------------------------------------ config.json
def hf_config(gf: GGUFFile, extra: Mapping[str, Any]) -> Any:
    """The transformers config of the model (``extra``: token ids, dtype), from the
    ``<arch>.*`` metadata; GGUFError for what the config would silently lose."""
    arch = architecture(gf)
    refuse_unmodelled(gf)
    heads = int(gf.arch_value("attention.head_count"))
    names = gf.tensor_names()
    rope_theta = shortest_float(gf.arch_value("rope.freq_base", 10000.0))
    if arch.output_is_embedding and "output.weight" in names:
        raise GGUFError(
            f"{gf.path.name}: an output.weight in a {gf.arch} file, which llama.cpp does not "
            "read (its output is token_embd)"
        )
    kwargs: dict[str, Any] = {
        "architectures": [arch.hf_architecture],
        "vocab_size": int(gf.arch_value("vocab_size", len(gf.get("tokenizer.ggml.tokens")))),
        "hidden_size": int(gf.arch_value("embedding_length")),
        "intermediate_size": int(gf.arch_value("feed_forward_length")),
        "num_hidden_layers": int(gf.arch_value("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(gf.arch_value("attention.head_count_kv", heads)),
        "max_position_embeddings": int(gf.arch_value("context_length", 2048)),
        "rope_theta": rope_theta,
        "tie_word_embeddings": "output.weight" not in names,
        **arch.settings(gf),
        **extra,
    }
    scaling = rope_parameters(gf, rope_theta, head_dim(gf))
    if scaling is not None:
        kwargs["rope_scaling"] = scaling  # (transformers adds rope_theta to it)
    import transformers

    return getattr(transformers, arch.config_class)(**kwargs)


def refuse_unmodelled(gf: GGUFFile) -> None:
    """Metadata whose effect the converted config would silently lose."""
    where = gf.path.name
    if int(gf.arch_value("expert_count", 0) or 0):
        raise GGUFError(f"{where}: mixture-of-experts models are not supported")
    arch = architecture(gf)
    for key in ("attn_logit_softcapping", "final_logit_softcapping", "attention.sliding_window"):
        if key not in arch.handled_metadata and gf.arch_value(key, None) is not None:
            raise GGUFError(f"{where}: {gf.arch}.{key} is set; midword does not model it")
    size = head_dim(gf)
    if int(gf.arch_value("attention.value_length", size)) != size:
        raise GGUFError(f"{where}: V heads of another size than Q/K heads are not supported")
    rope_dim = int(gf.arch_value("rope.dimension_count", size))
    if rope_dim != size:
        raise GGUFError(f"{where}: partial rotary embeddings ({rope_dim} of {size})")


# ------------------------------------------------------------------ tensors
def hf_tensor_name(arch: Architecture, name: str) -> str:
    """The transformers name of a GGUF tensor; GGUFError for one the model has no place for.

    >>> hf_tensor_name(ARCHITECTURES["llama"], "blk.3.attn_q.weight")
    'model.layers.3.self_attn.q_proj.weight'
    >>> hf_tensor_name(ARCHITECTURES["starcoder2"], "blk.0.ffn_up.bias")
    'model.layers.0.mlp.c_fc.bias'
    """
    if name in arch.global_tensors:
        return arch.global_tensors[name]
    m = _LAYER_NAME.fullmatch(name)
    if m is None or m.group(2) not in arch.layer_tensors:
        raise GGUFError(f"tensor {name} has no counterpart in {arch.hf_architecture}")
    return f"model.layers.{m.group(1)}.{arch.layer_tensors[m.group(2)]}"


def check_tensors(gf: GGUFFile, config: Any) -> None:
    """The file's tensors are exactly the weights of the transformers model (built on
    the meta device: no memory): one it lacks would be initialised at random, silently."""
    import torch
    import transformers

    arch = architecture(gf)
    have = {hf_tensor_name(arch, n): n for n in weight_names(gf)}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    need = set(model.state_dict())
    if config.tie_word_embeddings:
        need.discard("lm_head.weight")
    missing, extra = sorted(need - set(have)), sorted(set(have) - need)
    if missing:
        raise GGUFError(
            f"{gf.path.name}: no tensor for {missing[0]} ({len(missing)} missing), which "
            f"{arch.hf_architecture} needs with this file's settings"
        )
    if extra:
        raise GGUFError(f"{gf.path.name}: tensor {have[extra[0]]} has no place in the model")


def weight_names(gf: GGUFFile) -> set[str]:
    """The file's tensors that are model weights (not :data:`CONFIG_TENSORS`)."""
    return gf.tensor_names() - CONFIG_TENSORS


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's row permutation of a Q or K projection.

    llama.cpp's converter writes ``w.reshape(n, 2, d/2, ...).swapaxes(1, 2)`` (n: the
    heads for Q, the KV heads for K; d the head size), interleaving each head's two
    rotary halves; this is its inverse.

    >>> w = np.arange(8).reshape(8, 1)
    >>> permuted = w.reshape(2, 2, 2, 1).swapaxes(1, 2).reshape(8, 1)
    >>> unpermute_rows(permuted, 2).ravel().tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise GGUFError(f"a Q/K projection of {rows} rows does not split into {n_heads} heads")
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def restore_tensor(
    arch: Architecture, name: str, w: np.ndarray, heads: int, kv_heads: int
) -> np.ndarray:
    """A dequantized tensor as the transformers model holds it: Q/K rows restored
    (``llama``), the converter's shift taken off norm weights (``gemma``: transformers
    adds 1 back, giving exactly the stored value, since subtracting 1 from a float32 in
    [0.5, 2] is exact)."""
    if arch.permuted_qk and name.endswith(("attn_q.weight", "attn_k.weight")):
        w = unpermute_rows(w, heads if name.endswith("attn_q.weight") else kv_heads)
    if arch.norm_shift and name.endswith("norm.weight"):
        w = w - np.float32(arch.norm_shift)
    return w


def tensor_dims(gf: GGUFFile) -> tuple[int, int]:
    """(heads, KV heads), as :func:`restore_tensor` needs them."""
    heads = int(gf.arch_value("attention.head_count"))
    return heads, int(gf.arch_value("attention.head_count_kv", heads))
