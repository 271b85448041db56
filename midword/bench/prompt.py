"""Prompt choices, measured (issue 38): what the model sees before the user's text.

Each study scores a few ways of building the prompt (its *arms*) at the same random
cuts, so the arms can be compared cut by cut:

* ``--study context``: the block of the user's other open files that the server puts
  first (server/context_files.py). The cut file is opened as the server would hold it
  (server/document.py: its prompt window, ``--window-bytes``), and beside it up to
  ``--related`` files of its folder, as if open in the editor, never edited: first the
  ones it imports, then the other files of the folder by name. The block is chosen by
  the server's own `ContextFiles` (budget ``--context-bytes``), in one of its `STYLES`
  (arms ``comment``, the server's, ``compare``, ``code``), or left out (arm ``none``).
* ``--study window``: where the window starts, at cuts more than ``--window-bytes``
  bytes into a file. ``line``: the server's window (the earliest line start that fits);
  ``byte``: the last ``--window-bytes`` bytes, cut mid-line; ``blank``: from the first
  line in the server's window that follows a blank line; ``def``: from the first
  top-level ``def``/``class`` (or its decorator) in it. The last two fall back to
  ``line`` where the window has no such line.

A cut is a random character position, uniform over the files' characters as in
``bench charlm``. Each arm scores what follows its prompt with ByteSampler's exact
next-byte distribution: the bits of the next ``--chars`` characters of the file (from
the exact prefix probabilities before and after them), and, as ``bench charlm`` has
them, the first character's bits and whether greedy bytes predict it. Tables: bits per
character over the ``--chars`` characters, the first character's bits and accuracy,
± one standard error over cuts, and each arm minus the first (the server's today), cut
by cut. ``--threads`` also sets llama.cpp's threads (default 1).

>>> before = "x = 1\\n\\ndef f():\\n    pass\\n"
>>> [window_start(arm, before, 20) for arm in ("line", "def")]
['\\ndef f():\\n    pass\\n', 'def f():\\n    pass\\n']
>>> window_start("byte", before, 14)
'f():\\n    pass\\n'
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import math
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from midword.bench import common, data
from midword.cli import CommandError

DEFAULT_OUT = "bench-results/prompt"
DEFAULT_LIMIT = 40
STUDIES: dict[str, tuple[str, ...]] = {
    "context": ("comment", "none", "compare", "code"),
    "window": ("line", "byte", "blank", "def"),
}
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go",
             ".rs": "rust", ".c": "c", ".h": "c", ".java": "java", ".lua": "lua"}  # fmt: skip
LN2 = math.log(2)
_DEF = re.compile(r"(?:@|def\s|async\s+def\s|class\s)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_common_arguments(parser, DEFAULT_OUT, DEFAULT_LIMIT, "cuts")
    data.add_text_arguments(parser)
    parser.add_argument("--study", choices=tuple(STUDIES), default="context",
                        help="what is varied: the other files' block (context, default) "
                        "or where the window starts (window)")  # fmt: skip
    parser.add_argument("--arms", help="comma-separated arms, the first the baseline "
                        "(default: all; context: " + ",".join(STUDIES["context"])
                        + "; window: " + ",".join(STUDIES["window"]) + ")")  # fmt: skip
    parser.add_argument("--chars", type=int, default=32,
                        help="characters scored after each cut (default 32)")  # fmt: skip
    parser.add_argument("--window-bytes", type=int, default=4096,
                        help="the prompt window (default 4096, the server's windowBytes)")  # fmt: skip
    parser.add_argument("--context-bytes", type=int, default=1024,
                        help="the other files' budget (default 1024, the server's contextBytes)")  # fmt: skip
    parser.add_argument("--related", type=int, default=2,
                        help="other open files per cut (context study; default 2)")  # fmt: skip


def arms_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The arms asked for, checked against the study's.

    >>> arms_of(argparse.Namespace(study="window", arms="byte,line"))
    ('byte', 'line')
    """
    known = STUDIES[args.study]
    if not args.arms:
        return known
    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    wrong = [a for a in arms if a not in known]
    if wrong or not arms:
        raise CommandError(f"--arms: {', '.join(wrong) or 'none given'}; "
                           f"the {args.study} study has {', '.join(known)}")  # fmt: skip
    return arms


