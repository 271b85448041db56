"""What the first covering tree of a process used to compute, now read from disk or
computed cheaply (engine/tree/saved_words.py, engine/tree/completions.py):

- under ignore_merges (llama3, gptoss), the whole words of every head that starts many
  tokens (``b" "``: 58k-107k tokens) and the probe-ending positions: equal to a plain scan
  of the vocabulary, for every saved head chosen by a brute-force count of token prefixes;
- under NFC (qwen3), the characters NFC may merge into the one before: the block-skipping
  scan and the disk file equal a plain pass over every code point;
- the continuation-byte facts read from one run of the sorted vocabulary equal those read
  from every token.

A damaged, stale (other layout, threshold, Unicode version) or other tokenizer's file is
rebuilt, not trusted; trees built with the saved answers never compute a saved one again.
"""

from __future__ import annotations

import random
import shutil
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from midword.engine import build_tree, load_engine
from midword.engine.disk_arrays import load_arrays, save_arrays
from midword.engine.tree import completions
from midword.engine.tree import saved_words as sw
from midword.engine.tree.completions import ByteFacts
from midword.engine.tree.tables import Engine
from midword.engine.tree.utf8 import PROBE_ENDINGS

from midword.models import shipped_test_model
from midword.testing import tokenizer_path

from ..words_oracle import plain_whole_words

IGNORE_MERGES = ["llama3", "gptoss"]  # the 128k-200k vocabularies with ignore_merges
MIXED = (
    "x = 12045 # don't\n  we've \t\n\n I'll \u4e2d\u6587 d\u00fc\u015fman e\u0301 \U0001f600x 3.14"
)


@pytest.fixture(scope="module", params=IGNORE_MERGES)
def engine(request: pytest.FixtureRequest) -> Engine:
    got = load_engine(str(tokenizer_path(request.param)))
    assert got.tok.ignore_merges and got.saved_words is not None
    return got


def _range_size(engine: Engine, head: bytes) -> int:
    lo, hi = engine.token_range(head)
    return hi - lo


def _as_dict(words: sw.WholeWords) -> dict[int, set[bytes]]:
    assert len(words.ids) == len(set(words.ids.tolist())), "a token listed twice"
    return dict(zip(words.ids.tolist(), map(set, words.exts), strict=True))


def test_saved_heads_are_every_head_with_many_tokens(engine: Engine) -> None:
    """The saved heads are exactly the byte strings that SAVED_RANGE or more tokens start
    with (counted over every prefix of every token)."""
    starts = Counter(w[:n] for w in engine.sorted_keys for n in range(1, len(w) + 1))
    want = sorted(h for h, count in starts.items() if count >= sw.SAVED_RANGE)
    assert b" " in want and len(want) > 100
    assert sorted(engine.saved_words._where) == want  # type: ignore[union-attr]


def test_saved_whole_words_equal_a_plain_scan(engine: Engine) -> None:
    """The answers read from disk equal a scan of the whole vocabulary: the heads that
    start the most tokens (b" " first) and a random sample of the others."""
    saved = engine.saved_words
    assert saved is not None
    heads = sorted(saved._where, key=lambda h: -_range_size(engine, h))
    rng = random.Random(0)
    picked = heads[:4] + rng.sample(heads[4:], 12)
    for head in picked:
        got = saved.get(head)
        assert got is not None
        assert _as_dict(got) == plain_whole_words(engine, head), head
        assert _as_dict(engine.scan_whole_words(head)) == _as_dict(got), head
    engine.clear_caches()
    assert _as_dict(engine.whole_words(b" ")) == plain_whole_words(engine, b" ")


def test_saved_ending_positions_equal_a_fresh_computation(engine: Engine) -> None:
    saved = engine.saved_words
    assert saved is not None
    assert np.array_equal(saved.ends_at, engine.ending_positions())
    assert engine._ends_at is not None and engine._ends_at[0] is saved.ends_at
    keys, endings = engine.sorted_keys, sorted(set(PROBE_ENDINGS) - {b""})
    lo, hi = engine.token_range(b" ")
    want = [(e, [i for i in range(lo, hi) if keys[i].endswith(e)]) for e in endings]
    assert engine._ending_runs(lo, hi) == [(e, w) for e, w in want if w]


