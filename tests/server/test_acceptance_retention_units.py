"""Following accepted text through edits (server/retention.py), without a transport: the
range against a brute-force model of the same rules on flat offsets, the named cases
(edits before, inside, after, overlapping deletions, undo), the checkpoints' entries
(retained, unknown when the document closed or the server stopped), and the timers."""

from __future__ import annotations

import asyncio
import random
from difflib import SequenceMatcher
from typing import Any

import pytest
from midword.server.acceptance import AcceptanceLog
from midword.server.document import Cursor, Document, Range
from midword.server.retention import (
    CHECKPOINTS_ENV,
    Retention,
    Span,
    Where,
    checkpoints_from_env,
    measure,
    narrowed,
    text_of,
)

URI = "file:///tmp/retained.py"


# ---------------------------------------------------------------------- helpers
def position(text: str, offset: int) -> tuple[int, int]:
    """(line, character) of a flat offset in ASCII text with \\n line breaks."""
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def offset_of(text: str, cursor: Cursor) -> int:
    lines = text.split("\n")
    return sum(len(line) + 1 for line in lines[: cursor.line]) + cursor.index


class Editor:
    """A document, the retention tracker on it, and the entries it logged."""

    def __init__(self, text: str, checkpoints: tuple[float, ...] = (1.0, 2.0)) -> None:
        self.text = text
        self.documents = {URI: Document(URI, text, 1, "python")}
        self.entries: list[dict[str, Any]] = []
        self.retention = Retention(self.entries.append, checkpoints)

    @property
    def doc(self) -> Document:
        return self.documents[URI]

    def replace(self, start: int, end: int, new: str) -> None:
        rng = Range(*position(self.text, start), *position(self.text, end))
        self.text = self.text[:start] + new + self.text[end:]
        self.doc.apply_change(rng, new, "utf-16")

    def accept(self, offset: int, inserted: str, item_id: str = "i-1") -> None:
        """The editor writes the item at ``offset``, then reports the acceptance."""
        self.replace(offset, offset, inserted)
        self.report(offset, inserted, item_id)

    def report(self, offset: int, inserted: str, item_id: str = "i-1") -> None:
        line, character = position(self.text, offset)
        tags = {"method": "bytesampler", "context": "boundary", "language": "python"}
        where = Where(URI, line, character)
        self.retention.accepted(item_id, tags, where, inserted, self.documents, "utf-16")

    def span(self, item_id: str = "i-1") -> tuple[int, int]:
        span = self.retention.followed[item_id].span
        return offset_of(self.text, span.start), offset_of(self.text, span.end)

    def now(self, item_id: str = "i-1") -> str:
        return text_of(self.doc, self.retention.followed[item_id].span)


# ---------------------------------------------------------------------- named cases
SUGGESTION = "max(a, b)"
BEFORE = "def f(a, b):\n    return "


def accepted() -> Editor:
    editor = Editor(BEFORE + "\n")
    editor.accept(len(BEFORE), SUGGESTION)
    assert editor.now() == SUGGESTION
    return editor


def test_an_edit_before_shifts_the_range() -> None:
    editor = accepted()
    editor.replace(0, 0, "import os\n\n")  # lines above
    editor.replace(len("import os\n\n") + 4, len("import os\n\n") + 4, "_g")  # same line, before
    assert editor.now() == SUGGESTION
    start, end = editor.span()
    assert editor.text[start:end] == SUGGESTION


def test_an_edit_inside_grows_or_shrinks_it() -> None:
    editor = accepted()
    start = len(BEFORE)
    editor.replace(start + 7, start + 8, "bb")  # b -> bb
    assert editor.now() == "max(a, bb)"
    editor.replace(start + 3, start + 4, "")  # delete "("
    assert editor.now() == "maxa, bb)"
    editor.replace(start + 3, start + 3, "(\n    ")  # a line break inside
    assert editor.now() == "max(\n    a, bb)"


def test_text_typed_at_either_end_or_after_stays_outside() -> None:
    editor = accepted()
    start = len(BEFORE)
    editor.replace(start + len(SUGGESTION), start + len(SUGGESTION), " + 1")  # at its end
    editor.replace(start, start, "-")  # at its start
    editor.replace(len(editor.text), len(editor.text), "\nprint(f(1, 2))\n")  # far after
    assert editor.now() == SUGGESTION
    assert editor.span() == (start + 1, start + 1 + len(SUGGESTION))


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        ((-4, 3), "(a, b)"),  # from before its start into it: deleted across the start
        ((6, 12), "max(a,"),  # from inside it past its end
        ((-4, 12), ""),  # all of it and more
        ((0, len(SUGGESTION)), ""),  # exactly it
    ],
)
def test_overlapping_deletions(cut: tuple[int, int], expected: str) -> None:
    editor = accepted()
    start = len(BEFORE)
    editor.replace(start + cut[0], min(len(editor.text), start + cut[1]), "")
    assert editor.now() == expected