# ---------------------------------------------------------------------- cuts
def make_cut(docs: Sequence[data.TextFile], seed: int, index: int, depth: int) -> dict:
    """Cut ``index``: a file (by its characters past the first ``depth`` bytes) and a
    character position in it past them; it depends only on (seed, index).

    >>> doc = data.TextFile("a.py", "x" * 10)
    >>> cut = make_cut([doc], 0, 0, 4)
    >>> 5 <= cut["cut"] < 10 and cut["file"] == "a.py"
    True
    """
    rng = random.Random(f"prompt-{seed}-{index}")
    firsts = [_chars_within(d.text, depth) for d in docs]
    weights = [max(0, len(d.text) - 1 - first) for d, first in zip(docs, firsts, strict=True)]
    if not any(weights):
        raise CommandError(f"no file is longer than {depth} bytes")
    k = rng.choices(range(len(docs)), weights=weights)[0]
    cut = rng.randrange(max(1, firsts[k] + 1), len(docs[k].text))
    return {"key": str(index), "file": docs[k].name, "cut": cut}


def _chars_within(text: str, size: int) -> int:
    """How many whole characters of ``text`` fit in its first ``size`` UTF-8 bytes."""
    return len(text.encode("utf-8")[:size].decode("utf-8", "ignore"))


def cursor_at(text: str, cut: int) -> Any:
    """The server's cursor (line, index in the line) at character ``cut``."""
    from midword.server.document import Cursor

    line_start = text.rfind("\n", 0, cut) + 1
    return Cursor(text.count("\n", 0, cut), cut - line_start)


# ---------------------------------------------------------------------- the window study
def window_start(arm: str, before: str, window_bytes: int) -> str:
    """The window for the text ``before`` the cursor, starting where ``arm`` says."""
    from midword.server.document import Document

    doc = Document("file:///w.py", before, 1, "python")
    lines = doc.lines
    line = doc.prefix_window(cursor_at(before, len(before)), window_bytes).decode("utf-8")
    if arm == "line":
        return line
    if arm == "byte":
        tail = before.encode("utf-8")[-window_bytes:]
        return tail.decode("utf-8", "ignore")  # a cut inside a character drops its rest
    first = len(lines) - len(line.split("\n"))  # the window's first line
    if first == 0:  # the window starts at the top of the file: nothing better
        return line
    wanted = _after_blank if arm == "blank" else _top_level_def
    for i in range(first, len(lines) - 1):
        if wanted(lines, i):
            return "".join(lines[i:])
    return line


def _after_blank(lines: list[str], i: int) -> bool:
    return not lines[i - 1].strip() and bool(lines[i].strip())


def _top_level_def(lines: list[str], i: int) -> bool:
    return _DEF.match(lines[i]) is not None and not lines[i - 1].startswith("@")


# ---------------------------------------------------------------------- the context study
def related_files(path: Path, count: int) -> list[Path]:
    """Up to ``count`` other files of ``path``'s folder with its extension: the modules it
    imports first (in the order of its imports), then the rest by name."""
    if count <= 0:
        return []
    folder = path.parent
    siblings = sorted(p for p in folder.glob(f"*{path.suffix}") if p.is_file() and p != path)
    imported = [folder / f"{name}{path.suffix}" for name in _imported_names(path)]
    order = [p for p in imported if p in siblings] + siblings
    return list(dict.fromkeys(order))[:count]


def _imported_names(path: Path) -> list[str]:
    """The module names a Python file imports (each part of a dotted name; none for a file
    that is not Python or does not parse)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [part for a in node.names for part in a.name.split(".")]
        elif isinstance(node, ast.ImportFrom):
            names += node.module.split(".") if node.module else []
            names += [a.name for a in node.names] if node.level else []
    return names


def context_prompt(
    arm: str, path: Path, text: str, cut: int, others: Sequence[Path], args: argparse.Namespace
) -> str:
    """The prompt the server would build at ``cut``: the other files' block in the arm's
    style (none for ``none``), then the buffer's window."""
    from midword.server.context_files import ContextFiles
    from midword.server.document import Document

    language = LANGUAGES.get(path.suffix, "python")
    doc = Document(path.as_uri(), text, 1, language)
    window = doc.prefix_window(cursor_at(text, cut), args.window_bytes).decode("utf-8")
    if arm == "none":
        return window
    chooser = ContextFiles(style=arm)
    documents = {doc.uri: doc}
    for other in reversed(others):  # the first one the most recently opened
        opened = Document(other.as_uri(), _read(other), 1, language)
        documents[opened.uri] = opened
        chooser.touched(opened.uri)
    return chooser.block(doc, documents, args.context_bytes).decode("utf-8") + window


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8").replace("\r\n", "\n")
    except (OSError, UnicodeDecodeError):
        return ""