def test_trees_read_the_saved_answers(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every engine cache cleared (a fresh process's state), trees over code and
    mixed text compute no saved head's whole words and no ending positions."""
    scan = engine.scan_whole_words
    asked: list[bytes] = []

    def scan_small(head: bytes) -> sw.WholeWords:
        assert _range_size(engine, head) < sw.SAVED_RANGE, f"computed the saved head {head!r}"
        asked.append(head)
        return scan(head)

    def no_positions() -> np.ndarray:
        raise AssertionError("ending positions computed")

    engine.clear_caches()
    monkeypatch.setattr(engine, "scan_whole_words", scan_small)
    monkeypatch.setattr(engine, "ending_positions", no_positions)
    text = (Path(__file__).read_text()[:1500] + MIXED).encode()
    for cut in range(20, len(text), 23):
        while 0x80 <= text[cut] < 0xC0:
            cut -= 1
        build_tree(engine, text[max(0, cut - 120) : cut])
    saved_asks = engine.whole_words.cache_info().misses - len(asked)
    assert saved_asks > 0 and asked  # both kinds of head were met


# ------------------------------------------------------------ the words file
@pytest.fixture
def words_file(engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The engine's words file, copied into an empty cache folder now in use."""
    source = engine.cache_file("words")
    assert source is not None and source.is_file()
    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path))
    path = engine.cache_file("words")
    assert path is not None and path.parent == tmp_path
    shutil.copy(source, path)
    return path


def _stale_copies(saved: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Files of another layout, threshold or vocabulary, and inconsistent ones."""
    cut = dict(saved, ids=saved["ids"][:-1])
    out_of_range = dict(saved, ids=saved["ids"] + np.int32(1 << 24))
    no_bits = dict(saved, ext_bits=np.zeros_like(saved["ext_bits"]))
    unsorted = dict(saved, ends_at=saved["ends_at"][::-1].copy())
    short_heads = dict(saved, heads=saved["heads"][:-1])
    missing = {k: v for k, v in saved.items() if k != "ends_at"}
    return {
        "version": dict(saved, version=np.array("0")),
        "threshold": dict(saved, min_range=np.array(sw.SAVED_RANGE + 1)),
        "vocab": dict(saved, vocab=saved["vocab"] + 1),
        "endings": dict(saved, endings=saved["endings"][:-1]),
        "cut ids": cut,
        "ids out of range": out_of_range,
        "no endings": no_bits,
        "unsorted positions": unsorted,
        "short heads": short_heads,
        "missing key": missing,
    }


def test_a_stale_or_inconsistent_words_file_is_rebuilt(engine: Engine, words_file: Path) -> None:
    saved = load_arrays(words_file)
    assert saved is not None and sw.load_words(words_file, engine) is not None
    for why, arrays in _stale_copies(saved).items():
        save_arrays(words_file, arrays)
        assert sw.load_words(words_file, engine) is None, why
    rebuilt = sw.saved_words_for(engine)  # (the last one: a key missing)
    assert np.array_equal(rebuilt.ids, saved["ids"])
    again = sw.load_words(words_file, engine)  # the rebuilt file was saved
    assert again is not None
    assert all(np.array_equal(again[k], saved[k]) for k in saved)


def test_a_damaged_words_file_is_rebuilt(engine: Engine, words_file: Path) -> None:
    data = words_file.read_bytes()
    middle = len(data) // 2  # inside the answers' ids
    for why, damaged in {
        "garbage": b"PK\x03\x04" + bytes(200),
        "empty": b"",
        "flipped byte": data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :],
        "torn": data[:middle],
    }.items():
        words_file.write_bytes(damaged)
        assert sw.load_words(words_file, engine) is None, why
    rebuilt = sw.saved_words_for(engine)
    assert engine.saved_words is not None
    assert rebuilt._where == engine.saved_words._where
    assert sw.load_words(words_file, engine) is not None


def test_another_tokenizers_words_file_is_rebuilt(engine: Engine, words_file: Path) -> None:
    """Files are named by the tokenizer's content hash; one of another vocabulary put in
    its place anyway is refused."""
    other = load_engine(str(shipped_test_model()))
    other_path = other.cache_file("words")
    assert other_path is not None and other_path.name != words_file.name
    save_arrays(words_file, sw.build_words(other, min_range=4))
    assert sw.load_words(words_file, engine) is None


# ------------------------------------------------------------------ NFC scan
def _plain_nfc_composing() -> frozenset[str]:
    """Every code point's decomposition, one by one (the scan before the block skip)."""
    out = {chr(c) for c in range(0x1161, 0x1176)} | {chr(c) for c in range(0x11A8, 0x11C3)}
    for cp in range(0x110000):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            parts = d.split()
            if len(parts) == 2:
                out.add(chr(int(parts[1], 16)))
    return frozenset(out)


def test_nfc_composing_equals_a_plain_pass_over_unicode() -> None:
    plain = _plain_nfc_composing()
    assert "\u0301" in plain and "\u3099" in plain  # combining acute, kana voiced mark
    assert completions.scan_nfc_composing() == plain
    assert completions.nfc_composing() == plain  # (from disk, or scanned and saved)


@pytest.fixture
def nfc_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path))
    completions.nfc_composing.cache_clear()
    yield completions.nfc_cache_file()
    completions.nfc_composing.cache_clear()  # the next reader goes back to the real cache


