"""The covering tree's fast paths give what the plain computations give (issue 3, byte
mode): leaf-table verdicts over a straddler's few candidates equal the whole-vocabulary
verdicts cut to them; the whole-vocabulary verdicts equal a plain transcription of the
rule (every whole-word token checked one by one); the kept answers of
``Engine.extends_canonically`` equal fresh ones; trees built with warm engine caches equal
trees built with them cleared."""

from __future__ import annotations

import random

import numpy as np
import pytest
from midword.engine import VCT, Engine, load_engine
from midword.engine.tree.leaf_tables import Config, LeafTables
from midword.engine.tree.tail import _Node, _TailBuilder

from midword.testing import tokenizer_path

from ..words_oracle import plain_whole_words

# qwen3 (NFC: tokens left to encoding at every node) is slow here, so it gets short texts
TABLE_TOKENIZERS = ["llama3", "gpt4o", "deepseek_v3", "qwen3"]
SHORT = {"qwen3": 5}  # bytes of each text
_LIMIT: dict[int, int] = {}  # per engine (by id): bytes of each text it is given
# code, Thai and CJK cut inside characters, digit runs, contractions, whitespace runs,
# and the random model's kind of text (letters glued to partial characters)
TEXTS = [
    "x = 12045 # don't\n  ",
    "_heads\u0e32\u0e02\u6570 d\u00fc\u015fman",
    "\u4e2d\u6587 we've \t\n\n I'll \U0001f600x",
    "\u1100\u1161 e\u0301",  # qwen3 (NFC): tokens left to encoding among the candidates
]


@pytest.fixture(scope="module", params=TABLE_TOKENIZERS)
def engine(request: pytest.FixtureRequest) -> Engine:
    eng = load_engine(str(tokenizer_path(request.param)))
    if eng.tables is None:
        pytest.skip(f"{request.param}: no leaf tables")
    _LIMIT[id(eng)] = SHORT.get(request.param, 1 << 20)
    return eng


def _reference_verdicts(
    builder: _TailBuilder, tables: LeafTables, node: _Node, configs: list[Config], k: int
) -> np.ndarray:
    """The whole-vocabulary verdicts as the rule states them: every token that would make
    a whole token with the open pre-token's head is judged by ``continues``."""
    if configs[0].start == k:
        return tables.fresh_tok.copy()
    verdict = np.zeros(builder.tok.size, dtype=bool)
    succ = builder.engine.validity.successors(node.last) if node.last is not None else None
    chain = tuple(c.state for c in configs)
    for n, ((splits, s, _, _), (a_tok, b_tok)) in enumerate(
        zip(configs, tables.masks(chain), strict=True)
    ):
        allow_a, allow_b = builder._allow(node, splits, s)
        if allow_a:
            verdict |= a_tok
        if allow_b and succ is not None:
            bad = builder._whole_open(builder.region[builder.byte_offs[s] : node.pos])
            bad_ids = bad.ids.tolist()
            plain = b_tok & succ
            plain[bad_ids] = False
            verdict |= plain
            for t, exts in zip(bad_ids, bad.exts, strict=True):
                if succ[t] and tables.continues(chain, n, t, exts):
                    verdict[t] = True
    return verdict


class _Checking(_TailBuilder):
    """A tail builder that checks every leaf-table call against the plain computations."""

    calls = 0

    def _table_leaves(self, node: _Node, cands: np.ndarray | None) -> np.ndarray | None:
        got = super()._table_leaves(node, cands)
        if cands is not None:
            full = super()._table_leaves(node, None)
            assert (got is None) == (full is None)
            if got is not None:
                want = np.sort(cands[np.isin(cands, full)])
                assert got.tolist() == want.tolist(), (self.region, node.path)
        _Checking.calls += got is not None
        return got

    def _config_verdicts(
        self,
        tables: LeafTables,
        node: _Node,
        configs: list[Config],
        k: int,
        cands: np.ndarray | None,
    ) -> np.ndarray:
        got = super()._config_verdicts(tables, node, configs, k, cands)
        if cands is None:
            want = _reference_verdicts(self, tables, node, configs, k)
            assert np.array_equal(got, want), (self.region, node.path)
        return got


def _data(engine: Engine, text: str) -> bytes:
    return text.encode("utf-8")[: _LIMIT[id(engine)]]


def _regions(engine: Engine, text: str) -> list[bytes]:
    """The unsettled region after every byte of ``text`` (what each tree is built from)."""
    vct, out = VCT(engine), []
    for b in _data(engine, text):
        vct.push(b)
        out.append(bytes(vct.buf[vct.settled :]))
    return out


