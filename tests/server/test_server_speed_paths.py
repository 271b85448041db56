"""The per-keystroke fast paths of the server and the engine calls behind it give what the
plain computations give (tests/server/test_server_equivalence.py checks the whole server)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.model.forward_plan import _common_prefix_len, _list_lcp
from midword.engine.sample.generate import Completer, Settings, _choose, _LazyRng, _pick
from midword.engine.sample.transform import Transform
from midword.server.controller import Controller
from midword.server.document import GROW_LIMIT, Cursor, Document, Range, _cut_long_line
from midword.server.scope import indent_unit

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 40


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(ROOT / "models" / "default"))


@pytest.fixture(scope="module")
def fake(engine):
    return FakeModel(engine.tok.size, seed=3, scale=1.0)


def _edited(trunk: list[int], rng: random.Random) -> list[int]:
    """A next trunk as typing makes them: grown, cut back, changed near the end or anywhere."""
    action = rng.choice(["grow", "grow", "cut", "end", "anywhere", "same", "empty"])
    if action == "grow":
        return trunk + [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 5))]
    if action == "cut":
        return trunk[: rng.randrange(len(trunk) + 1)]
    if action == "same":
        return list(trunk)
    if action == "empty":
        return []
    at = rng.randrange(len(trunk) + 1) if action == "anywhere" else max(0, len(trunk) - 3)
    return trunk[:at] + [rng.randrange(VOCAB) for _ in range(rng.randrange(0, 4))]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("bos", [None, 0])
def test_incremental_context_equals_the_full_conversion(seed: int, bos: int | None) -> None:
    rng = random.Random(seed)
    session = FakeModel(VOCAB, seed=seed).session(bos_id=bos)
    fresh = FakeModel(VOCAB, seed=seed)
    trunk = [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 150))]
    for _ in range(60):
        trunk = _edited(trunk, rng) or ([] if bos is not None else [1])
        ctx, lcp = session._context(list(trunk))
        full = np.asarray(([] if bos is None else [bos]) + trunk, dtype=np.int64)
        assert ctx.dtype == np.int64 and ctx.tolist() == full.tolist()
        assert lcp == _common_prefix_len(session._ctx, full)
        paths = [(), (rng.randrange(VOCAB),)] if len(full) else [(rng.randrange(VOCAB),)]
        got = session.logprobs(np.asarray(trunk, dtype=np.int64), paths)
        want = fresh.session(bos_id=bos).logprobs(trunk, paths)
        np.testing.assert_array_equal(got, want)


def test_a_trunk_the_caller_changes_afterwards_is_not_the_cached_one() -> None:
    session = FakeModel(VOCAB).session(bos_id=0)
    context = [3, 4, 5]
    session.logprobs(context, [()])
    context.append(6)  # plain decoding appends the token it drew
    got = session.logprobs(context, [()])
    np.testing.assert_array_equal(got[0], FakeModel(VOCAB).next_logprobs([0, 3, 4, 5, 6]))


def test_bad_ids_after_the_shared_prefix_are_still_refused() -> None:
    session = FakeModel(VOCAB).session(bos_id=0)
    session.logprobs([1, 2, 3], [()])
    with pytest.raises(ValueError, match="out of range"):
        session.logprobs([1, 2, VOCAB], [()])
    with pytest.raises(ValueError, match="flat sequence"):
        session.logprobs([1, 2, 3.5], [()])


@pytest.mark.parametrize("seed", range(20))
def test_list_lcp_equals_the_array_one(seed: int) -> None:
    rng = random.Random(seed)
    a = [rng.randrange(3) for _ in range(rng.randrange(0, 200))]
    b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(0, 90))]
    want = _common_prefix_len(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    assert _list_lcp(a, b) == want == _list_lcp(b, a)


@pytest.mark.parametrize("seed", range(8))
def test_choose_is_pick_of_the_transformed_row(seed: int) -> None:
    rng = np.random.default_rng(seed)
    row = np.log(rng.dirichlet(np.ones(50)))
    row[rng.integers(0, 50, 10)] = -np.inf
    row[7] = row[30] = row.max()  # a tie: both take the first
    for transform in [Transform(0.0), Transform(0.7), Transform(1.0, top_k=5, top_p=0.9)]:
        want = _pick(transform.apply(row), transform.is_greedy, np.random.default_rng(seed))
        assert _choose(row, transform, np.random.default_rng(seed)) == want


def test_lazy_rng_draws_what_the_generator_draws() -> None:
    lazy, eager = _LazyRng(11), np.random.default_rng(11)
    assert [lazy.random() for _ in range(5)] == [eager.random() for _ in range(5)]


def test_kept_leaf_set_is_the_fresh_one(engine, fake) -> None:
    completer = Completer(fake, engine)
    prefixes = [b"def f(x", b"def f(x):\n    ret", b"def f(x", b"import o", b"import o"]
    for prefix in prefixes:
        for transform in [Transform(), Transform(0.8), Transform()]:
            completer.sampler.reset(prefix)
            got = completer.leaf_set(transform)
            fresh = Completer(fake, engine)
            fresh.sampler.reset(prefix)
            want = fresh.sampler.leaf_set(transform)
            for field in ("node", "token", "weights"):
                np.testing.assert_array_equal(getattr(got, field), getattr(want, field))


PIECES = ["a", "  ", "\t", "\n", "\n    ", "\n  ", "x = 1\n", "中", "\n\n", "def f():\n    "]


def _random_change(doc: Document, rng: random.Random) -> Cursor:
    """A random edit (mostly typing at the last edit), like the server's didChange."""
    line = rng.randrange(len(doc.lines)) if rng.random() < 0.3 or not doc.last_edit else None
    if line is None:
        line, index = doc.last_edit.line, doc.last_edit.index
    else:
        index = rng.randrange(len(doc.body(line)) + 1)
    end = (line, index) if rng.random() < 0.8 else (min(len(doc.lines) - 1, line + 1), 0)
    end_index = min(end[1], len(doc.body(end[0])))
    doc.apply_change(Range(line, index, end[0], end_index), rng.choice(PIECES), "utf-32")
    return doc.last_edit