# ---------------------------------------------------------------------- scoring
def score_continuation(sampler: Any, prompt: str, continuation: str) -> dict[str, Any]:
    """Bits of ``continuation`` after ``prompt``, and the first character's bits and
    whether greedy bytes predict it (as `charlm.Scorer.bytesampler` has them: the exact
    next-byte log-probabilities chained over its UTF-8 bytes, greedy from the
    renormalized distribution).

    The continuation's bits come from two prefix probabilities, log P(prompt) - log
    P(prompt + continuation): the chain rule of the exact next-byte distributions makes
    that the sum of their log-probabilities over its bytes (to rounding), at the cost of
    two tree scorings rather than one per byte."""
    head = prompt.encode("utf-8")
    sampler.reset(head)
    with sampler.relative_prefix():
        base = sampler.next_bytes().prefix_logprob
        first_lp, right = 0.0, True
        for i, byte in enumerate(continuation[:1].encode("utf-8")):
            sampler.reset(head + continuation[:1].encode("utf-8")[:i])
            dist = sampler.next_bytes()
            first_lp += float(dist.next[byte])
            right = right and int(np.argmax(dist.normalized())) == byte
        sampler.reset(head + continuation.encode("utf-8"))
        total = base - sampler.prefix_logprob()
    return {"first_bits": -first_lp / LN2, "first_correct": int(right),
            "bits": total / LN2, "chars": len(continuation)}  # fmt: skip


def make_sampler(model: Any, engine: Any) -> Any:
    """A ByteSampler on the engine's start token (as the server and charlm have it)."""
    from midword.engine.sample.sampling import ByteSampler

    return ByteSampler(model, engine, track_prefix=False)


def _set_threads(model: Any, threads: int) -> None:
    """Give a llama.cpp model's later sessions ``threads`` threads (its default, every
    core, runs many times slower on a shared machine)."""
    params = getattr(model, "params", None)
    if threads > 0 and dataclasses.is_dataclass(params) and hasattr(params, "n_threads"):
        model.params = dataclasses.replace(params, n_threads=threads)


# ---------------------------------------------------------------------- run
def build_prompts(args: argparse.Namespace, arms: Sequence[str], doc: data.TextFile,
                  cut: int) -> dict[str, str]:  # fmt: skip
    """Each arm's prompt at ``cut`` of ``doc``."""
    if args.study == "window":
        before = doc.text[:cut]
        return {arm: window_start(arm, before, args.window_bytes) for arm in arms}
    path = Path(doc.name)
    others = related_files(path, args.related)
    return {arm: context_prompt(arm, path, doc.text, cut, others, args) for arm in arms}


def run(args: argparse.Namespace) -> int:
    arms = arms_of(args)
    if args.chars < 1:
        raise CommandError("--chars must be at least 1")
    docs = data.load_texts(args.text, args.glob)
    settings = {
        **common.model_settings(args),
        **data.text_settings(args),
        "benchmark": "prompt",
        **{k: getattr(args, k) for k in ("study", "chars", "window_bytes", "context_bytes")},
        "related": args.related if args.study == "context" else None,
    }
    rundir = common.RunDir(args.out, settings)
    timer = common.Timer()
    depth = args.window_bytes if args.study == "window" else 0
    by_name = {d.name: d for d in docs}
    done = {r["key"]: r["arms"] for r in rundir.records()}
    todo = [i for i in range(args.limit) if not set(arms) <= set(done.get(str(i), {}))]
    if todo:
        model, engine = common.load_model(args)
        _set_threads(model, args.threads)
        sampler = make_sampler(model, engine)
        bar = common.progress(len(todo), f"prompt {args.study}")
        for i in todo:
            cut = make_cut(docs, args.seed, i, depth)
            rundir.add(
                _measure(args, arms, sampler, by_name[cut["file"]], cut, done.get(cut["key"]))
            )
            bar.update(1)
        bar.close()
    wanted = {str(i) for i in range(args.limit)}
    records = [r for r in rundir.records() if r["key"] in wanted]
    markdown, summary = report(records, arms, args)
    common.finish(rundir, markdown, summary, timer.seconds())
    return 0


def _measure(args: argparse.Namespace, arms: Sequence[str], sampler: Any, doc: data.TextFile,
             cut: dict, scored: dict | None) -> dict:  # fmt: skip
    """The cut's record: the arms ``scored`` before (None: none) and the others asked."""
    at = cut["cut"]
    continuation = doc.text[at : at + args.chars]
    record = {**cut, "cut_kind": common.cut_kind(doc.text[:at], continuation),
              "arms": dict(scored or {})}  # fmt: skip
    missing = [a for a in arms if a not in record["arms"]]
    for arm, prompt in build_prompts(args, missing, doc, at).items():
        scored = score_continuation(sampler, prompt, continuation)
        record["arms"][arm] = {**scored, "prompt_bytes": len(prompt.encode("utf-8"))}
    return record


