"""Verdicts without encoding (engine/tree/partial_leaves.py) equal the encoding ones: on
random texts cut at every byte (CJK, emoji, accented letters, Thai, Hangul, mixed with
code), every question a covering tree asks, and more at the ends of trees that end
inside a character, gets the same answer from :class:`PartialVerdicts` as from encoding
the text (every witness completion of a partial character) with every probe; a sample
of those inside a character the same answer as encoding every completion (no witnesses)
with every probe."""

from __future__ import annotations

import random

import numpy as np
import pytest
from midword.engine import VCT, Engine, load_engine
from midword.engine.tree.partial_leaves import Shape
from midword.engine.tree.tail import _TailBuilder
from midword.engine.tree.utf8 import PROBES, split_utf8

from midword.testing import tokenizer_path
from midword.testing.chars import all_completions

from ..oracle import _ends_inside_char

# every tokenizer: qwen3 (NFC, added text) and deepseek_v3 (added text) answer by encoding
# where NFC may rewrite the probed texts or added text may occur in them
FAST_TOKENIZERS = ["llama3", "gpt4o", "gptoss", "gpt35turbo", "qwen3", "deepseek_v3"]
POOLS: dict[str, str | list[str]] = {
    "code": "def f(x):\n    return x_1 + 'don't' # 42\t(y)[0].z ",
    "cjk": "".join(map(chr, range(0x4E00, 0x4E60))) + "，。「」",
    "emoji": "".join(map(chr, range(0x1F600, 0x1F640))) + "\u200d\ufe0f",
    "latin": "".join(map(chr, range(0xC0, 0x180))),
    "thai": "".join(map(chr, range(0xE01, 0xE3A))),
    "hangul": "".join(map(chr, range(0xAC00, 0xAC40))),
    # what NFC rewrites or merges: marks, conjoining jamo, compatibility ideographs
    "nfc": "\u0301\u0323\u0302\u0308\u0315\u1100\u1161\u11a8\uf900\uf9a0\ufa0e\u212b\u0e48\u09be\u094deaoA",
    # added text of qwen3 and deepseek_v3, and pieces of it (drawn whole)
    "added": ["<think>", "</think>", "<thi", "<｜User｜>", "<｜", "｜", "<"],
}