@pytest.mark.parametrize("text", TEXTS)
def test_leaf_tables_on_candidates_equal_the_whole_vocabulary(engine: Engine, text: str) -> None:
    _Checking.calls = 0
    for region in _regions(engine, text):
        _Checking(engine, region).run()
    assert _Checking.calls > 0  # the tables were used


def test_whole_word_drops_follow_the_rule(engine: Engine, monkeypatch) -> None:  # noqa: ANN001
    """``continues`` is almost always true on real text; a stricter one (still implying
    the B mask, as the real one does) makes the drop path run, and the checking builder
    compares its verdicts with the reference's."""
    if not engine.tok.ignore_merges:
        pytest.skip("without ignore_merges there are no whole words: continues is never asked")
    real, real_reference = engine.tables.continues, _reference_verdicts
    dropped: list[int] = []
    compared: list[int] = []

    def stricter(chain, n, t, exts) -> bool:  # noqa: ANN001
        verdict = real(chain, n, t, exts)
        if verdict and t % 3 == 0:
            dropped.append(t)
            return False
        return verdict

    def reference(*args):  # noqa: ANN002, ANN202
        compared.append(1)
        return real_reference(*args)

    monkeypatch.setattr(engine.tables, "continues", stricter)
    monkeypatch.setitem(globals(), "_reference_verdicts", reference)
    for text in TEXTS[:2]:
        for region in _regions(engine, text):
            _Checking(engine, region).run()
    assert dropped, "the stricter rule never dropped a whole word: the drop path did not run"
    assert compared, "no verdicts were compared with the reference"


def test_remembered_continues_verdicts_equal_fresh_ones(engine: Engine, monkeypatch) -> None:  # noqa: ANN001
    """The ``continues`` memo, small enough to be cleared many times, holds the verdicts
    of the uncached rule (and the checking builder compares every whole-vocabulary call)."""
    from midword.engine.tree import leaf_tables

    if not engine.tok.ignore_merges:
        pytest.skip("without ignore_merges there are no whole words: continues is never asked")
    monkeypatch.setattr(leaf_tables, "CONTINUES_MEMO_SIZE", 8)
    tables = engine.tables
    tables.clear_caches()
    seen = 0
    for text in TEXTS[:2]:
        for region in _regions(engine, text):
            _Checking(engine, region).run()
            assert len(tables.continued) <= 8
            for key, verdict in tables.continued.items():
                assert verdict == tables.continues_uncached(*key)
            seen += len(tables.continued)
    assert seen  # the walk asked


def _walk_trees(engine: Engine, text: str, clear: bool) -> list[tuple]:
    vct, out = VCT(engine), []
    for b in _data(engine, text):
        vct.push(b)
        engine.tail_cache.clear()
        if clear:
            engine.canonical.clear()
        tree = vct.tree()
        nodes = [(n.path, n.ends_at_prefix_end, n.leaves.tolist()) for n in tree.nodes]
        out.append((tree.trunk, tree.rest, tree.complete, nodes))
    return out


