"""SentencePiece's fast paths give what the plain computations give: the heap BPE equals
the rescanning one, a tree's prefix encodings (hard boundaries found once) equal encoding
each prefix, the added-text lookups equal brute force over the added texts, the
straddlers' verdicts equal the whole-vocabulary mask cut to them, that mask equals the rule
written out (every need's tokens banned, none merged away), fallback masks equal a walk over
every character, and dead tokens equal one regex of all added texts. Tree identity over
thousands of trees is benchmarks/tree_hashes.py's job; these pin each shortcut alone."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from midword.engine import load_engine, load_tokenizer
from midword.engine.tokenize.bpe import BPETokenizer, MergeTable, bpe_apply
from midword.engine.tokenize.sentencepiece import bpe_heap
from midword.engine.tree.completions import completion_points
from midword.engine.tree.sentencepiece import SentencePieceEngine
from midword.engine.tree.tables import engine_for

from midword.testing import CORPUS, tokenizer_path
from midword.testing.fixtures import SENTENCEPIECE

RUNS = [c * n for c in "= -_#\t\n<a0" for n in (1, 2, 7, 31, 33, 120)]


@pytest.fixture(scope="module", params=[*SENTENCEPIECE, "llama2-split"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> SentencePieceEngine:
    if request.param != "llama2-split":
        return load_engine(str(tokenizer_path(request.param)))  # type: ignore[return-value]
    # llama2's file under Metaspace split (every space starts a piece), no dummy prefix
    spec = json.loads(tokenizer_path("llama2").read_text(encoding="utf-8"))
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "split": True}
    spec["pre_tokenizer"]["prepend_scheme"] = "never"
    path = tmp_path_factory.mktemp("split") / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    tok = load_tokenizer(path, use_cache=False)
    assert tok.split
    return engine_for(tok)  # type: ignore[return-value]


def _texts(seed: int, n: int, added: list[str]) -> list[str]:
    """Corpus slices, runs of one character, and slices with (parts of) added texts."""
    rng = random.Random(seed)
    data = "\n".join(CORPUS).replace("\u2581", "_")
    out = list(RUNS)
    for _ in range(n):
        i = rng.randrange(len(data))
        text = data[i : i + rng.randrange(1, 80)]
        if added and rng.random() < 0.5:
            a = rng.choice(added)
            k = rng.randrange(len(text) + 1)
            text = text[:k] + a[: rng.randrange(1, len(a) + 1)] + text[k:]
        out.append(text)
    return out


def _symbols(tok, text: str) -> list[int]:  # noqa: ANN001
    out: list[int] = []
    for ch in text:
        atom = tok.atom_id.get(ch)
        out += [atom] if atom is not None else [int(tok.fallback_ids[b]) for b in ch.encode()]
    return out


def test_bpe_heap_equals_bpe_apply_on_random_tables() -> None:
    """Equal ranks across pairs, chains of merges, long runs: the leftmost lowest first."""
    rng = random.Random(0)
    for _ in range(3000):
        size = rng.randrange(2, 5)
        merges: dict[tuple[int, int], tuple[int, int]] = {}
        for _ in range(rng.randrange(1, 12)):
            pair = (rng.randrange(size + len(merges)), rng.randrange(size + len(merges)))
            merges.setdefault(pair, (rng.randrange(8), size + len(merges)))
        seq = [rng.randrange(size) for _ in range(rng.randrange(0, 60))]
        table = MergeTable.of(merges)
        assert bpe_heap(seq, table) == bpe_apply(seq, table), (seq, merges)


def test_bpe_heap_equals_bpe_apply_on_the_vocabulary(engine: SentencePieceEngine) -> None:
    tok = engine.tok
    for text in _texts(1, 400, []):
        syms = _symbols(tok, text)
        got = bpe_heap(syms, tok.merges)
        assert got == [int(t) for t in bpe_apply(syms, tok.merges)], text
        assert all(type(t) is int for t in got), text  # tree hashes repr() the paths


def test_prefix_encodings_equal_encoding_each_prefix(engine: SentencePieceEngine) -> None:
    """encode_prefix against a plain transcription: the base class's added-text regex,
    every neighbour pair judged afresh, and bpe_apply per chunk."""
    tok = engine.tok

    def plain(text: str) -> list[int]:
        ids: list[int] = []
        for piece, added_id in BPETokenizer.split_added(tok, text):
            if added_id is not None:
                ids.append(added_id)
                continue
            start = 0
            for k in range(1, len(piece) + 1):
                if k == len(piece) or tok._hard(piece[k - 1], piece[k]):
                    ids += [int(t) for t in bpe_apply(_symbols(tok, piece[start:k]), tok.merges)]
                    start = k
        return ids

    for text in _texts(2, 150, list(tok.added_text)):
        cuts = tok.hard_cuts(text)
        for k in range(len(text) + 1):
            assert tok.encode_prefix(text, k, cuts) == plain(text[:k]), (text, k)


def test_added_text_lookups_against_brute_force(engine: SentencePieceEngine) -> None:
    tok = engine.tok
    added = list(tok.added_text)
    by_first: dict[int, list[bytes]] = {}
    for a in tok.added_bytes:
        by_first.setdefault(a[0], []).append(a)
    for text in _texts(3, 400, added):
        head = text.encode()
        pending = [
            j
            for j in range(len(head))
            if any(
                a.startswith(head[j:]) and len(a) > len(head) - j for a in by_first.get(head[j], [])
            )
        ]
        assert tok.pending_starts(head) == pending, text
        # kept answers (by the head's last bytes) move with a longer head
        assert tok.pending_starts(b"#" * 20 + head) == [j + 20 for j in pending], text
        assert tok.ends_with_added(text) == any(text.endswith(a) for a in added), text
        assert tok.split_added(text) == BPETokenizer.split_added(tok, text), text


def _heads(tok, rng: random.Random) -> list[bytes]:  # noqa: ANN001
    """Heads ending inside added texts (space runs, '<unus', '\\n\\n'), and plain ones."""
    some = rng.sample(tok.added_bytes, min(40, len(tok.added_bytes)))
    begun = [a[: rng.randrange(1, len(a))] for a in some if len(a) > 1]
    return [b"x = 1", b"ab", b"", *(b"y" + a for a in begun), b"    ", b"<", b"\n\n"]


def test_straddler_verdicts_equal_the_whole_mask_cut_to_them(
    engine: SentencePieceEngine,
) -> None:
    rng = random.Random(4)
    tok = engine.tok
    lasts = [[], [int(tok.fallback_ids[0xE4])], *([t] for t in rng.sample(range(tok.size), 30))]
    # a space may merge with what follows it unless it starts a piece (Metaspace split)
    lasts += [[tok.bytes_to_id[b]] for b in (b" ", b"  ", b"a", b" a") if b in tok.bytes_to_id]
    lasts = [p for p in lasts if not p or tok.token_bytes[p[0]] is not None]
    # straddled rests: space-first tokens (half of Gemma's), added texts' own starts
    spans = [b" ", b"  ", b"s", b"<", b"\n", b"un", b"\xe4", b""]
    for head in _heads(tok, rng):
        banned = _banned_plainly(tok, head)
        for path in lasts:
            whole = engine.allowed(path, head, None)
            assert np.array_equal(whole, _allowed_plainly(engine, path, banned)), (head, path)
            cands = engine.sorted_ids[rng.sample(range(len(engine.sorted_ids)), 500)]
            cands = np.concatenate([cands, engine.interfering(head)[:200]])
            got = engine.allowed(path, head, cands)
            assert np.array_equal(got, whole[cands]), (head, path)
            for rest in spans:
                lo, hi = engine.token_range(rest)
                got = engine.allowed_span(path, head, lo, hi)
                assert np.array_equal(got, whole[engine.sorted_ids[lo:hi]]), (head, path, rest)


def _banned_plainly(tok, head: bytes) -> np.ndarray:  # noqa: ANN001
    """Every token that starts with some need, need by need (none merged with another)."""
    by_first: dict[int, list[bytes]] = {}
    for need in tok.completing_needs(head):
        by_first.setdefault(need[0], []).append(need)
    firsts = {c: tuple(ns) for c, ns in by_first.items()}
    banned = np.zeros(tok.size, dtype=bool)
    for i, b in enumerate(tok.token_bytes):
        if b and b[0] in firsts and b.startswith(firsts[b[0]]):
            banned[i] = True
    return banned


def _allowed_plainly(
    engine: SentencePieceEngine, path: list[int], banned: np.ndarray
) -> np.ndarray:
    """The rule written out: a start, a valid successor (or after a space under split),
    an added token or a fallback first byte; banned tokens out."""
    tok = engine.tok
    ok = engine.starts.copy()
    if path and not (tok.is_added[path[-1]] or tok.is_fallback[path[-1]]):
        succ = engine.validity.successors(path[-1])
        ok &= succ | engine.space_first if tok.split else succ
    return (ok | tok.is_added | engine.fallback_first) & ~banned


def test_fallback_masks_against_every_character(engine: SentencePieceEngine) -> None:
    tok = engine.tok
    atoms = {ord(c) for c in tok.atom_id} | {0x2581}
    for partial in [b"\xc3", b"\xe2", b"\xe2\x96", b"\xe4", b"\xe4\xb8", b"\xf0", b"\xf0\x9f"]:
        nxt = {
            chr(p).encode()[len(partial)]
            for p in completion_points(partial).tolist()
            if p not in atoms
        }
        want = np.zeros(tok.size, dtype=bool)
        want[[int(tok.fallback_ids[b]) for b in nxt]] = True
        assert np.array_equal(engine._fallback_mask(partial), want), partial
    firsts = {b for b in range(0x80) if b not in atoms}
    firsts |= {
        lead
        for lead in range(0xC2, 0xF5)
        if any(p not in atoms for p in completion_points(bytes([lead])).tolist())
    }
    want = np.zeros(tok.size, dtype=bool)
    want[[int(tok.fallback_ids[b]) for b in firsts]] = True
    assert np.array_equal(engine.fallback_first, want)


def test_dead_tokens_against_one_regex(engine: SentencePieceEngine) -> None:
    tok = engine.tok
    want = np.zeros(tok.size, dtype=bool)
    if tok.split:
        want |= np.array([b is not None and b" " in b[1:] for b in tok.token_bytes])
    if tok.added_bytes:
        pattern = re.compile(b"|".join(re.escape(a) for a in tok.added_bytes))
        for i, b in enumerate(tok.token_bytes):
            if b is not None and not tok.is_added[i] and pattern.search(b):
                want[i] = True
    assert np.array_equal(tok._dead_tokens(), want)
    # gemma3: tokens with '\n' inside are dead; under split, those with a space inside
    assert want.any() == (tok.split or bool(tok.added_bytes))
