"""The start token: the special token every sequence is conditioned on.

A model only ever saw text after some context, and the start token stands in for it. It
should be what came before a document in training, never a chat-turn marker (conditioning
on ``<|im_start|>`` asks for the beginning of a chat turn, not of a file). The rule, in
order (docs/design.md, "The start token"; measured in docs/benchmarks.md):

1. a tokenizer that puts a special token before every text (``add_bos_token`` in
   ``tokenizer_config.json`` or a GGUF file, else a ``tokenizer.json`` post-processor
   template that starts with a special token, else llama.cpp's default for the
   vocabulary: SentencePiece and Llama 3 style vocabularies add one): that token, the
   model saw it before every document (Llama, Mistral, Gemma, DeepSeek, Command R);
2. otherwise the vocabulary's special ``<|endoftext|>``, the document separator of the
   GPT-2 family (Qwen, StarCoder, SmolLM, Falcon, GPT-NeoX, Phi): documents were packed
   one after another with it between them;
3. otherwise the model's BOS, then its EOS, then the first special token, skipping
   chat-turn markers (a token written in the chat template, or named like ``<|im_start|>``,
   ``<end_of_turn>``, ``<|eot_id|>``); if every candidate is one, the first of them. (A
   BOS the files do not add still names a document start, as in the first Llama 3
   tokenizer.json, whose template left it out.)

What the files say is read once per tokenizer file (a GGUF file's metadata without its
vocabulary arrays, a ``tokenizer.json``'s post-processor without the rest of the file).
"""

from __future__ import annotations

import json
import mmap
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendError
from ..gguf.reader import _ARRAY, _NUMERIC, _STRING, _HeaderReader

__all__ = ["TokenizerFacts", "choose_start", "is_chat_marker", "tokenizer_facts"]