def test_nfc_composing_is_saved_per_unicode_version(nfc_file: Path) -> None:
    assert unicodedata.unidata_version in nfc_file.name
    want = completions.scan_nfc_composing()
    assert not nfc_file.exists()
    assert completions.nfc_composing() == want
    assert completions.load_nfc_composing(nfc_file) == want  # saved on first use
    saved = load_arrays(nfc_file)
    assert saved is not None
    stale = {
        "other unicode": dict(saved, unicode=np.array("1.1.0")),
        "other layout": dict(saved, version=np.array("0")),
        "unsorted": dict(saved, points=saved["points"][::-1].copy()),
        "no jamo": dict(saved, points=saved["points"][saved["points"] > 0x11C3]),
        "surrogate": dict(saved, points=np.sort(np.append(saved["points"], 0xD900))),
        "floats": dict(saved, points=saved["points"].astype(float)),
    }
    for why, arrays in stale.items():
        save_arrays(nfc_file, arrays)
        assert completions.load_nfc_composing(nfc_file) is None, why


def test_a_damaged_nfc_file_is_rebuilt(nfc_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = completions.scan_nfc_composing()
    completions.save_nfc_composing(nfc_file, want)
    data = nfc_file.read_bytes()
    for damaged in (data[: len(data) // 2], b"not a zip file", b""):
        nfc_file.write_bytes(damaged)
        completions.nfc_composing.cache_clear()
        assert completions.nfc_composing() == want
        assert completions.load_nfc_composing(nfc_file) == want  # rewritten
    # a good file is read, not scanned again
    completions.nfc_composing.cache_clear()
    monkeypatch.setattr(completions, "scan_nfc_composing", lambda: pytest.fail("scanned"))
    assert completions.nfc_composing() == want


# ------------------------------------------------------------------ byte facts
@pytest.mark.parametrize("name", ["llama3", "qwen3", "gptoss"])
def test_byte_facts_from_the_continuation_run_equal_a_full_pass(name: str) -> None:
    engine = load_engine(str(tokenizer_path(name)))
    engine.completions(b"\xe4")  # the engine reads its facts from the sorted run
    full = ByteFacts.of(engine.tok)
    assert engine._facts is not None
    assert np.array_equal(engine._facts.starts, full.starts) and full.starts.any()
    assert engine._facts.bridges == full.bridges