def _texts(seed: int, count: int, length: int) -> list[str]:
    """Random mixes of the pools, in runs (as a model writes them)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        chars: list[str] = []
        while len(chars) < length:
            pool = POOLS[rng.choice(sorted(POOLS))]
            chars.extend(rng.choice(pool) for _ in range(rng.randint(1, 4)))
        out.append("".join(chars[:length]))
    return out


TEXTS = _texts(seed=7, count=6, length=14)


@pytest.fixture(scope="module", params=FAST_TOKENIZERS)
def engine(request: pytest.FixtureRequest) -> Engine:
    eng = load_engine(str(tokenizer_path(request.param)))
    assert eng.canonical.partial_verdicts() is not None
    return eng


def _slow(engine: Engine, seq: tuple[int, ...], data: bytes) -> bool:
    engine.partial_fast = False
    try:
        return engine.canonical.encodes_with(seq, data)
    finally:
        engine.partial_fast = True


class _Both(_TailBuilder):
    """A tail builder that answers every question both ways and checks they agree."""

    asked: list[tuple[tuple[int, ...], bytes, bool]] = []

    def _extends_canonically(self, seq: tuple[int, ...], data: bytes) -> bool:
        fast = self.engine.canonical.encodes_with(seq, data)
        assert fast == _slow(self.engine, seq, data), (self.region, seq, data)
        _Both.asked.append((seq, data, fast))
        return fast


def _partial(data: bytes) -> bytes:
    """The partial character ``data`` ends with (empty if none, or if not UTF-8)."""
    try:
        return split_utf8(data)[1]
    except ValueError:
        return b""


def _regions(engine: Engine, text: str) -> list[bytes]:
    """The unsettled region after every byte of ``text``."""
    vct, out = VCT(engine), []
    for b in text.encode("utf-8"):
        vct.push(b)
        out.append(bytes(vct.buf[vct.settled :]))
    return out


def _end_questions(engine: Engine, region: bytes, rng: random.Random) -> list:
    """(seq, data) for tokens that go on with the open character after each path of the
    tree that ends at the region's end: its leaves, valid successors of the path's last
    token that are not leaves (the hard "no"s), others that leave a partial character,
    and a few more."""
    trunk, nodes = _Both(engine, region).run()
    lo, hi = engine.token_range(b"\x80")[0], engine.token_range(b"\xbf")[1]
    cands = engine.sorted_ids[lo:hi].tolist()
    out = []
    for node in nodes:
        path = trunk + node.path
        if not node.ends_at_prefix_end or not path:
            continue
        leaves = set(node.leaves.tolist())
        succ = engine.validity.successors(path[-1])
        others = [t for t in cands if t not in leaves]
        inside = [t for t in others if _partial(region + engine.tok.token_bytes[t])]
        hard = [t for t in others if succ[t]]
        picks = rng.sample(sorted(leaves), min(4, len(leaves))) + rng.sample(cands, 2)
        picks += rng.sample(inside, min(4, len(inside))) + rng.sample(hard, min(6, len(hard)))
        out += [((*path, t), region + engine.tok.token_bytes[t]) for t in picks]
    return out


@pytest.fixture(scope="module")
def asked(engine: Engine) -> list[tuple[tuple[int, ...], bytes, bool]]:
    """Every question the trees of the texts ask, and more at their ends, each checked
    both ways."""
    _Both.asked = []
    rng = random.Random(11)
    questions = []
    for text in TEXTS:
        for region in _regions(engine, text):
            if _partial(region):
                questions += _end_questions(engine, region, rng)
            else:  # data that ends on a character boundary: the straddlers' questions
                _Both(engine, region).run()
    for seq, data in questions:
        verdict = engine.canonical.encodes_with(seq, data)
        assert verdict == _slow(engine, seq, data), (seq, data)
        _Both.asked.append((seq, data, verdict))
    return list(_Both.asked)


def test_fast_verdicts_equal_encoding_witnesses(asked: list) -> None:
    inside = [v for _, data, v in asked if _partial(data)]
    assert inside.count(True) > 50 and inside.count(False) > 50  # both kinds were asked
    whole = [v for _, data, v in asked if not _partial(data)]
    assert whole.count(True) > 50 and whole.count(False) > 20


def _brute(engine: Engine, seq: tuple[int, ...], data: bytes) -> bool:
    text, partial = split_utf8(data)
    return any(
        tuple(engine.tok.encode(text + c + y)[: len(seq)]) == seq
        for c in all_completions(partial)
        for y in PROBES
    )


def test_fast_verdicts_equal_every_completion(engine: Engine, asked: list) -> None:
    """Against encoding every completion (one missing byte: at most 64 of them)."""
    small = [a for a in asked if _partial(a[1]) and len(_partial(a[1])) + 1 == _char_len(a[1])]
    rng = random.Random(3)
    picks = rng.sample([a for a in small if a[2]], min(40, sum(a[2] for a in small)))
    picks += [a for a in small if not a[2]][:40]
    assert picks
    for seq, data, verdict in picks:
        assert _brute(engine, seq, data) == verdict, (seq, data)


def _char_len(data: bytes) -> int:
    lead = _partial(data)[0]
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def test_whole_pre_tokens_are_left_out() -> None:
    """Under ignore_merges a pre-token that is itself a token comes out as that token,
    so a completion that makes one never ends a sequence inside it."""
    engine = load_engine(str(tokenizer_path("llama3")))
    fast = engine.canonical.partial_verdicts()
    word = next(w for w in engine.sorted_keys if w.startswith("的".encode()) and len(w) == 6)
    partial = word[3:5]  # the second CJK character, cut before its last byte
    info = engine.completions(partial)
    whole = info.index(word[5:])
    other = next(
        i
        for i in range(len(info))
        if word[:5] + info.rests[i].tobytes() not in engine.tok.bytes_to_id
    )
    shape = Shape((), 0, b"")
    data, offsets = word[:3], [0, 3]
    assert not fast._not_all_whole(info, np.array([whole]), data, offsets, shape)
    assert fast._not_all_whole(info, np.array([whole, other]), data, offsets, shape)


def _split_questions(engine: Engine, count: int) -> list[tuple[tuple[int, ...], bytes]]:
    """(BPE(w)[:k], its bytes) for tokens ``w`` that BPE does not make (ignore_merges
    emits them whole): the questions where a whole pre-token and its BPE differ."""
    tok, out = engine.tok, []
    for w, wid in sorted(tok.bytes_to_id.items()):
        if tok.reachable[wid] or _ends_inside_char(w):
            continue
        bpe = tok._bpe_cached(w)
        for k in range(1, len(bpe) + 1):
            out.append((bpe[:k], b"".join(tok.token_bytes[t] or b"" for t in bpe[:k])))
        if len(out) >= count:
            break
    return out


def test_whole_token_splits_equal_encoding() -> None:
    """Under ignore_merges: a pre-token that is a token but not its own BPE (llama3 has
    ~1,900 such questions; gptoss's tokens are all their own BPE). Its BPE split is kept
    only if the pre-token may go on into a probe with a valid pair at the seam: one of
    them, ``b" .**************\n"``, may not."""
    engine = load_engine(str(tokenizer_path("llama3")))
    verdicts = []
    for seq, data in _split_questions(engine, 1 << 20):
        verdicts.append(engine.canonical.encodes_with(seq, data))
        assert verdicts[-1] == _slow(engine, seq, data), (seq, data)
    assert verdicts.count(True) > 1000 and verdicts.count(False) >= 1


def test_encodes_word_is_encode_word() -> None:
    """The pre-token check without BPE equals the encoder's, on whole tokens, their BPE
    splits and words that are no token."""
    engine = load_engine(str(tokenizer_path("llama3")))
    fast, tok = engine.canonical.partial_verdicts(), engine.tok
    rng = random.Random(5)
    words = [w for w in rng.sample(engine.sorted_keys, 3000) if not _ends_inside_char(w)]
    words += [a + b for a, b in zip(words[:500], words[500:1000], strict=True)]
    for word in words:
        want = tok.encode_word(word)
        for toks in {want, tok._bpe_cached(word), tuple(tok.byte_ids[b] for b in word)}:
            assert fast._encodes_word(toks, word) == (toks == want), (word, toks)


@pytest.mark.parametrize("name", ["llama3", "gpt4o"])
def test_shapes_kept_by_class_equal_fresh_ones(name: str) -> None:
    """:meth:`PartialVerdicts.shapes` is kept by the classes of the text's characters and
    of the open one: a text of the same classes built from other characters gets exactly
    what splitting it afresh gives."""
    from midword.engine.tree.partial_leaves import PartialVerdicts

    engine = load_engine(str(tokenizer_path(name)))
    machine = engine.machine
    assert machine is not None
    texts = _texts(seed=13, count=40, length=30)
    pool: dict[int, list[str]] = {}
    for ch in set("".join(texts)):
        pool.setdefault(machine.char_class(ch), []).append(ch)
    rng = random.Random(17)
    kept, swapped = PartialVerdicts(engine), 0
    for _ in range(300):
        text = rng.choice(texts)
        piece = text[: rng.randrange(0, len(text))]
        rep = rng.choice(text)
        twin, twin_rep = (
            "".join(rng.choice(pool[machine.char_class(c)]) for c in s) for s in (piece, rep)
        )
        swapped += twin != piece
        kept.shapes(piece, rep)  # remembered by class
        assert kept.shapes(twin, twin_rep) == PartialVerdicts(engine).shapes(twin, twin_rep)
        other = rng.choice(
            [c for cls, chars in pool.items() if cls != machine.char_class(rep) for c in chars[:3]]
        )  # the open character counts too
        assert kept.shapes(twin, other) == PartialVerdicts(engine).shapes(twin, other)
    assert swapped > 100  # the twins really are other texts