def test_text_written_over_it_is_compared_with_it() -> None:
    """A replacement that overlaps the range joins it: what the user wrote instead."""
    editor = accepted()
    start = len(BEFORE)
    editor.replace(start + 4, start + len(SUGGESTION) + 1, "x, y) + 1")  # past its end
    assert editor.now() == "max(x, y) + 1"


def test_deleted_then_undone_counts_again() -> None:
    editor = accepted()
    start = len(BEFORE)
    editor.replace(start, start + len(SUGGESTION), "")  # undo of the acceptance
    assert editor.now() == ""
    editor.replace(start, start, SUGGESTION)  # redo
    assert editor.now() == SUGGESTION


@pytest.mark.parametrize("where", ["end", "start"])
def test_an_undo_at_either_end_rejoins(where: str) -> None:
    """Backspaces at its end (or delete keys at its start), then one undo writing the
    characters back: they are the suggestion's again, not text typed beside it."""
    editor = accepted()
    start, end = len(BEFORE), len(BEFORE) + len(SUGGESTION)
    for _ in range(3):
        if where == "end":
            end -= 1
            editor.replace(end, end + 1, "")
        else:
            editor.replace(start, start + 1, "")
    assert editor.now() == (SUGGESTION[:-3] if where == "end" else SUGGESTION[3:])
    back = SUGGESTION[-3:] if where == "end" else SUGGESTION[:3]
    editor.replace(end if where == "end" else start, end if where == "end" else start, back)
    assert editor.now() == SUGGESTION


def test_text_typed_after_a_deletion_is_no_undo() -> None:
    editor = accepted()
    end = len(BEFORE) + len(SUGGESTION)
    editor.replace(end - 1, end, "")  # ")" deleted
    editor.replace(0, 0, "#\n")  # another edit first
    end += 2 - 1
    editor.replace(end, end, ")")  # typed again: beside the range, not in it
    assert editor.now() == SUGGESTION[:-1]


def test_a_whole_document_change_is_narrowed() -> None:
    """Clients with full sync send the whole text: only the changed part moves the range."""
    editor = accepted()
    start = len(BEFORE) + len("# top\n")
    texts = ["# top\n" + editor.text]  # a line above
    texts.append(texts[-1][: start + 4] + "x" + texts[-1][start + 5 :])  # a -> x, inside
    texts.append(texts[-1] + "# end\n")  # a line below
    for version, text in enumerate(texts, start=3):
        editor.text = text
        editor.doc.replace_all(text, version)
    assert editor.now() == "max(x, b)"


def test_a_multi_line_item_with_crlf_line_ends() -> None:
    """The editor may write the item's line breaks as \\r\\n: they read as \\n."""
    doc = Document(URI, "def f():\r\n    \r\n", 1)
    doc.apply_change(Range(1, 4, 1, 4), "x = 1\r\n    return x", "utf-16")
    entries: list[dict[str, Any]] = []
    retention = Retention(entries.append, (1.0,))
    tags = {"method": "naive", "context": "boundary", "language": "python"}
    followed = retention.accepted(
        "c-1", tags, Where(URI, 1, 4), "x = 1\n    return x", {URI: doc}, "utf-16"
    )
    assert followed is not None and followed.span == Span(Cursor(1, 4), Cursor(2, 12))
    doc.apply_change(Range(0, 0, 0, 0), "\r\n", "utf-16")  # a line above
    doc.apply_change(Range(3, 11, 3, 12), "y", "utf-16")  # return x -> return y
    assert text_of(doc, followed.span) == "x = 1\n    return y"
    retention.check("c-1", 1.0)
    assert (entries[0]["inserted"], entries[0]["retained"]) == (18, 17)


def test_text_not_there_yet_is_filled_by_the_insertion() -> None:
    """A client that reports the acceptance before its edit: the range starts empty."""
    editor = Editor(BEFORE + "\n")
    editor.report(len(BEFORE), SUGGESTION)
    assert editor.now() == ""
    editor.replace(len(BEFORE), len(BEFORE), SUGGESTION)
    assert editor.now() == SUGGESTION


