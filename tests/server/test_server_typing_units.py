"""Units of issue 25 §1, §2, §5 without a transport: the debounce's delay estimator
(server/debounce.py), the record of a completion typed through (server/reuse.py) and
the block of other files' snippets (server/context_files.py)."""

from __future__ import annotations

import random

import pytest
from midword.server.context_files import ContextFiles, comment_prefix
from midword.server.debounce import (
    MAX_MS,
    MIN_MS,
    PAUSE_S,
    DocumentTyping,
    TypingSpeed,
    fixed_delay_s,
)
from midword.server.document import Cursor, Document, Range
from midword.server.reuse import MAX_TYPED, TypedThrough


# ---------------------------------------------------------------------------- debounce
def _typed(intervals: list[float]) -> TypingSpeed:
    typing, now = TypingSpeed(), 0.0
    typing.keystroke(now)
    for interval in intervals:
        now += interval
        typing.keystroke(now)
    return typing


def test_the_delay_follows_steady_typing_speed() -> None:
    for interval in (0.06, 0.12, 0.2, 0.3):
        delay = _typed([interval] * 60).delay_s()
        expected = min(MAX_MS, max(MIN_MS, 2 * interval * 1000)) / 1000
        assert delay == pytest.approx(expected, rel=1e-3), interval


def test_the_delay_is_clamped_to_100_1000_ms() -> None:
    assert _typed([0.001] * 60).delay_s() == pytest.approx(MIN_MS / 1000)
    assert _typed([0.9] * 60).delay_s() == pytest.approx(MAX_MS / 1000)


def test_faster_typing_never_waits_longer() -> None:
    rng = random.Random(5)
    for _ in range(50):
        base = [rng.uniform(0.02, 0.8) for _ in range(20)]
        faster = [x * rng.uniform(0.3, 1.0) for x in base]
        assert _typed(faster).delay_s() <= _typed(base).delay_s() + 1e-12


def test_pauses_are_not_typing_speed() -> None:
    steady = _typed([0.1] * 30)
    paused = _typed([0.1] * 15 + [PAUSE_S + 5] + [0.1] * 14)
    assert paused.delay_s() == pytest.approx(steady.delay_s(), rel=0.02)


def test_the_wait_counts_from_the_latest_keystroke() -> None:
    typing = _typed([0.1] * 30)  # latest keystroke at 3.0 s
    delay = typing.delay_s()
    assert typing.wait_s(3.0, "auto") == pytest.approx(delay)
    assert typing.wait_s(3.0 + delay / 2, "auto") == pytest.approx(delay / 2)
    assert typing.wait_s(3.0 + 2 * delay, "auto") == 0.0
    assert typing.wait_s(3.05, 300) == pytest.approx(0.25)  # fixed milliseconds
    assert typing.wait_s(3.0, 0) == 0.0  # off
    assert TypingSpeed().wait_s(1.0, "auto") == 0.0  # no typing seen: nothing to wait for
    assert fixed_delay_s(250, typing) == 0.25 and fixed_delay_s("auto", typing) == delay


def test_each_document_waits_for_its_own_pause() -> None:
    typing = DocumentTyping()
    for step in range(20):  # typing in a.py, 80 ms a key, until 1.52 s
        typing.keystroke("a.py", step * 0.08)
    own = typing.wait_s("a.py", 1.52, "auto")
    assert own > 0.0
    for step in range(100):  # then a tool edits b.py every 10 ms
        typing.keystroke("b.py", 1.52 + step * 0.01)
    assert typing.wait_s("a.py", 1.52, "auto") == pytest.approx(own)  # unchanged by b.py
    assert typing.wait_s("a.py", 2.6, "auto") == 0.0  # a.py paused long ago
    assert typing.wait_s("c.py", 2.6, "auto") == 0.0  # never typed in
    # the user's speed carries over to a document typed in for the first time
    typing.keystroke("c.py", 3.0)
    assert typing.wait_s("c.py", 3.0, "auto") == pytest.approx(typing.wait_s("b.py", 2.51, "auto"))
    typing.forget("a.py")  # closed
    assert typing.wait_s("a.py", 1.52, "auto") == 0.0


# ---------------------------------------------------------------------------- reuse
def _type(through: TypedThrough, doc: Document, text: str) -> None:
    """Type ``text`` at the document's last edit, one character per change (as an editor
    does), telling ``through`` about each edit as the controller does."""
    for ch in text:
        at = doc.last_edit
        assert at is not None
        doc.apply_change(Range(at.line, at.index, at.line, at.index), ch, "utf-32")
        assert doc.last_edit is not None
        through.edited("u", doc.edits, at, ch, doc.last_edit)


def _shown_at_end(text: str, completion: str) -> tuple[TypedThrough, Document]:
    doc = Document("u", "", 1)
    doc.apply_change(Range(0, 0, 0, 0), text, "utf-32")
    through = TypedThrough()
    assert doc.last_edit is not None
    through.shown("u", doc.edits, doc.last_edit, completion)
    return through, doc


