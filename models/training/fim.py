"""The training documents: plain files, and fill-in-the-middle (FIM) examples drawn per epoch.

Character-level FIM as in the StarCoder / SantaCoder recipe: a chunk of a file is cut at two
uniformly random character positions into prefix, middle and suffix, and each part is
tokenized on its own (so the model sees parts cut anywhere, even inside a token). Formats,
with enc() the plain tokenizer and every document starting with <|endoftext|> (its BOS)::

    PSM: <|fim_prefix|> enc(prefix) <|fim_suffix|> enc(suffix) <|fim_middle|> enc(middle)
    SPM: <|fim_prefix|> <|fim_suffix|> enc(suffix) <|fim_middle|> enc(prefix + middle)

The middle ends where the next document's <|endoftext|> begins, so the model learns to close
the middle with <|endoftext|>. In SPM the prefix and the middle are ONE segment: at inference
the prefix is cut at the cursor exactly as in prefix-only completion, which is where
midword's covering tree applies. Chunks that are not transformed stay plain text; runs of
them are tokenized together, so with --fim-rate 0 the documents are exactly the files.

`make_epoch_docs` gives each epoch's documents as token ids (FIM drawn with a per-epoch
seed); the other functions are its steps.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .recipe import Recipe
from .tokenizer import SPECIAL_TOKENS

__all__ = [
    "FIM_FORMATS",
    "FIM_TEMPLATE_NAME",
    "EpochDocs",
    "FimIds",
    "Piece",
    "encode_pieces",
    "fim_pieces",
    "fim_summary",
    "line_chunks",
    "make_epoch_docs",
    "plan_documents",
    "split_at_random_characters",
]

EpochDocs = Callable[[int], Sequence[Sequence[int]]]  # epoch number -> its documents' ids


# config.json's "fim_template": the name of the SPM layout in midword.engine.sample.fim.TEMPLATES,
# so that `fim: auto` picks SPM (the covering tree applies at the cursor) over Qwen's PSM.
FIM_TEMPLATE_NAME = "qwen-spm"
Piece = int | str  # a special token id, or text that is tokenized on its own
FIM_FORMATS = {
    "psm": "<|endoftext|><|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>{middle}"
    "<|endoftext|>",
    "spm": "<|endoftext|><|fim_prefix|><|fim_suffix|>{suffix}<|fim_middle|>{prefix+middle}"
    "<|endoftext|>",
    "plain": "<|endoftext|>{text}",
}


@dataclass(frozen=True)
class FimIds:
    """Ids of the special tokens in a FIM document."""

    eot: int
    prefix: int
    suffix: int
    middle: int

    @classmethod
    def of(cls, tok) -> FimIds:
        ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
        if any(i is None for i in ids):
            raise ValueError(f"tokenizer lacks one of {SPECIAL_TOKENS}")
        return cls(*ids)


def split_at_random_characters(text: str, rng: random.Random) -> tuple[str, str, str]:
    """(prefix, middle, suffix) cut at two uniform positions in ``0..len(text)``.

    >>> parts = split_at_random_characters("def f(x):\\n    return x\\n", random.Random(3))
    >>> "".join(parts)
    'def f(x):\\n    return x\\n'
    """
    i, j = sorted(rng.randint(0, len(text)) for _ in range(2))
    return text[:i], text[i:j], text[j:]


def fim_pieces(prefix: str, middle: str, suffix: str, spm: bool, ids: FimIds) -> list[Piece]:
    """One FIM example (without its leading <|endoftext|>) as special ids and texts.

    >>> ids = FimIds(0, 1, 2, 3)
    >>> fim_pieces("a = ", "1", "\\n", spm=False, ids=ids)
    [1, 'a = ', 2, '\\n', 3, '1']
    >>> fim_pieces("a = ", "1", "\\n", spm=True, ids=ids)
    [1, 2, '\\n', 3, 'a = 1']
    """
    if spm:
        return [ids.prefix, ids.suffix, suffix, ids.middle, prefix + middle]
    return [ids.prefix, prefix, ids.suffix, suffix, ids.middle, middle]


def line_chunks(text: str, rng: random.Random, min_chars: int, max_chars: int) -> list[str]:
    """`text` cut after newlines into chunks of about a random length in [min, max] chars.

    A chunk ends at the first newline at or after its target length (or at the end of the
    text), so chunks join back into `text`.
    """
    chunks, start = [], 0
    while start < len(text):
        target = start + rng.randint(min_chars, max_chars)
        cut = text.find("\n", min(target, len(text)) - 1)
        end = len(text) if cut < 0 else cut + 1
        chunks.append(text[start:end])
        start = end
    return chunks


def plan_documents(
    texts: Sequence[str], recipe: Recipe, eot: int, ids: FimIds | None, rng: random.Random
) -> list[list[Piece]]:
    """The documents of one epoch: each starts with <|endoftext|>; see the module docstring.

    Every chunk becomes a FIM example with probability ``recipe.fim_rate`` (SPM with
    probability ``recipe.spm_rate``, else PSM); consecutive plain chunks of a file stay one
    document. Without `ids` (or at rate 0) every file is one plain document.
    """
    docs: list[list[Piece]] = []
    for text in texts:
        if ids is None or recipe.fim_rate <= 0:
            docs.append([eot, text])
            continue
        plain = ""
        for chunk in line_chunks(text, rng, recipe.fim_chunk_min, recipe.fim_chunk_max):
            if rng.random() >= recipe.fim_rate:
                plain += chunk
                continue
            if plain:
                docs.append([eot, plain])
                plain = ""
            spm = rng.random() < recipe.spm_rate
            docs.append([eot, *fim_pieces(*split_at_random_characters(chunk, rng), spm, ids)])
        if plain:
            docs.append([eot, plain])
    return docs


def encode_pieces(tok, docs: Sequence[Sequence[Piece]]) -> list[list[int]]:
    """Token ids of every document: ids kept, each text encoded on its own (one batch call)."""
    texts = [p for d in docs for p in d if isinstance(p, str)]
    encoded = iter(tok.encode_batch(texts, add_special_tokens=False))
    return [
        [t for p in d for t in ([p] if isinstance(p, int) else next(encoded).ids)] for d in docs
    ]


def make_epoch_docs(
    tok, texts: Sequence[str], recipe: Recipe, eot: int, fim_ids: FimIds | None
) -> EpochDocs:
    """Epoch number -> token ids of that epoch's documents (FIM drawn with a per-epoch seed)."""

    def docs(epoch: int) -> list[list[int]]:
        rng = random.Random(recipe.seed * 1_000_003 + epoch)
        return encode_pieces(tok, plan_documents(texts, recipe, eot, fim_ids, rng))

    return docs


def fim_summary(tok, recipe: Recipe) -> dict[str, object]:
    """The FIM tokens and formats, for training_summary.json and the model card."""
    if recipe.fim_rate <= 0:
        return {"enabled": False}
    return {
        "enabled": True,
        "tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
        "fim_rate": recipe.fim_rate,
        "spm_rate": recipe.spm_rate,
        "chunk_chars": [recipe.fim_chunk_min, recipe.fim_chunk_max],
        "split": "two uniform random character positions per chunk; parts tokenized separately",
        "formats": FIM_FORMATS,
    }
