"""What GGUF byte-level BPE and SentencePiece rebuilds share: llama.cpp's token types and
the added tokens of a rebuilt tokenizer.json, each kept at its own id.

>>> added_token(5, "<tab>", special=False)["content"]
'<tab>'
"""

from __future__ import annotations

import json

from ..errors import GGUFError

# gguf.TokenType values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {
    NORMAL: "NORMAL", UNKNOWN: "UNKNOWN", CONTROL: "CONTROL",
    USER_DEFINED: "USER_DEFINED", UNUSED: "UNUSED", BYTE: "BYTE",
}  # fmt: skip
# llama.cpp's defaults for a 'llama' vocabulary whose file does not set them


def place_added_tokens(spec: dict) -> None:
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
            if text in vocab or not (a["special"] or reads_as_itself(text)):
                break
            vocab[text] = a["id"]
        else:
            continue
        break
    raise GGUFError(
        f"added token {wrong[0]['content']!r} (id {wrong[0]['id']}) cannot keep its id in a "
        "rebuilt tokenizer.json"
    )


def reads_as_itself(text: str) -> bool:
    """Printable ASCII but space: the ByteLevel reading of ``text`` is its UTF-8."""
    return all("!" <= c <= "~" for c in text)


def added_token(i: int, text: str, special: bool) -> dict:
    return {
        "id": i,
        "content": text,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }
