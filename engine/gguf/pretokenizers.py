"""The pre-tokenizers of GGUF byte-level BPE files: what each ``tokenizer.ggml.pre`` value
stands for, as the tokenizer.json pieces (normalizer, pre-tokenizer, ``ignore_merges``) of
the family's own tokenizer.json. Values not modelled exactly are refused by name.

>>> pre_tokenizer_recipe("qwen2").normalizer
{'type': 'NFC'}
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GGUFError

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
