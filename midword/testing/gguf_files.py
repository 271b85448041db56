"""Random-weight GGUF model files written as llama.cpp's converter writes them, for the
benchmarks that run a real-sized model through both backends (nothing is downloaded).

`write_qwen2_gguf` writes a ``qwen2`` file (Qwen2.5-Coder's architecture: Q/K/V biases,
grouped-query attention, tied embeddings) of any shape from `midword.testing.shapes`,
with a real byte-level BPE tokenizer's ``tokenizer.ggml.*`` metadata and every matrix
in F32, F16, Q8_0 or Q4_0 (norms and biases stay F32, as the converter keeps them).

Example (a tiny shape on the shipped model's tokenizer):
    >>> import tempfile, pathlib
    >>> from midword.models import shipped_test_model
    >>> from midword.testing.shapes import TINY_SHIPPED
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = pathlib.Path(d) / "tiny.gguf"
    ...     tok = shipped_test_model() / "tokenizer.json"
    ...     size = write_qwen2_gguf(path, TINY_SHIPPED, tok, "Q8_0")
    ...     path.read_bytes()[:4], size > 100_000
    (b'GGUF', True)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FILE_TYPES", "write_bytelevel_tokenizer", "write_qwen2_gguf"]

NORMAL, UNUSED, CONTROL, USER_DEFINED = 1, 5, 3, 4  # llama.cpp's token types
_LAYER = {  # GGUF tensor -> (rows, columns) as functions of the shape; None: a vector
    "attn_q": ("hidden", "hidden"),
    "attn_k": ("kv", "hidden"),
    "attn_v": ("kv", "hidden"),
    "attn_output": ("hidden", "hidden"),
    "ffn_gate": ("inter", "hidden"),
    "ffn_up": ("inter", "hidden"),
    "ffn_down": ("hidden", "inter"),
}


# the matrices' type -> llama.cpp's LlamaFileType number (general.file_type)
FILE_TYPES = {"F32": 0, "F16": 1, "BF16": 32, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7}


def write_qwen2_gguf(
    path: str | Path,
    shape: dict[str, Any],
    tokenizer_json: str | Path,
    qtype: str,
    seed: int = 0,
    pre: str = "qwen2",
) -> int:
    """Write the file; returns its size in bytes. Weights are N(0, 0.02), norms around 1;
    ``pre`` is the ``tokenizer.ggml.pre`` value (the pre-tokenizer llama.cpp picks)."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "qwen2")
    _write_hparams(w, shape)
    # general.file_type, as the converter writes it: llama.cpp's backend reads it (a file
    # of float matrices takes other kernels for a lone row)
    w.add_file_type(FILE_TYPES[qtype])
    spec = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    bos, eos = shape["bos_token_id"], shape["eos_token_id"]
    write_bytelevel_tokenizer(w, spec, pre, shape["vocab_size"], bos, eos)
    w.add_add_bos_token(False)  # Qwen2.5 files: no BOS in front of a prompt
    dims = _dims(shape)
    _add(w, "token_embd.weight", _normal(rng, (shape["vocab_size"], dims["hidden"])), qtype)
    for layer in range(shape["num_hidden_layers"]):
        for name, (rows, cols) in _LAYER.items():
            matrix = _normal(rng, (dims[rows], dims[cols]))
            _add(w, f"blk.{layer}.{name}.weight", matrix, qtype)
        for name, rows in (("attn_q", "hidden"), ("attn_k", "kv"), ("attn_v", "kv")):
            _add(w, f"blk.{layer}.{name}.bias", _normal(rng, (dims[rows],)), qtype)
        for name in ("attn_norm", "ffn_norm"):
            _add(w, f"blk.{layer}.{name}.weight", _around_one(rng, dims["hidden"]), qtype)
    _add(w, "output_norm.weight", _around_one(rng, dims["hidden"]), qtype)
    if not shape.get("tie_word_embeddings", True):
        _add(w, "output.weight", _normal(rng, (shape["vocab_size"], dims["hidden"])), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path).stat().st_size


def _dims(shape: dict[str, Any]) -> dict[str, int]:
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    return {
        "hidden": shape["hidden_size"],
        "kv": head_dim * shape["num_key_value_heads"],
        "inter": shape["intermediate_size"],
    }


def _write_hparams(w: Any, shape: dict[str, Any]) -> None:
    w.add_block_count(shape["num_hidden_layers"])
    w.add_context_length(shape["max_position_embeddings"])
    w.add_embedding_length(shape["hidden_size"])
    w.add_feed_forward_length(shape["intermediate_size"])
    w.add_head_count(shape["num_attention_heads"])
    w.add_head_count_kv(shape["num_key_value_heads"])
    w.add_rope_freq_base(shape["rope_theta"])
    w.add_layer_norm_rms_eps(shape["rms_norm_eps"])


def write_bytelevel_tokenizer(
    w: Any, spec: dict[str, Any], pre: str, size: int = 0, bos: int = 0, eos: int = 0
) -> None:
    """The ``tokenizer.ggml.*`` keys llama.cpp's converter writes for a byte-level BPE
    tokenizer.json: tokens by id up to ``size`` (at least the file's; gaps as UNUSED
    ``[PAD<id>]``), special added tokens as CONTROL, other added tokens as USER_DEFINED,
    merges as 'a b'."""
    by_id = {i: (t, NORMAL) for t, i in spec["model"]["vocab"].items()}
    for a in spec.get("added_tokens", []):
        by_id[a["id"]] = (a["content"], CONTROL if a["special"] else USER_DEFINED)
    tokens = [by_id.get(i, (f"[PAD{i}]", UNUSED)) for i in range(max(size, max(by_id) + 1))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([t for t, _ in tokens])
    w.add_token_types([k for _, k in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)


def _normal(rng: np.random.Generator, dims: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)


def _around_one(rng: np.random.Generator, n: int) -> np.ndarray:
    return (1 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)


def _add(w: Any, name: str, data: np.ndarray, qtype: str) -> None:
    import gguf

    if data.ndim == 1 or qtype == "F32":
        w.add_tensor(name, data.astype(np.float32))
    elif qtype == "F16":
        w.add_tensor(name, data.astype(np.float16))
    else:
        kind = gguf.GGMLQuantizationType[qtype]
        w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