DOCUMENT_SEPARATOR = "<|endoftext|>"
# llama.cpp adds BOS to these BPE vocabularies when the file does not say (llama-vocab.cpp)
LLAMACPP_BOS_PRE = frozenset(
    {
        "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
        "lfm2", "jina-v5-nano", "tekken", "chameleon",
    }
)  # fmt: skip
LLAMACPP_BOS_MODELS = frozenset({"llama", "bert"})  # SentencePiece, WordPiece
CHAT_NAMES = re.compile(
    r"im_start|im_end|_of_turn|eot|header_id|^<\|(user|assistant|system|end|return)\|>$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class TokenizerFacts:
    """What a tokenizer's files say about its start: ``adds_bos`` (None when they do not
    say), the token it adds (``bos``: an id from a GGUF file, a text from tokenizer.json
    or tokenizer_config.json) and the chat template ('' when there is none)."""

    adds_bos: bool | None = None
    bos: int | str | None = None
    chat_template: str = ""


def choose_start(model: Any, tok: Any, facts: TokenizerFacts) -> int:
    """The start token id by the module's rule, for ``model`` (its ``bos_token_id`` and
    ``eos_token_id``, when it has them) and the tokenizer ``tok`` (its ``added`` tokens
    and ``special_ids``).

    >>> from types import SimpleNamespace as NS
    >>> tok = NS(added=[NS(content=t, id=i, special=True) for i, t in
    ...     enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])], special_ids=[0, 1, 2])
    >>> smollm = NS(bos_token_id=1, eos_token_id=2)
    >>> choose_start(smollm, tok, TokenizerFacts(adds_bos=False))
    0
    >>> choose_start(smollm, tok, TokenizerFacts(adds_bos=True, bos="<|im_start|>"))
    1
    """
    specials = {a.content: int(a.id) for a in getattr(tok, "added", ()) if a.special}
    bos, eos = _model_id(model, "bos_token_id"), _model_id(model, "eos_token_id")
    if facts.adds_bos:
        added = specials.get(facts.bos) if isinstance(facts.bos, str) else facts.bos
        if added is not None or bos is not None:
            return int(added if added is not None else bos)
    if DOCUMENT_SEPARATOR in specials:
        return specials[DOCUMENT_SEPARATOR]
    names = {i: t for t, i in specials.items()}
    candidates = [i for i in (bos, eos, *getattr(tok, "special_ids", ())) if i is not None]
    for i in candidates:
        if not is_chat_marker(names.get(i, ""), facts.chat_template):
            return int(i)
    if candidates:
        return int(candidates[0])
    raise BackendError("the model has no BOS, EOS or special token to start a sequence with")


def is_chat_marker(text: str, chat_template: str = "") -> bool:
    """A token that marks chat turns: written in the chat template, or named like one.

    >>> [is_chat_marker(t) for t in ("<|im_end|>", "<end_of_turn>", "</s>", "<|end_of_text|>")]
    [True, True, False, False]
    >>> is_chat_marker("<|END|>", "{{ '<|END|>' }}"), is_chat_marker("")
    (True, False)
    """
    if not text:
        return False
    return bool(CHAT_NAMES.search(text)) or (text in chat_template)


def _model_id(model: Any, attr: str) -> int | None:
    """``model.<attr>`` as one id (the first of a list), or None."""
    value = getattr(model, attr, None)
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return None if value is None else int(value)


# ------------------------------------------------------------------ reading the files
def tokenizer_facts(source: str) -> TokenizerFacts:
    """What the tokenizer file ``source`` (a GGUF file or a tokenizer.json, with the
    tokenizer_config.json beside it) says about its start; empty facts for a file that is
    not there or cannot be read (a tokenizer built in memory). Read once per version of
    the files (a model folder the server watches may change)."""
    path = Path(source)
    if path.is_dir():  # a model folder
        path = path / "tokenizer.json"
    if not path.name:
        return TokenizerFacts()
    stamps = (_stamp(path), _stamp(path.with_name("tokenizer_config.json")))
    return _read_facts(str(path), stamps)


def _stamp(path: Path) -> tuple[int, int] | None:
    """(modification time, size) of a file; None when it is not there."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=32)
def _read_facts(source: str, stamps: tuple[object, ...]) -> TokenizerFacts:
    """`tokenizer_facts` of ``source`` as the files are at ``stamps`` (the cache key)."""
    path = Path(source)
    try:
        with path.open("rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            return _gguf_facts(path)
        return _hf_facts(path)
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return TokenizerFacts()


def _gguf_facts(path: Path) -> TokenizerFacts:
    """``tokenizer.ggml.add_bos_token`` and the BOS id, with llama.cpp's defaults when
    the file leaves them out (it adds BOS to SentencePiece and Llama 3 style vocabularies;
    a SentencePiece BOS is id 1)."""
    meta = _gguf_scalars(path)
    kind = meta.get("tokenizer.ggml.model")
    adds = meta.get("tokenizer.ggml.add_bos_token")
    if adds is None:
        adds = kind in LLAMACPP_BOS_MODELS or meta.get("tokenizer.ggml.pre") in LLAMACPP_BOS_PRE
    if kind == "gemma4":  # llama.cpp adds BOS to Gemma 4 whatever the file says
        adds = True
    bos = meta.get("tokenizer.ggml.bos_token_id", 1 if kind == "llama" else None)
    template = meta.get("tokenizer.chat_template")
    return TokenizerFacts(
        bool(adds), None if bos is None else int(bos), template if isinstance(template, str) else ""
    )


class _ScalarReader(_HeaderReader):
    """The GGUF header reader, skipping arrays (the vocabulary and merges: most of the
    reading time): their values come back as None."""

    def _value(self, kind: int) -> Any:
        if kind != _ARRAY:
            return super()._value(kind)
        item, count = self._unpack("I"), self._unpack("Q")
        if item in _NUMERIC:
            self.pos += count * np.dtype(_NUMERIC[item]).itemsize
        elif item == _STRING:
            length = struct.Struct(self.order + "Q").unpack_from
            pos = self.pos
            for _ in range(count):
                pos += 8 + length(self.data, pos)[0]
            self.pos = pos
        else:
            for _ in range(count):
                self._value(item)
        return None


def _gguf_scalars(path: Path) -> dict[str, Any]:
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        metadata, _ = _ScalarReader(m).read()
    return metadata


def _hf_facts(path: Path) -> TokenizerFacts:
    """From tokenizer_config.json (``add_bos_token``, ``bos_token``, ``chat_template``,
    also a ``chat_template.jinja`` file) and the tokenizer.json's post-processor."""
    config = _json_file(path.with_name("tokenizer_config.json"))
    adds, bos = _template_start(_post_processor(path))
    if isinstance(config.get("add_bos_token"), bool):
        adds = config["add_bos_token"]
        bos = (_token_text(config.get("bos_token")) or bos) if adds else None
    return TokenizerFacts(adds, bos, _chat_template(path, config))


def _json_file(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _post_processor(path: Path) -> Any:
    """The ``post_processor`` of a tokenizer.json, decoded alone (the file may be tens of
    megabytes; the key cannot occur inside a JSON string followed by a colon)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'(?<!\\)"post_processor"\s*:\s*', text)
    if found is None:
        return None
    value, _ = json.JSONDecoder().raw_decode(text, found.end())
    return value


def _template_start(processor: Any) -> tuple[bool | None, str | None]:
    """(adds a token first, its text) from a post-processor: a template whose single-text
    form starts with a special token adds it; any other known processor adds nothing."""
    if not isinstance(processor, dict):
        return None, None
    kind = processor.get("type")
    if kind == "Sequence":
        parts = [_template_start(p) for p in processor.get("processors") or []]
        return next((p for p in parts if p[0]), (False, None))
    if kind == "TemplateProcessing":
        first = (processor.get("single") or [{}])[0]
        if "SpecialToken" in first:
            return True, str(first["SpecialToken"].get("id"))
        return False, None
    if kind in ("BertProcessing", "RobertaProcessing"):
        return True, _token_text((processor.get("cls") or [None])[0])
    return False, None


def _token_text(value: Any) -> str | None:
    """A token as tokenizer_config.json writes it: a string, or an object with ``content``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(path: Path, config: dict) -> str:
    """Every chat template of the tokenizer, joined ('' when there is none)."""
    value = config.get("chat_template")
    if isinstance(value, list):  # named templates: [{"name": ..., "template": ...}]
        value = "\n".join(str(t.get("template", "")) for t in value if isinstance(t, dict))
    parts = [value] if isinstance(value, str) else []
    jinja = path.with_name("chat_template.jinja")
    if jinja.is_file():
        parts.append(jinja.read_text(encoding="utf-8"))
    return "\n".join(parts)
