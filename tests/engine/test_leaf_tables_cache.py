"""The leaf tables' per-state runs (:class:`~midword.engine.tree.leaf_tables.LeafTables`):
computed for every state the class machine can be in when the tables are built, cached
on disk with them, so no covering tree pays a pass over the vocabulary.

Checked here: every cached run equals a fresh vectorized walk and, on sampled class
sequences, the scalar machine; the bit-set masks equal the probe-by-probe rule for every
state and for chains of states; a state the cache lacks is walked on demand to the same
masks; a damaged, inconsistent or other-version cache file is rebuilt, not trusted, and
the rebuilt tables give what the first build gave.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from midword.engine import build_tree, load_engine, load_tokenizer
from midword.engine.disk_arrays import save_arrays
from midword.engine.tokenize.class_machine import ClassMachine
from midword.engine.tree.leaf_cache import VCT_CACHE_VERSION, load_checked
from midword.engine.tree.leaf_tables import LeafTables, scan_configs
from midword.engine.tree.tables import engine_for
from midword.engine.tree.utf8 import PROBE_ENDINGS, split_lenient

from midword.models import shipped_test_model
from midword.testing import tokenizer_path

# the 128k-200k vocabularies whose cold trees this cache is for (gpt4o: 54 states)
TOKENIZERS = ["llama3", "qwen3", "gpt4o"]
# digits, contractions, whitespace runs, CJK, accents, emoji: chains of two and three states
MIXED = (
    "x = 12045 # don't\n  we've \t\n\n I'll \u4e2d\u6587 d\u00fc\u015fman e\u0301 \U0001f600x 3.14"
)


@pytest.fixture(scope="module", params=TOKENIZERS)
def tables(request: pytest.FixtureRequest) -> LeafTables:
    got = load_engine(str(tokenizer_path(request.param))).tables
    assert got is not None, f"{request.param}: the class machine models its pre-tokenizer"
    return got


def _cached_states(tables: LeafTables) -> list[int]:
    return tables._local_states[: len(tables.runs_rec)]


def _scalar_walk(machine: ClassMachine, state: int, classes: list[int]) -> tuple[int, int]:
    """(last position inside ``classes`` where the attempt ends, -1 if none; the state
    after them), one step at a time."""
    rec = -1
    for i, c in enumerate(classes):
        matched, state = machine.step(state, c)
        rec = i if matched else rec
    return rec, state


def test_every_reachable_state_is_cached(tables: LeafTables) -> None:
    tables._dense(ClassMachine.INIT)
    assert set(_cached_states(tables)) == tables._dense_seen
    assert len(tables._dense_seen) > 10  # the real machines have a few dozen states


def test_cached_runs_equal_fresh_walks(tables: LeafTables) -> None:
    """Per cached state, the runs read from disk equal a walk computed now, over every
    class sequence of the vocabulary."""
    states = np.array(tables._local_states)
    for k, state in enumerate(_cached_states(tables)):
        rec, fin = tables._walk(state)
        assert np.array_equal(rec, tables.runs_rec[k]), state
        assert np.array_equal(states[fin], states[tables.runs_fin[k]]), state
    cached = _cached_states(tables)  # and where each probe ends the attempt, per state
    assert np.array_equal(tables._probe_ends(cached), tables._ends_known[: len(cached)])


def test_cached_runs_equal_the_scalar_machine(tables: LeafTables) -> None:
    rng = random.Random(5)
    seqs = rng.sample(range(len(tables.seq_len)), 150)
    seqs += list(range(20))  # the longest sequences
    for k, state in enumerate(_cached_states(tables)):
        for q in seqs:
            classes = [int(tables.seq_cols[i][q]) for i in range(int(tables.seq_len[q]))]
            rec, after = _scalar_walk(tables.machine, state, classes)
            assert int(tables.runs_rec[k, q]) == rec, (state, q)
            assert tables._local_states[int(tables.runs_fin[k, q])] == after, (state, q)


def test_rows_spell_their_tokens(tables: LeafTables) -> None:
    """Row t is token t's first row; a token without text has a row that never leaves;
    a row's classes are its token's characters' (then the completing character's)."""
    size, tok = tables.tok.size, tables.tok
    assert np.array_equal(tables.row_tok[:size], np.arange(size))
    assert tables.row_partial[size:].all()  # later rows: other completions of a partial
    rng = random.Random(7)
    for t in rng.sample(range(size), 300):
        b = tok.token_bytes[t]
        text, partial = split_lenient(b) if b is not None else ("", b"")
        if b is None or 0x80 <= b[0] < 0xC0 or not (text or partial):
            assert not tables.fresh_bits[t] and not tables.bbits[:, t].any(), t
        elif not partial:
            assert tables.row_classes(t) == tables.machine.classes(text), t
        else:
            assert tables.row_classes(t)[:-1] == tables.machine.classes(text), t


def test_token_masks_take_every_row_of_a_token(tables: LeafTables) -> None:
    rng = np.random.default_rng(3)
    for density in (0.001, 0.3, 0.9):
        rows = rng.random(len(tables.row_tok)) < density
        want = np.zeros(tables.tok.size, dtype=bool)
        for r in np.flatnonzero(rows).tolist():
            want[tables.row_tok[r]] = True
        assert np.array_equal(tables._tok_mask(rows), want), density


def _chains(tables: LeafTables, seed: int) -> list[tuple[int, ...]]:
    """Every state alone, the chains the prefixes of some code and mixed text leave,
    and random chains."""
    rng = random.Random(seed)
    live = [s for s in _cached_states(tables) if s != ClassMachine.DEAD]
    text = Path(__file__).read_text()[:1500] + MIXED
    classes = tables.machine.classes(text)
    seen = (scan_configs(tables.machine, classes[:k]) for k in range(1, len(classes)))
    real = sorted({tuple(c.state for c in got) for got in seen if got and len(got) > 1})
    pairs = [tuple(rng.sample(live, 2)) for _ in range(8)]
    triples = [tuple(rng.sample(live, 3)) for _ in range(4)]
    return [(s,) for s in live] + real + pairs + triples


def _assert_masks_equal(got: list, want: list, chain: tuple[int, ...]) -> None:
    assert len(got) == len(want) == len(chain)
    for n, ((a, b), (a_ref, b_ref)) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(a, a_ref), (chain, n, "A")
        assert np.array_equal(b, b_ref), (chain, n, "B")


def test_masks_equal_the_probe_by_probe_rule(tables: LeafTables) -> None:
    """Bit-set masks from the cached runs equal the rule applied probe by probe (every
    state alone, and chains where later configurations see only the probes left open)."""
    tables.clear_caches()
    some = 0
    for chain in _chains(tables, seed=1):
        got = tables.masks(chain)
        _assert_masks_equal(got, tables.masks_uncached(chain), chain)
        some += sum(int(a.sum() + b.sum()) for a, b in got[1:])
    assert some > 0  # later configurations do get tokens: the chains test something


def test_a_state_the_cache_lacks_is_walked_to_the_same_masks(
    tables: LeafTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regions with a character of a class no token has may lead the machine to a state
    the cache lacks: that state is walked on demand, kept until ``clear_caches``."""
    chains = _chains(tables, seed=2)[-8:]
    want = {chain: tables.masks_uncached(chain) for chain in chains}
    tables.clear_caches()
    monkeypatch.setattr(tables, "_run_row", {})  # as if no state were cached
    for chain in chains:
        _assert_masks_equal(tables.masks(chain), want[chain], chain)
    assert set(tables._extra_runs) == {s for chain in chains for s in chain}
    tables.clear_caches()
    assert not tables._extra_runs