def test_typing_the_head_gives_the_rest_and_anything_else_forgets() -> None:
    completion = "ser()\n    args = parser"
    for typed in range(1, len(completion)):
        through, doc = _shown_at_end("p = ArgumentPar", completion)
        assert through.rest("u", doc.edits, doc.last_edit) is None  # nothing typed yet
        _type(through, doc, completion[:typed])
        assert doc.last_edit is not None
        assert through.rest("u", doc.edits, doc.last_edit) == completion[typed:]
        assert through.rest("u", doc.edits, Cursor(0, 0)) is None  # another cursor
        _type(through, doc, "#")  # not what the completion goes on with
        assert through.rest("u", doc.edits, doc.last_edit) is None
        _type(through, doc, completion[typed:][:1])
        assert through.rest("u", doc.edits, doc.last_edit) is None  # forgotten for good


def test_a_replacement_or_an_edit_elsewhere_forgets() -> None:
    through, doc = _shown_at_end("x = foo", "bar(1)")
    _type(through, doc, "b")
    doc.apply_change(Range(0, 0, 0, 1), "y", "utf-32")  # a replacement, elsewhere
    through.edited("u", doc.edits, None, "y", Cursor(0, 1))
    assert through.rest("u", doc.edits, Cursor(0, 8)) is None


def test_reuse_stops_after_max_typed_characters() -> None:
    completion = "a" * (MAX_TYPED + 10)
    through, doc = _shown_at_end("x = ", completion)
    _type(through, doc, completion[:MAX_TYPED])
    assert doc.last_edit is not None
    assert through.rest("u", doc.edits, doc.last_edit) == completion[MAX_TYPED:]
    _type(through, doc, "a")
    assert through.rest("u", doc.edits, doc.last_edit) is None


# ---------------------------------------------------------------------------- context files
def _open(docs: dict[str, Document], ctx: ContextFiles, uri: str, text: str, lang: str) -> None:
    docs[uri] = Document(uri, text, 1, lang)
    ctx.touched(uri)


def _block(ctx: ContextFiles, docs: dict[str, Document], uri: str, budget: int = 1024) -> str:
    doc = docs[uri]
    cursor = Cursor(len(doc.lines) - 1, len(doc.body(len(doc.lines) - 1)))
    doc.prefix_window(cursor, 4096)  # sets the window start, as the controller does first
    return ctx.block(doc, docs, budget).decode()


def test_the_block_quotes_other_files_of_the_same_language_as_comments() -> None:
    docs: dict[str, Document] = {}
    ctx = ContextFiles()
    _open(
        docs, ctx, "file:///w/lib/shapes.py", "def rescale(points):\n    return points\n", "python"
    )
    _open(docs, ctx, "file:///w/app.ts", "function rescaleTs() {}\n", "typescript")
    _open(docs, ctx, "file:///w/main.py", "import shapes\n", "python")
    block = _block(ctx, docs, "file:///w/main.py")
    assert block == "# Path: lib/shapes.py\n# def rescale(points):\n#     return points\n"
    assert "rescaleTs" not in block
    assert _block(ctx, docs, "file:///w/app.ts") == ""  # no other TypeScript file
    assert comment_prefix("typescript") == "//"


def test_the_block_keeps_its_budget_and_prefers_recent_files() -> None:
    docs: dict[str, Document] = {}
    ctx = ContextFiles()
    for n in range(6):
        lines = "".join(f"value_{n}_{i} = {i}\n" for i in range(200))
        _open(docs, ctx, f"file:///w/m{n}.py", lines, "python")
    _open(docs, ctx, "file:///w/main.py", "x = 1\n", "python")
    for budget in (0, 100, 300, 1024, 5000):
        block = _block(ctx, docs, "file:///w/main.py", budget)
        assert len(block.encode()) <= budget
        quoted = [n for n in range(6) if f"m{n}.py" in block]
        assert quoted == list(range(6 - len(quoted), 6))  # the most recently opened
        if budget >= 1024:
            assert quoted == [2, 3, 4, 5]  # the four most recent


def test_the_block_stays_while_typing_in_one_place_and_follows_other_files() -> None:
    docs: dict[str, Document] = {}
    ctx = ContextFiles()
    _open(docs, ctx, "file:///w/a.py", "def alpha():\n    pass\n", "python")
    _open(docs, ctx, "file:///w/main.py", "x = ", "python")
    first = _block(ctx, docs, "file:///w/main.py")
    main = docs["file:///w/main.py"]
    for ch in "alp":  # typing in main.py
        main.apply_change(Range(0, len(main.body(0)), 0, len(main.body(0))), ch, "utf-16")
        ctx.touched(main.uri)
        assert _block(ctx, docs, main.uri) == first
    other = docs["file:///w/a.py"]
    other.apply_change(Range(1, 4, 1, 8), "return 2", "utf-16")  # an edit in a.py
    ctx.touched(other.uri)
    assert "return 2" in _block(ctx, docs, main.uri)
    del docs[other.uri]
    ctx.closed(other.uri)
    assert _block(ctx, docs, main.uri) == ""