# ---------------------------------------------------------------------- report
def per_cut(record: dict, arm: str) -> dict[str, float]:
    """One cut's figures for an arm: bits per character over its characters, and the
    first character's bits and greedy prediction.

    >>> r = {"arms": {"a": {"bits": 4.0, "chars": 2, "first_bits": 1.0, "first_correct": 1,
    ...                     "prompt_bytes": 9}}}
    >>> per_cut(r, "a")
    {'bpc': 2.0, 'first_bits': 1.0, 'first_correct': 1.0, 'prompt_bytes': 9.0}
    """
    arm_ = record["arms"][arm]
    return {"bpc": arm_["bits"] / arm_["chars"], "first_bits": float(arm_["first_bits"]),
            "first_correct": float(arm_["first_correct"]),
            "prompt_bytes": float(arm_["prompt_bytes"])}  # fmt: skip


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error.

    >>> mean_se([1.0, 3.0])
    (2.0, 1.0)
    """
    return common.mean(values), common.std(values) / math.sqrt(len(values)) if values else math.nan


FIGURES: tuple[tuple[str, str], ...] = (
    ("bpc", "bits per char"), ("first_bits", "first char: bits"),
    ("first_correct", "first char: accuracy"),
)  # fmt: skip


def report(records: list[dict], arms: Sequence[str], args: argparse.Namespace
           ) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """Markdown tables and a JSON summary over the cuts every arm has scored."""
    rows = [r for r in records if all(a in r["arms"] for a in arms)]
    cuts = {a: [per_cut(r, a) for r in rows] for a in arms}
    summary: dict[str, Any] = {"cuts": len(rows), "study": args.study, "arms": {}}
    for arm in arms:
        entry: dict[str, Any] = {}
        for key, _ in (*FIGURES, ("prompt_bytes", "")):
            entry[key] = mean_se([c[key] for c in cuts[arm]])
            diffs = [c[key] - b[key] for c, b in zip(cuts[arm], cuts[arms[0]], strict=True)]
            entry[f"{key}_minus_{arms[0]}"] = mean_se(diffs)
        summary["arms"][arm] = entry
    kinds = _kind_table(rows, arms)
    return _tables(summary, arms, args) + kinds, summary


def _tables(summary: dict[str, Any], arms: Sequence[str], args: argparse.Namespace) -> str:
    cell = _cell
    head = ["arm", *(name for _, name in FIGURES), "prompt bytes"]
    rows = [[a, *(cell(summary["arms"][a][k]) for k, _ in FIGURES),
             f"{summary['arms'][a]['prompt_bytes'][0]:.0f}"] for a in arms]  # fmt: skip
    base = arms[0]
    dhead = ["arm", *(f"{name}, minus {base}" for _, name in FIGURES)]
    drows = [[a, *(cell(summary["arms"][a][f"{k}_minus_{base}"]) for k, _ in FIGURES)]
             for a in arms[1:]]  # fmt: skip
    title = {"context": "the other files' block", "window": "where the window starts"}
    text = (f"## Prompt choices: {title[args.study]} ({summary['cuts']} cuts, "
            f"{args.chars} characters each)\n\n" + common.markdown_table(head, rows))  # fmt: skip
    if drows:
        text += "\nPaired, cut by cut:\n\n" + common.markdown_table(dhead, drows)
    return text + "\n± one standard error over cuts.\n"


def _cell(value: tuple[float, float]) -> str:
    """A table cell: mean ± standard error."""
    return f"{common.fmt(value[0])} ± {common.fmt(value[1])}"


def _kind_table(rows: list[dict], arms: Sequence[str]) -> str:
    """Bits per character by cut kind (the first character's kind of cut)."""
    head = ["arm"] + [f"{k} (n={sum(r['cut_kind'] == k for r in rows)})" for k in common.CUTS]
    table = []
    for arm in arms:
        cells = []
        for kind in common.CUTS:
            values = [per_cut(r, arm)["bpc"] for r in rows if r["cut_kind"] == kind]
            cells.append(_cell(mean_se(values) if values else (math.nan, math.nan)))
        table.append([arm, *cells])
    return "\n### Bits per character by cut kind\n\n" + common.markdown_table(head, table)
