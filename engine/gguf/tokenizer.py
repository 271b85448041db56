"""A GGUF file's tokenizer, rebuilt from its ``tokenizer.ggml.*`` metadata alone (no
tensor is read): as a tokenizer.json (:func:`tokenizer_json`, what a conversion writes)
and as midword's own tokenizer (:func:`gguf_tokenizer`), which ``midword tree --tokenizer
X.gguf`` and scoring backends that run a GGUF model as it is (llama.cpp) build their
covering trees over. ``load_tokenizer`` and ``load_engine`` take a GGUF file through it.

The rebuild is exact or refused: a :class:`~midword.engine.errors.GGUFError` names what
midword does not model (a pre-tokenizer, a normalization, a tie rule ...).

Example::

    tok = gguf_tokenizer("qwen2.5-coder-1.5b-q8_0.gguf")
    engine = load_engine("qwen2.5-coder-1.5b-q8_0.gguf")   # the Engine tables, once
    tree = build_tree(engine, b"import nump")
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import GGUFError, TokenizerError
from ..tokenize.tokenizer import (
    GGUF_MAGIC,
    BPETokenizer,
    load_hf_tokenizer,
    resolve_tokenizer_path,
    tokenizer_builder,
)
from .added import (
    BYTE,
    CONTROL,
    NORMAL,
    UNKNOWN,
    UNUSED,
    USER_DEFINED,
    added_token,
    as_llama_cpp_reads,
    named_roles,
    place_added_tokens,
)
from .pretokenizers import GPT2_BYTELEVEL, pre_tokenizer_recipe
from .reader import GGUFFile
from .sentencepiece import SP_DEFAULT_IDS, sentencepiece_tokenizer_json


def tokenizer_json(gf: GGUFFile) -> dict:
    """tokenizer.json (as a dict) rebuilt from the file's ``tokenizer.ggml.*`` metadata
    (SentencePiece ones: :func:`sentencepiece_tokenizer_json`).

    Normal tokens form the BPE vocabulary; CONTROL tokens become special added tokens and
    USER_DEFINED tokens added text (both stored as raw text in GGUF, as llama.cpp reads
    them); UNUSED tokens (llama.cpp's ``[PAD<id>]`` fillers) are left out. A byte with no
    token is dropped from the text, as llama.cpp does (``unk_token`` null).
    """
    kind = gf.get("tokenizer.ggml.model", None)
    if kind == "llama":
        return sentencepiece_tokenizer_json(gf)
    if kind != "gpt2":
        raise GGUFError(
            f"{gf.path.name}: tokenizer.ggml.model = {kind!r}; midword converts byte-level "
            "BPE ('gpt2') and SentencePiece ('llama') vocabularies"
        )
    recipe = pre_tokenizer_recipe(gf.get("tokenizer.ggml.pre", None))
    tokens: list[str] = gf.get("tokenizer.ggml.tokens")
    types: list[int] = gf.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))
    types = as_llama_cpp_reads(tokens, [int(k) for k in types], named_roles(gf.get))
    vocab, added = _vocab_and_added(tokens, types)
    merges = [m.split(" ", 1) for m in gf.get("tokenizer.ggml.merges", [])]
    if any(len(m) != 2 for m in merges):
        raise GGUFError(f"{gf.path.name}: a merge in tokenizer.ggml.merges is not 'a b'")
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": recipe.normalizer,
        "pre_tokenizer": recipe.pre_tokenizer,
        "post_processor": None,
        "decoder": {**GPT2_BYTELEVEL},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": recipe.ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }
    place_added_tokens(spec)
    return spec


def _vocab_and_added(tokens: list[str], types: list[int]) -> tuple[dict[str, int], list[dict]]:
    """The BPE vocabulary (normal tokens) and the added tokens (CONTROL and USER_DEFINED)."""
    vocab: dict[str, int] = {}
    added: list[dict] = []
    for i, (text, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind in (NORMAL, UNKNOWN, BYTE):
            if text in vocab:
                raise GGUFError(f"token {text!r} appears twice (ids {vocab[text]} and {i})")
            vocab[text] = i
        elif kind in (CONTROL, USER_DEFINED):
            added.append(added_token(i, text, special=kind == CONTROL))
        elif kind != UNUSED:
            raise GGUFError(f"token {i} ({text!r}) has an unknown token type {kind}")
    return vocab, added


def special_token_id(gf: GGUFFile, name: str) -> int | None:
    """``tokenizer.ggml.<name>_token_id``, else llama.cpp's default for a 'llama' vocabulary."""
    value = gf.get(f"tokenizer.ggml.{name}_token_id", None)
    if value is None and gf.get("tokenizer.ggml.model", None) == "llama":
        value = SP_DEFAULT_IDS.get(name)
    return None if value is None else int(value)


def tokenizer_config(gf: GGUFFile) -> dict:
    """tokenizer_config.json: the special tokens transformers' AutoTokenizer reports."""
    tokens: list[str] = gf.get("tokenizer.ggml.tokens")
    is_sp = gf.get("tokenizer.ggml.model", None) == "llama"
    out: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        # llama.cpp starts a 'llama' vocabulary's text with BOS unless the file says not
        "add_bos_token": bool(gf.get("tokenizer.ggml.add_bos_token", is_sp)),
        "add_eos_token": bool(gf.get("tokenizer.ggml.add_eos_token", False)),
        "model_max_length": int(gf.arch_value("context_length", 2048)),
    }
    for name in ("bos", "eos", "unknown", "padding"):
        i = special_token_id(gf, name)
        if i is not None and 0 <= i < len(tokens):
            key = {"unknown": "unk", "padding": "pad"}.get(name, name)
            out[f"{key}_token"] = tokens[int(i)]
    return out


