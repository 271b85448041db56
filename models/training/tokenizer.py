"""The tokenizer: byte-level BPE trained on the training files, and how it is written.

``tokenizers``' BPE with the cl100k pre-tokenization regex (midword parses it back out of
tokenizer.json) and ``<|endoftext|>`` as id 0 (BOS = EOS); with FIM, the three FIM
sentinels are ids 1-3. ``tokenizers`` is imported when a tokenizer is trained.

Example:
    >>> tok = train_tokenizer(["def f(x):\\n    return x\\n"] * 20, vocab_size=300)  # doctest: +SKIP
    >>> encode_documents(tok, ["x = 1\\n"])[0][0] == tok.token_to_id(EOT)          # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CL100K_PATTERN",
    "EOT",
    "FIM_MIDDLE",
    "FIM_PREFIX",
    "FIM_SUFFIX",
    "SPECIAL_TOKENS",
    "encode_documents",
    "train_tokenizer",
    "write_tokenizer",
]


EOT = "<|endoftext|>"
# Fill-in-the-middle sentinels (Qwen2.5-Coder's names); with EOT they get ids 0-3.
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
SPECIAL_TOKENS = (EOT, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)
# The cl100k_base pre-tokenization regex; midword parses it back out of tokenizer.json.
CL100K_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(
    texts: Sequence[str], vocab_size: int, fim: bool = False
):  # -> tokenizers.Tokenizer
    """Byte-level BPE with the cl100k Split regex; ``<|endoftext|>`` gets id 0.

    With `fim`, the three FIM sentinels follow as ids 1-3 (``SPECIAL_TOKENS``); the vocabulary
    size counts them.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(CL100K_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS if fim else (EOT,)),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer, length=len(texts))
    return tok


def encode_documents(tok, texts: Sequence[str]) -> list[list[int]]:
    """``[eot] + ids(text)`` for every text."""
    eot = tok.token_to_id(EOT)
    return [[eot, *enc.ids] for enc in tok.encode_batch(list(texts), add_special_tokens=False)]


def write_tokenizer(tok, out: Path, seq_len: int) -> None:
    """tokenizer.json (exactly as `tokenizers` writes it) + a tokenizer_config.json."""
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        "pad_token": EOT,
        "model_max_length": seq_len,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
