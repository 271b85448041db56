"""llama.cpp's own tokenizer as the brute-force oracle for GGUF covering trees.

llama.cpp ships vocabulary-only GGUF files of real tokenizers (``ggml-vocab-*.gguf``, in
``vendor/llama.cpp/models`` of the llama-cpp-python source package; CI unpacks them into
``$MIDWORD_LLAMA_VOCAB``, else ``<repo>/.cache/llama.cpp-vocab``). :class:`LlamaVocab`
loads one with ``vocab_only`` (no weights) through llama-cpp-python's low-level API and
tokenizes with ``llama_tokenize`` (``parse_special`` off, ``add_special`` as the model
does, the BOS/EOS it adds taken off again). It offers what tests/oracle.py's brute force
asks of an encoder and a vocabulary (``encode(text).ids``, ``token_bytes``, ``decode``),
with every token's bytes from llama.cpp's ``llama_token_to_piece``: the oracle shares
nothing with midword but the probe continuations.

A step the model's own tokenizer takes and llama.cpp skips is applied before
``llama_tokenize`` (:data:`MODEL_STEPS`: Qwen2's NFC); the brute force still asks which
token sequences start the encoding of a text whose *bytes* start with the prefix.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import unicodedata
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the 13 files with .inp/.out texts (llama.cpp's tokenizer tests), by tokenizer.ggml.pre
NAMES = (
    "starcoder", "refact", "deepseek-coder", "deepseek-llm", "llama-bpe", "qwen2", "gpt-2",
    "command-r", "falcon", "mpt", "llama-spm", "phi-3", "gemma-4",
)  # fmt: skip
CODE_FAMILIES = ("starcoder", "refact", "deepseek-coder", "qwen2", "llama-spm", "phi-3")
# steps of the model's own tokenizer that llama.cpp's skips (listed in docs/gguf.md)
MODEL_STEPS: dict[str, Callable[[str], str]] = {
    "qwen2": lambda text: unicodedata.normalize("NFC", text),
}


def vocab_dir() -> Path:
    """Where the ggml-vocab-*.gguf files are (they may be absent: the tests then skip)."""
    return Path(os.environ.get("MIDWORD_LLAMA_VOCAB") or ROOT / ".cache" / "llama.cpp-vocab")


def vocab_file(name: str) -> Path:
    """``ggml-vocab-<name>.gguf``; the test skips when the folder or llama.cpp is missing."""
    path = vocab_dir() / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.skip(f"no {path} (CI unpacks llama.cpp's vocabulary files there)")
    return path


def inp_texts(name: str) -> list[str]:
    """llama.cpp's test texts for a vocabulary (``.inp``: texts between marker lines)."""
    raw = (vocab_dir() / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
    return [t for t in raw.split("\n__ggml_vocab_test__\n") if t]


@cache
def _llama() -> Any:
    llama_cpp = pytest.importorskip("llama_cpp")
    low = llama_cpp.llama_cpp
    low.llama_backend_init()
    return low


_QUIET = None  # (the log callback must outlive every call into llama.cpp)


def _silence(low: Any) -> None:
    global _QUIET
    if _QUIET is None:
        _QUIET = low.llama_log_callback(lambda level, text, data: None)
        low.llama_log_set(_QUIET, ctypes.c_void_p())


class LlamaVocab:
    """A vocabulary-only GGUF file as llama.cpp tokenizes it.

    Example (with llama.cpp and the files present)::

        v = LlamaVocab("qwen2")
        v.encode("def f():").ids      # llama_tokenize's ids, no BOS
        v.token_bytes[v.encode("def").ids[0]]   # b'def'
    """

    def __init__(self, name: str) -> None:
        low = _llama()
        _silence(low)
        params = low.llama_model_default_params()
        params.vocab_only = True
        path = vocab_file(name)
        self.model = low.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.low, self.name = low, name
        self.vocab = low.llama_model_get_vocab(self.model)
        self.bos = (
            low.llama_vocab_bos(self.vocab) if low.llama_vocab_get_add_bos(self.vocab) else None
        )
        self.eos = (
            low.llama_vocab_eos(self.vocab) if low.llama_vocab_get_add_eos(self.vocab) else None
        )
        self.size = low.llama_vocab_n_tokens(self.vocab)
        self.step = MODEL_STEPS.get(name)
        self.token_bytes = [self._piece(i) for i in range(self.size)]
        self.lead = self._lead()

    def oracle_identity(self) -> str:
        """What decides this encoder's output, for tests/oracle.py's kept verdicts: the file,
        llama.cpp's release and the model's own steps (this module's code)."""
        import llama_cpp

        digest = hashlib.sha256(vocab_file(self.name).read_bytes()).hexdigest()
        return f"llama.cpp {llama_cpp.__version__} {digest}\0{Path(__file__).read_text()}"

    def _piece(self, token: int) -> bytes | None:
        """The token's text bytes: those of NORMAL, USER_DEFINED and BYTE tokens, even where
        llama.cpp also flags them CONTROL (Qwen2's NORMAL '</s>', which merges still form);
        None for the others (events)."""
        low = self.low
        text = low.LLAMA_TOKEN_ATTR_NORMAL | low.LLAMA_TOKEN_ATTR_USER_DEFINED
        if not low.llama_vocab_get_attr(self.vocab, token) & (text | low.LLAMA_TOKEN_ATTR_BYTE):
            return None
        buf = ctypes.create_string_buffer(256)
        n = low.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = low.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n] if n > 0 else None

    def _lead(self) -> bytes:
        """The dummy space llama.cpp puts before a SentencePiece text (b"" for others)."""
        ids = self.tokenize("a")
        return b" " if self.decode(ids) == b" a" else b""

    def tokenize(self, text: str) -> list[int]:
        """``llama_tokenize`` of the text after the model's own steps, without BOS/EOS."""
        if self.step is not None:
            text = self.step(text)
        data = text.encode("utf-8")
        room = len(data) + 8
        while True:
            out = (ctypes.c_int32 * room)()
            n = self.low.llama_tokenize(self.vocab, data, len(data), out, room, True, False)
            if n >= 0:
                break
            room = -n
        ids = list(out[:n])
        if self.bos is not None and ids[:1] == [self.bos]:
            ids = ids[1:]
        if self.eos is not None and ids[-1:] == [self.eos]:
            ids = ids[:-1]
        return ids

    def encode(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        """tests/oracle.py's encoder interface over the text *as the tokens spell it*:
        the dummy space in front (SentencePiece) is llama.cpp's to add, so it is taken off."""
        del add_special_tokens  # (never added: see tokenize)
        if self.lead:
            if not text.startswith(" "):
                return SimpleNamespace(ids=[-1])  # no text spells so: no sequence starts it
            text = text[1:]
        return SimpleNamespace(ids=self.tokenize(text))

    def decode(self, ids: tuple[int, ...] | list[int]) -> bytes:
        return b"".join(self.token_bytes[i] or b"" for i in ids)


def assert_trees_match_llama(
    eng: Any, vocab: LlamaVocab, prefixes: list[bytes], seed: int = 0, n_sample: int = 25
) -> None:
    """Each prefix's covering tree against llama.cpp's tokenizer.

    A prefix that ends on a character boundary and not in whitespace: the tree equals
    tests/oracle.py's brute force (on a sample of end tokens plus the first ``n_sample``
    leaves the tree claims at the prefix end). One that stops inside a character or ends
    in whitespace (where the brute force would try most of the vocabulary as straddling
    leaves, minutes each): every sampled sequence of the tree starts the encoding of some
    text with those bytes, and the covering start of every sampled such text's encoding
    is in the tree (:func:`assert_sound_and_covering`)."""
    import random

    from midword.engine import build_tree

    from .oracle import (
        _ends_inside_char,
        brute_force_tree,
        kept_verdicts,
        sample_ids,
        tree_sequences,
    )

    rng = random.Random(seed)
    memo = kept_verdicts(vocab, vocab)  # type: ignore[arg-type]
    for prefix in prefixes:
        tree = build_tree(eng, prefix)
        ends = [n for n in tree.nodes if n.ends_at_prefix_end]
        claimed = [int(t) for n in ends for t in n.leaves[:n_sample]]
        sample = sample_ids(eng.tok, n_sample, rng) + claimed
        mine = {tuple(int(t) for t in tree.trunk) + s for s in tree_sequences(tree, sample)}
        if _ends_inside_char(prefix) or prefix[-1:].isspace():
            assert_sound_and_covering(vocab, prefix, mine, rng, memo)
        else:
            truth = brute_force_tree(vocab, vocab, vocab.lead + prefix, sample, memo)
            assert mine == truth, (vocab.name, prefix, sorted(mine ^ truth)[:5])


def assert_sound_and_covering(
    vocab: LlamaVocab,
    prefix: bytes,
    mine: set[tuple[int, ...]],
    rng: Any,
    memo: dict[tuple[int, ...], bool],
    n: int = 60,
) -> None:
    """Up to ``n`` sequences of the tree each start the encoding of a text whose bytes
    start with the prefix, and for up to ``n`` such texts (the prefix, completed and
    continued by the probes), the shortest start of the encoding that covers the prefix is
    a sequence of the tree."""
    from .oracle import canonical_prefixes, confirmed_through_leaves, probe_strings

    some = rng.sample(sorted(mine), min(n, len(mine)))
    unsound = set(some) - canonical_prefixes(vocab, vocab, some, memo)  # type: ignore[arg-type]
    unsound -= confirmed_through_leaves(vocab, vocab, unsound, mine, memo)  # type: ignore[arg-type]
    assert not unsound, (vocab.name, prefix, sorted(unsound)[:5])
    whole = vocab.lead + prefix
    texts = probe_strings(whole) or []
    for text in rng.sample(texts, min(n, len(texts))):
        ids = vocab.encode(text).ids
        if not vocab.decode(ids).startswith(whole):
            continue  # (Qwen2's NFC rewrote the prefix's bytes: no sequence covers it)
        k = next(k for k in range(1, len(ids) + 1) if len(vocab.decode(ids[:k])) >= len(whole))
        assert tuple(ids[:k]) in mine, (vocab.name, prefix, text, ids[:k])
