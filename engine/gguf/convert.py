"""GGUF model files (llama.cpp, Ollama, LM Studio) as Hugging Face model folders.

:func:`convert_gguf` reads a ``.gguf`` file with the ``gguf`` package and writes, once,
a folder transformers and midword load like any other: ``config.json`` from the file's
metadata, ``model.safetensors`` with every tensor dequantized (``gguf.quants.dequantize``)
and stored in the precision asked for, and a ``tokenizer.json`` rebuilt from the
metadata. The folder lives in the user's cache (``$MIDWORD_CACHE``, else
``$XDG_CACHE_HOME/midword``, else ``~/.cache/midword``; under ``gguf/``), keyed by the
file's path, size and modification time and the precision, so a second start loads it
from there and a changed file is converted again. It is written into a temporary folder
and renamed into place, so an interrupted conversion leaves nothing half-written.

The tokenizer is rebuilt exactly or not at all, from the metadata alone, by
:mod:`~midword.engine.gguf.tokenizer` (byte-level BPE, with the pre-tokenizers of
:mod:`~midword.engine.gguf.pretokenizers`) and :mod:`~midword.engine.gguf.sentencepiece`
(``tokenizer.ggml.model = 'llama'``); its names are re-exported here.

Weights: the architectures in :data:`ARCHITECTURES` (llama, qwen2, qwen3, starcoder2,
phi3, gemma, gemma2, gemma3), mapped in :mod:`midword.engine.gguf.architectures`, which also undoes what
llama.cpp's converter did to some tensors (the Q/K row permutation of llama files, the 1
added to Gemma's norm weights), or every logit would be wrong.

Example (a GGUF file written by llama.cpp, converted and loaded)::

    folder = convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", dtype="float32")
    model = load_hf_model(folder)          # midword.engine.model.hf_backend
    engine = load_engine(str(folder))      # midword.engine.tree.vct
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GGUFError
from ..tokenize.tokenizer import cache_root
from .added import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED
from .architectures import (
    ARCHITECTURES,
    CONFIG_TENSORS,
    Architecture,
    architecture,
    check_tensors,
    hf_config,
    hf_tensor_name,
    restore_tensor,
    tensor_dims,
    unpermute_rows,
)
from .pretokenizers import GPT2_BYTELEVEL, GPT4O_PATTERN, PRE_TOKENIZERS, pre_tokenizer_recipe
from .reader import GGUFFile
from .sentencepiece import sentencepiece_merges
from .tokenizer import special_token_id, tokenizer_config, tokenizer_json

__all__ = [  # (with the names of the modules it builds on, re-exported for callers)
    "ARCHITECTURES", "BYTE", "CONTROL", "GPT2_BYTELEVEL", "GPT4O_PATTERN", "NORMAL",
    "PRE_TOKENIZERS", "UNKNOWN", "UNUSED",
    "USER_DEFINED", "Architecture", "GGUFError", "GGUFFile", "architecture", "cache_folder",
    "convert_gguf", "dequantized_tensors", "hf_tensor_name", "iter_dequantized",
    "model_config", "pre_tokenizer_recipe", "sentencepiece_merges", "tokenizer_config",
    "tokenizer_json", "unpermute_rows",
]  # fmt: skip

CONVERTER_VERSION = "2"  # part of the cache key: bump when the written folder changes
STORAGE_DTYPES = ("float32", "float16", "bfloat16")
Progress = Callable[[str, int], None]  # (message, percent 0-100)


# ------------------------------------------------------------------ the model
def model_config(gf: GGUFFile, dtype: str) -> dict:
    """config.json of the transformers model, from the ``<arch>.*`` metadata
    (:func:`~midword.engine.gguf.architectures.hf_config`) and the special token ids."""
    extra = {
        "bos_token_id": special_token_id(gf, "bos"),
        "eos_token_id": special_token_id(gf, "eos"),
        "pad_token_id": gf.get("tokenizer.ggml.padding_token_id", None),
        "dtype": dtype,
    }
    config = hf_config(gf, extra)
    check_tensors(gf, config)
    return config.to_dict()


def dequantized_tensors(gf: GGUFFile, progress: Progress | None = None) -> dict[str, np.ndarray]:
    """Every tensor as float32 under its transformers name, as the model holds it."""
    return dict(iter_dequantized(gf, progress))


def iter_dequantized(
    gf: GGUFFile, progress: Progress | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """(transformers name, float32 array) of each tensor in turn, as the transformers
    model holds it (:func:`~midword.engine.gguf.architectures.restore_tensor`): one
    float32 tensor at a time, so a caller that narrows each at once never holds the whole
    model in float32."""
    from gguf.quants import dequantize

    arch = architecture(gf)
    heads, kv_heads = tensor_dims(gf)
    weights = [t for t in gf.tensors if t.name not in CONFIG_TENSORS]
    total = sum(int(t.n_bytes) for t in weights) or 1
    done = 0
    for t in weights:
        name = hf_tensor_name(arch, t.name)
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if not w.flags.writeable:  # F32 tensors come back as views of the mapped file
            w = w.copy()
        yield name, restore_tensor(arch, t.name, w, heads, kv_heads)
        done += int(t.n_bytes)
        if progress is not None:
            progress(f"dequantizing {gf.path.name}", 100 * done // total)


# ------------------------------------------------------------------ the cached folder
def cache_folder(path: str | Path, dtype: str, cache_dir: Path | None = None) -> Path:
    """Where the conversion of ``path`` at ``dtype`` lives: named after the file, keyed
    by its resolved path, size, modification time, the dtype and the converter version
    (``cache_dir``: default the ``gguf`` folder of midword's cache)."""
    src = Path(path).resolve()
    st = src.stat()
    where = hashlib.sha256(str(src).encode()).hexdigest()[:12]
    state = f"{st.st_size}:{st.st_mtime_ns}:{CONVERTER_VERSION}"
    when = hashlib.sha256(state.encode()).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", src.stem)[:80]
    root = cache_dir if cache_dir is not None else cache_root() / "gguf"
    return root / f"{stem}-{where}-{dtype}-{when}"


def _complete(folder: Path) -> bool:
    return (folder / "source.json").is_file()


def convert_gguf(
    path: str | Path,
    dtype: str = "float32",
    progress: Progress | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """The Hugging Face folder of a GGUF model file, converted on first use (see module).

    ``dtype``: one of :data:`STORAGE_DTYPES`, the precision of model.safetensors.
    ``progress(message, percent)`` is told about the dequantization.
    """
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"unknown storage dtype {dtype!r}; expected {', '.join(STORAGE_DTYPES)}")
    src = Path(path).expanduser()
    if not src.is_file():
        raise GGUFError(f"GGUF file not found: {path}")
    target = cache_folder(src, dtype, cache_dir)
    if _complete(target):
        return target
    gf = GGUFFile(src)
    architecture(gf)  # (an unsupported model is refused before its tokenizer is rebuilt)
    files = {  # everything but the weights first: a refused file costs no dequantization
        "tokenizer.json": tokenizer_json(gf),
        "tokenizer_config.json": tokenizer_config(gf),
        "config.json": model_config(gf, dtype),
    }
    weights = _narrowed(iter_dequantized(gf, progress), dtype, files["config.json"])
    _write_folder(target, files, weights, dtype, src)
    _remove_stale(target)
    return target


def _narrowed(
    tensors: Iterator[tuple[str, np.ndarray]], dtype: str, config: dict
) -> dict[str, Any]:
    """torch tensors in the storage dtype (a tied output matrix is not stored twice)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    out = {}
    for name, w in tensors:
        if name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue
        out[name] = torch.from_numpy(w).to(torch_dtype).contiguous()
    return out


def _write_folder(
    target: Path, files: dict[str, dict], weights: dict[str, Any], dtype: str, src: Path
) -> None:
    from safetensors.torch import save_file

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, content in files.items():
            (tmp / name).write_text(json.dumps(content, indent=1, ensure_ascii=False))
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        st = src.stat()
        source = {"gguf": str(src.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        (tmp / "source.json").write_text(json.dumps({**source, "dtype": dtype}, indent=1))
        try:
            os.replace(tmp, target)
        except OSError:
            if not _complete(target):  # not another process's finished copy: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(target: Path) -> None:
    """Drop earlier conversions of the same file at the same dtype (the file changed)."""
    head = target.name.rsplit("-", 1)[0] + "-"
    for other in target.parent.glob(f"{glob.escape(head)}*"):
        if other != target and other.is_dir() and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)
