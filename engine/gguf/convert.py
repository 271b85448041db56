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

The tokenizer is rebuilt exactly or not at all: vocabulary, merges, added tokens
(CONTROL tokens become special added tokens, USER_DEFINED ones added text matched
before pre-tokenization), and the pre-tokenizer that ``tokenizer.ggml.pre`` names, from
:data:`PRE_TOKENIZERS`. Any other value raises :class:`GGUFError` naming it.
SentencePiece vocabularies (``tokenizer.ggml.model = 'llama'``: Llama 2, CodeLlama,
Mistral v0.1) merge by score, not rank: :func:`sentencepiece_merges` turns the scores
into the one merge list that encodes as llama.cpp does, or refuses the file by name.

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
import itertools
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GGUFError
from ..tokenize.tokenizer import cache_root
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
from .reader import GGUFFile

__all__ = [  # (with the architectures' and the reader's names, re-exported for callers)
    "ARCHITECTURES", "PRE_TOKENIZERS", "Architecture", "GGUFError", "GGUFFile",
    "architecture", "cache_folder", "convert_gguf", "dequantized_tensors", "hf_tensor_name",
    "iter_dequantized", "model_config", "pre_tokenizer_recipe", "sentencepiece_merges",
    "tokenizer_config", "tokenizer_json", "unpermute_rows",
]  # fmt: skip

CONVERTER_VERSION = "2"  # part of the cache key: bump when the written folder changes
STORAGE_DTYPES = ("float32", "float16", "bfloat16")
Progress = Callable[[str, int], None]  # (message, percent 0-100)

# gguf.TokenType values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


# ------------------------------------------------------------------ pre-tokenizers
GPT2_BYTELEVEL = {
    "type": "ByteLevel",
    "add_prefix_space": False,
    "trim_offsets": True,
    "use_regex": True,
}
BYTELEVEL_NO_REGEX = {**GPT2_BYTELEVEL, "use_regex": False}
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The regexes llama.cpp's llama-vocab.cpp quotes as the models' own ("original regex from
# tokenizer.json"; it runs ASCII-cased rewrites of the two below)
SEED_CODER_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}"
    r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