# ------------------------------------------------------------------ tokenizer-only loading
def rebuilt_tokenizer_json(path: str | os.PathLike[str]) -> tuple[dict, bytes]:
    """The tokenizer.json rebuilt from a GGUF file's metadata, as a dict and as the text a
    conversion writes (the same text: the same caches). Reads no tensor."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise GGUFError(f"GGUF file not found: {path}")
    spec = tokenizer_json(GGUFFile(p))
    return spec, json.dumps(spec, indent=1, ensure_ascii=False).encode()


def gguf_tokenizer(path: str | os.PathLike[str], *, use_cache: bool = True) -> BPETokenizer:
    """midword's tokenizer of a GGUF file, rebuilt from its metadata alone.

    :class:`GGUFError` when the file cannot be read or its tokenizer is not one midword
    rebuilds exactly (the message names what is not modelled). Example::

        tok = gguf_tokenizer("ggml-vocab-qwen2.gguf")
        tok.decode(tok.encode("def f():"))   # b'def f():'
    """
    spec, raw = rebuilt_tokenizer_json(path)
    build = tokenizer_builder(spec, raw, Path(path).expanduser(), use_cache=use_cache)
    del spec, raw  # (before the tables are made: 7 MiB less resident at 151k tokens)
    return build()


def load_tokenizer(path: str | os.PathLike[str], *, use_cache: bool = True) -> BPETokenizer:
    """The tokenizer of any file midword reads: a ``tokenizer.json``, a model folder
    holding one, or a GGUF file (rebuilt from its metadata by `gguf_tokenizer`, no weight
    read). It lives here, above the tokenizer loaders, because the GGUF rebuild needs this
    folder's reader; every caller that takes a tokenizer file asks this one.

    Every file it cannot load is a :class:`TokenizerError` whose message is one line.

    >>> load_tokenizer("models/default").size
    4096
    """
    file = resolve_tokenizer_path(path)
    with file.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        return load_hf_tokenizer(file, use_cache=use_cache)
    try:
        return gguf_tokenizer(file, use_cache=use_cache)
    except GGUFError as exc:
        raise TokenizerError(" ".join(str(exc).split())) from exc
