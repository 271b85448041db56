"""What GGUF byte-level BPE and SentencePiece rebuilds share: llama.cpp's token types and
the added tokens of a rebuilt tokenizer.json, each kept at its own id.

>>> added_token(5, "<tab>", special=False)["content"]
'<tab>'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
    vocab = spec["model"]["vocab"]
    if keeps_written_ids(vocab, spec["added_tokens"]):
        return  # (the usual case: no `tokenizers.Tokenizer` built to find out)
    from tokenizers import Tokenizer

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


def keeps_written_ids(vocab: Mapping[str, int], added: Sequence[Mapping[str, Any]]) -> bool:
    """True where ``tokenizers`` gives every added token the id it is written with, as it
    does when the vocabulary's ids are 0..n-1 and the added tokens, none empty, none in
    the vocabulary, no two with the same text, come next with ids n, n+1, ... in order:
    ``AddedVocabulary::add_tokens`` gives each one the vocabulary lacks the next id after
    the vocabulary and the added tokens before it (Qwen, Llama 3). Finding that out by
    loading the file into a ``tokenizers.Tokenizer`` takes 90 MiB at Qwen2's 151,643
    tokens, and keeps the library's 5 MiB resident in the server for good.

    >>> vocab = {"a": 0, "b": 1}
    >>> keeps_written_ids(vocab, [added_token(2, "<s>", True), added_token(3, "<t>", False)])
    True
    >>> keeps_written_ids(vocab, [added_token(3, "<s>", True)])  # a gap: ask tokenizers
    False
    >>> keeps_written_ids({"a": 0, "b": 2}, [added_token(2, "<s>", True)])
    False
    """
    n = len(vocab)
    if [a["id"] for a in added] != list(range(n, n + len(added))):
        return False
    texts = [a["content"] for a in added]
    if len(set(texts)) != len(texts) or any(not t or t in vocab for t in texts):
        return False
    ids = set(vocab.values())
    return len(ids) == n and (not ids or (min(ids) == 0 and max(ids) == n - 1))


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


# ------------------------------------------------------------------ llama.cpp's overrides
# Token texts llama.cpp's loader makes CONTROL whatever the file says (llama-vocab.cpp,
# "control-looking token ... its type will be overridden"): never matched in text, so the
# rebuild makes them special too. End-of-generation texts always:
EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
})  # fmt: skip
# the rest only when the file names no token for that role (metadata keys, old and new)
SLOT_TEXTS: dict[tuple[str, ...], frozenset[str]] = {
    ("eot",): frozenset({
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
        "<end_of_utterance>",
    }),
    ("eom",): frozenset({"<|eom_id|>"}),
    ("fim_pre", "prefix"): frozenset({
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
        "▁<PRE>", "<|code_prefix|>", "<|prefix|>",
    }),
    ("fim_suf", "suffix"): frozenset({
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
        "▁<SUF>", "<|code_suffix|>", "<|suffix|>",
    }),
    ("fim_mid", "middle"): frozenset({
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
        "▁<MID>", "<|code_middle|>", "<|middle|>",
    }),
    ("fim_pad",): frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
    ("fim_rep",): frozenset({
        "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    }),
    ("fim_sep",): frozenset({"<|file_sep|>"}),
}  # fmt: skip


def as_llama_cpp_reads(tokens: list[str], types: list[int], named: set[str]) -> list[int]:
    """The token types llama.cpp's loader ends with: a text it treats as a control token
    (:data:`EOG_TEXTS`, and :data:`SLOT_TEXTS` of a role the file names no token for:
    ``named`` holds the roles it does name) is CONTROL when the file made it USER_DEFINED.
    A NORMAL one (Qwen2's '</s>') keeps its type: the flag only stops llama.cpp matching
    it as added text, which it never was, and merges still form it.

    >>> as_llama_cpp_reads(["a", "<|im_end|>", "<PRE>"], [NORMAL, USER_DEFINED, USER_DEFINED],
    ...                    {"fim_pre"})
    [1, 3, 4]
    """
    control = set(EOG_TEXTS)
    users = {t for t, k in zip(tokens, types, strict=True) if k == USER_DEFINED} - control
    for roles, texts in SLOT_TEXTS.items():
        if not named.intersection(roles):
            present = [t for t in tokens if t in texts]
            if len(present) > 1 and users.intersection(present):
                # (llama.cpp takes whichever its hash map meets first)
                raise GGUFError(
                    f"tokens {present[0]!r} and {present[1]!r} both look like llama.cpp's "
                    f"{roles[0]} token: which one it makes a control token is not modelled"
                )
            control.update(present)
    return [
        CONTROL if k == USER_DEFINED and t in control else k
        for t, k in zip(tokens, types, strict=True)
    ]


def named_roles(get: Callable[[str, Any], Any]) -> set[str]:
    """The roles whose token the file's metadata names (``tokenizer.ggml.<role>_token_id``)."""
    roles = {r for roles in SLOT_TEXTS for r in roles}
    return {r for r in roles if get(f"tokenizer.ggml.{r}_token_id", None) is not None}