TEKKEN_PATTERN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT4O_PATTERN = (  # (o200k: as Tekken's, with contractions and digits in threes)
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK3_PATTERNS = (
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    # (CR and LF stand as themselves, as in DeepSeek V3's tokenizer.json)
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
)

# DeepSeek-Coder (v1): lone CR and LF, letters, punctuation and CJK runs (with at most one
# whitespace in front), then every digit alone (llama.cpp's "\p{N}"; a Digits step in the
# model's tokenizer.json), then ByteLevel without its own split
DEEPSEEK_CODER_PATTERNS = (
    "[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
)


def _split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def _sequence(*steps: dict) -> dict:
    return {"type": "Sequence", "pretokenizers": list(steps)}


@dataclass(frozen=True)
class PreTokenizerRecipe:
    """The tokenizer.json pieces one ``tokenizer.ggml.pre`` value stands for."""

    pre_tokenizer: dict
    normalizer: dict | None = None
    ignore_merges: bool = False
    models: str = ""  # who uses it (for messages and docs)


def _regex_then_bytes(pattern: str) -> dict:
    """One isolating regex split, then ByteLevel without its own (tiktoken-style files)."""
    return _sequence(_split(pattern), BYTELEVEL_NO_REGEX)


_DIGITS_THEN_GPT2 = PreTokenizerRecipe(
    _sequence({"type": "Digits", "individual_digits": True}, GPT2_BYTELEVEL),
    models="StarCoder, SmolLM, Refact, CodeShell: every digit alone, then the GPT-2 split",
)
# Values of tokenizer.ggml.pre modelled exactly (llama.cpp's src/llama-vocab.cpp names
# them; the splits are those of each family's own tokenizer.json).
PRE_TOKENIZERS: dict[str, PreTokenizerRecipe] = {
    "gpt-2": PreTokenizerRecipe(GPT2_BYTELEVEL, models="GPT-2"),
    "starcoder": _DIGITS_THEN_GPT2,
    "smollm": _DIGITS_THEN_GPT2,
    "refact": _DIGITS_THEN_GPT2,
    "codeshell": _DIGITS_THEN_GPT2,
    "llama-bpe": PreTokenizerRecipe(
        _sequence(_split(LLAMA3_PATTERN), BYTELEVEL_NO_REGEX),
        ignore_merges=True,
        models="Llama 3 (a whole-word token wins over merges)",
    ),
    "qwen2": PreTokenizerRecipe(
        _sequence(_split(QWEN2_PATTERN), BYTELEVEL_NO_REGEX),
        normalizer={"type": "NFC"},
        models="Qwen2, Qwen2.5, Qwen3 (NFC as their tokenizer.json, single digits)",
    ),
    "deepseek-coder": PreTokenizerRecipe(
        _sequence(
            *(_split(p) for p in DEEPSEEK_CODER_PATTERNS),
            {"type": "Digits", "individual_digits": True},
            BYTELEVEL_NO_REGEX,
        ),
        models="DeepSeek-Coder 1.3B, 6.7B, 33B (v1): four chained splits, then single digits",
    ),
    "dbrx": PreTokenizerRecipe(
        _regex_then_bytes(LLAMA3_PATTERN),
        models="DBRX, Phi-4 (cl100k: Llama 3's split, merges always applied)",
    ),
    "stablelm2": PreTokenizerRecipe(
        _regex_then_bytes(QWEN2_PATTERN),
        models="StableLM 2 (Arcade100k: Qwen2's split, no normalizer)",
    ),
    "seed-coder": PreTokenizerRecipe(
        _regex_then_bytes(SEED_CODER_PATTERN),
        models="Seed-Coder (single digits, newlines kept out of punctuation runs)",
    ),
    "tekken": PreTokenizerRecipe(
        _regex_then_bytes(TEKKEN_PATTERN),
        ignore_merges=True,
        models="Mistral Nemo, Mistral Small 3, Devstral, Ministral (Tekken: case-split "
        "words, single digits; a whole-word token wins over merges)",
    ),
    "gpt-4o": PreTokenizerRecipe(
        _regex_then_bytes(GPT4O_PATTERN),
        models="Phi-4-mini and other o200k vocabularies (GPT-4o's split)",
    ),
    "deepseek-v3": PreTokenizerRecipe(
        _sequence(*(_split(p) for p in DEEPSEEK3_PATTERNS), BYTELEVEL_NO_REGEX),
        models="DeepSeek V3 and R1 (three chained splits)",
    ),
}
PRE_ALIASES = {"llama3": "llama-bpe", "llama-v3": "llama-bpe"}
# Values llama.cpp reads that midword leaves out, and why (its regexes are known; what the
# models' own tokenizer.json files do besides could not be matched or checked)
PRE_NOT_MODELLED = {
    "falcon": "Falcon's tokenizer.json splits digit runs after the byte-level mapping, "
    "and llama.cpp's three regexes differ from it (' 12' stays whole)",
    "command-r": "llama.cpp splits as StarCoder, but Command-R's tokenizer.json also "
    "NFC-normalizes, which was not checked against the model's own file",
    "mpt": "llama.cpp splits as GPT-2, but MPT's GPT-NeoX tokenizer.json also "
    "NFC-normalizes, which was not checked against the model's own file",
    "olmo": "llama.cpp splits as GPT-2, but OLMo's GPT-NeoX-derived tokenizer.json "
    "normalizer was not checked against the model's own file",
}


def pre_tokenizer_recipe(name: str | None) -> PreTokenizerRecipe:
    """The recipe for a ``tokenizer.ggml.pre`` value; GGUFError for one not modelled.

    >>> pre_tokenizer_recipe("smollm").pre_tokenizer["pretokenizers"][0]["type"]
    'Digits'
    >>> try:
    ...     pre_tokenizer_recipe("falcon")
    ... except GGUFError as exc:
    ...     print(str(exc)[:62])
    tokenizer.ggml.pre = 'falcon' is not a pre-tokenizer midword m
    """
    if name is None:
        raise GGUFError(
            "the file has no tokenizer.ggml.pre: llama.cpp then uses its 'default' split, "
            "which midword does not model exactly"
        )
    recipe = PRE_TOKENIZERS.get(PRE_ALIASES.get(name, name))
    if recipe is None:
        known = ", ".join(sorted([*PRE_TOKENIZERS, *PRE_ALIASES]))
        why = f": {PRE_NOT_MODELLED[name]}" if name in PRE_NOT_MODELLED else ""
        raise GGUFError(
            f"tokenizer.ggml.pre = {name!r} is not a pre-tokenizer midword models exactly"
            f"{why} (supported: {known})"
        )
    return recipe


# ------------------------------------------------------------------ the tokenizer
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
    _place_added_tokens(spec)
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
            added.append(_added_token(i, text, special=kind == CONTROL))
        elif kind != UNUSED:
            raise GGUFError(f"token {i} ({text!r}) has an unknown token type {kind}")
    return vocab, added


def _place_added_tokens(spec: dict) -> None:
    """Make every added token keep its id when ``tokenizers`` loads the rebuilt file.

    ``tokenizers`` gives an added token that the vocabulary lacks the next free id after
    the vocabulary, not the id it is written with: right for added tokens that follow the
    vocabulary (Llama 3, Qwen), wrong for those before or among it (StarCoder's at 0-16).
    Those go into the vocabulary too, under their own id, which is safe where merges never
    build them (a special token) or their ByteLevel reading is their text (plain ASCII);
    any other is refused.
    """
    from tokenizers import Tokenizer

    vocab = spec["model"]["vocab"]
    for _ in range(4):  # an insertion moves the next free id: settle in a few rounds
        tok = Tokenizer.from_str(json.dumps(spec))
        wrong = [a for a in spec["added_tokens"] if tok.token_to_id(a["content"]) != a["id"]]
        if not wrong:
            return
        for a in wrong:
            text = a["content"]
            if text in vocab or not (a["special"] or _reads_as_itself(text)):
                break
            vocab[text] = a["id"]
        else:
            continue
        break
    raise GGUFError(
        f"added token {wrong[0]['content']!r} (id {wrong[0]['id']}) cannot keep its id in a "
        "rebuilt tokenizer.json"
    )


def _reads_as_itself(text: str) -> bool:
    """Printable ASCII but space: the ByteLevel reading of ``text`` is its UTF-8."""
    return all("!" <= c <= "~" for c in text)


def _added_token(i: int, text: str, special: bool) -> dict:
    return {
        "id": i,
        "content": text,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


# ------------------------------------------------------------------ SentencePiece ('llama')
SPACE_PIECE = "\u2581"  # how SentencePiece writes a space
TYPE_NAMES = {
    NORMAL: "NORMAL", UNKNOWN: "UNKNOWN", CONTROL: "CONTROL",
    USER_DEFINED: "USER_DEFINED", UNUSED: "UNUSED", BYTE: "BYTE",
}  # fmt: skip
# llama.cpp's defaults for a 'llama' vocabulary whose file does not set them
SP_DEFAULT_IDS = {"bos": 1, "eos": 2, "unknown": 0}


@dataclass(frozen=True)
class SentencePieceVocab:
    """A ``'llama'`` vocabulary as llama.cpp reads it: tokens by id, their types and scores."""

    tokens: list[str]
    types: list[int]
    scores: list[float]
    where: str  # names the file in messages

    def refuse(self, why: str) -> GGUFError:
        return GGUFError(f"{self.where}: {why}")

    def entries(self) -> Iterator[tuple[int, str, int]]:
        """(id, text, type) of every token."""
        for i, (text, kind) in enumerate(zip(self.tokens, self.types, strict=True)):
            yield i, text, kind


def read_sentencepiece_vocab(gf: GGUFFile) -> SentencePieceVocab:
    """Tokens, types (NORMAL when the file has none, as llama.cpp reads it) and scores."""
    where = f"{gf.path.name} (tokenizer.ggml.model = 'llama')"
    tokens = [str(t) for t in gf.get("tokenizer.ggml.tokens")]
    types = [int(k) for k in gf.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]
    scores = gf.get("tokenizer.ggml.scores", None)
    if scores is None:
        raise GGUFError(
            f"{where}: no tokenizer.ggml.scores; llama.cpp then merges with every score 0 "
            "(leftmost pair first), which midword does not model"
        )
    if len(scores) < len(tokens) or len(types) < len(tokens):
        raise GGUFError(f"{where}: fewer scores or token types than the {len(tokens)} tokens")
    n = len(tokens)
    vocab = SentencePieceVocab(tokens, types[:n], [float(x) for x in scores[:n]], where)
    for i, text, kind in vocab.entries():
        if kind not in TYPE_NAMES:
            raise vocab.refuse(f"token {i} ({text!r}) has an unknown token type {kind}")
        if not text or math.isnan(vocab.scores[i]):
            raise vocab.refuse(f"token {i} ({text!r}) is empty or has no score (NaN)")
    if len(set(tokens)) < len(tokens):
        raise vocab.refuse("a token appears twice in tokenizer.ggml.tokens")
    return vocab


def spm_segment(
    chars: Sequence[str], score: Mapping[str, float]
) -> tuple[list[str], tuple[str, str] | None]:
    """llama.cpp's SentencePiece merging of ``chars``: join the adjacent pair whose
    concatenation is a token of the highest score, the leftmost on ties, until none is
    left. Returns the symbols and the last pair joined (None when none was).

    >>> spm_segment(list("abc"), {"ab": -2.0, "bc": -1.0})
    (['a', 'bc'], ('b', 'c'))
    >>> spm_segment(list("abc"), {"ab": -1.0, "bc": -1.0, "abc": -3.0})  # a tie: leftmost
    (['abc'], ('ab', 'c'))
    """
    symbols = list(chars)
    last = None
    while len(symbols) > 1:
        best, best_score = -1, 0.0
        for i in range(len(symbols) - 1):
            s = score.get(symbols[i] + symbols[i + 1])
            if s is not None and (best < 0 or s > best_score):
                best, best_score = i, s
        if best < 0:
            break
        last = (symbols[best], symbols[best + 1])
        symbols[best : best + 2] = [last[0] + last[1]]
    return symbols, last


def sentencepiece_merges(vocab: SentencePieceVocab) -> list[list[str]]:
    """BPE merges, by rank, that encode as llama.cpp's score-driven merging does.

    Within the text a token covers, merging goes as it goes on the token's characters
    alone (a merge across the token's edges would have stopped it forming), so each token
    the encoder can produce is formed from one pair: the last one :func:`spm_segment`
    joins on its characters. One merge per such token, ranked by its score, then picks
    what llama.cpp picks, provided no two scores tie (llama.cpp would take the leftmost
    pair, a rank list the first listed): ties, tokens of other types that merging forms,
    and characters outside the vocabulary that a merge needs are refused by name.
    """
    score = dict(zip(vocab.tokens, vocab.scores, strict=True))
    kind = dict(zip(vocab.tokens, vocab.types, strict=True))
    for i, text, k in vocab.entries():
        if len(text) == 1 and k not in (NORMAL, USER_DEFINED):
            raise vocab.refuse(
                f"the character {text!r} is a {TYPE_NAMES[k]} token (id {i}): llama.cpp emits "
                "it for that character in text"
            )
    ranked: list[tuple[float, int, str, str]] = []
    for i, text, k in vocab.entries():
        pair = _formed_from(text, k, score, kind, vocab, i)
        if pair is not None:
            ranked.append((-vocab.scores[i], i, *pair))
    ranked.sort()
    for (s1, i1, *_), (s2, i2, *_) in itertools.pairwise(ranked):
        if s1 == s2:
            raise vocab.refuse(
                f"tokens {vocab.tokens[i1]!r} and {vocab.tokens[i2]!r} have the same score "
                f"{-s1}: llama.cpp joins whichever pair comes first in the text, which a BPE "
                "merge list cannot express"
            )
    _refuse_tokens_above_halves(vocab, ranked, score)
    return [[left, right] for _, _, left, right in ranked]


def _refuse_tokens_above_halves(
    vocab: SentencePieceVocab, ranked: list[tuple[float, int, str, str]], score: Mapping[str, float]
) -> None:
    """midword's covering trees take a merge list in which every merge comes after the
    merges forming its halves, as trained vocabularies have it (a token scores below the
    tokens it joins); a file whose scores put a token above one of its halves would be
    encoded differently by the trees, so it is refused."""
    for minus_score, i, left, right in ranked:
        for half in (left, right):
            if len(half) > 1 and score[half] <= -minus_score:
                raise vocab.refuse(
                    f"token {vocab.tokens[i]!r} scores {-minus_score}, above its half "
                    f"{half!r} ({score[half]}): midword needs every token to score below "
                    "the tokens it is merged from, as trained vocabularies do"
                )


def _formed_from(
    text: str,
    k: int,
    score: Mapping[str, float],
    kind: Mapping[str, int],
    vocab: SentencePieceVocab,
    i: int,
) -> tuple[str, str] | None:
    """The pair merging joins last to form token ``text`` (None: it never forms from text)."""
    if len(text) < 2:
        return None
    symbols, last = spm_segment(list(text), score)
    if symbols != [text] or last is None:
        return None
    if k == USER_DEFINED and SPACE_PIECE not in text:
        return None  # split out of the text before merging: it never reaches the merges
    if k != NORMAL:
        raise vocab.refuse(
            f"the {TYPE_NAMES[k]} token {text!r} (id {i}) is formed by merging "
            f"{last[0]!r} and {last[1]!r}, so llama.cpp emits it for that text"
        )
    for part in last:
        if part not in kind:
            raise vocab.refuse(
                f"token {text!r} (id {i}) is merged from the character {part!r}, which is "
                "not in the vocabulary (tokenizers would spell it as bytes first)"
            )
    if USER_DEFINED in (kind[last[0]], kind[last[1]]):
        return None  # one half never reaches the merges
    return last


def _sp_vocab_and_added(vocab: SentencePieceVocab, lead: bool) -> tuple[dict[str, int], list[dict]]:
    """The BPE vocabulary (NORMAL, UNKNOWN and BYTE tokens) and the added tokens: CONTROL
    and UNKNOWN special, USER_DEFINED matched in the raw text first, as llama.cpp does."""
    plain: dict[str, int] = {}
    added: list[dict] = []
    users: list[str] = []
    for i, text, k in vocab.entries():
        if k in (NORMAL, UNKNOWN, BYTE):
            plain[text] = i
        if k in (CONTROL, UNKNOWN):
            added.append(_added_token(i, text, special=True))
        elif k == USER_DEFINED:
            if SPACE_PIECE in text:
                raise vocab.refuse(
                    f"USER_DEFINED token {text!r} (id {i}) holds '▁': llama.cpp looks for it "
                    "in the text before spaces become '▁'"
                )
            added.append(_added_token(i, text, special=False))
            users.append(text)
    lacking = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in plain]
    if lacking:
        raise vocab.refuse(
            f"no byte token {lacking[0]} ({len(lacking)} of the 256 missing): a character "
            "outside the vocabulary could not be spelled"
        )
    if users and lead:
        raise vocab.refuse(
            "USER_DEFINED tokens with the dummy prefix (add_space_prefix): llama.cpp gives "
            "the text after such a token no prefix, tokenizers gives every piece one"
        )
    _refuse_overlapping(users, vocab)
    return plain, added


def _refuse_overlapping(texts: list[str], vocab: SentencePieceVocab) -> None:
    """llama.cpp splits USER_DEFINED texts out longest first, tokenizers leftmost-longest:
    the same splits unless two different texts can overlap (an end of one starting the
    other); runs of one character (Gemma's spaces and newlines) agree either way."""
    starts: dict[str, str] = {}
    for text in texts:
        for n in range(1, len(text)):
            starts.setdefault(text[:n], text)
    for text in texts:
        for n in range(1, len(text)):
            other = starts.get(text[n:])
            if other is not None and other != text and not _same_run(text, other):
                raise vocab.refuse(
                    f"USER_DEFINED tokens {text!r} and {other!r} overlap: llama.cpp and "
                    "tokenizers would split such text differently"
                )


def _same_run(a: str, b: str) -> bool:
    return len(set(a + b)) == 1


def sentencepiece_tokenizer_json(gf: GGUFFile) -> dict:
    """tokenizer.json of a ``'llama'`` (SentencePiece) vocabulary: BPE with byte fallback
    whose merges follow the scores (:func:`sentencepiece_merges`), spaces written '▁', and
    a dummy '▁' in front when ``tokenizer.ggml.add_space_prefix`` (default on) says so."""
    vocab = read_sentencepiece_vocab(gf)
    lead = bool(gf.get("tokenizer.ggml.add_space_prefix", True))
    plain, added = _sp_vocab_and_added(vocab, lead)
    merges = sentencepiece_merges(vocab)
    unknown = [text for _, text, k in vocab.entries() if k == UNKNOWN]
    space = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE_PIECE}
    prepend = [{"type": "Prepend", "prepend": SPACE_PIECE}] if lead else []
    strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if lead else []
    unspace = {"type": "Replace", "pattern": {"String": SPACE_PIECE}, "content": " "}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [*prepend, space]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [unspace, {"type": "ByteFallback"}, {"type": "Fuse"}, *strip],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unknown[0] if unknown else None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": plain,
            "merges": merges,
        },
    }
    _place_added_tokens(spec)
    return spec


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