def test_trees_never_walk_the_vocabulary(
    tables: LeafTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the chain caches cleared, trees over code and mixed text read the cached
    runs only: no pass over the vocabulary."""

    def walk(state: int) -> None:
        raise AssertionError(f"walked from state {state}")

    engine = tables.engine
    engine.clear_caches()  # type: ignore[attr-defined]
    monkeypatch.setattr(tables, "_walk", walk)
    text = (Path(__file__).read_text()[:600] + MIXED).encode()
    for cut in range(20, len(text), 37):
        while 0x80 <= text[cut] < 0xC0:
            cut -= 1
        build_tree(engine, text[max(0, cut - 120) : cut])  # type: ignore[arg-type]
    assert tables._masks  # the tables were used


# ------------------------------------------------------------------ disk cache
@pytest.fixture
def small_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, LeafTables]:
    """The leaf cache of the shipped test tokenizer (4k tokens) built into a fresh folder,
    and the tables that built it."""
    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path))
    engine = engine_for(load_tokenizer(str(shipped_test_model() / "tokenizer.json")))
    assert engine.tables is not None
    path = engine.cache_file("leaf")
    assert path is not None and path.is_file() and VCT_CACHE_VERSION in path.name
    return path, engine.tables


def _reload(path: Path) -> LeafTables:
    engine = engine_for(load_tokenizer(str(shipped_test_model() / "tokenizer.json")))
    assert engine.tables is not None and engine.cache_file("leaf") == path
    return engine.tables


def _by_pcs(tables: LeafTables) -> dict[tuple[int, ...], int]:
    return {tables.machine.state_pcs[s]: s for s in _cached_states(tables)}


def _assert_same_tables(got: LeafTables, want: LeafTables) -> None:
    """Same rows, bits and runs, and the same masks for every state (matched by thread
    list: two processes may number the machine's states differently)."""
    for name in ("row_tok", "row_seq", "fresh_bits", "bbits", "runs_rec", "needs_exact"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    got_ids, want_ids = _by_pcs(got), _by_pcs(want)
    assert got_ids.keys() == want_ids.keys()
    for pcs, s in want_ids.items():
        chain = (s,)
        _assert_masks_equal(got.masks((got_ids[pcs],)), want.masks_uncached(chain), chain)


def test_a_cached_load_gives_the_built_tables(small_cache: tuple[Path, LeafTables]) -> None:
    path, built = small_cache
    assert load_checked(path) is not None
    _assert_same_tables(_reload(path), built)


def test_a_damaged_cache_file_is_rebuilt(small_cache: tuple[Path, LeafTables]) -> None:
    path, built = small_cache
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: the zip's CRC no longer matches
    path.write_bytes(bytes(data))
    assert load_checked(path) is None
    reloaded = _reload(path)
    assert load_checked(path) is not None  # rewritten whole
    _assert_same_tables(reloaded, built)


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "other version",
        "missing key",
        "state row lost",
        "state out of range",
        "other probes",
    ],
)
def test_an_inconsistent_cache_file_is_not_trusted(
    small_cache: tuple[Path, LeafTables], damage: str
) -> None:
    path, built = small_cache
    saved = load_checked(path)
    assert saved is not None
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    else:
        if damage == "other version":
            saved["version"] = np.array(str(int(VCT_CACHE_VERSION) - 1))
        elif damage == "missing key":
            del saved["bbits"]
        elif damage == "other probes":
            saved["probes"] = saved["probes"][:-1]
        elif damage == "state row lost":
            saved["runs_rec"] = saved["runs_rec"][:, :-1]
        else:
            saved["runs_fin"] = saved["runs_fin"] + len(saved["state_pcs_len"])
        save_arrays(path, saved)
    assert load_checked(path) is None
    _assert_same_tables(_reload(path), built)


def test_ending_runs_equal_a_scan_of_the_vocabulary(tables: LeafTables) -> None:
    """`Engine._ending_runs` (found with array operations on the first tree of a
    session) lists, per probe ending, exactly the tokens in the range that end with it."""
    engine = tables.engine
    keys = engine.sorted_keys  # type: ignore[attr-defined]
    endings = sorted(set(PROBE_ENDINGS) - {b""})
    for lo, hi in [(0, len(keys)), engine.token_range(b"re"), engine.token_range(b" s")]:
        want = [(e, [i for i in range(lo, hi) if keys[i].endswith(e)]) for e in endings]
        assert engine._ending_runs(lo, hi) == [(e, w) for e, w in want if w]  # type: ignore[attr-defined]