def test_kept_answers_equal_fresh_ones(engine: Engine) -> None:
    text = TEXTS[1]
    warm = _walk_trees(engine, text, clear=False)
    assert engine.canonical.memo  # the walk asked (mid-character end children)
    kept = list(engine.canonical.memo.items())
    for (seq, data), answer in kept[:: max(1, len(kept) // 300)]:  # a few hundred, spread
        assert engine.canonical.encodes_with(seq, data) == answer, (seq, data)
    assert _walk_trees(engine, text, clear=True) == warm


def test_whole_words_equal_a_plain_scan(engine: Engine) -> None:
    rng = random.Random(0)
    words = [w for w in rng.sample(engine.sorted_keys, 150) if len(w) > 1]
    heads = [b"in", b"\xe0", b"12", b"__", *(w[: rng.randrange(2, len(w) + 1)] for w in words)]
    engine.clear_caches()  # every head's whole words computed afresh
    for head in heads:
        got = engine.whole_words(head)
        assert dict(zip(got.ids.tolist(), map(set, got.exts), strict=True)) == (
            plain_whole_words(engine, head)
        ), head


@pytest.mark.parametrize(
    "name", ["llama3", "qwen3", "deepseek_v3", "gptoss", "gpt4o", "gpt35turbo"]
)
def test_probes_of_one_class_split_every_text_alike(name: str) -> None:
    """`Engine.split_probes` keeps one probe per class sequence: every probe it drops
    splits random texts (code, prose, CJK, digits, contractions, whitespace, cut at random
    characters) exactly as the probe kept for its class does."""
    from midword.engine.tree.utf8 import PROBES

    from midword.testing import CORPUS

    engine = load_engine(str(tokenizer_path(name)))
    if engine.machine is None:
        pytest.skip(f"{name}: no class machine, every probe is kept")
    kept = {tuple(engine.machine.classes(y)): y for y in reversed(PROBES)}
    assert len(engine.split_probes) == len(kept) < len(PROBES)
    spans = engine.tok.pretokenizer.spans
    rng = random.Random(5)
    texts = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in CORPUS]
    for _ in range(400):
        text = rng.choice(texts)
        start = rng.randrange(len(text))
        piece = text[start : start + rng.randrange(1, 40)]
        for y in PROBES:
            rep = kept[tuple(engine.machine.classes(y))]
            assert rep in engine.split_probes
            assert spans(piece + y) == spans(piece + rep), (piece, y, rep)


@pytest.mark.parametrize("name", ["llama3", "qwen3", "deepseek_v3", "gpt4o"])
def test_hypotheses_kept_by_shape_equal_fresh_ones(name: str) -> None:
    """`_TailBuilder._probe_hyps` keeps its answer by the region's shape (each character's
    class and byte length): a region of the same shape built from other characters gets
    exactly what computing it afresh gives."""
    from midword.testing import CORPUS

    engine = load_engine(str(tokenizer_path(name)))
    machine = engine.machine
    if machine is None:
        pytest.skip(f"{name}: no class machine, nothing is kept")
    texts = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in CORPUS]
    pool: dict[tuple[int, int], list[str]] = {}
    for ch in set("".join(texts)):
        pool.setdefault((machine.char_class(ch), len(ch.encode())), []).append(ch)
    rng = random.Random(11)
    swapped = 0
    for _ in range(300):
        text = rng.choice(texts)
        start = rng.randrange(len(text))
        piece = text[start : start + rng.randrange(1, 24)]
        twin = "".join(rng.choice(pool[(machine.char_class(c), len(c.encode()))]) for c in piece)
        swapped += twin != piece
        cut = rng.choice([0, 0, 1, 2])  # also regions that end inside a character
        first, second = (t.encode()[: len(t.encode()) - cut or None] for t in (piece, twin))
        _TailBuilder(engine, first)._probe_hyps()  # remembered by shape
        kept = _TailBuilder(engine, second)._probe_hyps()
        engine.clear_caches()
        assert kept == _TailBuilder(engine, second)._probe_hyps(), (piece, twin, cut)
    assert swapped > 100  # the twins really are other texts


def test_leaf_table_runs_equal_the_scalar_machine(engine: Engine) -> None:
    """`LeafTables.run` (rows grouped by the state their text leaves, each probe run once
    per state) gives, for sampled rows and every probe, where the scalar class machine
    ends the attempt over the row's classes then the probe's."""
    from midword.engine.tokenize.class_machine import ClassMachine

    tables = engine.tables
    assert tables is not None
    rng = random.Random(3)
    # the states the region's text can leave: every state the machine reaches
    tables._dense(ClassMachine.INIT)
    states = sorted(s for s in tables._dense_seen if s != ClassMachine.DEAD)
    rows = rng.sample(range(len(tables.row_tok)), 200)
    rows += np.flatnonzero(tables.row_partial)[:20].tolist()  # rows ending inside a character
    for state in rng.sample(states, min(6, len(states))):
        got = tables.run(state)
        for row in rows:
            classes = tables.row_classes(row)
            for y, probe in enumerate(tables.probe_cls):
                want = tables._scalar_end(state, classes + list(probe))
                assert got[y][row] == want, (state, row, y)


def test_tokens_after_a_partial_character_keep_the_valid_ones(engine: Engine) -> None:
    """`Engine.continuing` drops only tokens that make invalid UTF-8 after the partial
    character, and keeps each token that starts with a continuation byte and makes valid
    UTF-8 (so far): it may keep a few invalid ones (overlong forms), which the exact check
    after it rejects."""
    from midword.engine.errors import PrefixError
    from midword.engine.tree.utf8 import split_utf8

    starting = [
        i for i, b in enumerate(engine.tok.token_bytes) if b is not None and 0x80 <= b[0] < 0xC0
    ]
    for partial in [b"\xc3", b"\xe4", b"\xe4\xb8", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98"]:
        valid = set()
        for t in starting:
            try:
                split_utf8(b"a" + partial + engine.tok.token_bytes[t])
            except PrefixError:
                continue
            valid.add(t)
        got = engine.continuing(partial).tolist()
        assert len(got) == len(set(got)) and valid <= set(got), partial
        assert len(got) < len(starting), partial  # it does drop some