def test_a_partial_acceptance_then_the_rest() -> None:
    editor = Editor(BEFORE + "\n")
    start = len(BEFORE)
    editor.accept(start, "max(")
    assert editor.now() == "max("
    editor.replace(start + 4, start + 4, "a, b)")  # the rest, then the whole acceptance
    editor.report(start, SUGGESTION)
    assert editor.now() == SUGGESTION
    assert editor.retention.followed["i-1"].inserted == SUGGESTION


# ---------------------------------------------------------------------- random edits
def model_follow(span: tuple[int, int], a: int, b: int, text: str) -> tuple[int, int]:
    """The rules of `Span.follow` on flat offsets (the brute-force reference)."""
    s, e = span
    n, delta = len(text), len(text) - (b - a)
    if a == b and s == e == a:
        return s, s + n
    ns = s if s < a or (s == a and a != b) else a if s < b else s + delta
    ne = e if e <= a else a + n if e < b else e + delta
    return ns, max(ne, ns)


def model_narrow(old: str, a: int, new: str) -> tuple[int, int, str]:
    """Common start and end left out, one character at a time."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return a + head, a + len(old) - tail, new[head : len(new) - tail]


class ModelItem:
    """A followed range on flat offsets, with the undo rule of `Followed.follow`."""

    def __init__(self, span: tuple[int, int]) -> None:
        self.span = span
        self.undo: tuple[int, str] | None = None

    def edit(self, a: int, b: int, old: str, new: str) -> None:
        s, e = self.span
        if a == b and self.undo == (a, new):
            self.span, self.undo = (s, e + len(new)), None
            return
        inside = s <= a and b <= e
        self.span = model_follow(self.span, a, b, new)
        if not (inside and a != b and not new):
            self.undo = None
        elif self.undo is not None and self.undo[0] == b:
            self.undo = (a, old + self.undo[1])
        elif self.undo is not None and self.undo[0] == a:
            self.undo = (a, self.undo[1] + old)
        else:
            self.undo = (a, old)


@pytest.mark.parametrize("seed", range(8))
def test_random_edits_follow_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "ab \n("

    def chunk(most: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))

    editor = Editor(chunk(40) + "\n")
    at = rng.randint(0, len(editor.text))
    inserted = chunk(12) or "x"
    editor.accept(at, inserted)
    model = ModelItem((at, at + len(inserted)))
    undone = 0
    for _ in range(150):
        start = rng.randint(0, len(editor.text))
        end = min(len(editor.text), start + rng.choice([0, 0, 1, 2, 5, 15]))
        new = chunk(rng.choice([0, 1, 1, 3, 8]))
        if model.undo is not None and rng.random() < 0.3:  # an undo of the deletion
            (start, new), end = model.undo, model.undo[0]
            undone += 1
        old_text = editor.text
        a, b, text = model_narrow(old_text[start:end], start, new)
        if (a, b, text) != (b, b, ""):
            model.edit(a, b, old_text[a:b], text)
        editor.replace(start, end, new)
        assert editor.span() == model.span, (old_text, start, end, new)
        assert editor.now() == editor.text[model.span[0] : model.span[1]]
    assert undone  # the undo rule was exercised


def test_narrowed_keeps_crlf_pairs_whole() -> None:
    # "a\r\nb" -> "a\r\r\nb": the change is a \r inserted before the pair, not a \n after one
    a, b, text = narrowed("a\r\nb", Cursor(0, 0), "a\r\r\nb")
    assert (a, b, text) == (Cursor(0, 1), Cursor(0, 1), "\r")


# ---------------------------------------------------------------------- entries
def test_checkpoint_entries_hold_numbers_only() -> None:
    editor = accepted()
    start = len(BEFORE)
    editor.replace(start + 7, start + 9, "")  # "b)" deleted
    editor.retention.check("i-1", 1.0)
    [entry] = editor.entries
    assert entry["event"] == "retained" and entry["checkpoint"] == 1
    assert (entry["inserted"], entry["retained"]) == (9, 7)
    assert entry["similarity"] == pytest.approx(2 * 7 / (9 + 7), abs=1e-4)
    assert (entry["method"], entry["context"], entry["language"]) == (
        "bytesampler",
        "boundary",
        "python",
    )
    assert not any(SUGGESTION[:4] in str(value) for value in entry.values())
    editor.retention.check("i-1", 1.0)  # logged once
    assert len(editor.entries) == 1


def test_the_last_checkpoint_stops_following() -> None:
    editor = accepted()
    editor.retention.check("i-1", 1.0)
    assert editor.doc.observers
    editor.retention.check("i-1", 2.0)
    assert not editor.doc.observers and not editor.retention.followed


@pytest.mark.parametrize("reopen", [False, True])
def test_a_closed_document_is_unknown(reopen: bool) -> None:
    editor = accepted()
    del editor.documents[URI]
    if reopen:  # opened again: maybe other text, so still unknown
        editor.documents[URI] = Document(URI, editor.text, 5, "python")
    editor.retention.check("i-1", 1.0)
    [entry] = editor.entries
    assert entry["unknown"] == "closed" and "retained" not in entry


def test_stopping_logs_the_due_checkpoints_unknown() -> None:
    editor = accepted()
    editor.retention.check("i-1", 1.0)
    editor.retention.stop()
    assert [(e["checkpoint"], e.get("unknown")) for e in editor.entries] == [
        (1, None),
        (2, "shutdown"),
    ]
    assert not editor.doc.observers


def test_measure_is_difflib() -> None:
    inserted, now = "for i in range(n):", "for j in range(n + 1):"
    blocks = SequenceMatcher(None, inserted, now, autojunk=False).get_matching_blocks()
    kept = sum(b.size for b in blocks)
    assert measure(inserted, now) == (kept, round(2 * kept / (len(inserted) + len(now)), 4))
    assert measure("abc", "") == (0, 0.0)


def test_checkpoints_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert checkpoints_from_env({CHECKPOINTS_ENV: "2,0.5"}) == (0.5, 2.0)
    assert checkpoints_from_env({CHECKPOINTS_ENV: "soon"}) == (30.0, 120.0, 600.0)
    assert checkpoints_from_env({CHECKPOINTS_ENV: "-1"}) == (30.0, 120.0, 600.0)
    assert "not seconds" in caplog.text


def test_timers_log_on_the_event_loop() -> None:
    """With a running loop the checkpoints come by themselves, in order, and the loop is
    free meanwhile (an edit between them counts at the second)."""

    async def scenario() -> list[dict[str, Any]]:
        editor = Editor(BEFORE + "\n", checkpoints=(0.05, 0.2))
        editor.accept(len(BEFORE), SUGGESTION)
        await asyncio.sleep(0.12)
        editor.replace(len(BEFORE), len(BEFORE) + 4, "")  # "max(" deleted
        await asyncio.sleep(0.25)
        return editor.entries

    entries = asyncio.run(scenario())
    assert [(e["checkpoint"], e["retained"]) for e in entries] == [(0.05, 9), (0.2, 5)]


def test_the_acceptance_log_follows_its_items(tmp_path: Any) -> None:
    """AcceptanceLog: an accepted item it issued is followed; the file gets the entries."""
    log = AcceptanceLog(tmp_path / "a.jsonl", checkpoints=[1.0])
    documents = {URI: Document(URI, BEFORE + SUGGESTION + "\n", 2, "python")}
    line, character = position(BEFORE, len(BEFORE))
    tags = log.issue("bytesampler", "boundary", "python", SUGGESTION, URI, line, character)
    other = log.issue("bytesampler", "boundary", "python", "zzz")  # no position: not followed
    for item in (tags, other):
        log.follow(log.record("accepted", {"id": item["id"]}) or {}, documents, "utf-16")
    assert list(log.retention.followed) == [tags["id"]]
    partial = log.issue("naive", "inside_word", "python", SUGGESTION, URI, line, character)
    entry = log.record("partial", {"id": partial["id"], "acceptedLength": 4})
    log.follow(entry or {}, documents, "utf-16")
    assert log.retention.followed[partial["id"]].inserted == "max("
    log.enabled = lambda: False  # acceptanceLog turned off: checkpoints write nothing
    log.retention.check(partial["id"], 1.0)
    log.enabled = lambda: True
    log.close()  # the other checkpoint is due: unknown (shutdown)
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert sum('"retained"' in line for line in lines) == 1
    assert '"unknown":"shutdown"' in lines[-1] and tags["id"] in lines[-1]


def test_a_huge_range_is_measured_off_the_event_loop() -> None:
    """A paste of 100k characters into the range: difflib runs on a thread, the entry
    still comes, and the loop stays free meanwhile."""

    async def scenario() -> tuple[list[dict[str, Any]], int]:
        editor = Editor(BEFORE + "\n", checkpoints=(0.01,))
        editor.accept(len(BEFORE), SUGGESTION)
        editor.replace(len(BEFORE) + 4, len(BEFORE) + 4, "a, " * 35_000)
        ticks = 0
        while not editor.entries and ticks < 2000:
            await asyncio.sleep(0.005)
            ticks += 1
        return editor.entries, ticks

    entries, ticks = asyncio.run(scenario())
    [entry] = entries
    assert entry["retained"] == len(SUGGESTION) and entry["similarity"] < 0.01
    assert ticks > 2  # the loop ran while the thread compared