def _reference_window(doc: Document, cursor: Cursor, window_bytes: int) -> bytes:
    """The prompt window as first written: the span summed line by line."""
    start = doc.window_line
    lines = doc.lines
    span = sum(len(x.encode()) for x in lines[start : cursor.line]) if start is not None else 0
    span += len(doc.line_prefix(cursor).encode())
    if start is None or start > cursor.line or span > GROW_LIMIT * window_bytes:
        start = doc._fit_start(cursor, window_bytes)
        doc.window_line = start
    head = doc.line_prefix(cursor)
    if start == cursor.line and len(head.encode()) > window_bytes:
        return _cut_long_line(head, window_bytes).encode()
    return ("".join(lines[start : cursor.line]) + head).encode()


@pytest.mark.parametrize("seed", range(10))
def test_kept_window_is_the_computed_one(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice(PIECES) for _ in range(80))
    kept, plain = Document("untitled:1", text, 1), Document("untitled:1", text, 1)
    before = Cursor(0, 0)
    for _ in range(150):
        rng_state = rng.getstate()
        cursor = _random_change(kept, rng)
        rng.setstate(rng_state)
        assert _random_change(plain, rng) == cursor
        size = rng.choice([64, 64, 200, 16])
        if before.line >= len(kept.lines) or before.index > len(kept.body(before.line)):
            before = Cursor(0, 0)
        # the cursor asked before this edit: the same question, other text
        for asked in [before, cursor, cursor, Cursor(rng.randrange(len(kept.lines)), 0), cursor]:
            window = kept.prefix_window(asked, size)
            assert window == _reference_window(plain, asked, size)
            assert kept.window_line == plain.window_line
        before = cursor


@pytest.mark.parametrize("seed", range(10))
def test_kept_indent_tallies_give_the_indent_unit(seed: int) -> None:
    rng = random.Random(seed)
    controller = Controller()
    try:
        text = "".join(rng.choice(PIECES) for _ in range(300))
        controller.open("untitled:1", text, 1)
        doc = controller.documents["untitled:1"]
        for _ in range(200):
            cursor = _random_change(doc, rng)
            if rng.random() < 0.2:
                cursor = Cursor(rng.randrange(len(doc.lines)), 0)
            first = max(0, cursor.line - 200)
            want = indent_unit([doc.body(i) for i in range(first, cursor.line + 1)])
            assert controller._indent_unit(doc, cursor) == want
    finally:
        controller.shutdown()


def test_item_settings_follow_the_options() -> None:
    controller = Controller()
    try:
        for raw, items in [({}, 1), ({}, 3), ({"temperature": 0.3}, 3), ({}, 1)]:
            if raw:
                controller.options = replace(controller.options, **raw)
            first = controller._item_settings(items)
            assert first == controller._make_settings(items)
            assert controller._item_settings(items) is first  # kept while nothing changed
    finally:
        controller.shutdown()


def test_settings_transform_is_made_once_and_follows_replace() -> None:
    settings = Settings(temperature=0.5, top_k=3)
    assert settings.transform is settings.transform
    assert settings.transform == Transform(0.5, 3, 1.0)
    warm = replace(settings, temperature=0.9, top_p=0.8)
    assert warm.transform == Transform(0.9, 3, 0.8)
    assert settings == Settings(temperature=0.5, top_k=3)  # the kept one is no field
