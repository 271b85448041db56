"""The Valid Covering Tree: soundness against a brute-force oracle, the edit property,
pinned exactness cases, and bad input (completeness against real encodings at scale:
test_completeness.py)."""

from __future__ import annotations

import random

import pytest
from midword.engine import VCT, PrefixError, build_tree, load_engine
from midword.engine.tree.vct import MAX_PREFIX_BYTES

from midword.testing import CORPUS, tokenizer_path
from midword.testing.fixtures import SENTENCEPIECE

from ..oracle import (
    brute_force_tree,
    canonical_prefixes,
    real_encoder,
    sample_ids,
    tree_sequences,
)

PINNED = [
    "Helmo", "I'", "12", "a b", "Eq", "x = 12045", "don't", " we'v", "中文", "中".encode()[:2]
]  # fmt: skip


def _bytes(p: str | bytes) -> bytes:
    return p if isinstance(p, bytes) else p.encode()


def _random_prefixes(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    data = "".join(CORPUS).encode()
    out = []
    while len(out) < n:
        i = rng.randrange(len(data))
        cut = data[i : i + rng.randrange(1, 7)]
        try:
            cut.decode("utf-8")
        except UnicodeDecodeError:
            if rng.random() < 0.5:
                continue
        if not 0x80 <= cut[0] < 0xC0:  # a prefix never starts inside a character
            out.append(cut)
    return out


@pytest.mark.parametrize("which", ["pinned", "random"])
def test_soundness_against_brute_force(tokenizer_name: str, which: str) -> None:
    path = tokenizer_path(tokenizer_name)
    eng, hf = load_engine(str(path)), real_encoder(path)
    rng = random.Random(11)
    prefixes = [_bytes(p) for p in PINNED] if which == "pinned" else _random_prefixes(4, 5)
    for prefix in prefixes:
        tree = build_tree(eng, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]]
        sample = sample_ids(eng.tok, 150, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        truth = brute_force_tree(hf, eng.tok, prefix, sample)
        # The oracle tries every completion of a character one or two bytes short, but
        # one per (category, next byte) of a bare 4-byte lead (262,144 completions): there
        # what it accepts must be accepted; the chain-rule test checks the rest.
        bare = {s for s in mine | truth if _bytes_short(eng.tok.decode(s)) == 3}
        assert mine - bare == truth - bare, (prefix, sorted((mine ^ truth) - bare)[:5])
        assert truth & bare <= mine, (prefix, sorted((truth & bare) - mine)[:5])


def _bytes_short(data: bytes) -> int:
    """How many bytes the last character of ``data`` misses (0: it is complete)."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if lead >= 0xC0:
            need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            return max(need - back, 0)
        if lead < 0x80:
            return 0
    return 0


@pytest.mark.parametrize("name", ["llama3", *SENTENCEPIECE])
def test_edit_property_matches_scratch(name: str) -> None:
    eng = load_engine(str(tokenizer_path(name)))
    rng = random.Random(2)
    source = CORPUS[0].encode() + CORPUS[4].encode()
    vct = VCT(eng)
    for _ in range(60):
        action = rng.random()
        if action < 0.6 and len(vct.prefix) < len(source):
            vct.push(source[len(vct.prefix)])
        elif action < 0.8 and vct.prefix:
            vct.truncate(len(vct.prefix) - 1)  # backspace
        else:
            vct.truncate(rng.randrange(len(vct.prefix) + 1))  # cursor jump back
        fresh = build_tree(eng, vct.prefix)
        assert vct.tree().to_json() == fresh.to_json()


def _leaf_paths(tree, tok) -> set[tuple[bytes, ...]]:
    out = set()
    for node in tree.nodes:
        for t in node.leaves[:5000]:
            out.add(tuple(tok.token_bytes[i] for i in (*tree.trunk, *node.path, int(t))))
    return out


def test_pinned_exactness_cases() -> None:
    ll3 = load_engine(str(tokenizer_path("llama3")))
    helmo = build_tree(ll3, b"Helmo")
    assert (b"Hel", b"mor") not in _leaf_paths(helmo, ll3.tok)  # "Helmor" is H|elm|or
    assert (b"Hel", b"more") in _leaf_paths(helmo, ll3.tok)  # "Helmore" is Hel|more
    eng = load_engine(str(tokenizer_path("gpt4o")))
    tok = eng.tok
    assert (b"Hel", b"mor") in _leaf_paths(build_tree(eng, b"Helmo"), tok)  # o200k: Hel|mor
    digits = build_tree(eng, b"12")
    assert (b"12", b"045") not in _leaf_paths(digits, tok)  # 12045 splits as 120|45
    # o200k keeps contractions in the word's pre-token: " we'v" may still become the one
    # token " we've", so " we" must not be settled into the trunk yet
    contraction = build_tree(eng, b" we'v")
    assert (b" we've",) in _leaf_paths(contraction, tok)
    assert build_tree(eng, b" we've").trunk == [tok.bytes_to_id[b" we've"]]
    apostrophe = build_tree(ll3, b"I'")
    paths = _leaf_paths(apostrophe, ll3.tok)
    assert (b"I", b"'", b"_cou") not in paths  # "'_" is one pre-token
    assert (b"I", b"'s") in paths


def test_end_children_after_punctuation_newlines() -> None:
    """o200k keeps newlines and slashes with punctuation (`=>\n\n//` is one pre-token):
    every end child starting with those bytes matches the real encoder, as a set."""
    path = tokenizer_path("gpt4o")
    eng, hf = load_engine(str(path)), real_encoder(path)
    tok = eng.tok
    tree = build_tree(eng, b"p((v) =>")
    node = next(n for n in tree.nodes if n.ends_at_prefix_end)
    sample = [i for i, b in enumerate(tok.token_bytes) if b and b[:1] in (b"\n", b"\r", b"/")]
    mine = {int(t) for t in node.leaves if int(t) in set(sample)}
    base = tuple(tree.trunk) + tuple(node.path)
    truth = canonical_prefixes(hf, tok, [base + (t,) for t in sample])
    assert mine == {s[-1] for s in truth}
    assert tok.bytes_to_id[b"\n\n//"] in mine


def test_ignore_merges_tokens_stay_at_splits() -> None:
    eng = load_engine(str(tokenizer_path("llama3")))
    tok = eng.tok
    unreachable = [i for i in range(tok.size) if tok.is_text[i] and not tok.reachable[i]]
    unreachable = [i for i in unreachable if i not in tok.added_text.values()]
    word = next(tok.token_bytes[i] for i in unreachable if len(tok.token_bytes[i]) > 3)
    tree = build_tree(eng, b"x = " + word[:2])
    leaves = {int(t) for n in tree.nodes for t in n.leaves}
    assert tok.bytes_to_id[word] in leaves


def test_prefix_inside_a_character() -> None:
    eng = load_engine(str(tokenizer_path("qwen3")))
    tree = build_tree(eng, "中".encode()[:2])
    firsts = {eng.tok.decode([*n.path, int(t)]) for n in tree.nodes for t in n.leaves}
    assert any(f.startswith("中".encode()) for f in firsts)
    assert all(f.startswith("中".encode()[:2]) for f in firsts)


def test_bad_input() -> None:
    eng = load_engine(str(tokenizer_path("gpt35turbo")))
    vct = VCT(eng)
    vct.push_bytes(b"ok \x00 ctrl")  # NUL and control characters are text
    with pytest.raises(PrefixError, match="not valid UTF-8"):
        vct.push_bytes(b"\xff")
    assert vct.prefix == b"ok \x00 ctrl"  # the bad byte was not taken
    with pytest.raises(PrefixError):
        build_tree(eng, "\ud800".encode("utf-8", "surrogatepass"))
    big = VCT(eng)
    big.buf.extend(b"a" * MAX_PREFIX_BYTES)
    with pytest.raises(PrefixError, match="window"):
        big.push(ord("a"))


def test_tail_cache_is_bounded_by_leaf_bytes() -> None:
    """The engine's cache of built tails drops its least recently used entries once their
    leaf arrays pass the byte budget (a large vocabulary's end nodes hold ~1 MB each), keeps
    at least the newest, and its doctest runs."""
    import doctest

    import numpy as np
    from midword.engine.tree import tail_cache
    from midword.engine.tree.tail import TailNode
    from midword.engine.tree.tail_cache import TailCache

    assert doctest.testmod(tail_cache, optionflags=doctest.ELLIPSIS).failed == 0

    def tail(n: int) -> tuple[tuple[int, ...], list[TailNode]]:
        return (), [TailNode((), True, np.arange(n, dtype=np.int64))]

    cache = TailCache(max_entries=10, max_bytes=8 * 100)
    for k in range(5):
        cache.put(bytes([k]), tail(30))  # 240 bytes each: three fit
    assert len(cache) == 3 and cache.nbytes == 720
    assert cache.get(b"\x00") is None and cache.get(b"\x02") is not None
    cache.put(b"big", tail(1000))  # over the budget alone: kept, everything else dropped
    assert len(cache) == 1 and cache.get(b"big") is not None
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
    small = TailCache(max_entries=2, max_bytes=1 << 20)
    for k in range(4):
        small.put(bytes([k]), tail(1))
    small.get(b"\x02")  # recently used: survives the next insert
    small.put(b"\x09", tail(1))
    assert small.get(b"\x02") is not None and small.get(b"\x03") is None


def test_pending_added_texts_looks_only_near_the_end() -> None:
    """`pending_added` skips the starts that lie further from the end than the longest
    added text (the unsettled text can be kilobytes long): the same offsets as trying
    every start, over long texts ending inside added texts, partial characters included."""
    from midword.engine.tree.tail import pending_added

    tok = load_engine(str(tokenizer_path("qwen3"))).tok
    added = sorted(tok.added_bytes, key=len)
    rng = random.Random(5)

    def every_start(text: str, partial: bytes) -> list[int]:
        tail = text.encode() + partial
        offsets = [len(text[:k].encode()) for k in range(len(text) + (1 if partial else 0))]
        return [
            k
            for k, off in enumerate(offsets)
            if any(len(a) > len(tail) - off and a.startswith(tail[off:]) for a in added)
        ]

    checked = 0
    for _ in range(300):
        body = "".join(
            rng.choice(["a", " ", "é", "<", "日", "\n"]) for _ in range(rng.randrange(0, 400))
        )
        a = rng.choice(added[-3:] if rng.random() < 0.5 else added)  # the longest often
        cut = a[: rng.randrange(1, len(a))].decode("utf-8", errors="ignore")
        text = body + cut
        partial = rng.choice([b"", "日".encode()[:1], "é".encode()[:1]])
        want = every_start(text, partial)
        assert pending_added(tok, text, partial) == want, (text[-30:], partial)
        checked += bool(want)
    assert checked > 50  # many texts end inside an added text that may still complete
